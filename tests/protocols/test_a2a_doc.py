"""docs/a2a.md's A2A client runs as written (SPEC section 16, issue 53: a client in under 20 lines): the page's Python
block, with the served console's address and an operator's token where the page says to put them, run by .venv's
Python against a console serving the assistant, prints what the page says it prints."""

import re
import subprocess

import pytest

from tests.helpers import ASSISTANT
from tests.processes.cluster import PYTHON, ROOT, Api, new_cluster

pytestmark = pytest.mark.processes

DOC = (ROOT / "docs" / "a2a.md").read_text()
CLIENT = re.search(r"## A client in Python.*?```python\n(?P<code>.*?)^```$", DOC, re.S | re.M)
URL, TOKEN = "http://127.0.0.1:8000", "<an operator's API token>"


def test_the_client_is_under_20_lines():
    assert CLIENT is not None, "docs/a2a.md has no Python block under 'A client in Python'"
    assert len(CLIENT["code"].splitlines()) < 20


def test_the_client_runs_as_written(tmp_path):
    assert CLIENT is not None
    code = CLIENT["code"]
    assert URL in code and TOKEN in code  # the two things the reader puts in
    cluster = new_cluster(tmp_path / "data")
    try:
        token = cluster.manage("create_token", "ada", "--tenant", "acme").strip().splitlines()[-1]
        console = cluster.serve(WORKER_THREADS="2")  # the continuation the answer queues runs on these
        Api(console.url, token).ok("POST", "/api/agents", ASSISTANT)
        script = tmp_path / "client.py"
        script.write_text(code.replace(URL, console.url).replace(TOKEN, token))
        ran = subprocess.run([PYTHON, str(script)], capture_output=True, text=True, timeout=120, check=False)
    finally:
        cluster.stop_all()

    assert ran.returncode == 0, ran.stderr
    printed = re.search(r"It prints `(?P<line>[^`]+)`", DOC)
    assert printed is not None, "docs/a2a.md does not say what the client prints"
    assert ran.stdout.strip() == printed["line"]
