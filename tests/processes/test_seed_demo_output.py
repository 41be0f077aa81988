"""`make run`'s first words (issue 50): `manage.py seed_demo` says the demo is ready and how to log in, and then
only how its history went; the tasks that run the history's continuations do not log a line each under it (they
printed some fourteen `Task id=… state=RUNNING/SUCCESSFUL` lines)."""

import subprocess

import pytest

from tests.processes.cluster import PYTHON, ROOT, new_cluster

pytestmark = pytest.mark.processes


def test_seeding_prints_the_login_and_the_history_and_nothing_else(tmp_path):
    cluster = new_cluster(tmp_path)
    env = {**cluster.env, "DEMO_PASSWORD": "demo-output-1", "LOG_LEVEL": "INFO"}

    seeded = subprocess.run(
        [PYTHON, "manage.py", "seed_demo"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False
    )

    assert seeded.returncode == 0, seeded.stderr
    printed = (seeded.stdout + seeded.stderr).splitlines()
    assert printed == [
        "Demo tenant 'demo' is ready. Log in as admin, operator or viewer",
        "with the password: demo-output-1",
        "Demo history: 10 conversations with their answers.",
    ], printed
