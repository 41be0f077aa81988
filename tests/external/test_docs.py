"""docs/external-agents.md runs as written (issue 50, item 2): every code block of the page, in order, against a
console seeded as `make run` seeds it (`seed_demo`), with AIRLOCK_URL and AIRLOCK_TOKEN set as the page tells its
reader to. Shell blocks run with bash from the checkout, Python blocks with .venv's Python (the OpenAI Agents SDK's
in .venv-openai-agents) and the client on PYTHONPATH. Where the page says to answer in the inbox, the demo's
operator approves what waits, through the API. A block the tests cannot run says why in a comment right above it
(`<!-- not run: REASON -->`); those are few."""

import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.processes.cluster import ROOT, Api, Cluster, new_cluster, seeded_demo

pytestmark = pytest.mark.processes

DOC = ROOT / "docs" / "external-agents.md"
BLOCK = re.compile(r"(?:<!-- not run: (?P<reason>[^\n]*?) -->\n)?```(?P<lang>[a-z]*)\n(?P<code>.*?)^```$", re.S | re.M)
PYTHON = ROOT / ".venv" / "bin" / "python"
SDK_PYTHON = ROOT / ".venv-openai-agents" / "bin" / "python"
# The agents whose requests the page has its reader answer in the inbox.
ANSWERED = ("release-bot", "release-mailer", "example-deployer")


@dataclass
class Block:
    line: int
    lang: str
    code: str
    not_run: str | None


def blocks(text: str) -> list[Block]:
    return [
        Block(text.count("\n", 0, found.start("code")) + 1, found["lang"], found["code"], found["reason"])
        for found in BLOCK.finditer(text)
    ]


@dataclass
class Demo:
    url: str
    admin: str
    operator: str
    cluster: Cluster


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """A console with the demo data, as `make run` serves it, and its admin's and operator's API tokens."""
    cluster = new_cluster(Path(tmp_path_factory.mktemp("airlock-docs")))
    admin, operator = seeded_demo(cluster.env)
    try:
        served = cluster.serve("daphne")
        yield Demo(served.url, admin, operator, cluster)
    finally:
        cluster.stop_all()


class Answerer:
    """The reader's colleague at the inbox: approves, as the demo's operator, every request of the page's agents
    that waits, until stopped."""

    def __init__(self, demo: Demo) -> None:
        self.api = Api(demo.url, demo.operator)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Answerer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(10)

    def _run(self) -> None:
        while not self.stopped.wait(0.2):
            for agent in ANSWERED:
                for request in self.api.ok("GET", f"/api/requests?agent={agent}")["items"]:
                    self.api("POST", f"/api/requests/{request['requestId']}/responses", answer(request))


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """Yes to an approval or a plan, the first choice (or "yes") to a question."""
    if request["kind"] == "question":
        return {"text": (request.get("choices") or ["yes"])[0]}
    return {"approved": True}


def run(block: Block, demo: Demo, folder: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in demo.cluster.env.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")}
    env |= {"AIRLOCK_URL": demo.url, "AIRLOCK_TOKEN": demo.admin}
    if block.lang == "sh":
        # From the checkout, as the page's reader runs it; -e: a failed command fails the block.
        command, cwd = ["bash", "-e", "-o", "pipefail", "-c", block.code], ROOT
    else:
        # From elsewhere: the repository's `agents` app must not shadow the OpenAI Agents SDK's `agents`.
        script = folder / f"block_{block.line}.py"
        script.write_text(block.code)
        python = SDK_PYTHON if re.search(r"^from agents import", block.code, re.M) else PYTHON
        env["PYTHONPATH"] = str(ROOT / "clients" / "python")
        command, cwd = [str(python), str(script)], folder
    # A block that answers its own requests is left to do so; one that waits gets its answer.
    with Answerer(demo) if "/responses" not in block.code else nullcontext():
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


def test_it_runs_every_block_of_the_page_as_written(demo, tmp_path):
    found = blocks(DOC.read_text())
    assert found, "no code blocks found in docs/external-agents.md"
    skipped = [block for block in found if block.not_run is not None]
    assert all((block.not_run or "").strip() for block in skipped), "a block marked not run must say why"
    assert len(skipped) <= 1, f"keep blocks that are not run rare: {[b.line for b in skipped]}"
    for block in found:
        if block.not_run is not None:
            continue
        assert block.lang in ("sh", "python"), f"line {block.line}: a ```{block.lang} block cannot be run"
        done = run(block, demo, tmp_path)
        assert done.returncode == 0, f"the block at line {block.line} failed:\n{done.stdout}\n{done.stderr}"


def test_it_names_only_files_the_repository_has():
    text = DOC.read_text()
    named = set(re.findall(r"\b(?:docs|tests|clients|approvals|agents|console)/[\w./-]+\.(?:py|md|toml)\b", text))
    assert named, "the page names no files"
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"docs/external-agents.md names files the repository does not have: {missing}"
    assert "SPEC" not in text, "SPEC.md is not in the repository"
