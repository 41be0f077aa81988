"""What a client sends to start a turn (SPEC section 4): its message, session, parameters, documents, lane, the
client tools it offers for the turn and the answers it carries to the session's open requests, as pydantic models of
the JSON body. `agents.prepare.prepare_run` checks one whole against the agent and the session."""

import json
import re
import uuid
from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StrictBool, StrictInt, field_validator

from agents.definition_checks import distinct_names
from agents.definitions import CULTURE, IDENTIFIER, WireModel, object_schema
from agents.lanes import LANE_PATTERN
from agents.rule_matching import Remember, RememberedUntil

# An answer's requestId is any string: one that is not a UUID names no request of the session, which is
# `unknown_request` (SPEC section 4) rather than a malformed body.
RequestId = Annotated[str, Field(max_length=200)]


class ApprovalAnswer(WireModel):
    request_id: RequestId
    approved: StrictBool
    reason: str | None = Field(default=None, max_length=2000)
    remember: Remember = None
    remember_arguments_only: StrictBool = False
    override_arguments: dict[str, Any] | None = None
    expires_at: RememberedUntil = None


class ToolResultAnswer(WireModel):
    call_id: str = Field(min_length=1, max_length=200)
    result: Any = None
    error_message: str | None = Field(default=None, max_length=5000)
    outcome: Literal["completed", "failed", "rejected", "background"] | None = None


class InputAnswer(WireModel):
    request_id: RequestId
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None


class PersonAnswer(WireModel):
    """An answer to a question, a plan or a continuation (SPEC section 9): `text`, `json` or `approved`."""

    request_id: RequestId
    text: str | None = Field(default=None, max_length=20_000)
    json_value: Any = Field(default=None, alias="json")
    approved: StrictBool | None = None


# The answer fields a `PersonAnswer` has (`agents.prepare.PERSON_KINDS`: the kinds `answers` answers).
PERSON_FIELDS = frozenset({"text", "approved"})


SESSION_KEY = re.compile(r"[^/\x00-\x1f\x7f]+")


class Document(WireModel):
    name: str = Field(min_length=1, max_length=255)
    content: str = Field(max_length=1_000_000)


# How many client tools a run may bring, and how large they may be together (their JSON, descriptions included).
MOST_RUN_CLIENT_TOOLS = 64
RUN_CLIENT_TOOLS_MAX_BYTES = 256 * 1024


class RunClientTool(WireModel):
    """A client tool the run's caller offers for this turn (an AG-UI frontend tool), next to the definition's own: the
    shape of a definition's client tool (`agents.definitions.ClientTool`) without its routing. Its requests are routed
    as the definition routes the `client_tool` kind."""

    name: str = Field(pattern=IDENTIFIER)
    description: str = Field(default="", max_length=2000)
    parameters: Annotated[dict[str, Any], AfterValidator(object_schema)] = Field(
        default_factory=lambda: {"type": "object"}
    )

    @classmethod
    def stored(cls, tools: Iterable[dict[str, Any]]) -> list["RunClientTool"]:
        """The tools a run stored (`Run.client_tools`, checked when it was asked for), read back unchecked."""
        return [
            cls.model_construct(**{name: tool[name] for name in cls.model_fields if name in tool}) for tool in tools
        ]


def _run_client_tools(tools: list[RunClientTool]) -> list[RunClientTool]:
    distinct_names("client tools", tools)
    size = len(json.dumps([tool.model_dump(mode="json") for tool in tools]).encode())
    if size > RUN_CLIENT_TOOLS_MAX_BYTES:
        raise ValueError(f"the client tools take {size} bytes, more than {RUN_CLIENT_TOOLS_MAX_BYTES}")
    return tools


class RunRequest(WireModel):
    message: str | None = Field(default=None, max_length=200_000)
    session_id: str | None = Field(default=None, min_length=1, max_length=200)
    parameters: dict[str, Any] | None = None
    culture: str | None = Field(default=None, max_length=35)
    documents: list[Document] = Field(default_factory=list)
    attachment_ids: list[uuid.UUID] = Field(default_factory=list)
    approvals: list[ApprovalAnswer] = Field(default_factory=list)
    tool_results: list[ToolResultAnswer] = Field(default_factory=list)
    input_responses: list[InputAnswer] = Field(default_factory=list)
    answers: list[PersonAnswer] = Field(default_factory=list)
    client_tools: Annotated[list[RunClientTool], AfterValidator(_run_client_tools)] | None = Field(
        default=None,
        max_length=MOST_RUN_CLIENT_TOOLS,
        description=(
            "Client tools offered for this turn besides the definition's (AG-UI's frontend tools): names distinct, at"
            f" most {MOST_RUN_CLIENT_TOOLS} and {RUN_CLIENT_TOOLS_MAX_BYTES // 1024} KiB together, none named as the"
            " agent's tools or sub-agents (400 `tool_name_conflict`); a call of one waits as a `client_tool` request."
            " Null: none, or, for a turn that carries answers, those of the run that asked."
        ),
    )
    abandon_pending: StrictBool = False
    definition_version: StrictInt | None = Field(default=None, ge=1)
    lane: str | None = Field(default=None, pattern=LANE_PATTERN)

    @field_validator("session_id")
    @classmethod
    def _session_id(cls, value: str | None) -> str | None:
        # A session is addressed in paths (/api/sessions/{sessionId}/…).
        if value is not None and not SESSION_KEY.fullmatch(value):
            raise ValueError("a session id may not contain '/' or control characters")
        return value

    @field_validator("culture")
    @classmethod
    def _culture(cls, value: str | None) -> str | None:
        if value is not None and not CULTURE.match(value):
            raise ValueError("not a culture name (like 'tr' or 'tr-TR')")
        return value

    @property
    def has_answers(self) -> bool:
        return bool(self.approvals or self.tool_results or self.input_responses or self.answers)
