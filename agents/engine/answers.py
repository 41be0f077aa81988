"""The answers a turn carries to the engine (`Answers`): approvals, client tools' results, elicitations' and people's
answers, policy decisions, a held answer's release, a continuation, and the answers of waiting sub-agents; as
pydantic-ai's deferred tool results, and as JSON (`dump`, `load`) for a waiting sub-agent's call (and a run
queued with a copy of its answers, before they were rebuilt from its requests:
`agents.run_lifecycle.carried_answers`)."""

from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import DeferredToolResults, ToolApproved, ToolDenied, ToolFailed, ToolReturn

# What the model reads of a client tool the client runs in the background.
BACKGROUND = "accepted, running in the background"


@dataclass
class Answers:
    """The answers a turn carries to the engine, keyed by tool call id."""

    approvals: dict[str, ToolApproved | ToolDenied] = field(default_factory=dict)
    tool_results: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Operators' decisions on policy escalations, by the escalated context's key (agents.policies).
    decisions: dict[str, bool] = field(default_factory=dict)
    # The reason an operator typed when denying one of them: what the agent is told instead of the policy's words.
    refusals: dict[str, str] = field(default_factory=dict)
    # An answer held for review at `output` (the request's engine state), to release or refuse.
    release: dict[str, Any] | None = None
    # A person's answers to the tools that ask one (`ask_user`, `propose_plan`), as the model reads them.
    people: dict[str, str] = field(default_factory=dict)
    # A run stopped at its model-call limit: its history, and whether to go on (a `continuation` answer).
    resume: dict[str, Any] | None = None
    # Answers for waiting sub-agents, by the parent's call that runs each: (its state, their answers).
    subagents: dict[str, tuple[dict[str, Any], "Answers"]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(
            self.approvals
            or self.tool_results
            or self.inputs
            or self.decisions
            or self.people
            or self.resume
            or self.subagents
        )

    def for_subagent(self, state: dict[str, Any]) -> "Answers":
        """The answers of the sub-agent waiting in the call `state` names (`agents.engine.subagent_turns`); they
        re-run that call, which resumes the sub-agent's turn with them."""
        entry = self.subagents.setdefault(state["parentCallId"], (state, Answers()))
        return entry[1]

    def answer_person(self, call_id: str, text: str) -> None:
        """What a person answered a tool that asked them; the model reads it as the tool's result."""
        self.people[call_id] = text

    def decide(self, key: str, approved: bool, reason: str | None = None) -> None:
        """An operator's decision on a policy's escalation; the policy's context asks again and gets it (with
        the operator's reason for a denial)."""
        self.decisions[key] = approved
        if not approved and reason:
            self.refusals[key] = reason

    def approve(self, call_id: str, override_arguments: dict[str, Any] | None = None) -> None:
        self.approvals[call_id] = ToolApproved(override_args=override_arguments)

    def deny(self, call_id: str, reason: str) -> None:
        """The call does not run; the model reads `reason` as its result."""
        self.approvals[call_id] = ToolDenied(reason)

    def result(self, call_id: str, value: Any) -> None:
        """The result a client tool returned."""
        self.tool_results[call_id] = value

    def fail(self, call_id: str, message: str) -> None:
        """The client tool failed (or never ran); the model reads `message` as its error."""
        self.tool_results[call_id] = ToolFailed(message)

    def reject(self, call_id: str, reason: str) -> None:
        """The client refused to run the tool; the model reads `TOOL rejected: <reason>`."""
        self.tool_results[call_id] = ToolReturn(return_value=reason, metadata={"outcome": "rejected"})

    def background(self, call_id: str) -> None:
        """The client accepted the call and runs it in the background; a later message may bring the result."""
        self.tool_results[call_id] = ToolReturn(return_value=BACKGROUND, metadata={"outcome": "background"})

    def answer_input(self, call_id: str, answer: dict[str, Any]) -> None:
        """An elicitation's answer (action, content, the engine's state of the call)."""
        self.inputs[call_id] = answer

    def dump(self) -> dict[str, Any]:
        """JSON for the metadata of a waiting sub-agent's call; `load` reads it back."""
        approvals = {
            call_id: {"approved": True, "overrideArguments": answer.override_args}
            if isinstance(answer, ToolApproved)
            else {"approved": False, "reason": answer.message}
            for call_id, answer in self.approvals.items()
        }
        results = {call_id: _dump_result(answer) for call_id, answer in self.tool_results.items()}
        return {
            "approvals": approvals,
            "toolResults": results,
            "inputs": self.inputs,
            "decisions": self.decisions,
            "refusals": self.refusals,
            "release": self.release,
            "people": self.people,
            "resume": self.resume,
            "subagents": {call_id: [state, answers.dump()] for call_id, (state, answers) in self.subagents.items()},
        }

    @classmethod
    def load(cls, data: dict[str, Any]) -> "Answers":
        approvals: dict[str, ToolApproved | ToolDenied] = {
            call_id: ToolApproved(override_args=a.get("overrideArguments"))
            if a["approved"]
            else ToolDenied(a["reason"])
            for call_id, a in data.get("approvals", {}).items()
        }
        results = {call_id: _load_result(r) for call_id, r in data.get("toolResults", {}).items()}
        return cls(
            approvals=approvals,
            tool_results=results,
            inputs=data.get("inputs", {}),
            decisions=data.get("decisions", {}),
            refusals=data.get("refusals", {}),
            release=data.get("release"),
            people=data.get("people", {}),
            resume=data.get("resume"),
            subagents={
                call_id: (state, cls.load(answers)) for call_id, (state, answers) in data.get("subagents", {}).items()
            },
        )

    def deferred_results(self) -> DeferredToolResults:
        approvals: dict[str, Any] = dict(self.approvals)
        metadata: dict[str, dict[str, Any]] = {}
        for call_id, answer in self.inputs.items():
            # An answered elicitation re-runs the MCP call from its start with the answer at hand.
            approvals[call_id] = ToolApproved()
            metadata[call_id] = {"input_answer": answer}
        for call_id, text in self.people.items():
            approvals[call_id] = ToolApproved()
            metadata[call_id] = {"person_answer": text}
        for call_id, (state, answers) in self.subagents.items():
            approvals[call_id] = ToolApproved()
            metadata[call_id] = {"subagent_resume": {"state": state, "answers": answers.dump()}}
        return DeferredToolResults(approvals=approvals, calls=dict(self.tool_results), metadata=metadata)


def _dump_result(answer: Any) -> dict[str, Any]:
    if isinstance(answer, ToolFailed):
        return {"error": answer.message}
    if isinstance(answer, ToolReturn):
        return {"result": answer.return_value, "outcome": (answer.metadata or {}).get("outcome")}
    return {"result": answer}


def _load_result(stored: dict[str, Any]) -> Any:
    if "error" in stored:
        return ToolFailed(stored["error"])
    if stored.get("outcome"):
        return ToolReturn(return_value=stored["result"], metadata={"outcome": stored["outcome"]})
    return stored["result"]
