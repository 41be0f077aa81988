"""The operations commands: create_tenant, create_user, create_token, seed_demo, run_worker."""

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from agents.models import Agent, Run
from approvals.models import PendingRequest
from approvals.receipts import Receipt
from console.models import ApiToken, Membership, Tenant
from tests.helpers import snapshot


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def accounts() -> dict[str, list[dict[str, Any]]]:
    """Every field of every row the account commands write (tenants, users, memberships, tokens)."""
    return {
        model._meta.label: list(model.objects.order_by("pk").values()) for model in (Tenant, User, Membership, ApiToken)
    }


def test_it_creates_a_tenant(db):
    assert run("create_tenant", "initech", "--name", "Initech Corp") == "created tenant initech\n"
    assert Tenant.objects.get(slug="initech").name == "Initech Corp"


def test_it_names_a_tenant_after_its_slug_by_default(db):
    run("create_tenant", "initech")
    assert Tenant.objects.get(slug="initech").name == "initech"


def test_it_refuses_a_tenant_that_exists(acme):
    before = accounts()

    with pytest.raises(CommandError, match="tenant 'acme' exists already"):
        run("create_tenant", "acme", "--name", "Acme Renamed")

    assert accounts() == before


def test_it_refuses_a_tenant_slug_with_spaces(acme):
    before = accounts()

    with pytest.raises(CommandError, match="'not a slug' is not a slug"):
        run("create_tenant", "not a slug")

    assert accounts() == before


def test_it_creates_a_user_who_can_log_in(acme):
    out = run("create_user", "mia", "--tenant", "acme", "--role", "operator", "--password", "s3cret-enough")
    assert out == "created user mia as operator in acme\n"
    assert Membership.objects.get(user__username="mia", tenant=acme).role == "operator"
    assert Client().login(username="mia", password="s3cret-enough")


def test_it_creates_a_user_without_a_password_who_cannot_log_in(acme):
    run("create_user", "bot", "--tenant", "acme", "--role", "reader")
    assert not User.objects.get(username="bot").has_usable_password()


def test_it_adds_a_membership_to_an_existing_user(admin, globex):
    out = run("create_user", admin.user.username, "--tenant", "globex", "--role", "reader")
    assert out == "updated user ada as reader in globex\n"
    roles = dict(Membership.objects.filter(user=admin.user).values_list("tenant__slug", "role"))
    assert roles == {"acme": "admin", "globex": "reader"}
    # The existing password still works.
    assert Client().login(username="ada", password="correct horse battery staple")


def test_it_changes_the_role_of_an_existing_member(reader):
    run("create_user", reader.user.username, "--tenant", "acme", "--role", "admin")
    reader.membership.refresh_from_db()
    assert reader.membership.role == "admin"


@pytest.mark.parametrize("username", ["mia", "ada"])
def test_it_refuses_a_user_for_an_unknown_tenant(admin, username):
    before = accounts()

    with pytest.raises(CommandError, match="no tenant 'nowhere'; create it with create_tenant first"):
        run("create_user", username, "--tenant", "nowhere", "--role", "reader", "--password", "s3cret-enough")

    assert accounts() == before  # no user mia, ada's password and memberships as they were


@pytest.mark.parametrize("username", ["mia", "ada"])
def test_it_refuses_an_unknown_role(admin, username):
    before = accounts()

    with pytest.raises(CommandError, match="invalid choice: 'owner'"):
        run("create_user", username, "--tenant", "acme", "--role", "owner")

    assert accounts() == before


def test_it_prints_only_a_working_token(admin, agent):
    out = run("create_token", admin.user.username, "--tenant", "acme")
    assert out.count("\n") == 1
    raw = out.strip()
    assert raw.startswith("al_") and " " not in raw
    response = Client().get("/api/agents", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 200
    assert [a["name"] for a in response.json()] == ["helper"]


@pytest.mark.parametrize(("username", "tenant"), [("ada", "globex"), ("nobody", "acme")])
def test_it_refuses_a_token_for_a_tenant_the_user_is_not_in(admin, globex, username, tenant):
    before = accounts()

    with pytest.raises(CommandError, match=f"'{username}' is not a member of tenant '{tenant}'"):
        run("create_token", username, "--tenant", tenant)

    assert accounts() == before


def test_it_seeds_the_demo_once(db, monkeypatch):
    monkeypatch.setenv("DEMO_PASSWORD", "demo-password-1")
    out = run("seed_demo")
    assert "demo-password-1" in out
    run("seed_demo")
    demo = Tenant.objects.get(slug="demo")
    assert set(Agent.objects.live().filter(tenant=demo).values_list("name", flat=True)) == {
        "assistant",
        "deployer",
        "guarded",
        "planner",
        "researcher",
    }
    assert Agent.objects.get(tenant=demo, name="assistant").current_version == 1
    roles = dict(Membership.objects.filter(tenant=demo).values_list("user__username", "role"))
    assert roles == {"admin": "admin", "operator": "operator", "viewer": "reader"}
    assert Client().login(username="viewer", password="demo-password-1")


def test_it_seeds_a_history_of_answered_requests_once(db, monkeypatch, django_capture_on_commit_callbacks):
    monkeypatch.setenv("DEMO_PASSWORD", "demo-password-1")
    with django_capture_on_commit_callbacks(execute=True):
        out = run("seed_demo")
    demo = Tenant.objects.get(slug="demo")
    answered = PendingRequest.objects.filter(tenant=demo, answered_by__username="operator")
    kinds = set(answered.values_list("kind", flat=True))
    assert kinds == {"approval", "client_tool", "question", "plan"}, out
    assert Receipt.objects.filter(tenant=demo).count() >= answered.count() > 0
    assert not Run.objects.filter(tenant=demo, status__in=["queued", "running", "failed"]).exists()
    assert Run.objects.filter(tenant=demo, agent__name="guarded", status="blocked").exists()
    # A week of it: the dashboard's chart has days, each answer came after its request opened.
    days = {timezone.localdate(opened) for opened in answered.values_list("opened_at", flat=True)}
    assert len(days) >= 5 and min(days) <= timezone.localdate() - timedelta(days=5), days
    assert all(p.answered_at > p.opened_at for p in answered)
    assert not Receipt.objects.filter(tenant=demo, at__lt=timezone.now() - timedelta(hours=1)).exists()
    before = snapshot()

    with django_capture_on_commit_callbacks(execute=True):
        run("seed_demo")

    assert snapshot() == before, "a second seed adds no history"


def test_the_worker_works_what_is_queued_in_batch_mode_and_only_its_lanes(admin, agent):
    def queue(lane: str) -> str:
        response = admin.api(
            "POST", f"/api/agents/{agent.name}/runs", {"message": "hi", "lane": lane}, HTTP_PREFER="respond-async"
        )
        assert response.status_code == 202, response.content
        return response.json()["runId"]

    mine, theirs = queue("reports"), queue("default")

    assert run("run_worker", "--lanes", "reports", "--batch").strip() == "ran 1 queued runs"

    from agents.models import Run

    assert Run.objects.get(id=mine).status == "completed"
    assert Run.objects.get(id=theirs).status == "queued"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lanes", "default,Not A Lane"], "'Not A Lane' is not a lane name"),
        (["--threads", "0"], "--threads must be at least 1"),
    ],
)
def test_the_worker_refuses_a_bad_lane_or_thread_count_and_runs_nothing(admin, agent, args, message):
    queued = admin.api("POST", f"/api/agents/{agent.name}/runs", {"message": "hi"}, HTTP_PREFER="respond-async")
    assert queued.status_code == 202, queued.content
    before = snapshot()

    # In batch mode a worker that took the bad value would run the queued turn and return.
    with pytest.raises(CommandError, match=message):
        run("run_worker", *args, "--batch")

    assert snapshot() == before


def test_it_keeps_the_demo_passwords_when_seeded_again_without_demo_password(db, monkeypatch, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    monkeypatch.setenv("DEMO_PASSWORD", "chosen-at-first")
    run("seed_demo")
    operator = User.objects.get(username="operator")
    operator.set_password("the-operators-own")
    operator.save()
    monkeypatch.delenv("DEMO_PASSWORD")

    out = run("seed_demo")

    assert Client().login(username="admin", password="chosen-at-first")
    assert Client().login(username="operator", password="the-operators-own")
    assert "with the passwords they had" in out
    assert not (tmp_path / "demo-password").exists(), "no new password was made up"


def test_it_sets_every_demo_password_again_when_demo_password_says_so(db, monkeypatch):
    monkeypatch.setenv("DEMO_PASSWORD", "first")
    run("seed_demo")
    monkeypatch.setenv("DEMO_PASSWORD", "second")

    assert "second" in run("seed_demo")

    assert all(Client().login(username=name, password="second") for name in ("admin", "operator", "viewer"))


def test_it_generates_and_keeps_a_password_on_a_first_seed_without_demo_password(db, monkeypatch, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    monkeypatch.delenv("DEMO_PASSWORD", raising=False)

    out = run("seed_demo")

    password = (tmp_path / "demo-password").read_text().strip()
    assert f"with the password: {password}" in out
    assert f"with the password: {password}" in run("seed_demo")
    assert Client().login(username="viewer", password=password)
