"""agent-hooks (AGENT-HOOKS-0.1) with Airlock: an interceptor that asks Airlock for the verdict of an agent's
bound policies (`POST /api/agents/{name}/interceptions`), and an approval resolver that turns an escalation into
an Airlock request and answers it with the operator's decision.

    emitter = InterceptionEmitter(resolver=AirlockResolver(AsyncAirlock(url, token), "mailer"), timeout=600)
    emitter.register(AirlockInterceptor(url, token, "mailer"), name="airlock")

The emitter's `timeout` bounds the resolver too: give it as long as a person may take to answer.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

import httpx
from agent_hooks import (
    ApprovalOutcome,
    ApprovalRequest,
    ApprovalResolution,
    InterceptionPoint,
    Verdict,
)

from airlock_client.client import RequestClosed

if TYPE_CHECKING:
    from airlock_client.client import AsyncAirlock

# The requestId of an escalation: the same context asks the same request again (a retry is idempotent).
NAMESPACE = uuid.UUID("6f1c3b52-0f5e-4b8e-9a57-1f2d6c3e9a10")


class AirlockInterceptor:
    """An agent-hooks interceptor: each context goes to Airlock, which answers its policies' verdict. A transport
    error or a refusal raises, which the emitter turns into a fail-closed deny."""

    def __init__(
        self,
        base_url: str,
        token: str,
        agent: str,
        *,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.agent = agent
        headers = {"Authorization": f"Bearer {token}"}
        self._http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout, transport=transport)

    async def intercept(self, context: dict[str, Any]) -> Any:
        response = await self._http.post(f"/api/agents/{self.agent}/interceptions", json=context)
        response.raise_for_status()
        answer = response.json()
        # The verdict as Airlock answered it (agent-hooks section 5.5: bare, or in an envelope): the emitter checks
        # it as it checks any interceptor's, so a failed policy (a reserved `host_error` reason) is a deny.
        if isinstance(answer, dict) and "verdict" in answer and "decision" not in answer:
            return answer["verdict"]
        return answer

    async def aclose(self) -> None:
        await self._http.aclose()


class AirlockResolver:
    """An agent-hooks approval resolver: an escalation becomes an Airlock request of `agent` (at `pre_tool_call`
    an approval of the call, elsewhere a plan to approve), and the operator's decision resolves it. Waits at most
    `timeout` seconds (None: until decided); a request closed without a decision rejects."""

    def __init__(self, airlock: AsyncAirlock, agent: str, *, timeout: float | None = None) -> None:
        self.airlock, self.agent, self.timeout = airlock, agent, timeout

    async def resolve(self, request: ApprovalRequest) -> ApprovalResolution:
        context, verdict = request.context, request.verdict
        identity = request.context_identity
        key = identity or json.dumps(context, sort_keys=True, default=str)
        request_id = uuid.uuid5(NAMESPACE, f"{self.agent}:{key}")
        session = (context.get("session") or {}).get("id")
        if request.interception_point is InterceptionPoint.PRE_TOOL_CALL:
            call = context.get("tool_call") or {}
            opened = await self.airlock.request(
                self.agent,
                "approval",
                request_id=request_id,
                session_id=session,
                tool_name=call.get("name"),
                tool_call_id=call.get("id"),
                arguments=call.get("args") or {},
            )
        else:
            opened = await self.airlock.request(
                self.agent,
                "plan",
                request_id=request_id,
                session_id=session,
                summary=verdict.message or verdict.reason or "A policy asks for approval.",
                plan_content=json.dumps(context.get("target"), indent=2, default=str),
            )
        try:
            decision = opened.decision or await self.airlock.wait(opened.request_id, timeout=self.timeout)
        except RequestClosed as closed:  # cancelled, expired or abandoned: nobody approved it
            decision = closed.decision
        if decision.approved:
            return ApprovalResolution(
                outcome=ApprovalOutcome.APPROVE, context_identity=identity, verdict=Verdict.allow()
            )
        said = decision.text or f"Denied in Airlock by {decision.answered_by or 'its deadline'}."
        denial = Verdict.deny(reason=verdict.reason or "denied", message=said)
        return ApprovalResolution(outcome=ApprovalOutcome.REJECT, context_identity=identity, verdict=denial)
