"""One way a run is built (issue 49 item 2): `agents.run_lifecycle.new_run` makes every `Run`, whoever starts it (an
API or console start, a replay, a continuation, an external agent's request, a gateway's call). A search over the
apps' code fails on a `Run(...)` or `Run.objects.create(...)` anywhere else (`bulk_create` saves runs `new_run`
built: the gateway's passed calls are saved together)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("agents", "approvals", "console", "gateway", "protocols", "slackapp", "decisionlog", "identity")
BUILDER = (Path("agents/run_lifecycle.py"), "new_run")


def builds_of_a_run(path: Path, source: str) -> list[str]:
    """`path:line in <function>` for each `Run(...)` or `Run.objects.create(...)` / `get_or_create` in `source`."""
    found = []
    for function in [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]:
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            direct = isinstance(func, ast.Name) and func.id == "Run"
            managed = (
                isinstance(func, ast.Attribute)
                and func.attr in ("create", "get_or_create")
                and isinstance(func.value, ast.Attribute)
                and isinstance(func.value.value, ast.Name)
                and func.value.value.id == "Run"
            )
            if direct or managed:
                found.append(f"{path}:{node.lineno} in {function.name}")
    return sorted(set(found))


def test_every_run_is_built_by_new_run():
    built = []
    for app in APPS:
        for file in sorted((ROOT / app).rglob("*.py")):
            path = file.relative_to(ROOT)
            if "migrations" in path.parts:
                continue
            built += builds_of_a_run(path, file.read_text())
    assert built == [f"{BUILDER[0]}:{line} in {BUILDER[1]}" for line in _builder_lines()], built


def _builder_lines() -> list[int]:
    source = (ROOT / BUILDER[0]).read_text()
    tree = ast.parse(source)
    builder = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == BUILDER[1])
    return [n.lineno for n in ast.walk(builder) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Run"]


def test_the_search_finds_a_run_built_elsewhere():
    planted = "def start(agent):\n    return Run.objects.create(agent=agent)\n\ndef other():\n    return Run(id=1)\n"
    assert builds_of_a_run(Path("agents/elsewhere.py"), planted) == [
        "agents/elsewhere.py:2 in start",
        "agents/elsewhere.py:5 in other",
    ]
