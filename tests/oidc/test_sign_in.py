"""Signing in through an OpenID Connect provider, in Chromium (SPEC section 19, issue 57): a served console with an
oidc connection loaded by `load_connections`, a real provider (tests/oidc/provider.py) and the browser going between
them. Proven as a person sees it: a first sign-in lands on the dashboard as the mapped role, in the mapped approver
group; changed claims change both at the next sign-in; a person the mapping gives no tenant is refused with a page
saying so, and one who had a tenant loses it and their API token; a tampered `state` and each bad ID token (nonce,
expiry, key, audience, issuer) are refused with a page naming what failed, nobody signed in; logging out goes through
the provider's end-session page (allowed by the CSP's form-action) and back to the login page; an answer given after
such a sign-in has a receipt saying `oidc:<connection>`; and with PASSWORD_LOGIN=0 only a superuser's password works.
"""

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin
from uuid import uuid4

import pytest
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Route, expect, sync_playwright

from tests.browser.conftest import CHROMIUM_ARGS, REPORT_CSP_VIOLATIONS
from tests.browser.test_inbox import SEND, create_agent, open_inbox, run
from tests.oidc.provider import Provider, start_provider
from tests.processes.cluster import PASSWORD, Api, Cluster, Process, free_port, manage_all, new_cluster

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("oidc-sign-in")]

CONNECTION = "corp"
DISPLAY_NAME = "Corp SSO"
SECRET_VARIABLE = "OIDC_CLIENT_SECRET"
ROLES = {"sre": "operator", "airlock-admins": "admin", "auditors": "reader"}
GROUPS = {"finance-approvers": "finance"}
NO_TENANT = "gives you no tenant of this console"


@dataclass
class Installation:
    """One console signing in through the provider, its data folder's cluster, and the provider's accounts."""

    cluster: Cluster
    console: Process
    provider: Provider
    admin_token: str
    accounts: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.console.url

    def person(self, *groups: str) -> str:
        """A new account at the provider with these groups; its login (also its preferred username)."""
        login = f"p{uuid4().hex[:8]}"
        self.accounts[login] = {
            "sub": f"sub-{login}",
            "email": f"{login}@corp.example",
            "email_verified": True,
            "preferred_username": login,
            "name": login.title(),
            "groups": list(groups),
        }
        self.provider.set_accounts(self.accounts)
        return login

    def regroup(self, login: str, *groups: str) -> None:
        """The account's groups as the provider says them from now on."""
        self.accounts[login]["groups"] = list(groups)
        self.provider.set_accounts(self.accounts)

    def api(self, token: str | None = None) -> Api:
        return Api(self.url, token or self.admin_token)


@pytest.fixture(scope="module")
def installation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installation]:
    folder = tmp_path_factory.mktemp("oidc-console")
    cluster = new_cluster(folder, DJANGO_SUPERUSER_PASSWORD=PASSWORD)
    # The provider must know the console's addresses before the console knows the provider's: the port comes first.
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    provider = start_provider(
        folder / "provider",
        redirect_uris=[f"{url}/oidc/callback/"],
        post_logout_redirect_uris=[f"{url}/login/"],
        accounts={},
    )
    try:
        connections = folder / "connections.json"
        oidc = {
            "name": CONNECTION,
            "kind": "oidc",
            "issuer": provider.issuer,
            "clientId": provider.client_id,
            "clientSecretEnv": SECRET_VARIABLE,
            "displayName": DISPLAY_NAME,
            "tenants": {"acme": {"roles": ROLES, "groups": GROUPS}},
        }
        connections.write_text(json.dumps({"connections": [oidc]}))
        outputs = manage_all(
            cluster.env,
            ["collectstatic", "--noinput"],
            ["load_connections", str(connections)],
            ["createsuperuser", "--noinput", "--username", "root", "--email", "root@example.com"],
            ["create_token", "ada", "--tenant", "acme"],
        )
        console = cluster.serve(port=port, WORKER_THREADS="2", **{SECRET_VARIABLE: provider.client_secret})
        yield Installation(cluster, console, provider, outputs[-1].strip())
    finally:
        cluster.stop_all()
        provider.stop()


@pytest.fixture(autouse=True)
def normal_mode(installation: Installation) -> Iterator[None]:
    yield
    installation.provider.set_mode("normal")


@pytest.fixture
def window(installation: Installation) -> Iterator[Callable[..., Page]]:
    """A page in a browser context of its own (one person, one window), on the console or `url`; the test fails
    when a Content-Security-Policy blocked anything in any of them (Chromium checks the console's form-action on the
    logout form's redirect to the provider too)."""
    contexts: dict[BrowserContext, list[str]] = {}
    # One Playwright per test, as tests/browser/conftest.py says why.
    with sync_playwright() as playwright:
        browser: Browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS
        )

        def open_window(url: str = "") -> Page:
            context = browser.new_context(base_url=url or installation.url, viewport={"width": 960, "height": 900})
            context.set_default_timeout(10_000)
            blocked = contexts[context] = []
            context.add_init_script(REPORT_CSP_VIOLATIONS)

            def collect(message: ConsoleMessage) -> None:
                if message.type == "error" and any(w in message.text for w in ("CSP violation", "Security Policy")):
                    blocked.append(f"{message.page.url if message.page else '?'}: {message.text}")

            context.on("console", collect)
            return context.new_page()

        try:
            yield open_window
        finally:
            for context in contexts:
                context.close()
            browser.close()
    blocked_anywhere = [text for blocked in contexts.values() for text in blocked]
    assert blocked_anywhere == [], "the Content-Security-Policy blocked: " + "\n".join(blocked_anywhere)


def sign_in(page: Page, login: str) -> int:
    """From the console's login page through the provider's login form; the status of the console's callback."""
    page.goto("/login/")
    page.get_by_role("link", name=f"Sign in with {DISPLAY_NAME}").click()
    page.locator("input[name=login]").fill(login)
    page.locator("input[name=password]").fill("anything: the provider checks none")
    with page.expect_response(lambda response: "/oidc/callback/" in response.url) as callback:
        page.locator("button[type=submit]").click()
    page.wait_for_load_state()
    return callback.value.status


def log_in_with_password(page: Page, username: str) -> None:
    page.goto("/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()


def expect_signed_in(page: Page, installation: Installation, login: str, role: str) -> None:
    expect(page).to_have_url(f"{installation.url}/")
    expect(page).to_have_title("Dashboard · Airlock")
    expect(page.get_by_role("heading", level=1)).to_have_text("Acme")
    expect(page.locator(".who")).to_contain_text(f"{login} {role}")


def expect_refused(page: Page, reason: str) -> None:
    expect(page).to_have_title("Sign-in failed · Airlock")
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign-in failed")
    expect(page.locator("#error-reason")).to_contain_text(reason)


def expect_nobody_signed_in(page: Page, url: str) -> None:
    page.goto("/")
    expect(page).to_have_url(f"{url}/login/?next=/")
    expect(page.get_by_role("button", name="Log out")).to_have_count(0)


def finance_place(page: Page, login: str) -> int:
    """How many times the Tenant page lists `login` in the approver group "finance" (0 or 1)."""
    page.goto("/tenant/")
    finance = page.get_by_role("region", name="finance", exact=True)
    expect(finance).to_be_visible()
    return finance.get_by_role("button", name=f"Remove {login} from finance", exact=True).count()


def test_it_signs_a_newcomer_in_as_the_mapped_role_and_approver_group(
    installation: Installation, window: Callable[..., Page]
) -> None:
    login = installation.person("sre", "finance-approvers", "unmapped-team")
    page = window()

    assert sign_in(page, login) == 302

    expect_signed_in(page, installation, login, "operator")
    expect(page.get_by_role("link", name="Tenant")).to_have_count(0)
    admin = window()
    log_in_with_password(admin, "ada")
    expect(admin).to_have_url(f"{installation.url}/")
    assert finance_place(admin, login) == 1


def test_it_follows_changed_claims_at_the_next_sign_in(installation: Installation, window: Callable[..., Page]) -> None:
    login = installation.person("sre", "finance-approvers")
    first = window()
    assert sign_in(first, login) == 302
    expect_signed_in(first, installation, login, "operator")

    installation.regroup(login, "airlock-admins", "sre")  # the highest mapped role wins; no finance-approvers
    again = window()
    assert sign_in(again, login) == 302

    expect_signed_in(again, installation, login, "admin")
    expect(again.get_by_role("link", name="Tenant")).to_be_visible()
    assert finance_place(again, login) == 0
    admin = window()
    log_in_with_password(admin, "ada")
    assert finance_place(admin, login) == 0


def test_it_refuses_a_person_the_mapping_gives_no_tenant(
    installation: Installation, window: Callable[..., Page]
) -> None:
    login = installation.person("contractors")
    page = window()

    assert sign_in(page, login) == 403

    expect_refused(page, NO_TENANT)
    expect(page.get_by_role("link", name="Back to the login page")).to_be_visible()
    expect_nobody_signed_in(page, installation.url)


def test_it_takes_the_tenant_and_token_of_a_member_the_mapping_no_longer_gives_one(
    installation: Installation, window: Callable[..., Page]
) -> None:
    login = installation.person("auditors")
    earlier = window()
    assert sign_in(earlier, login) == 302
    expect_signed_in(earlier, installation, login, "reader")
    token = installation.cluster.manage("create_token", login, "--tenant", "acme").strip()
    status, agents = installation.api(token)("GET", "/api/agents")
    assert status == 200, agents

    installation.regroup(login, "contractors")
    page = window()
    assert sign_in(page, login) == 403

    expect_refused(page, NO_TENANT)
    expect_nobody_signed_in(page, installation.url)
    status, problem = installation.api(token)("GET", "/api/agents")
    assert status == 401, problem
    earlier.goto("/")  # the earlier session goes on, with no tenant to see
    expect(earlier.get_by_role("heading", level=1)).to_have_text("Not allowed")
    expect(earlier.locator("main")).to_contain_text(f"You are signed in as {login} but belong to no tenant yet")


def test_it_refuses_a_tampered_state(installation: Installation, window: Callable[..., Page]) -> None:
    login = installation.person("sre")
    page = window()
    sent_back: list[str] = []

    def tamper(route: Route) -> None:
        """The provider's answer to its login form, followed to its redirect back to the console, whose `state` is
        changed on the way (Playwright routes no request a redirect led to: the callback cannot be routed itself)."""
        resumed = route.fetch(max_redirects=0)
        back = page.request.get(urljoin(route.request.url, resumed.headers["location"]), max_redirects=0)
        sent_back.append(back.headers["location"])
        route.fulfill(status=303, headers={"Location": re.sub(r"([?&]state=)[^&]+", r"\1tampered", sent_back[0])})

    page.route(f"{installation.provider.issuer}/interaction/*/login", tamper)
    status = sign_in(page, login)

    assert sent_back[0].startswith(f"{installation.url}/oidc/callback/?") and "state=" in sent_back[0], sent_back
    assert status == 400
    expect_refused(page, "its state was changed on the way: nobody was signed in")
    expect_nobody_signed_in(page, installation.url)


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("wrong-nonce", "The sign-in could not be verified: JWT Nonce verification failed."),
        ("expired", "The ID token has expired."),
        ("wrong-key", "The ID token's signature does not verify with the provider's keys."),
        ("wrong-audience", "The ID token was issued to another client than this console."),
        ("wrong-issuer", "The ID token was issued by another issuer than"),
    ],
)
def test_it_refuses_a_bad_id_token_saying_what_failed(
    installation: Installation, window: Callable[..., Page], mode: str, reason: str
) -> None:
    login = installation.person("sre")
    installation.provider.set_mode(mode)
    page = window()

    assert sign_in(page, login) == 400

    expect_refused(page, reason)
    expect(page.get_by_text(f"Identity provider: {CONNECTION}.")).to_be_visible()
    expect_nobody_signed_in(page, installation.url)


def test_it_refuses_an_id_token_it_cannot_read_saying_so(
    installation: Installation, window: Callable[..., Page]
) -> None:
    login = installation.person("sre")
    installation.provider.set_mode("garbled")
    page = window()

    assert sign_in(page, login) == 502

    expect_refused(page, "The identity provider's answer could not be read: nobody was signed in.")
    expect_nobody_signed_in(page, installation.url)


def test_it_logs_out_through_the_providers_end_session_page(
    installation: Installation, window: Callable[..., Page]
) -> None:
    login = installation.person("sre")
    page = window()
    assert sign_in(page, login) == 302
    expect_signed_in(page, installation, login, "operator")
    before = installation.provider.logouts()

    # The console's CSP lets this form's redirect reach the provider (window() fails on anything blocked).
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile("^" + re.escape(installation.provider.issuer)))
    page.locator("button[name=logout]").click()

    expect(page).to_have_url(f"{installation.url}/login/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Log in to Airlock")
    assert installation.provider.logouts() == before + 1
    expect_nobody_signed_in(page, installation.url)


def test_it_names_the_sign_in_on_the_receipt_of_an_answer(
    installation: Installation, window: Callable[..., Page]
) -> None:
    admin = {"ada": installation.api()}
    agent = create_agent(admin, tools=[{"name": "send_email", "approval": "always"}])
    asked = run(admin["ada"], agent, SEND, uuid4().hex)
    assert asked["status"] == "awaiting_approval", asked
    request_id = asked["pendingRequests"][0]["requestId"]
    login = installation.person("sre")
    page = window()
    assert sign_in(page, login) == 302

    open_inbox(page, agent)
    page.locator(f"#request-{request_id}").get_by_role("button", name="Approve", exact=True).click()

    expect(page.locator(f"#request-{request_id}")).to_have_count(0)
    status, receipt = admin["ada"]("GET", f"/api/requests/{request_id}/receipt")
    assert status == 200, receipt
    said = (receipt["result"], receipt["answeredBy"], receipt["authMethod"])
    assert said == ("approved", login, f"oidc:{CONNECTION}"), receipt


@pytest.fixture(scope="module")
def password_off(installation: Installation) -> Process:
    """A second console of the same installation with PASSWORD_LOGIN=0."""
    secret = {SECRET_VARIABLE: installation.provider.client_secret}
    return installation.cluster.serve("password-off", None, PASSWORD_LOGIN="0", **secret)


def test_it_keeps_password_login_for_superusers_only_when_turned_off(
    password_off: Process, window: Callable[..., Page]
) -> None:
    page = window(password_off.url)
    page.goto("/login/")
    expect(page.locator("#password-login-note")).to_have_text(
        "Signing in with a password is for the installation's administrators."
    )
    expect(page.get_by_role("link", name=f"Sign in with {DISPLAY_NAME}")).to_be_visible()

    log_in_with_password(page, "ada")

    expect(page).to_have_url(f"{password_off.url}/login/")
    expect(page.locator(".errorlist")).to_contain_text("Please enter a correct username and password")
    expect_nobody_signed_in(page, password_off.url)
    log_in_with_password(page, "root")
    expect(page).not_to_have_url(re.compile(r"/login/"))
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
