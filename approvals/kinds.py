"""Request kinds (SPEC section 4): what a run may ask while it runs. Each kind says, once, which answer
fields it takes and what it stores, the checks an answer must pass, how the answer reaches the engine
and which event records it, the event and run status that announce it, and how the audit describes it.

Both ways of answering call the same `Kind.answer`: the next turn's input (`agents.prepare.prepare_run`) and
the inbox / respond API (`approvals.actions.answer_request`). A new kind is one class here plus its inbox form and
its card partial (docs/architecture.md, "A new request kind").
"""

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from jsonschema import Draft202012Validator

from agents.engine import Answers, server_tool_schema
from agents.events import EventLog
from agents.models import Agent, RunStatus
from agents.payloads import (
    PLAN_ACTIONS,
    Approved,
    Cancelled,
    CustomToolPermission,
    DeniedByUser,
    ElicitationCompleted,
    ElicitationRequested,
    ExitPlanModeCompleted,
    ExitPlanModeRequested,
    ExternalToolCompleted,
    ExternalToolRequested,
    HookPermission,
    LimitsResponse,
    McpPermission,
    Payload,
    PermissionCompleted,
    PermissionRequested,
    PolicyAsk,
    RequestAnswered,
    RequestedSchema,
    SessionLimitsExhaustedCompleted,
    SessionLimitsExhaustedRequested,
    UserInputCompleted,
    UserInputRequested,
)
from agents.tools import REGISTRY
from approvals.models import PendingRequest, RequestKind, RequestStatus, Rule
from approvals.rules import arguments_hash

RAN_IN_FAILED_TURN = (
    "This call already ran, in a turn that failed before its result was kept; it was not run again. "
    "Repeat it only if the user asks."
)


class AnswerRefused(Exception):
    """An answer its kind refuses; nothing is stored. `code` is `remember_refused` or `invalid_content`."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


def parameters_schema(pending: PendingRequest) -> dict[str, Any] | None:
    """The JSON schema of the parameters of the tool `pending` asks about, where the console knows it: a client
    tool's (its definition), a server tool's (its function); None for an MCP tool (its schema lives on its server)."""
    definition = pending.run.version.definition
    if pending.kind == RequestKind.CLIENT_TOOL:
        return next((t.parameters for t in definition.client_tools if t.name == pending.tool_name), None)
    if pending.kind == RequestKind.APPROVAL and any(t.name == pending.tool_name for t in definition.tools):
        return server_tool_schema(pending.tool_name)
    return None


def schema_problems(schema: dict[str, Any], content: dict[str, Any]) -> str:
    errors = sorted(Draft202012Validator(schema).iter_errors(content), key=lambda e: list(e.path))
    return "; ".join(f"{'/'.join(map(str, e.path)) or '(content)'}: {e.message}" for e in errors)


class Kind:
    name: ClassVar[RequestKind]
    awaiting: ClassVar[RunStatus]
    # The answer fields (snake_case, as on `approvals.answers.Response`) this kind takes; `required` among them.
    fields: ClassVar[frozenset[str]]
    required: ClassVar[str | None] = None
    # What a stored answer holds (camelCase, as on the wire).
    stored: ClassVar[tuple[str, ...]]
    # Said when an answer is not for this kind.
    takes: ClassVar[str]
    # The card's pill, and what the agent does, as in "helper wants to call send_email". The card's answer
    # fields are the partial templates/approvals/kinds/<name>.html; the inbox's form is approvals/forms.py.
    label: ClassVar[str]
    asks: ClassVar[str]

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
        if wire.get("remember"):
            raise AnswerRefused("remember_refused", "`remember` applies to tool approvals only.")

    def read_json(self, value: Any) -> dict[str, Any] | None:
        """A respond's `json` answer as this kind's answer fields (snake_case), or None when it is not of
        the type this kind expects."""
        return None

    def deliver(self, pending: PendingRequest, answers: Answers, log: EventLog) -> None:
        """Hand the stored answer of `pending` to the engine and record it in the run's log: the SDK's completion
        (`completed`), then what it has no field for (`request.answered`)."""
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
            **facts,
        )


def _policy(pending: PendingRequest) -> PolicyAsk | None:
    return PolicyAsk(**pending.policy) if pending.policy is not None else None


class Approval(Kind):
    name = RequestKind.APPROVAL
    awaiting = RunStatus.AWAITING_APPROVAL
    fields = frozenset({"approved", "reason", "remember_arguments_only", "override_arguments"})
    required = "approved"
    stored = ("requestId", "approved", "reason", "remember", "rememberArgumentsOnly", "overrideArguments")
    takes = "An approval request takes `approved` (and a reason)."
    label, asks = "Approval", "wants to call"

    def check(self, pending: PendingRequest, wire: dict[str, Any], modes: Mapping[str, str] | None) -> None:
        if wire.get("remember") and pending.policy is not None:
            raise AnswerRefused(
                "remember_refused", "A policy's escalation is decided each time; it cannot be remembered."
            )
        if wire.get("remember") and not wire.get("approved"):
            raise AnswerRefused("remember_refused", "`remember` applies to approvals only, not to a denial.")
        if wire.get("remember") and self._mode(pending, modes) == "every_time":
            raise AnswerRefused("remember_refused", f"{pending.tool_name} asks every time; it cannot be remembered.")
        override = wire.get("overrideArguments")
        schema = parameters_schema(pending) if override is not None else None
        if override is not None and schema is not None:
            # Arguments that do not fit the tool are refused now, not handed to it to fail with.
            problems = schema_problems(schema, override)
            if problems:
                detail = f"The arguments do not fit the parameters of {pending.tool_name}: {problems}"
                raise AnswerRefused("invalid_content", detail)

    def read_json(self, value: Any) -> dict[str, Any] | None:
        return {"approved": value} if isinstance(value, bool) else None

    @staticmethod
    def _mode(pending: PendingRequest, modes: Mapping[str, str] | None) -> str:
        return pending.approval_mode if modes is None else pending.approval_mode_in(modes)

    def deliver(self, pending: PendingRequest, answers: Answers, log: EventLog) -> None:
        answer = pending.answer or {}
        approved = bool(answer.get("approved"))
        override = answer.get("overrideArguments")
        if pending.policy is not None:
            self._decide(pending, answers, approved, override)
        elif approved:
            answers.approve(pending.call_id, override)
        else:
            answers.deny(pending.call_id, answer.get("reason") or "The operator denied the call.")
        remembered = answer.get("rememberedRuleId")
        if approved and answer.get("remember") and not remembered:
            remembered = self._remember(pending, answer)
        feedback = answer.get("reason") or None
        result = (
            Approved(kind="approved")
            if approved
            else DeniedByUser(kind="denied-interactively-by-user", feedback=feedback)
        )
        log.record(
            PermissionCompleted(
                requestId=str(pending.id),
                toolCallId=self._call(pending),
                result=result,
                decisionSource="human_response",
            )
        )
        facts = {"overrideArguments": override, "rememberedRuleId": remembered if approved else None}
        log.record(self.answered(pending, **facts, policy=_policy(pending)))

    @staticmethod
    def _call(pending: PendingRequest) -> str | None:
        """The tool call the request is about (none for an answer held at `output`)."""
        return pending.call_id if pending.tool_name else None

    def requested(self, pending: PendingRequest) -> Payload:
        asked: CustomToolPermission | McpPermission | HookPermission
        if pending.policy is not None and not pending.tool_name:
            # An answer held at `output`: the answer waits, not a call.
            message = pending.policy.get("message") or pending.policy.get("reason")
            asked = HookPermission(kind="hook", toolName="output", hookMessage=message, toolArgs=pending.arguments)
        else:
            # The engine describes the call as the SDK asks for it (agents.engine.permission_request); a request
            # stored before it did is described from the definition.
            described = own_state(pending).get("permissionRequest") or {
                "kind": "custom-tool",
                "toolName": pending.tool_name,
                "toolDescription": _description(pending),
            }
            shape = McpPermission if described["kind"] == "mcp" else CustomToolPermission
            asked = shape.model_validate({**described, "args": pending.arguments, "toolCallId": pending.call_id})
        return PermissionRequested(requestId=str(pending.id), permissionRequest=asked)

    def unanswered(self, pending: PendingRequest) -> Payload:
        reason: Any = pending.status
        return PermissionCompleted(
            requestId=str(pending.id),
            toolCallId=self._call(pending),
            result=Cancelled(kind="cancelled", reason=reason),
        )

    @staticmethod
    def _decide(pending: PendingRequest, answers: Answers, approved: bool, override: dict[str, Any] | None) -> None:
        """A policy's escalation: the decision goes to the policy, which asks again with the same context next
        turn (SPEC section 8); the call runs again to be asked, or the held answer is offered again."""
        state = own_state(pending)
        answers.decide(state["policyKey"], approved)
        if "heldOutput" in state:
            answers.release = state
        else:
            answers.approve(pending.call_id, override)

    @staticmethod
    def _remember(pending: PendingRequest, answer: dict[str, Any]) -> str:
        """The rule a remembered approval makes, narrowed to the arguments the operator approved (with an
        override, never the model's own); made once: should the turn fail, the answer comes back for the
        next one without a second rule."""
        override = answer.get("overrideArguments")
        approved_arguments = override if override is not None else pending.arguments
        only_these = bool(answer.get("rememberArgumentsOnly"))
        # A sub-agent's request is remembered for the sub-agent: its turns consult its own rules.
        owner = pending.asker
        agent = pending.agent if owner is None else Agent.objects.get(tenant=pending.tenant_id, name=owner[0])
        rule = Rule.objects.create(
            tenant=pending.tenant,
            agent=agent,
            tool_name=pending.tool_name,
            arguments_hash=arguments_hash(approved_arguments) if only_these else "",
            arguments=approved_arguments if only_these else None,
            created_by=pending.answered_by,
            created_from=pending,
        )
        pending.answer = {**answer, "rememberedRuleId": str(rule.id)}
        PendingRequest.objects.filter(pk=pending.pk).update(answer=pending.answer)
        return str(rule.id)

    def close(self, pending: PendingRequest, answers: Answers, reason: str) -> None:
        if pending.policy is not None and not pending.tool_name:
            return  # an answer held for review that nobody released: there is no call to tell
        super().close(pending, answers, reason)

    def audit(self, answer: dict[str, Any], rule_id: str | None) -> tuple[str, dict[str, Any]]:
        decision = "approved" if answer.get("approved") else "denied"
        return decision, {
            "override_arguments": answer.get("overrideArguments"),
            "remembered": bool(answer.get("remember")) and decision == "approved",
            "rule_id": rule_id,
        }


class Input(Kind):
    name = RequestKind.INPUT
    awaiting = RunStatus.AWAITING_INPUT
    fields = frozenset({"action", "content"})
    required = "action"
    stored = ("requestId", "action", "content")
    takes = "An input request takes `action` (and `content`)."
    label, asks = "Input", "asks through"

    def check(self, pending: PendingRequest, wire: dict[str, Any], modes: Mapping[str, str] | None) -> None:
        super().check(pending, wire, modes)
        if wire.get("action") == "accept":
            problems = schema_problems(pending.requested_schema or {"type": "object"}, wire.get("content") or {})
            if problems:
                raise AnswerRefused("invalid_content", f"The content does not fit the requested schema: {problems}")

    def read_json(self, value: Any) -> dict[str, Any] | None:
        return {"action": "accept", "content": value} if isinstance(value, dict) else None

    def deliver(self, pending: PendingRequest, answers: Answers, log: EventLog) -> None:
        answer = pending.answer or {}
        given = {"action": answer["action"], "content": answer.get("content")}
        answers.answer_input(pending.call_id, {**given, "engine_state": own_state(pending) or None})
        log.record(ElicitationCompleted(requestId=str(pending.id), **given))
        log.record(self.answered(pending))

    def requested(self, pending: PendingRequest) -> Payload:
        return ElicitationRequested(
            requestId=str(pending.id),
            message=pending.message,
            requestedSchema=RequestedSchema.of(pending.requested_schema),
            mode="form",
            toolCallId=pending.call_id,
        )

    def unanswered(self, pending: PendingRequest) -> Payload:
        return ElicitationCompleted(requestId=str(pending.id), action="cancel")

    def audit(self, answer: dict[str, Any], rule_id: str | None) -> tuple[str, dict[str, Any]]:
        action = str(answer.get("action") or "")
        decision = {"accept": "input-accepted", "decline": "input-declined", "cancel": "input-cancelled"}.get(
            action, f"input-{action}"
        )
        return decision, {"action": action or None, "content": answer.get("content")}


class ClientTool(Kind):
    name = RequestKind.CLIENT_TOOL
    awaiting = RunStatus.AWAITING_TOOL_RESULT
    fields = frozenset({"result", "error_message", "outcome"})
    stored = ("callId", "outcome", "result", "errorMessage")
    takes = (
        "A client-tool request takes `result` (outcome `completed`), `errorMessage` (outcome `failed`, or"
        " `rejected` with the client's reason) or outcome `background`."
    )
    label, asks = "Client tool", "asks the client to run"

    @staticmethod
    def outcome(answer: Mapping[str, Any]) -> str:
        """completed | failed | rejected | background; without one, an error message means `failed`."""
        return answer.get("outcome") or ("failed" if answer.get("errorMessage") else "completed")

    def check(self, pending: PendingRequest, wire: dict[str, Any], modes: Mapping[str, str] | None) -> None:
        super().check(pending, wire, modes)
        outcome = self.outcome(wire)
        if outcome in ("failed", "rejected") and not wire.get("errorMessage"):
            raise AnswerRefused("invalid_content", f"Outcome {outcome} needs an `errorMessage` (the reason).")
        if outcome in ("completed", "background") and wire.get("errorMessage"):
            raise AnswerRefused("invalid_content", f"Outcome {outcome} takes no `errorMessage`.")
        if outcome != "completed" and wire.get("result") is not None:
            raise AnswerRefused("invalid_content", f"Outcome {outcome} takes no `result`.")

    def answer(
        self, pending: PendingRequest, wire: dict[str, Any], modes: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        return {**super().answer(pending, wire, modes), "outcome": self.outcome(wire)}

    def read_json(self, value: Any) -> dict[str, Any] | None:
        return {"result": value}

    def deliver(self, pending: PendingRequest, answers: Answers, log: EventLog) -> None:
        answer = pending.answer or {}
        outcome = self.outcome(answer)
        if outcome == "failed":
            answers.fail(pending.call_id, answer["errorMessage"])
        elif outcome == "rejected":
            answers.reject(pending.call_id, answer["errorMessage"])
        elif outcome == "background":
            answers.background(pending.call_id)
        else:
            answers.result(pending.call_id, answer.get("result"))
        # What the client returned is the call's `tool.execution_complete`, in the turn it goes on in.
        log.record(ExternalToolCompleted(requestId=str(pending.id)))
        log.record(self.answered(pending, outcome=outcome))

    def requested(self, pending: PendingRequest) -> Payload:
        return ExternalToolRequested(
            requestId=str(pending.id),
            sessionId=pending.session.key if pending.session is not None else "",
            toolCallId=pending.call_id,
            toolName=pending.tool_name,
            arguments=pending.arguments,
        )

    def unanswered(self, pending: PendingRequest) -> Payload:
        return ExternalToolCompleted(requestId=str(pending.id))

    def close(self, pending: PendingRequest, answers: Answers, reason: str) -> None:
        answers.fail(pending.call_id, reason)

    def audit(self, answer: dict[str, Any], rule_id: str | None) -> tuple[str, dict[str, Any]]:
        decision = {"failed": "tool-error", "completed": "tool-result"}.get(self.outcome(answer))
        return decision or f"tool-{self.outcome(answer)}", {
            "result": answer.get("result"),
            "error_message": answer.get("errorMessage"),
        }


class Question(Kind):
    """`ask_user(question, choices?, allow_freeform?)`: answered in words (`text`), one of the choices unless
    free text is allowed (by default: without choices only). The model reads `ask_user: <text>`."""

    name = RequestKind.QUESTION
    awaiting = RunStatus.AWAITING_INPUT
    fields = frozenset({"text"})
    required = "text"
    stored = ("requestId", "text")
    takes = "A question takes `text` (one of its choices unless free text is allowed)."
    label, asks = "Question", "asks through"

    def check(self, pending: PendingRequest, wire: dict[str, Any], modes: Mapping[str, str] | None) -> None:
        super().check(pending, wire, modes)
        choices = pending.choices
        if choices and not pending.allows_freeform and wire.get("text") not in choices:
            raise AnswerRefused("invalid_content", f"Answer with one of the choices: {', '.join(choices)}.")
        if not (wire.get("text") or "").strip():
            raise AnswerRefused("invalid_content", "The answer is empty.")

    def read_json(self, value: Any) -> dict[str, Any] | None:
        return {"text": value} if isinstance(value, str) else None

    def deliver(self, pending: PendingRequest, answers: Answers, log: EventLog) -> None:
        text = (pending.answer or {}).get("text") or ""
        answers.answer_person(pending.call_id, text)
        freeform = text not in pending.choices
        log.record(UserInputCompleted(requestId=str(pending.id), answer=text, wasFreeform=freeform))
        log.record(self.answered(pending))

    def requested(self, pending: PendingRequest) -> Payload:
        return UserInputRequested(
            requestId=str(pending.id),
            question=pending.message,
            choices=pending.choices or None,
            allowFreeform=pending.allows_freeform,
            toolCallId=pending.call_id,
        )

    def unanswered(self, pending: PendingRequest) -> Payload:
        return UserInputCompleted(requestId=str(pending.id))

    def audit(self, answer: dict[str, Any], rule_id: str | None) -> tuple[str, dict[str, Any]]:
        return "question-answered", {"content": answer.get("text")}


class Plan(Kind):
    """`propose_plan(steps)`: approved (the model reads `propose_plan: approved`) or sent back with revision
    guidance in `text` (`propose_plan: revise: <text>`)."""

    name = RequestKind.PLAN
    awaiting = RunStatus.AWAITING_APPROVAL
    fields = frozenset({"approved", "text"})
    required = "approved"
    stored = ("requestId", "approved", "text")
    takes = "A plan takes `approved` (and, to send it back, `text` with what to revise)."
    label, asks = "Plan", "proposes a plan through"

    def check(self, pending: PendingRequest, wire: dict[str, Any], modes: Mapping[str, str] | None) -> None:
        super().check(pending, wire, modes)
        if not wire.get("approved") and not (wire.get("text") or "").strip():
            raise AnswerRefused("invalid_content", "Say what to revise (`text`) when sending a plan back.")

    def read_json(self, value: Any) -> dict[str, Any] | None:
        if isinstance(value, bool):
            return {"approved": value}
        return {"approved": False, "text": value} if isinstance(value, str) else None

    def deliver(self, pending: PendingRequest, answers: Answers, log: EventLog) -> None:
        answer = pending.answer or {}
        approved = bool(answer.get("approved"))
        answers.answer_person(pending.call_id, "approved" if approved else f"revise: {answer.get('text') or ''}")
        completed = ExitPlanModeCompleted(requestId=str(pending.id), approved=approved)
        if approved:
            completed.selectedAction = PLAN_ACTIONS[0]
        else:  # sent back: what to revise
            completed.feedback = answer.get("text") or None
        log.record(completed)
        log.record(self.answered(pending))

    def requested(self, pending: PendingRequest) -> Payload:
        steps = [str(step) for step in pending.arguments.get("steps") or []]
        summary = f"A plan of {len(steps)} step{'s' if len(steps) != 1 else ''}"
        return ExitPlanModeRequested(
            requestId=str(pending.id),
            summary=summary,
            planContent="\n".join(f"{n}. {step}" for n, step in enumerate(steps, 1)),
            actions=PLAN_ACTIONS,
            recommendedAction=PLAN_ACTIONS[0],
        )

    def unanswered(self, pending: PendingRequest) -> Payload:
        return ExitPlanModeCompleted(requestId=str(pending.id))

    def audit(self, answer: dict[str, Any], rule_id: str | None) -> tuple[str, dict[str, Any]]:
        if answer.get("approved"):
            return "plan-approved", {}
        return "plan-revised", {"content": answer.get("text")}


class Continuation(Kind):
    """A run at its definition's `maxModelCalls` asks whether to go on: `approved` continues with a fresh
    allowance, a denial ends the run `completed` with what it has."""

    name = RequestKind.CONTINUATION
    awaiting = RunStatus.AWAITING_APPROVAL
    fields = frozenset({"approved"})
    required = "approved"
    stored = ("requestId", "approved")
    takes = "A continuation takes `approved` (go on, or stop with what the run has)."
    label, asks = "Go on?", "reached its model-call limit in"

    def read_json(self, value: Any) -> dict[str, Any] | None:
        return {"approved": value} if isinstance(value, bool) else None

    def deliver(self, pending: PendingRequest, answers: Answers, log: EventLog) -> None:
        approved = bool((pending.answer or {}).get("approved"))
        answers.resume = {"approved": approved}
        # Going on adds a fresh allowance of the definition's `maxModelCalls` (a model call is one AI credit).
        response = LimitsResponse(action="add", additionalAiCredits=self._limit(pending)) if approved else None
        log.record(
            SessionLimitsExhaustedCompleted(
                requestId=str(pending.id), response=response or LimitsResponse(action="cancel")
            )
        )
        log.record(self.answered(pending))

    @staticmethod
    def _limit(pending: PendingRequest) -> int:
        return int(pending.arguments.get("maxModelCalls") or 0)

    def requested(self, pending: PendingRequest) -> Payload:
        return SessionLimitsExhaustedRequested(
            requestId=str(pending.id),
            maxAiCredits=self._limit(pending),
            usedAiCredits=int(pending.arguments.get("usedModelCalls") or 0),
        )

    def unanswered(self, pending: PendingRequest) -> Payload:
        return SessionLimitsExhaustedCompleted(requestId=str(pending.id), response=LimitsResponse(action="cancel"))

    def close(self, pending: PendingRequest, answers: Answers, reason: str) -> None:
        # Expired or cancelled: the run stops with what it has. Abandoned (a new message): the message goes on
        # from the history as it stands.
        if pending.status != RequestStatus.ABANDONED:
            answers.resume = {"approved": False}

    def audit(self, answer: dict[str, Any], rule_id: str | None) -> tuple[str, dict[str, Any]]:
        return f"continuation-{_go_on(bool(answer.get('approved')))}", {}


def _go_on(approved: bool) -> Literal["continue", "stop"]:
    return "continue" if approved else "stop"


# In the order a run waits on them: with several kinds open, its status is the first one's `awaiting`.
KINDS: dict[str, Kind] = {
    kind.name: kind for kind in (Approval(), Plan(), Continuation(), Input(), Question(), ClientTool())
}


def awaiting_status(kinds: set[str]) -> RunStatus:
    """The status of a run waiting on requests of `kinds`."""
    return next(kind.awaiting for name, kind in KINDS.items() if name in kinds)


def deliver(pending: PendingRequest, answers: Answers, log: EventLog) -> None:
    """Hand a stored answer to the engine; a call that already ran in a failed turn is never run twice."""
    kind = KINDS[pending.kind]
    answers = routed(pending, answers)
    with log.speaking_for(pending.asker_id):
        if (pending.answer or {}).get("ranInFailedTurn"):
            # Its SDK completion was recorded by the turn that failed; the call is not run again.
            answers.deny(pending.call_id, RAN_IN_FAILED_TURN)
            log.record(kind.answered(pending, ranInFailedTurn=True))
            return
        kind.deliver(pending, answers, log)


def closed(pending: PendingRequest) -> Payload:
    """The SDK's completion of `pending`, closed without an answer (its status says how)."""
    return KINDS[pending.kind].unanswered(pending)


def _description(pending: PendingRequest) -> str:
    """What the tool `pending` asks about does, from the definition that asked (a request stored before the engine
    described its calls)."""
    definition = pending.run.version.definition
    client = next((t.description for t in definition.client_tools if t.name == pending.tool_name), None)
    server = REGISTRY.get(pending.tool_name)
    return client or (server.description if server is not None else "") or ""


def close(pending: PendingRequest, answers: Answers, reason: str) -> None:
    """Tell the engine that the call of `pending` closed without an answer and did not run, for `reason`."""
    KINDS[pending.kind].close(pending, routed(pending, answers), reason)


def routed(pending: PendingRequest, answers: Answers) -> Answers:
    """Where the answer to `pending` goes: the turn's answers, or, for a sub-agent's request, the answers of
    the call that runs the sub-agent (agents/engine/subagents.py)."""
    state = pending.engine_state or {}
    while "subagent" in state:
        answers = answers.for_subagent(state["subagent"])
        state = state.get("inner") or {}
    return answers


def own_state(pending: PendingRequest) -> dict[str, Any]:
    """The engine state of the call `pending` stands for (a sub-agent's own, under the way back to it)."""
    state = pending.engine_state or {}
    while "subagent" in state:
        state = state.get("inner") or {}
    return state
