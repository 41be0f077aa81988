"""Tenants: members see their tenant, switch between their tenants, and nothing of anyone else's."""

import json

import pytest
from django.test import Client

from agents.models import Agent
from console.models import Membership
from tests.conftest import PASSWORD, definition

CONSOLE_PAGES = ["/", "/tokens/", "/trial/", "/inbox/", "/rules/", "/runs/", "/audit/"]


@pytest.mark.parametrize("path", CONSOLE_PAGES)
def test_it_sends_anonymous_visitors_to_the_login_page(db, path):
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={path}"


def test_it_logs_a_member_in_to_the_dashboard(admin):
    response = Client().post("/login/", {"username": "ada", "password": PASSWORD}, follow=True)
    assert response.redirect_chain == [("/", 302)]
    assert b"<h1>Acme</h1>" in response.content


def test_it_refuses_a_wrong_password(admin):
    response = Client().post("/login/", {"username": "ada", "password": "wrong"})
    assert response.status_code == 200
    assert b"correct username and password" in response.content


def test_it_serves_the_dashboard_with_the_tenant_s_agents(admin, agent, outsider):
    Agent.create(outsider.tenant, definition("globex-bot"), outsider.user)
    response = admin.client.get("/")
    assert response.status_code == 200
    assert b"<h1>Acme</h1>" in response.content
    assert b"helper" in response.content
    assert b"globex-bot" not in response.content


def test_it_refuses_console_pages_to_a_user_without_a_membership(db, django_user_model):
    user = django_user_model.objects.create_user("nomad")
    client = Client()
    client.force_login(user)
    assert client.get("/").status_code == 403


@pytest.fixture
def member_of_both(admin, globex, outsider):
    """Ada, admin of acme, is also a reader in globex, which has an agent of its own."""
    Membership.objects.create(user=admin.user, tenant=globex, role="reader")
    Agent.create(globex, definition("globex-bot"), outsider.user)
    return admin


def test_it_offers_the_tenant_switch_to_a_member_of_two_tenants(member_of_both, globex):
    page = member_of_both.client.get("/").content.decode()
    assert f'<option value="{globex.pk}"' in page


def test_it_switches_to_another_tenant_of_the_user(member_of_both, globex):
    client = member_of_both.client
    response = client.post("/tenant/switch/", {"tenant": globex.pk})
    assert response.status_code == 302
    assert response["Location"] == "/"
    page = client.get("/").content.decode()
    assert "<h1>Globex</h1>" in page
    assert "globex-bot" in page
    assert '<span class="role">reader</span>' in page
    # The browser session's API calls follow the switch too.
    assert [a["name"] for a in client.get("/api/agents").json()] == ["globex-bot"]


def test_it_switches_back(member_of_both, acme, globex):
    client = member_of_both.client
    client.post("/tenant/switch/", {"tenant": globex.pk})
    client.post("/tenant/switch/", {"tenant": acme.pk})
    assert b"<h1>Acme</h1>" in client.get("/").content


def test_it_will_not_switch_to_a_tenant_the_user_is_not_in(admin, globex):
    response = admin.client.post("/tenant/switch/", {"tenant": globex.pk})
    assert response.status_code == 404
    assert b"<h1>Acme</h1>" in admin.client.get("/").content


@pytest.mark.parametrize("tenant", ["", "globex", "1.5", "999999", "9" * 30])
def test_it_answers_404_to_a_switch_to_no_tenant(admin, tenant):
    assert admin.client.post("/tenant/switch/", {"tenant": tenant}).status_code == 404


def test_it_switches_tenants_only_by_post(member_of_both):
    assert member_of_both.client.get("/tenant/switch/").status_code == 405


def test_it_asks_anonymous_visitors_to_log_in_before_switching(globex):
    response = Client().post("/tenant/switch/", {"tenant": globex.pk})
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_it_falls_back_to_a_remaining_tenant_after_losing_a_membership(member_of_both, globex):
    client = member_of_both.client
    client.post("/tenant/switch/", {"tenant": globex.pk})
    Membership.objects.filter(user=member_of_both.user, tenant=globex).delete()
    page = client.get("/").content.decode()
    assert "<h1>Acme</h1>" in page
    assert "globex-bot" not in page


@pytest.mark.parametrize("path", ["/inbox/", "/"])
def test_it_tells_an_htmx_request_without_a_session_that_it_was_signed_out(db, path):
    # htmx follows a redirect and swaps what it finds: the login page would land inside the inbox list.
    headers = {"HX-Request": "true", "HX-Current-URL": "http://testserver/inbox/?kind=question"}
    response = Client(headers=headers).get(path)
    assert response.status_code == 401
    login = "/login/?next=%2Finbox%2F%3Fkind%3Dquestion"  # back to the page, not to the fragment
    assert json.loads(response["HX-Trigger"]) == {"airlock:signed-out": {"login": login}}
    assert response.content.decode() == f'You were signed out. <a href="{login}">Sign in</a>'


def test_it_does_not_send_an_htmx_request_back_to_another_site(db):
    headers = {"HX-Request": "true", "HX-Current-URL": "https://elsewhere.example/steal"}
    response = Client(headers=headers).post("/tenant/switch/", {"tenant": "1"})
    assert response.status_code == 401
    assert json.loads(response["HX-Trigger"]) == {"airlock:signed-out": {"login": "/login/?next=%2F"}}


def test_an_htmx_post_without_any_cookie_is_signed_out_too(db):
    # The CSRF check comes before the view: without its cookie the post would get the 403 page, which htmx
    # does not show, and the button would do nothing.
    client = Client(enforce_csrf_checks=True, headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/"})
    response = client.post("/tenant/switch/", {"tenant": "1"})
    assert response.status_code == 401
    assert json.loads(response["HX-Trigger"]) == {"airlock:signed-out": {"login": "/login/?next=%2F"}}
    # A plain form post (no htmx) without its token still gets the CSRF page.
    assert Client(enforce_csrf_checks=True).post("/tenant/switch/", {"tenant": "1"}).status_code == 403


def test_a_signed_in_pages_post_with_an_old_token_says_the_page_is_stale(admin):
    """A sign-in renews the security token: a page opened before it is refused, and says so, without a role hint."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin.user)
    client.get("/")
    plain = client.post("/tenant/switch/", {"tenant": "1", "csrfmiddlewaretoken": "stale" * 8})
    htmx = client.post("/tenant/switch/", {"tenant": "1"}, headers={"HX-Request": "true"})

    assert plain.status_code == 403
    page = plain.content.decode()
    assert "opened before you last signed in" in page and "Go back to copy what you typed" in page
    assert "can change your role" not in page
    assert htmx.status_code == 403
    assert json.loads(htmx["HX-Trigger"]) == {"airlock:stale": {}}
