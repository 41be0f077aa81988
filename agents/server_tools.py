"""The registry of server tools: Python functions an agent definition can choose by name."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from pydantic import AfterValidator, Field


@dataclass(frozen=True)
class ServerTool:
    name: str
    function: Callable[..., Any]
    description: str
    side_effects: bool
    # The request kind a tool that asks a person opens (`question`, `plan`), and what the request says (its message)
    # from the call's arguments; the engine answers the call with the person's answer and never runs the function.
    asks: str | None = None
    says: Callable[[Mapping[str, Any]], str] | None = None


REGISTRY: dict[str, ServerTool] = {}


def server_tool(
    *, side_effects: bool, asks: str | None = None, says: Callable[[Mapping[str, Any]], str] | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(function: Callable[..., Any]) -> Callable[..., Any]:
        description = (function.__doc__ or "").strip()
        tool = ServerTool(function.__name__, function, description, side_effects, asks, says)
        REGISTRY[function.__name__] = tool
        return function

    return register


@server_tool(side_effects=False)
def get_time() -> str:
    """The current date and time in UTC, ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def one_address_each(to: str | list[str]) -> str | list[str]:
    """`to` when it is one e-mail address or a list of them; a string naming several would reach each of
    them past a policy that reads it as one."""
    addresses = [to] if isinstance(to, str) else to
    if not addresses:
        raise ValueError("give at least one address")
    for address in addresses:
        try:
            validate_email(address)
        except ValidationError:
            raise ValueError(f"{address!r} is not an e-mail address (several go in a list, one each)") from None
    return to


@server_tool(side_effects=True)
def send_email(to: Annotated[str | list[str], AfterValidator(one_address_each)], subject: str, body: str) -> str:
    """Send an email through the console's mail backend. `to` is one address, or a list of addresses to send
    it to each of them; a string holding several addresses is refused."""
    recipients = [to] if isinstance(to, str) else to
    sent = send_mail(subject, body, None, recipients)
    return f"{'sent' if sent else 'not sent'} to {', '.join(recipients)}"


class AskedOfAPerson(RuntimeError):
    """A tool that asks a person ran as a function: the engine answers such calls itself."""


# What a person is asked is pushed to every open inbox as a card: a model may not make one of megabytes. The
# schema the model is given carries these; a call over them is refused before any request opens, the model
# reading why.
QUESTION_MAX, CHOICES_MAX, CHOICE_MAX = 2_000, 100, 500
STEPS_MAX, STEP_MAX = 100, 2_000
Choice = Annotated[str, Field(max_length=CHOICE_MAX)]
Step = Annotated[str, Field(max_length=STEP_MAX)]


@server_tool(side_effects=False, asks="question", says=lambda arguments: str(arguments.get("question") or ""))
def ask_user(
    question: Annotated[str, Field(max_length=QUESTION_MAX)],
    choices: Annotated[list[Choice], Field(max_length=CHOICES_MAX)] | None = None,
    allow_freeform: bool | None = None,
) -> str:
    """Ask the user a question and wait for the answer. Give `choices` to offer a set of answers; with choices the
    user must pick one unless `allow_freeform` is true."""
    raise AskedOfAPerson(question)


@server_tool(side_effects=False, asks="plan", says=lambda _: "Approve this plan?")
def propose_plan(steps: Annotated[list[Step], Field(max_length=STEPS_MAX)]) -> str:
    """Submit a plan (its steps, in order) for approval before carrying it out. The answer is `approved`, or
    `revise: <guidance>` with what to change."""
    raise AskedOfAPerson("; ".join(steps))
