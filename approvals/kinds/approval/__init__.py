"""An approval request: a tool call (or an answer held at `output`) waiting for a person's yes or no, a rule's
"don't ask again", or a policy's escalation (SPEC sections 4 and 8)."""

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django import forms

from agents.definitions import ClientTool, ExternalTool
from agents.engine import Answers, server_tool_schema
from agents.events import EventLog
from agents.models import Agent, AgentVersion, RunStatus
from agents.payloads import (
    Approved,
    ApprovedForSession,
    Cancelled,
    CustomToolPermission,
    CustomToolSessionApproval,
    DeniedByUser,
    HookPermission,
    McpPermission,
    McpSessionApproval,
    Payload,
    PermissionCompleted,
    PermissionRequested,
    PolicyAsk,
)
from agents.request_kinds import RequestKind
from agents.requirements import needs_several
from agents.rule_matching import arguments_hash
from agents.server_tools import REGISTRY
from approvals.decisions import note_remembered
from approvals.external_wire import AskedTool, OpenRequest, RequestRefused, invalid
from approvals.kinds.answer_form import DECISIONS, AnswerForm, chosen
from approvals.kinds.base import CANCELLED_REASON, AnswerRefused, Kind, own_state, schema_problems
from approvals.models import PendingRequest, Rule
from approvals.remembered_rules import default_expiry


def _policy(pending: PendingRequest) -> PolicyAsk | None:
    return PolicyAsk(**pending.policy) if pending.policy is not None else None


class ApprovalForm(AnswerForm):
    decision = forms.ChoiceField(choices=DECISIONS, error_messages=chosen("Choose Approve or Deny."))
    reason = forms.CharField(required=False)
    # "Don't ask again": in this session, or always (SPEC section 13); blank keeps asking.
    remember = forms.ChoiceField(
        choices=[("", "no"), ("session", "this session"), ("always", "always")],
        required=False,
        error_messages=chosen("Choose whether to ask again: this session, always, or not remembered."),
    )
    remember_arguments_only = forms.BooleanField(required=False)
    arguments = forms.CharField(required=False)  # the call's arguments as edited, a JSON object

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        approved = data["decision"] == "approve"
        answer: dict[str, Any] = {
            "approved": approved,
            "reason": data["reason"] or None,
            # "…only with these exact arguments" narrows "don't ask again"; checking it alone remembers "always".
            "remember": data["remember"] or ("always" if data["remember_arguments_only"] else None),
            "rememberArgumentsOnly": data["remember_arguments_only"],
        }
        if approved and data["arguments"]:
            edited = self._edited(data["arguments"])
            if edited is not None and edited != self.pending.arguments:
                answer["overrideArguments"] = edited
        self.give(answer)
        return data

    def _edited(self, text: str) -> dict[str, Any] | None:
        try:
            edited = json.loads(text)
        except json.JSONDecodeError as error:
            said = f"Not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})."  # as every form says
            self.refuse("arguments", said, "The edited arguments are not valid JSON.")
            return None
        if not isinstance(edited, dict):
            self.refuse("arguments", "Give a JSON object: {…}.", "The edited arguments are not valid.")
            return None
        return edited


class ApprovalKind(Kind):
    name = RequestKind.APPROVAL
    form = ApprovalForm
    waits = 1
    awaiting = RunStatus.AWAITING_APPROVAL
    fields = frozenset({"approved", "reason", "remember_arguments_only", "override_arguments"})
    required = "approved"
    stored = ("requestId", "approved", "reason", "remember", "rememberArgumentsOnly", "overrideArguments", "expiresAt")
    takes = "An approval request takes `approved` (and a reason)."
    asks = "wants to call"
    decisions = {"approved": "approved", "denied": "denied"}
    keys = {"a": ["approve"], "d": "reason", "e": "arguments", "enter": {"reason": "deny"}}
    selectable = True
    gates_call = True
    interrupt_reason = "tool_approval"
    interrupt_message = "{agent} wants to call {tool}. Approve it?"
    cancel_answer = {"approved": False, "reason": CANCELLED_REASON}
    audit_filters = {"approved": {"answer__approved": True}, "denied": {"answer__approved": False}}

    def done(self, pending: PendingRequest, given: Mapping[str, Any]) -> str:
        said = f"{self.verb(given).capitalize()} {pending.tool_name}"
        return said + (" and remembered the rule" if given.get("remember") else "")

    def verb(self, answer: Mapping[str, Any]) -> str:
        return "approved" if answer.get("approved") else "denied"

    def remembers(self, pending: PendingRequest) -> bool:
        """Never for a tool that asks every time, a policy's escalation, nor a request whose approvals need several
        (one person's rule would skip them, SPEC section 14)."""
        return pending.policy is None and pending.approval_mode != "every_time" and not needs_several(pending.require)

    def answer(
        self, pending: PendingRequest, wire: dict[str, Any], modes: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """Also says until when the rule it remembers "always" holds: its `expiresAt`, else RULE_DEFAULT_EXPIRY."""
        stored = super().answer(pending, wire, modes)
        if stored.get("approved") and stored.get("remember") == "always" and not stored.get("expiresAt"):
            until = default_expiry()
            stored["expiresAt"] = until.isoformat() if until is not None else None
        return stored

    def check(self, pending: PendingRequest, wire: dict[str, Any], modes: Mapping[str, str] | None) -> None:
        if wire.get("remember") and pending.policy is not None:
            raise AnswerRefused(
                "remember_refused", "A policy's escalation is decided each time; it cannot be remembered."
            )
        if wire.get("remember") and not wire.get("approved"):
            raise AnswerRefused("remember_refused", "`remember` applies to approvals only, not to a denial.")
        if wire.get("remember") and self._mode(pending, modes) == "every_time":
            raise AnswerRefused("remember_refused", f"{pending.tool_name} asks every time; it cannot be remembered.")
        if wire.get("expiresAt") and not wire.get("remember"):
            raise AnswerRefused(
                "remember_refused", "`expiresAt` says until when a rule holds: send it with `remember`."
            )
        override = wire.get("overrideArguments")
        schema = self.parameters(pending) if override is not None else None
        if override is not None and schema is not None:
            # Arguments that do not fit the tool are refused now, not handed to it to fail with.
            problems = schema_problems(schema, override)
            if problems:
                detail = f"The arguments do not fit the parameters of {pending.tool_name}: {problems}"
                raise AnswerRefused("invalid_content", detail)

    def read_json(self, value: Any) -> dict[str, Any] | None:
        return {"approved": value} if isinstance(value, bool) else None

    def external_fields(self, version: AgentVersion, body: OpenRequest, asked: AskedTool | None) -> dict[str, Any]:
        """The call of a tool the agent declares (or `asked`, a gateway's), its arguments fitting its parameters."""
        if body.tool_name is None:
            raise invalid("toolName", "an approval names the tool it asks to call")
        if asked is None:
            declared = next((t for t in version.definition.tools if t.name == body.tool_name), None)
            if not isinstance(declared, ExternalTool):
                named = ", ".join(t.name for t in version.definition.tools) or "none"
                detail = f"The agent {version.agent.name!r} declares no tool {body.tool_name!r} (declared: {named})."
                raise RequestRefused(400, "unknown_tool", detail)
            asked = AskedTool.declared(declared, body.description)
        arguments = body.arguments or {}
        problems = schema_problems(asked.parameters, arguments, root="arguments")
        if problems:
            detail = f"The arguments do not fit the parameters of {asked.name}."
            raise RequestRefused(400, "invalid_arguments", detail, {"arguments": problems})
        state = {"permissionRequest": asked.permission, "approvalMode": asked.approval, **asked.state}
        return {"tool_name": asked.name, "arguments": arguments, "engine_state": state}

    def parameters(self, pending: PendingRequest) -> dict[str, Any] | None:
        """A server tool's (its function's), an external agent's (declared); None for an MCP tool's (its schema
        lives on its server) and for an answer held at `output`."""
        tool = next((t for t in pending.run.version.definition.tools if t.name == pending.tool_name), None)
        if isinstance(tool, ExternalTool):
            return tool.parameters  # declared by an external agent (SPEC section 12)
        return server_tool_schema(pending.tool_name) if tool is not None else None

    def narrowed(self, pending: PendingRequest, properties: dict[str, Any]) -> dict[str, Any]:
        """`overrideArguments` as the tool's parameters, where the console knows them."""
        parameters = self.parameters(pending)
        return {**properties, "overrideArguments": parameters} if parameters else properties

    def interrupt_facts(self, pending: PendingRequest) -> dict[str, Any]:
        return {"arguments": pending.arguments} if pending.arguments else {}

    @staticmethod
    def _mode(pending: PendingRequest, modes: Mapping[str, str] | None) -> str:
        return pending.approval_mode if modes is None else pending.approval_mode_in(modes)

    def to_engine(self, pending: PendingRequest, answers: Answers) -> None:
        answer = pending.answer or {}
        approved = bool(answer.get("approved"))
        override = answer.get("overrideArguments")
        if pending.policy is not None:
            self._decide(pending, answers, approved, override, answer.get("reason"))
        elif approved:
            answers.approve(pending.call_id, override)
        else:
            answers.deny(pending.call_id, answer.get("reason") or "The operator denied the call.")

    def record_carried(self, pending: PendingRequest, log: EventLog) -> None:
        """Also makes the rule of a remembered approval (once: `rememberedRuleId`)."""
        answer = pending.answer or {}
        approved = bool(answer.get("approved"))
        override = answer.get("overrideArguments")
        remembered = answer.get("rememberedRuleId")
        if approved and answer.get("remember") and not remembered:
            remembered = self._remember(pending, answer)
        feedback = answer.get("reason") or None
        result: Approved | ApprovedForSession | DeniedByUser
        if approved and answer.get("remember") == "session":
            result = ApprovedForSession(kind="approved-for-session", approval=_session_approval(pending))
        elif approved:
            result = Approved(kind="approved")
        else:
            result = DeniedByUser(kind="denied-interactively-by-user", feedback=feedback)
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
    def _decide(
        pending: PendingRequest, answers: Answers, approved: bool, override: dict[str, Any] | None, reason: str | None
    ) -> None:
        """A policy's escalation: the decision (and a denial's reason) goes to the policy, which asks again with
        the same context next turn (SPEC section 8); the call runs again to be asked, or the held answer is
        offered again."""
        state = own_state(pending)
        answers.decide(state["policyKey"], approved, reason)
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
        # `remember` was a boolean before scopes: an answer stored then is remembered "always".
        session = pending.session if answer.get("remember") == "session" else None
        expires = answer.get("expiresAt")
        rule = Rule.objects.create(
            tenant=pending.tenant,
            agent=agent,
            tool_name=pending.tool_name,
            arguments_hash=arguments_hash(approved_arguments) if only_these else "",
            arguments=approved_arguments if only_these else None,
            created_by=pending.answered_by,
            created_from=pending,
            session=session,
            expires_at=datetime.fromisoformat(expires) if expires else None,
        )
        note_remembered(pending, str(rule.id))
        return str(rule.id)

    def close(self, pending: PendingRequest, answers: Answers, reason: str) -> None:
        if pending.policy is not None and not pending.tool_name:
            return  # an answer held for review that nobody released: there is no call to tell
        super().close(pending, answers, reason)

    def audit(self, answer: dict[str, Any], rule_id: str | None) -> tuple[str, dict[str, Any]]:
        decision = self.verb(answer)
        return decision, {
            "override_arguments": answer.get("overrideArguments"),
            "remembered": bool(answer.get("remember")) and decision == "approved",
            "rule_id": rule_id,
        }


def _session_approval(pending: PendingRequest) -> CustomToolSessionApproval | McpSessionApproval:
    """What an `approved-for-session` result says is approved for the rest of the session: the MCP server's tool,
    else the tool by name (the SDK's `UserToolSessionApproval`)."""
    described = own_state(pending).get("permissionRequest") or {}
    if described.get("kind") == "mcp":
        return McpSessionApproval(kind="mcp", serverName=described["serverName"], toolName=pending.tool_name)
    return CustomToolSessionApproval(kind="custom-tool", toolName=pending.tool_name)


def _description(pending: PendingRequest) -> str:
    """What the tool `pending` asks about does, from the definition that asked (a request stored before the engine
    described its calls)."""
    definition = pending.run.version.definition
    client = next(
        (
            t.description
            for t in [*definition.client_tools, *definition.tools]
            if t.name == pending.tool_name and isinstance(t, ClientTool | ExternalTool)
        ),
        None,
    )
    server = REGISTRY.get(pending.tool_name)
    return client or (server.description if server is not None else "") or ""


KIND = ApprovalKind()
