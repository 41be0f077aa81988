"""The pages of a sign-in through an OpenID Connect connection (SPEC section 19), with the test client: the login
page offers each connection (keeping `next`), an unknown one is 404, one that cannot be used now (its secret unset,
its issuer unreachable) is the failure page at once, a callback nobody started or that the provider refused is the
failure page, in the provider's words escaped, and signs nobody in. PASSWORD_LOGIN=0 leaves password sign-in to
superusers; a session signed in through a provider names it in its receipts (`authMethod`)."""

import html
import re
import socket
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings

from approvals.answerers import ApproverGroup
from approvals.models import Receipt
from console.models import Connection, Tenant
from console.tenancy import SIGNED_IN_WITH
from tests.approvals.test_inbox_pages import answer, ask, make_agent, request_id
from tests.conftest import PASSWORD, Persona
from tests.oidc.provider import Provider, start_provider

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse as Answer  # the test client's response (stubs only)

SECRET_ENV = "AIRLOCK_TEST_CORP_OIDC_SECRET"
# The provider's client as tests/oidc/provider.py registers it (the console's callback on the test client's host).
CALLBACK = "http://testserver/oidc/callback/"


def oidc_connection(name: str, issuer: str, **settings: Any) -> Connection:
    """An OpenID Connect connection mapping the `sre` group to an operator of acme, as the installation saves one."""
    oidc = {"clientId": "airlock", "tenants": {"acme": {"roles": {"sre": "operator"}}}} | settings
    connection = Connection(name=name, kind="oidc", url=issuer, secret_env=SECRET_ENV, oidc=oidc)
    connection.full_clean()
    connection.save()
    return connection


def reason(response: "Answer") -> str:
    """The failure page's reason as a person reads it, once it is sure the page is the failure page."""
    page = response.content.decode()
    assert '<h1 id="error-title">Sign-in failed</h1>' in page, page
    found = re.search(r'<p class="reason" id="error-reason">(.*?)</p>', page, re.S)
    assert found is not None, page
    return html.unescape(found[1])


def signed_in(client: Client) -> bool:
    """Whether the client's session is signed in, as the next page shows: a guarded page, or the login page."""
    response = client.get("/inbox/")
    assert response.status_code in (200, 302), response.status_code
    return response.status_code == 200


def closed_port() -> int:
    """A loopback port nothing listens on: bound, then closed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(SECRET_ENV, "airlock-secret")
    return "airlock-secret"


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    with start_provider(
        tmp_path_factory.mktemp("oidc"),
        redirect_uris=[CALLBACK],
        post_logout_redirect_uris=["http://testserver/login/"],
        accounts={"alice": {"sub": "sub-alice", "preferred_username": "alice", "groups": ["sre"]}},
    ) as started:
        yield started


# --- the login page ----------------------------------------------------------------------------------------------


def test_it_offers_each_connection_on_the_login_page_keeping_next(acme: Tenant) -> None:
    oidc_connection("corp", "https://login.corp.example", displayName="Corp SSO")
    oidc_connection("partners", "https://login.partners.example")

    page = Client().get("/login/", {"next": "/inbox/?page=2"}).content.decode()

    assert '<a class="button" href="/oidc/corp/login/?next=/inbox/%3Fpage%3D2">Sign in with Corp SSO</a>' in page
    assert '<a class="button" href="/oidc/partners/login/?next=/inbox/%3Fpage%3D2">Sign in with partners</a>' in page
    assert page.index("Sign in with Corp SSO") < page.index("Sign in with partners")
    assert "Or with a username and password:" in page


def test_it_links_to_the_connection_without_next_when_there_is_none(acme: Tenant) -> None:
    oidc_connection("corp", "https://login.corp.example", displayName="Corp SSO")

    page = Client().get("/login/").content.decode()

    assert '<a class="button" href="/oidc/corp/login/">Sign in with Corp SSO</a>' in page


def test_it_offers_no_provider_without_an_oidc_connection(db: None) -> None:
    page = Client().get("/login/").content.decode()

    assert "Sign in with" not in page
    assert "Or with a username and password:" not in page


# --- starting a sign-in -------------------------------------------------------------------------------------------


def test_it_answers_404_for_an_unknown_connection(acme: Tenant) -> None:
    oidc_connection("corp", "https://login.corp.example")

    assert Client().get("/oidc/initech/login/").status_code == 404


def test_it_answers_404_for_a_connection_of_another_kind(acme: Tenant, secret: str) -> None:
    Connection.objects.create(name="policy-svc", kind="webhook", url="http://127.0.0.1:9/", secret_env=SECRET_ENV)

    assert Client().get("/oidc/policy-svc/login/").status_code == 404


def test_it_says_a_connection_without_its_secret_is_not_set_up_and_calls_nobody(
    acme: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SECRET_ENV, raising=False)
    with socket.create_server(("127.0.0.1", 0)) as issuer:
        issuer.settimeout(0.5)
        oidc_connection("corp", f"http://127.0.0.1:{issuer.getsockname()[1]}")

        response = Client().get("/oidc/corp/login/")

        with pytest.raises(TimeoutError):
            issuer.accept()  # nobody knocked
    assert response.status_code == 502
    assert reason(response) == (
        "Sign-in with corp is not set up on this server (its client secret is missing). Tell the installation's "
        "administrator."
    )
    assert "Identity provider: <code>corp</code>." in response.content.decode()


def test_it_says_an_unreachable_provider_could_not_be_reached_at_once(acme: Tenant, secret: str) -> None:
    issuer = f"http://127.0.0.1:{closed_port()}"
    oidc_connection("corp", issuer)

    started = time.monotonic()
    response = Client().get("/oidc/corp/login/")

    assert time.monotonic() - started < 3
    assert response.status_code == 502
    assert reason(response) == f"The identity provider at {issuer} could not be reached. Try again later."


@pytest.mark.processes
def test_it_sends_the_browser_to_the_provider_with_pkce_state_and_nonce(
    acme: Tenant, secret: str, provider: Provider
) -> None:
    oidc_connection("corp", provider.issuer)

    response = Client().get("/oidc/corp/login/?next=/inbox/")

    assert response.status_code == 302
    location = urlsplit(response["Location"])
    assert f"{location.scheme}://{location.netloc}".startswith(provider.issuer)
    query = {key: values[0] for key, values in parse_qs(location.query).items()}
    assert (query["client_id"], query["redirect_uri"], query["response_type"]) == ("airlock", CALLBACK, "code")
    assert query["scope"] == "openid email profile"
    assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) >= 43
    assert query["state"] and query["nonce"] and query["state"] != query["nonce"]


# --- the callback -------------------------------------------------------------------------------------------------


def test_it_refuses_a_callback_nobody_started_and_signs_nobody_in(operator: Persona) -> None:
    client = Client()

    response = client.get("/oidc/callback/?code=stolen&state=made-up")

    assert response.status_code == 400
    assert reason(response).startswith("This sign-in was not started in this browser")
    assert not signed_in(client)


def test_it_keeps_the_session_and_shows_none_of_its_words_for_an_error_link_nobody_started(operator: Persona) -> None:
    said = "Call 555-0100 to restore access"

    response = operator.client.get("/oidc/callback/", {"error": "access_denied", "error_description": said})

    assert response.status_code == 400
    assert reason(response).startswith("This sign-in was not started in this browser")
    assert said not in response.content.decode()
    assert signed_in(operator.client)


@pytest.mark.processes
def test_it_shows_the_providers_refusal_escaped_and_forgets_the_state(
    acme: Tenant, secret: str, provider: Provider
) -> None:
    oidc_connection("corp", provider.issuer)
    client = Client()
    started = client.get("/oidc/corp/login/")
    state = parse_qs(urlsplit(started["Location"]).query)["state"][0]
    said = "<script>alert('pwned')</script> You may not use Airlock."

    response = client.get("/oidc/callback/", {"error": "access_denied", "error_description": said, "state": state})

    assert response.status_code == 400
    assert reason(response) == f"The identity provider refused the sign-in: {said}"
    assert "<script>alert" not in response.content.decode()
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in response.content.decode()
    assert not signed_in(client)
    replayed = client.get("/oidc/callback/", {"code": "any", "state": state})
    assert replayed.status_code == 400
    assert reason(replayed).startswith("This sign-in was not started in this browser")


@pytest.mark.processes
def test_it_names_the_error_code_when_the_provider_gives_no_description(
    acme: Tenant, secret: str, provider: Provider
) -> None:
    oidc_connection("corp", provider.issuer)
    client = Client()
    state = parse_qs(urlsplit(client.get("/oidc/corp/login/")["Location"]).query)["state"][0]

    response = client.get("/oidc/callback/", {"error": "login_required", "state": state})

    assert reason(response) == "The identity provider refused the sign-in: login_required"


# --- PASSWORD_LOGIN -----------------------------------------------------------------------------------------------


def log_in(username: str) -> tuple["Answer", Client]:
    client = Client()
    return client.post("/login/", {"username": username, "password": PASSWORD}), client


@override_settings(PASSWORD_LOGIN=False)
def test_it_refuses_a_members_right_password_without_password_login(operator: Persona) -> None:
    response, client = log_in(operator.user.username)

    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()
    assert not signed_in(client)


@override_settings(PASSWORD_LOGIN=False)
def test_it_signs_a_superuser_in_with_a_password_without_password_login(acme: Tenant) -> None:
    User.objects.create_superuser("root", password=PASSWORD)

    response, client = log_in("root")

    assert response.status_code == 302
    assert client.get("/admin/").status_code == 200


def test_it_ends_a_members_password_session_when_password_login_is_turned_off(operator: Persona) -> None:
    assert signed_in(operator.client)

    with override_settings(PASSWORD_LOGIN=False):
        assert not signed_in(operator.client)


def test_it_says_on_the_login_page_that_passwords_are_for_administrators_only_when_turned_off(db: None) -> None:
    note = '<p class="muted" id="password-login-note">Signing in with a password is for the installation\'s'

    with override_settings(PASSWORD_LOGIN=False):
        assert note in Client().get("/login/").content.decode()
    assert 'id="password-login-note"' not in Client().get("/login/").content.decode()


@override_settings(PASSWORD_LOGIN=True)
def test_it_signs_a_member_in_with_a_password_with_password_login(operator: Persona) -> None:
    response, client = log_in(operator.user.username)

    assert response.status_code == 302
    assert signed_in(client)


# --- authMethod ---------------------------------------------------------------------------------------------------


def test_it_names_the_provider_in_the_receipt_of_a_session_signed_in_through_it(
    operator: Persona, admin: Persona
) -> None:
    make_agent(admin)
    session = operator.client.session
    session[SIGNED_IN_WITH] = "oidc:corp"
    session.save()
    rid = request_id(ask(operator))

    assert answer(operator, rid, {"decision": "approve"}).status_code == 302

    assert Receipt.objects.get(request_id=rid).wire()["authMethod"] == "oidc:corp"


def test_it_says_session_in_the_receipt_of_a_password_session(operator: Persona, admin: Persona) -> None:
    make_agent(admin)
    rid = request_id(ask(operator))

    assert answer(operator, rid, {"decision": "approve"}).status_code == 302

    assert Receipt.objects.get(request_id=rid).wire()["authMethod"] == "session"


def test_it_tells_admins_which_approver_groups_a_providers_claims_keep(admin: Persona) -> None:
    for name in ("finance", "oncall"):
        ApproverGroup.objects.create(tenant=admin.tenant, name=name)
    mapping = {"acme": {"roles": {"sre": "operator"}, "groups": {"finance-approvers": "finance"}}}
    oidc_connection("corp", "https://login.example.com", displayName="Corp SSO", tenants=mapping)

    page = admin.client.get("/tenant/").content.decode()

    sections = {
        name: re.search(rf'id="group-\d+-title">{name}</h3>(.*?)</section>', page, re.S)
        for name in ("finance", "oncall")
    }
    assert "Kept in step with Corp SSO" in sections["finance"][1]  # type: ignore[index]
    assert "Kept in step" not in sections["oncall"][1]  # type: ignore[index]
