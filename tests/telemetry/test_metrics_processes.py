"""`GET /metrics` of a served installation (SPEC section 18): a console (`manage.py serve`) and a worker
(`manage.py run_worker`) count into one folder, and the console's /metrics sums them; a worker killed no longer
counts its threads, while what it counted stays."""

import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.processes.cluster import Api, Cluster, manage_all, new_cluster, wait_for

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str, str]]:
    """One installation for the module: its console (no worker threads of its own), an API token, a metrics token."""
    cluster = new_cluster(tmp_path_factory.mktemp("metrics"))
    token, metrics_token = (
        out.strip()
        for out in manage_all(cluster.env, ["create_token", "ada", "--tenant", "acme"], ["create_metrics_token"])
    )
    try:
        cluster.serve("console")
        yield cluster, token, metrics_token
    finally:
        cluster.stop_all()


def scrape(url: str, token: str) -> dict[str, Any]:
    request = urllib.request.Request(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        body = response.read().decode()
    return {"": body} | {family.name: family for family in text_string_to_metric_families(body)}


def value(families: dict[str, Any], sample: str, **labels: str) -> float:
    family = families.get(re.sub(r"_(total|count|sum|bucket)$", "", sample))
    found = [
        s.value for s in (family.samples if family else []) if s.name == sample and labels.items() <= s.labels.items()
    ]
    return sum(found)


def test_a_console_and_a_worker_are_counted_together(served):
    cluster, token, metrics_token = served
    console = cluster.processes[0]
    api = Api(console.url, token)
    api.ok("POST", "/api/agents", {"name": "assistant", "instructions": "You help."})
    with pytest.raises(urllib.error.HTTPError) as refused:
        scrape(console.url, "alm_00000000_not-a-token")
    assert (refused.value.code, refused.value.read()) == (403, b"")

    here = api.ok("POST", "/api/agents/assistant/runs", {"message": "hello"})  # the console runs it
    assert here["status"] == "completed", here
    queued = api.ok("POST", "/api/agents/assistant/runs", {"message": "hello again"}, Prefer="respond-async")
    worker = cluster.worker("worker", "--threads", "2")
    api.run_until(queued["runId"], lambda run: run["status"] == "completed")

    completed = {"tenant": "acme", "agent": "assistant", "status": "completed"}

    def both_counted() -> dict[str, Any] | None:
        families = scrape(console.url, metrics_token)
        return families if value(families, "airlock_runs_total", **completed) == 2 else None

    families = wait_for(both_counted, "both turns counted")
    assert value(families, "airlock_worker_threads") == 2  # the worker's; the console has none
    assert value(families, "airlock_queue_depth", lane="default") == 0
    folder = Path(cluster.folder) / "metrics"
    counted_by = {int(m[1]) for p in folder.glob("counter_*.db") if (m := re.search(r"_(\d+)\.db$", p.name))}
    assert {console.pid, worker.pid} <= counted_by

    cluster.kill(worker)
    after = scrape(console.url, metrics_token)
    assert value(after, "airlock_worker_threads") == 0  # a killed process's gauges leave with it
    assert value(after, "airlock_runs_total", **completed) == 2  # what it counted stays
    assert not list(folder.glob(f"gauge_live*_{worker.pid}.db"))
