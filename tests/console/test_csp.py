"""The Content-Security-Policy of the console: every page carries the strict policy, and no page holds what
that policy would block (inline scripts, inline event handlers, htmx's eval-based `hx-on`, inline styles)."""

from html.parser import HTMLParser

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve

from agents.models import Run
from agents.starter_policy import starter_hooks
from approvals.models import Receipt, Rule
from tests.helpers import EMAIL, call_line, make_agent, run_ok

# Views that answer only POST, or that are fragments of a page (each fetched by the page's own script);
# every other view of the console is a page and is visited below.
NOT_PAGES = {
    "logout",
    # Slack's requests (signature-verified, no page) and the Slack sections' forms (POST, then back to their page).
    "slack_interactions",
    "slack_commands",
    "slack_channel_add",
    "slack_channel_delete",
    "slack_link_code",
    "slack_unlink",
    # Prometheus's scrape (SPEC section 18): text for a scraper, 403 to anyone else, signed-in admins included.
    "metrics",
    # Signing in through an identity provider (SPEC section 19): a redirect to the provider, and its redirect back,
    # whose only page, the failure's, the anonymous visitors' test below checks.
    "oidc_login",
    "oidc_callback",
    "switch_tenant",
    "tenant_webhook",
    "tenant_group_create",
    "tenant_group_add",
    "tenant_group_remove",
    "tenant_group_delete",
    "revoke_token",
    "hide_first_steps",
    "away",
    "agents:rollback",
    "agents:delete",
    "agents:row",
    "agents:starter_policy",
    "agents:policy_row",
    "run_cancel",
    "run_fork",
    "run_replay",
    "jobs",
    "trial_turn",
    "inbox_answer",
    "inbox_remember",
    "inbox_cancel_run",
    "inbox_claim",
    "inbox_selection",
    "held_answer",
    "held_undo",
    "rule_create",
    "rule_condition_row",
    "rule_revoke",
    "rule_edit",
    "rule_preview",
    "rule_suggestion_adopt",
    "agents:policy_preview",
    # A fragment the rules page loads (test_it_sends_the_policy_with_fragments_htmx_swaps_in), and a redirect.
    "rule_suggestions",
    "request_receipt",
    "healthz",
}


@pytest.fixture
def pages(admin) -> list[str]:
    """A path of every console page, with an agent, a run waiting for an approval and a rule to show."""
    make_agent(admin, hooks=starter_hooks("evaluate_only", ["get_user_location"]))
    asked = run_ok(admin, {"message": call_line("send_email", EMAIL), "sessionId": "s1"})
    decided = run_ok(admin, {"message": call_line("send_email", EMAIL), "sessionId": "s2"})
    answer = {"requestId": decided["pendingRequests"][0]["requestId"], "approved": False}
    assert admin.api("POST", f"/api/runs/{decided['runId']}/responses", answer).status_code == 200
    Rule.objects.create(
        tenant=admin.tenant, agent=Run.objects.get(id=asked["runId"]).agent, tool_name="get_time", created_by=admin.user
    )
    return [
        "/",
        "/agents/",
        "/agents/new/",
        "/agents/assistant/",
        "/agents/assistant/edit/",
        "/agents/assistant/versions/",
        "/agents/assistant/versions/1/",
        "/agents/assistant/diff/?a=1&b=1",
        "/agents/assistant/try/?point=input",
        "/trial/",
        "/trial/?agent=assistant",
        "/inbox/",
        "/rules/",
        "/runs/",
        f"/runs/{asked['runId']}/",
        "/audit/",
        "/receipts/",
        f"/receipts/{Receipt.objects.get().id}/",
        "/tokens/",
        "/tenant/",
        "/notifications/",
    ]


def console_views() -> set[str]:
    """The names of the console's own views (the Django admin and the JSON API are apart)."""
    names: set[str] = set()

    def walk(patterns: list[URLPattern | URLResolver], namespace: str) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                if pattern.namespace is None or pattern.app_name == "agents":
                    walk(pattern.url_patterns, f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace)
            elif pattern.name:
                names.add(namespace + pattern.name)

    walk(get_resolver().url_patterns, "")
    return names


def policy(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    directives = [part.split() for part in header.split(";") if part.strip()]
    return {name: values for name, *values in directives}


def assert_strict(response) -> None:
    directives = policy(response)
    assert directives["default-src"] == ["'self'"]
    for name in ("script-src", "style-src"):
        assert directives[name][0] == "'self'"
        assert not {"'unsafe-inline'", "'unsafe-eval'", "'unsafe-hashes'", "*", "data:"} & set(directives[name])
    assert directives["object-src"] == ["'none'"]
    assert directives["base-uri"] == ["'none'"]
    assert directives["frame-ancestors"] == ["'none'"]
    assert directives["connect-src"] == ["'self'"]


class InlineCode(HTMLParser):
    """What a strict policy blocks in a page: inline scripts and styles without the response's nonce, event
    handler attributes, `style` attributes, `javascript:` URLs and htmx's eval-based `hx-on`."""

    def __init__(self, nonce: str | None) -> None:
        super().__init__()
        self.nonce = nonce
        self.found: list[str] = []
        self._tag: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for name, value in attrs:
            if name.startswith("on") or name == "style" or name.startswith(("hx-on", "data-hx-on")):
                self.found.append(f"<{tag} {name}={value!r}>")
            if name in ("href", "src", "action", "formaction") and (value or "").strip().lower().startswith(
                "javascript:"
            ):
                self.found.append(f"<{tag} {name}={value!r}>")
        inline = tag == "style" or (tag == "script" and "src" not in a and a.get("type") != "application/json")
        if inline and (self.nonce is None or a.get("nonce") != self.nonce):
            self.found.append(f"<{tag}> without the response's nonce")


def inline_code(response) -> list[str]:
    nonce = next((value[7:-1] for value in policy(response)["script-src"] if value.startswith("'nonce-")), None)
    reader = InlineCode(nonce)
    reader.feed(response.content.decode())
    return reader.found


def test_it_visits_every_console_page(pages):
    visited = {resolve(path.partition("?")[0]).view_name for path in pages} | {"login"}
    assert console_views() - NOT_PAGES == visited


def test_it_sends_a_strict_policy_with_every_console_page(admin, pages):
    for path in pages:
        response = admin.client.get(path)
        assert response.status_code == 200, path
        assert_strict(response)
        assert inline_code(response) == [], path


def test_it_sends_the_policy_with_pages_of_anonymous_visitors_and_errors(db):
    for path, status in (("/login/", 200), ("/no-such-page/", 404), ("/api/docs", 200), ("/oidc/callback/", 400)):
        response = Client().get(path)
        assert response.status_code == status, path
        assert_strict(response)


def test_it_sends_the_policy_with_fragments_htmx_swaps_in(admin, pages):
    for path in ("/agents/row/parameters/", "/rules/condition-row/", "/rules/?agent=assistant", "/rules/suggestions/"):
        response = admin.client.get(path, HTTP_HX_REQUEST="true")
        assert response.status_code == 200, path
        assert_strict(response)
        assert inline_code(response) == [], path


def test_it_sends_a_page_without_a_nonce_when_nothing_uses_one(admin, pages):
    """A nonce is only worth its header when a page has an inline block; the console's pages have none."""
    response = admin.client.get("/inbox/")
    assert "'nonce-" not in response["Content-Security-Policy"]
