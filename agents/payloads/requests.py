"""What a person is asked (section 4's kinds: input, plan, continuation, an MCP server's elicitation), and
Airlock's own events of any request's end: `request.answered`, `request.terminated`."""

from typing import Any, Literal

from pydantic import Field

from agents.payloads.base import EventType, Kept, Payload, Shape, optional
from agents.request_kinds import REQUEST_KINDS


class UserInputRequested(Kept):
    type = EventType.USER_INPUT_REQUESTED
    requestId: str
    question: str
    choices: list[str] | None = optional()
    allowFreeform: bool
    toolCallId: str | None = optional()


class UserInputCompleted(Kept):
    type = EventType.USER_INPUT_COMPLETED
    requestId: str
    answer: str | None = optional()
    wasFreeform: bool | None = optional()


# The SDK's actions on leaving plan mode; Airlock's plan, once approved, goes on in the agent's turn, its tools
# still asking as their approval modes say: `interactive`. A revision is `approved: false` with `feedback`.
PlanAction = Literal["exit_only", "interactive", "autopilot", "autopilot_fleet"]
PLAN_ACTIONS: list[PlanAction] = ["interactive"]


class ExitPlanModeRequested(Kept):
    type = EventType.EXIT_PLAN_MODE_REQUESTED
    requestId: str
    summary: str
    planContent: str
    actions: list[PlanAction]
    recommendedAction: PlanAction


class ExitPlanModeCompleted(Kept):
    type = EventType.EXIT_PLAN_MODE_COMPLETED
    requestId: str
    approved: bool | None = optional()
    selectedAction: PlanAction | None = optional()
    feedback: str | None = optional()


class LimitsResponse(Shape):
    """`add` a fresh allowance (`additionalAiCredits`: the definition's `maxModelCalls`), or `cancel`: stop."""

    action: Literal["add", "cancel"]
    additionalAiCredits: int | None = optional()


class SessionLimitsExhaustedRequested(Kept):
    """A run at its `maxModelCalls` (a model call counts one AI credit)."""

    type = EventType.SESSION_LIMITS_EXHAUSTED_REQUESTED
    requestId: str
    maxAiCredits: int
    usedAiCredits: int


class SessionLimitsExhaustedCompleted(Kept):
    type = EventType.SESSION_LIMITS_EXHAUSTED_COMPLETED
    requestId: str
    response: LimitsResponse


class RequestedSchema(Shape):
    """The SDK's form schema: an object's `properties` and `required` (the whole schema stays on the request)."""

    type: Literal["object"]
    properties: dict[str, Any]
    required: list[str] | None = optional()

    @classmethod
    def of(cls, schema: dict[str, Any] | None) -> "RequestedSchema":
        schema = schema or {}
        required = schema.get("required")
        return cls(
            type="object", properties=schema.get("properties") or {}, required=list(required) if required else None
        )


class ElicitationRequested(Kept):
    type = EventType.ELICITATION_REQUESTED
    requestId: str
    message: str
    requestedSchema: RequestedSchema
    mode: Literal["form"] = "form"
    toolCallId: str | None = optional()


class ElicitationCompleted(Kept):
    type = EventType.ELICITATION_COMPLETED
    requestId: str
    action: Literal["accept", "decline", "cancel"] | None = optional()
    content: dict[str, Any] | None = optional()


class PolicyAsk(Shape):
    binding: str | None = None
    reason: str | None = None
    message: str | None = None


class ApprovalGiven(Shape):
    """One approval of a request that needs several (SPEC section 14)."""

    by: str
    onBehalfOf: str | None = optional(description="the away member a delegate answered for")
    at: str
    argumentsDigest: str = Field(description="SHA-256 of the canonical JSON of the arguments it approved")
    authMethod: str | None = optional()


class RequestApprovalRecorded(Payload):
    """Airlock's own: an approval of a request that needs several, which did not decide it yet (SPEC section 14);
    never a `permission.completed`."""

    type = EventType.REQUEST_APPROVAL_RECORDED
    requestId: str
    by: str = Field(description="who gave this approval (the last of `approvals`)")
    toolCallId: str | None = optional()
    toolName: str | None = optional()
    approvals: list[ApprovalGiven] = Field(description="the approvals that count now, in order")
    required: int
    waitingFor: list[str] | None = optional(description="the groups of `fromEach` none of them is from yet")


class RequestAnswered(Payload):
    """Airlock's own, after every `*.completed` of a request decided (by a person, a rule or a policy): what the
    SDK's events have no field for. A request closed unanswered has `request.terminated` instead."""

    type = EventType.REQUEST_ANSWERED
    requestId: str
    kind: str = Field(description=" | ".join(REQUEST_KINDS))
    toolCallId: str | None = optional()
    toolName: str | None = optional()
    answeredBy: str | None = optional(description="the username; absent when a rule or a policy decided")
    onBehalfOf: str | None = optional(description="the away member whose delegate answered (SPEC section 14)")
    authMethod: str | None = optional(description="how the person who answered signed in, as the receipt says")
    ruleId: str | None = optional(description="the remembered rule that approved the call")
    rememberedRuleId: str | None = optional(description="the rule this answer remembered")
    overrideArguments: dict[str, Any] | None = optional(description="the arguments the operator edited")
    arguments: dict[str, Any] | None = optional(description="the arguments a rule or a policy decided on")
    policy: PolicyAsk | None = optional(description="the policy that escalated or denied")
    outcome: str | None = optional(description="a client tool's: completed | failed | rejected | background")
    ranInFailedTurn: bool | None = optional(description="the call ran in a turn that failed; it was not run again")
    approvals: list[ApprovalGiven] | None = optional(description="a quorum's approvals that decided it (SPEC 14)")


class RequestTerminated(Payload):
    type = EventType.REQUEST_TERMINATED
    requestId: str
    kind: Literal["expired", "cancelled", "abandoned"]
    toolCallId: str | None = optional()
    toolName: str | None = optional()
