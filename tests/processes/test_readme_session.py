"""The README's "Following a session from code" example runs as written and ends (issue 50): its Python block, read
out of README.md, with the served console's address and an operator's token put where the README says to put them,
run by .venv's Python beside a copy of `airlock_events.py`, against a console seeded as `make run` seeds it. It
ends once the conversation is done, whoever decides its call: a person answering in the inbox (here through the
API) and a policy that denies it, where no person is asked (docs/policies.md's mail-domain recipe, bound to the
demo's assistant, enforced)."""

import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from console.management.commands.seed_demo import OTHER_TOOLS, demo_agent
from tests.policies.test_recipes import recipe_hooks
from tests.processes.cluster import PYTHON, ROOT, Api, Cluster, new_cluster, seeded_demo

pytestmark = pytest.mark.processes

README = ROOT / "README.md"
SECTION = "### Following a session from code"
BLOCK = re.compile(r"^```python\n(?P<code>.*?)^```$", re.S | re.M)
ADDRESS = re.compile(r'^BASE, TOKEN = "http://127\.0\.0\.1:8000", "al_…"', re.M)
# How long the example may take to follow one conversation to its end (it takes a few seconds).
ENDS_WITHIN = 60


def readme_block() -> str:
    """The section's one Python block."""
    text = README.read_text()
    start = text.index(SECTION)
    following = text.find("\n## ", start + len(SECTION))
    [found] = BLOCK.findall(text[start : following if following != -1 else len(text)])
    return found


class Console:
    def __init__(self, cluster: Cluster, url: str, admin: str, operator: str) -> None:
        self.cluster, self.url = cluster, url
        self.admin, self.operator = Api(url, admin), Api(url, operator)


@pytest.fixture
def console(tmp_path: Path) -> Iterator[Console]:
    """A console with the demo data, working queued runs (the example starts its run on a lane)."""
    cluster = new_cluster(tmp_path / "console")
    admin, operator = seeded_demo(cluster.env)
    try:
        served = cluster.serve("daphne", WORKER_THREADS="2")
        yield Console(cluster, served.url, admin, operator)
    finally:
        cluster.stop_all()


def run_example(console: Console, folder: Path) -> subprocess.CompletedProcess[str]:
    """The README's block as its reader runs it: the address and the operator's token filled in, from a folder of
    its own holding `airlock_events.py` (copied beside it, as the README says)."""
    code, filled = ADDRESS.subn(f'BASE, TOKEN = "{console.url}", "{console.operator.token}"', readme_block())
    assert filled == 1, "the README's block no longer sets BASE and TOKEN as this test expects"
    folder.mkdir()
    shutil.copy(ROOT / "airlock_events.py", folder)
    (folder / "example.py").write_text(code)
    env = {k: v for k, v in console.cluster.env.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")}
    try:
        return subprocess.run(
            [PYTHON, "example.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=ENDS_WITHIN
        )
    except subprocess.TimeoutExpired as waited:
        printed = (waited.stdout or b"").decode() if isinstance(waited.stdout, bytes) else waited.stdout
        pytest.fail(f"the README's example did not end within {ENDS_WITHIN} s; it printed:\n{printed}")


def answer_what_waits(api: Api, stopped: threading.Event, answered: list[str]) -> None:
    """The reader's colleague at the inbox: approves each request of the assistant that waits."""
    while not stopped.wait(0.2):
        for request in api.ok("GET", "/api/requests?agent=assistant")["items"]:
            status, _ = api("POST", f"/api/requests/{request['requestId']}/responses", {"approved": True})
            if status == 200:
                answered.append(request["requestId"])


def test_it_ends_after_a_person_approves_the_call(console, tmp_path):
    stopped, answered = threading.Event(), []
    colleague = threading.Thread(target=answer_what_waits, args=(console.operator, stopped, answered), daemon=True)
    colleague.start()
    try:
        done = run_example(console, tmp_path / "example")
    finally:
        stopped.set()
        colleague.join(10)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert len(answered) == 1, answered
    assert "[asks to run send_email" in done.stdout, done.stdout
    assert "send_email: sent to ada@example.com" in done.stdout, done.stdout
    history = console.operator.ok("GET", "/api/sessions/readme-1/events")["items"]
    assert history[-1]["type"] == "run.completed", [event["type"] for event in history]


def denying_hooks() -> dict[str, Any]:
    """docs/policies.md's "Deny mail outside a domain", its domain example.org (so the example's mail to
    ada@example.com is denied), its manifest naming the assistant's other tools and its sub-agent."""
    hooks = recipe_hooks("Deny mail outside a domain")
    [binding] = hooks["bindings"]
    [(policy, modules)] = binding["config"]["modules"].items()
    [(file, module)] = modules.items()
    assert '"@example.com"' in module
    binding["config"]["modules"] = {policy: {file: module.replace("example.com", "example.org")}}
    manifest = yaml.safe_load(binding["config"]["manifest"])
    for tool in (*OTHER_TOOLS, "researcher"):
        manifest["tools"][tool] = {"type": "Tool", "id": tool}
    binding["config"]["manifest"] = yaml.safe_dump(manifest, sort_keys=False)
    return hooks


def test_it_ends_when_a_policy_denies_the_call_and_nobody_is_asked(console, tmp_path):
    assistant = demo_agent().model_dump(mode="json", by_alias=True, exclude_none=True)
    console.admin.ok("PUT", "/api/agents/assistant", {**assistant, "hooks": denying_hooks()})

    done = run_example(console, tmp_path / "example")

    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "Mail goes to example.org only, not to ada@example.com." in done.stdout, done.stdout
    assert "sent to" not in done.stdout, done.stdout
    assert console.operator.ok("GET", "/api/requests?agent=assistant")["items"] == []
