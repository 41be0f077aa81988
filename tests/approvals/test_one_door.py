"""Every decision passes through one door (issue 49): a request's end (its answer, who gave it and how, its closing,
the run that carries it) is written by `approvals.decisions` and nowhere else. A search over the code of the three
apps finds each write of those fields (a keyword of a call: `.update(answer=…)`, `PendingRequest(status=…)`; an
assignment: `pending.answered_via = …`) and fails on one outside it."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("agents", "approvals", "console")
DOOR = Path("approvals/decisions.py")
# Writes of those fields that decide nothing, each with why.
NOT_DECISIONS = {
    Path("console/management/commands/seed_demo.py"): "moves the demo's history (answered, closed) back in time",
}

# A request's end: what `approvals.decisions.decide` writes (and `carry`, `carry_closed` once decided).
END_FIELDS = {"answer", "answered_by", "answered_at", "answered_via", "answered_in", "closed_by", "closed_at"}


# The calls that write rows: a queryset's, and a request made whole (`PendingRequest(...)`, saved after).
WRITING_CALLS = {"update", "create", "bulk_create", "get_or_create", "update_or_create", "PendingRequest"}


def _writes(call: ast.Call) -> bool:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return name in WRITING_CALLS


def _names_request_status(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "RequestStatus" for n in ast.walk(node))


def writes_of_an_end(path: Path, source: str) -> list[str]:
    """`path:line field` for each write of a request's end in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
            called = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            if called == "record_closing":  # the door's own statement: the write with its receipt
                found.append(f"{path}:{node.lineno} record_closing")
        if isinstance(node, ast.Call) and _writes(node):
            for keyword in node.keywords:
                ending = keyword.arg in END_FIELDS or (keyword.arg == "status" and _names_request_status(keyword.value))
                if ending:
                    found.append(f"{path}:{node.lineno} {keyword.arg}")
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in ast.walk(target)]
            value: ast.AST | None = node.value
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets, value = [node.target], node.value
        for target in targets:
            if not isinstance(target, ast.Attribute):
                continue
            ending = target.attr in END_FIELDS or (
                target.attr == "status" and value is not None and _names_request_status(value)
            )
            if ending:
                found.append(f"{path}:{target.lineno} {target.attr}")
    return found


def app_modules() -> list[Path]:
    return sorted(
        path.relative_to(ROOT) for app in APPS for path in (ROOT / app).rglob("*.py") if "migrations" not in path.parts
    )


def test_only_the_door_writes_a_requests_end() -> None:
    writers = [
        write
        for path in app_modules()
        if path != DOOR and path not in NOT_DECISIONS
        for write in writes_of_an_end(path, (ROOT / path).read_text())
    ]
    assert writers == [], "a request's end is written outside approvals/decisions.py (use `decide`):\n" + "\n".join(
        writers
    )


def test_the_search_finds_a_second_writer() -> None:
    """The search is not blind: each way a second writer could write an end is found (the writers the door replaced
    were of these shapes: `PendingRequest.record_answer`, `carry`, `close`, the fork's copy, an external decision)."""
    second = """
def record(pending, now, run):
    PendingRequest.objects.filter(pk=pending.pk).update(answer={"approved": True}, answered_at=now)
    pending.status, pending.closed_at = RequestStatus.EXPIRED, now
    pending.answered_via = "rule"
    PendingRequest(status=RequestStatus.ANSWERED, answered_in=run)
    receipts.record_closing(closing, pending, now, decider)
"""
    found = writes_of_an_end(Path("agents/elsewhere.py"), second)
    written = [
        "answer",
        "answered_at",
        "status",
        "closed_at",
        "answered_via",
        "status",
        "answered_in",
        "record_closing",
    ]
    assert sorted(line.split()[1] for line in found) == sorted(written)
    # A run's status is not a request's end.
    assert writes_of_an_end(Path("x.py"), "run.status = RunStatus.COMPLETED\nRun(status=RunStatus.QUEUED)") == []
