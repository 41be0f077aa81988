"""What every request kind declares (`Kind`), and what the kinds share: the refusal of an answer, the schema
checks (`agents.schemas`'), the engine state of the call a request stands for. `parameters_schema` (a tool's
parameters, for the card and for checking an edited call) is the registry's: each kind says whether it knows them.

Both ways of answering call the same `Kind.answer`: the next turn's input (`agents.prepare.prepare_run`) and
the inbox / respond API (`approvals.actions.answer_request`).
"""

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from agents.engine import Answers
from agents.events import EventLog
from agents.models import AgentVersion, RunStatus
from agents.payloads import Payload, RequestAnswered
from agents.request_kinds import KIND_NAMES, RequestKind
from agents.schemas import schema_problems as schema_problems  # where the kinds and gateway.calls import it
from agents.server_tools import REGISTRY
from approvals.external_wire import AskedTool, OpenRequest, invalid
from approvals.kinds.answer_form import AnswerForm
from approvals.models import PendingRequest

# What a cancelled answer says where its kind stores a reason (`Kind.cancel_answer`).
CANCELLED_REASON = "Cancelled by the user."


class AnswerRefused(Exception):
    """An answer its kind refuses; nothing is stored. `code` is `remember_refused` or `invalid_content`."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


class Kind:
    name: ClassVar[RequestKind]
    # Its place in the order a run waits on kinds (`KINDS`): with several open, the run's status is the `awaiting`
    # of the kind whose `waits` is lowest.
    waits: ClassVar[int]
    awaiting: ClassVar[RunStatus]
    # The answer fields (snake_case, as on `approvals.responses.Response`) this kind takes; `required` among them.
    fields: ClassVar[frozenset[str]]
    required: ClassVar[str | None] = None
    # What a stored answer holds (camelCase, as on the wire).
    stored: ClassVar[tuple[str, ...]]
    # Said when an answer is not for this kind.
    takes: ClassVar[str]
    # The inbox card's form: what the card posts, as the `Response` it gives.
    form: ClassVar[type[AnswerForm]]
    # What the agent does, as in "helper wants to call send_email" (the kind's name is `label`). Everything else a
    # page shows of the kind is a partial of its `template`.
    asks: ClassVar[str]
    # The decisions `audit` gives, and how the audit page says each.
    decisions: ClassVar[dict[str, str]]
    # What the inbox's keys do on its card (static/console/inbox.js reads them from the card's `data-keys`): for a,
    # d and e, the values of the buttons to press (a list) or the name of the field to type in first ("field": the
    # first of a form's fields); `needs`, the field `a` waits on while it is empty; `enter`, the button Enter in
    # a field presses (by the field's name).
    keys: ClassVar[dict[str, Any]]
    # Whether one yes or no (`approved`, and a reason) answers it: its cards are answered together (the selection's
    # checkbox, a run's "Approve all" bar), an escalation's step may approve or deny it, and its Slack message
    # carries Approve and Deny (slackapp/blocks.py; a click on another kind's is refused, slackapp/answering.py).
    selectable: ClassVar[bool] = False
    # Whether its request holds a tool call until a yes (an approval): an external agent's passes the agent's
    # policies first and may be decided unasked by a rule or its tool's mode `never` (approvals.actions.external),
    # and once approved has an outcome to report (approvals.actions.settling).
    gates_call: ClassVar[bool] = False
    # Its AG-UI interrupt's `reason` (SPEC section 16, protocols/agui_events.py) and what the interrupt says when the
    # request carries no message of its own (`{agent}`, `{tool}`). None: no interrupt, a frontend tool's call,
    # answered by a tool message (the run finishes `success` with the call among `pendingToolCallIds`).
    interrupt_reason: ClassVar[str | None] = None
    interrupt_message: ClassVar[str] = ""
    # Whether its request is about a call of the model's, one a TOOL_CALL_START named (its interrupt's `toolCallId`).
    # False: a continuation, whose `call_id` is an id of Airlock's own.
    about_call: ClassVar[bool] = True
    # What an AG-UI resume entry's `status: "cancelled"` answers (respond fields, camelCase; protocols/agui.py keeps
    # the `reason` or `text` its payload gives): the kind's no. None: it cannot be cancelled, only answered.
    cancel_answer: ClassVar[dict[str, Any] | None] = None
    # The audit's decision filters (`approvals.audit_entries.DecisionFilter` values) that list answers of this kind,
    # each with its lookups on the answered request (approvals/audit_queries.py).
    audit_filters: ClassVar[dict[str, dict[str, Any]]] = {}

    # The partials of `template`, each rendering the request as `r`: what a page shows of this kind.
    PARTIALS: ClassVar[tuple[str, ...]] = ("title", "card", "answer", "what", "ask", "shows", "asked", "answered")

    @property
    def template(self) -> str:
        """The kind's template (templates/approvals/kinds/<name>.html): its `PARTIALS`, one for each place a
        page shows the kind, included as `template#part` (`approvals.templatetags.inbox.kind_part`)."""
        return f"approvals/kinds/{self.name}.html"

    @property
    def keys_json(self) -> str:
        return json.dumps(self.keys, separators=(",", ":"))

    @property
    def label(self) -> str:
        """The kind's name as every page says it (the card's pill, the Kind filter): `KIND_NAMES`' label."""
        return KIND_NAMES[self.name].label

    def answer(
        self, pending: PendingRequest, wire: dict[str, Any], modes: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """The answer to store for `pending`, from its camelCase `wire` form; raises AnswerRefused. `modes`
        are the tools' approval modes of the version the answer goes to (a next turn may name another);
        None: the version that asked."""
        self.check(pending, wire, modes)
        given = {**wire, "requestId": str(pending.id), "callId": pending.call_id}
        return {key: given.get(key) for key in self.stored}

    def check(self, pending: PendingRequest, wire: dict[str, Any], modes: Mapping[str, str] | None) -> None:
        if wire.get("remember") or wire.get("expiresAt"):
            raise AnswerRefused("remember_refused", "`remember` applies to tool approvals only.")

    def remembers(self, pending: PendingRequest) -> bool:
        """Whether its card offers "don't ask again" (a rule that answers the next ones)."""
        return False

    def done(self, pending: PendingRequest, given: Mapping[str, Any]) -> str:
        """What an answer `given` (camelCase, as the respond API takes it) did, as the card and the undo notice say
        it once given: "Answered lookup"."""
        return f"Answered {pending.tool_name or 'the request'}"

    def verb(self, answer: Mapping[str, Any]) -> str:
        """What `answer` did, in a word: "answered"; the audit says it of an answer undone before it applied."""
        return "answered"

    def glance(self, pending: PendingRequest) -> str:
        """What the request's row in the dense inbox quotes, before it is cut: by default the call's first
        argument (`to: a@b.co`), else the request's message."""
        arguments = pending.arguments if isinstance(pending.arguments, dict) else {}
        if not arguments:
            return pending.message
        name, value = next(iter(arguments.items()))
        return f"{name}: {value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}"

    def tool_description(self, pending: PendingRequest) -> str:
        """What the requested tool does, as the definition of the run that asked has it: a server tool's
        docstring; "" when the console does not know it (an MCP tool's lives on its server)."""
        tools = pending.run.version.definition.tools
        if pending.tool_name in REGISTRY and any(t.name == pending.tool_name for t in tools):
            return REGISTRY[pending.tool_name].description
        return ""

    def parameters(self, pending: PendingRequest) -> dict[str, Any] | None:
        """The JSON schema of the parameters of the tool `pending` asks about, where the console knows it."""
        return None

    def narrowed(self, pending: PendingRequest, properties: dict[str, Any]) -> dict[str, Any]:
        """The JSON Schemas of the respond fields it takes (`properties`, camelCase, as the respond API has them),
        narrowed to what `pending` accepts (a tool's parameters, a question's choices, the requested form): its AG-UI
        interrupt's `responseSchema` (protocols/agui_events.py). By default as the respond API has them."""
        return properties

    def interrupt_facts(self, pending: PendingRequest) -> dict[str, Any]:
        """What its AG-UI interrupt's metadata says of `pending` besides its kind, run and tool: what a client shows
        to answer it (the call's arguments, a question's choices). None by default."""
        return {}

    def read_json(self, value: Any) -> dict[str, Any] | None:
        """A respond's `json` answer as this kind's answer fields (snake_case), or None when it is not of
        the type this kind expects."""
        return None

    def external_fields(self, version: AgentVersion, body: OpenRequest, asked: AskedTool | None) -> dict[str, Any]:
        """The stored fields of a request of this kind an external agent opens (SPEC section 12) with `body`,
        checked (RequestRefused 400): of `tool_name`, `arguments`, `message` and `requested_schema` those it sets,
        and what its `engine_state` keeps besides. A kind an external agent cannot open (not in
        `approvals.external_wire.OpenKind`) keeps this, which says so."""
        raise invalid("kind", f"an external agent cannot open a request of kind {self.name}")

    def to_engine(self, pending: PendingRequest, answers: Answers) -> None:
        """Put the stored answer of `pending` into the turn's `answers`, as the engine takes it; writes nothing."""
        raise NotImplementedError

    def record_carried(self, pending: PendingRequest, log: EventLog) -> None:
        """Record in the run's log that it carries the stored answer of `pending`: the SDK's completion, then what
        it has no field for (`request.answered`)."""
        raise NotImplementedError

    def requested(self, pending: PendingRequest) -> Payload:
        """The SDK's event that announces `pending` (SPEC section 10's mapping table)."""
        raise NotImplementedError

    def unanswered(self, pending: PendingRequest) -> Payload:
        """The SDK's completion of `pending` closed without an answer (expired, cancelled, abandoned: its status;
        `request.terminated` says which)."""
        raise NotImplementedError

    def close(self, pending: PendingRequest, answers: Answers, reason: str) -> None:
        """The call of `pending` closed without an answer: it did not run, for `reason`."""
        answers.deny(pending.call_id, reason)

    def audit(self, answer: dict[str, Any], rule_id: str | None) -> tuple[str, dict[str, Any]]:
        """The audit's decision for a stored answer, and the details it shows."""
        raise NotImplementedError

    def answered(self, pending: PendingRequest, **facts: Any) -> RequestAnswered:
        """Airlock's `request.answered` of `pending`: who answered, and `facts` the SDK's completion has no field
        for."""
        return RequestAnswered(
            requestId=str(pending.id),
            kind=self.name,
            toolCallId=pending.call_id if pending.tool_name else None,
            toolName=pending.tool_name or None,
            answeredBy=pending.answered_by.username if pending.answered_by else None,
            approvals=(pending.answer or {}).get("approvals"),
            onBehalfOf=pending.answered_for.username if pending.answered_for else None,
            authMethod=pending.answered_auth or None,
            **facts,
        )


def own_state(pending: PendingRequest) -> dict[str, Any]:
    """The engine state of the call `pending` stands for (a sub-agent's own, under the way back to it)."""
    state = pending.engine_state or {}
    while "subagent" in state:
        state = state.get("inner") or {}
    return state
