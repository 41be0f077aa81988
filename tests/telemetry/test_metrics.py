"""`GET /metrics` (SPEC section 18), read with prometheus_client's own parser: who may read it, the values moving
after a decision and a run, nothing of a call's arguments in it, the docs' alerts naming metrics it has; and a served
console summing its own counters with a worker process's."""

import ipaddress
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from console.env import EnvError, env_networks
from tests.helpers import EMAIL, ask_to_send, drain_queued, make_agent

DOCS = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def scrape(client: Client | None = None, **headers: Any) -> dict[str, Any]:
    """The families of /metrics by name; the body under "".`"""
    response = (client or Client()).get("/metrics", **headers)
    assert response.status_code == 200, response.content
    body = response.content.decode()
    return {"": body} | {family.name: family for family in text_string_to_metric_families(body)}


def value(families: dict[str, Any], sample: str, **labels: str) -> float:
    """The sample's value where its labels include `labels`; 0 when there is none."""
    family = families[re.sub(r"_(total|count|sum|bucket)$", "", sample)]
    found = [s.value for s in family.samples if s.name == sample and labels.items() <= s.labels.items()]
    assert len(found) <= 1, found
    return found[0] if found else 0.0


def metrics_token(*args: str) -> str:
    from io import StringIO

    out = StringIO()
    call_command("create_metrics_token", *args, stdout=out)
    return out.getvalue().strip()


@pytest.mark.django_db
def test_it_refuses_everyone_not_allowed_with_an_empty_403(admin, settings):
    settings.METRICS_ALLOW = (ipaddress.ip_network("10.0.0.0/8"),)
    tries = [
        Client().get("/metrics"),  # 127.0.0.1, not listed
        Client().get("/metrics", REMOTE_ADDR="192.168.1.9"),
        Client().get("/metrics", HTTP_AUTHORIZATION="Bearer alm_00000000_guessed"),
        Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {admin.token}"),  # a tenant's API token is not one
        Client().get("/metrics", HTTP_AUTHORIZATION="Bearer " + "x" * 5000),
        admin.client.get("/metrics"),  # a signed-in admin is not either
        Client().post("/metrics"),
        Client().get("/metrics", REMOTE_ADDR="not an address"),
    ]
    assert [(r.status_code, r.content) for r in tries] == [(403, b"")] * len(tries)


@pytest.mark.django_db
def test_it_answers_the_listed_addresses(settings):
    settings.METRICS_ALLOW = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("::1"))
    for address in ("10.1.2.3", "::ffff:10.1.2.3", "::1"):
        assert "airlock_requests_open" in scrape(REMOTE_ADDR=address)
    assert Client().get("/metrics", REMOTE_ADDR="11.1.2.3").status_code == 403
    assert Client().post("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 405


@pytest.mark.django_db
def test_it_answers_a_metrics_token_until_it_is_replaced():
    first = metrics_token("--name", "prometheus")
    assert first.startswith("alm_")
    assert "airlock_runs" in scrape(HTTP_AUTHORIZATION=f"Bearer {first}")
    assert "airlock_runs" in scrape(HTTP_AUTHORIZATION=f"bearer {first}")  # the scheme in any case, as the API's
    second = metrics_token("--replace")
    assert Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {first}").status_code == 403
    assert "airlock_runs" in scrape(HTTP_AUTHORIZATION=f"Bearer {second}")


def test_it_refuses_to_start_with_a_bad_allow_list():
    assert env_networks("METRICS_ALLOW", {}) == ()
    assert env_networks("METRICS_ALLOW", {"METRICS_ALLOW": " 127.0.0.1, 10.0.0.0/8 ,::1"}) == (
        ipaddress.ip_network("127.0.0.1"),
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("::1"),
    )
    for bad in ("localhost", "10.0.0.1/8", "10.0.0.0/33", "127.0.0.1;10.0.0.1"):
        with pytest.raises(EnvError, match="METRICS_ALLOW"):
            env_networks("METRICS_ALLOW", {"METRICS_ALLOW": bad})


@pytest.mark.django_db
def test_the_values_move_after_a_run_and_a_decision(admin, settings, django_capture_on_commit_callbacks):
    settings.METRICS_ALLOW = (ipaddress.ip_network("127.0.0.1"),)
    make_agent(admin)
    mine = {"tenant": "acme", "agent": "assistant"}
    before = scrape()

    with django_capture_on_commit_callbacks(execute=True):
        asked = ask_to_send(admin)
    waiting = scrape()
    assert value(waiting, "airlock_requests_open", **mine, kind="approval") == 1
    assert value(waiting, "airlock_requests_open_oldest_seconds", **mine, kind="approval") >= 0
    assert value(waiting, "airlock_runs_total", **mine, status="awaiting_approval") == (
        value(before, "airlock_runs_total", **mine, status="awaiting_approval") + 1
    )

    with django_capture_on_commit_callbacks(execute=True):
        [request] = asked["pendingRequests"]
        response = admin.api(
            "POST", f"/api/runs/{asked['runId']}/responses", {"requestId": request["requestId"], "approved": True}
        )
        assert response.status_code == 200, response.content
    queued = scrape()
    assert value(queued, "airlock_requests_open", **mine, kind="approval") == 0
    assert value(queued, "airlock_queue_depth", lane="default") == 1
    assert value(queued, "airlock_decisions_total", tenant="acme", source="human") == (
        value(before, "airlock_decisions_total", tenant="acme", source="human") + 1
    )
    decided = {"tenant": "acme", "kind": "approval", "result": "approved"}
    assert value(queued, "airlock_request_decision_seconds_count", **decided) == (
        value(before, "airlock_request_decision_seconds_count", **decided) + 1
    )

    with django_capture_on_commit_callbacks(execute=True):
        drain_queued(1)
    ran = scrape()
    assert value(ran, "airlock_queue_depth", lane="default") == 0
    assert value(ran, "airlock_runs_total", **mine, status="completed") == (
        value(before, "airlock_runs_total", **mine, status="completed") + 1
    )
    for said in (*EMAIL.values(), admin.token):  # no argument value, no token, in any label
        assert said not in ran[""]


def alerts() -> list[dict[str, Any]]:
    """The alerting rules of the Metrics section of docs/observability.md (every yaml block of it parses)."""
    section = DOCS.read_text().split("\n## Metrics", 1)[1].split("\n## ", 1)[0]
    documents = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", section, re.DOTALL)]
    rules = [rule for document in documents for group in document.get("groups", []) for rule in group["rules"]]
    assert len(rules) >= 3
    return rules


@pytest.mark.django_db
def test_the_docs_alerts_parse_and_name_metrics_that_exist(settings):
    settings.METRICS_ALLOW = (ipaddress.ip_network("127.0.0.1"),)
    families = scrape()
    named = {name for rule in alerts() for name in re.findall(r"\bairlock_[a-z_]+", rule["expr"])}
    assert named
    for name in named:
        assert re.sub(r"_(total|count|sum|bucket)$", "", name) in families, name
    listed = DOCS.read_text().split("\n## Metrics", 1)[1]
    for family in families:
        assert not family or f"`{family}" in listed, f"{family} is not in the docs' list"
