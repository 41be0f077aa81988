"""The console's 403 and 404 pages: styled (base.html), saying the server's reason, whatever DEBUG is; the
API keeps its problem+json answers; the navigation and the Rules page follow the caller's role."""

import json

import pytest
from django.test import Client

from tests.conftest import Persona


@pytest.fixture(params=[True, False], ids=["debug", "production"])
def debug(request, settings) -> bool:
    settings.DEBUG = request.param
    return request.param


def test_it_answers_an_unknown_address_with_the_console_s_404_page(debug, admin: Persona) -> None:
    response = admin.client.get("/no-such-page/")
    assert response.status_code == 404
    assert response.templates[0].name == "console/error.html"
    page = response.content.decode()
    assert "There is no page at /no-such-page/." in page
    assert 'class="topbar"' in page and "Back to the dashboard" in page
    # Not Django's technical page with the URL patterns it tried.
    assert "URLconf" not in page and "api/" not in page.split("</header>")[1]


def test_it_says_the_reason_a_view_raised_with(debug, admin: Persona) -> None:
    response = admin.client.get("/agents/nobody/")
    assert response.status_code == 404
    assert response.templates[0].name == "console/error.html"
    assert "No agent named &#x27;nobody&#x27; in this tenant." in response.content.decode()


def test_it_shows_a_reader_a_styled_403_naming_the_role_it_needs(debug, reader: Persona) -> None:
    response = reader.client.get("/trial/")
    assert response.status_code == 403
    page = response.content.decode()
    assert '<h1 id="error-title">Not allowed</h1>' in page
    assert "This needs the operator role in the current tenant." in page
    assert "rita, reader in Acme" in page


def test_it_keeps_the_append_slash_redirect(debug, admin: Persona) -> None:
    response = admin.client.get("/agents")
    assert response.status_code == 301
    assert response["Location"] == "/agents/"


def test_it_shows_an_anonymous_visitor_the_404_page_with_a_login_link(debug, db) -> None:
    response = Client().get("/nowhere")
    assert response.status_code == 404
    assert "/login/" in response.content.decode()


def test_it_leaves_the_api_s_problem_answers_alone(debug, admin: Persona, reader: Persona) -> None:
    missing = admin.api("GET", "/api/agents/nobody")
    assert missing.status_code == 404
    assert missing["Content-Type"] == "application/problem+json"
    assert json.loads(missing.content)["code"]
    no_route = admin.api("GET", "/api/no-such-route")
    assert no_route.status_code == 404 and no_route["Content-Type"] == "application/problem+json"
    refused = reader.api("POST", "/api/agents", {"name": "x"})
    assert refused.status_code == 403 and refused["Content-Type"] == "application/problem+json"


def test_it_answers_a_post_without_its_csrf_token_with_the_styled_403(admin: Persona) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin.user)
    response = client.post("/tokens/", {"name": "x"})
    assert response.status_code == 403
    assert "reload the page and send it again" in response.content.decode()


def test_it_offers_the_trial_link_to_operators_only(admin: Persona, operator: Persona, reader: Persona) -> None:
    assert 'href="/trial/"' in admin.client.get("/").content.decode()
    assert 'href="/trial/"' in operator.client.get("/").content.decode()
    assert 'href="/trial/"' not in reader.client.get("/").content.decode()


def test_it_tells_an_operator_why_the_rules_page_has_no_revoke(
    admin: Persona, operator: Persona, reader: Persona
) -> None:
    assert "rules-role-note" not in admin.client.get("/rules/").content.decode()
    said = operator.client.get("/rules/").content.decode()
    assert "Only admins revoke rules" in said and "you are an operator" in said
    assert "you are a reader" in reader.client.get("/rules/").content.decode()
