"""Decisions that need more than one person, in Chromium (SPEC section 14, issue 51): a quorum's card says how it
stands and who is still needed, a member marks themselves away with a delegate, and the agent form edits what
deciding takes; axe-core finds no serious violation on the three pages."""

from collections.abc import Callable
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.axe import violations
from tests.browser.conftest import Server
from tests.processes.cluster import Api, manage_all

pytestmark = pytest.mark.browser


@pytest.fixture
def team(server: Server) -> dict[str, str]:
    """A tenant of its own: ada the admin, sam of sre, sue of security, otto who asks; the agent `releaser`."""
    tag = uuid4().hex[:6]
    tenant = f"quorum-{tag}"
    names = {role: f"{role}-{tag}" for role in ("ada", "sam", "sue", "otto")}
    commands = [["create_tenant", tenant]]
    password = ["--password", server.password]
    roles = {name: "admin" if who == "ada" else "operator" for who, name in names.items()}
    commands += [["create_user", name, "--tenant", tenant, "--role", role, *password] for name, role in roles.items()]
    commands += [
        ["create_group", "sre", "--tenant", tenant, "--member", names["sam"]],
        ["create_group", "security", "--tenant", tenant, "--member", names["sue"]],
    ]
    commands += [["create_token", names[who], "--tenant", tenant] for who in ("ada", "sam", "otto")]
    *_, ada, sam, otto = manage_all(server.env, *commands)
    deploy = {
        "name": "deploy",
        "approvers": ["sre", "security"],
        "require": {"approvals": 2, "fromEach": ["sre", "security"]},
        "escalation": [{"after": "1h", "then": "deny"}],
    }
    Api(server.url, ada.strip()).ok(
        "POST", "/api/agents", {"name": "releaser", "runtime": "external", "tools": [deploy]}
    )
    opened = Api(server.url, otto.strip()).ok("POST", "/api/agents/releaser/requests", {"toolName": "deploy"})
    said = Api(server.url, sam.strip()).ok("POST", f"/api/requests/{opened['requestId']}/responses", {"approved": True})
    assert said["status"] == "recorded", said
    later = Api(server.url, otto.strip()).ok("POST", "/api/agents/releaser/requests", {"toolName": "deploy"})
    return names | {"request": opened["requestId"], "later": later["requestId"], "sam_token": sam.strip()}


def test_a_quorum_card_says_how_it_stands(
    team: dict[str, str], sign_in: Callable[[str], Page], axe_source: str
) -> None:
    page = sign_in(team["sue"])
    page.goto("/".join(page.url.split("/", 3)[:3]) + "/inbox/")
    card = page.locator(f"#request-{team['request']}")
    expect(card.locator("[data-approvals]")).to_have_text(f"1 of 2 · {team['sam']} · waiting for security")
    expect(card.locator("[data-escalation]")).to_contain_text("denied unless decided before")
    expect(card).to_contain_text("for sre or security")
    expect(card.locator(".row-quorum")).to_have_text("1 of 2")
    assert violations(page, axe_source) == []
    # An approval given elsewhere reaches the open inbox: the card's line and its row say it.
    later = page.locator(f"#request-{team['later']}")
    expect(later.locator(".row-quorum")).to_have_text("0 of 2")
    origin = "/".join(page.url.split("/", 3)[:3])
    Api(origin, team["sam_token"]).ok("POST", f"/api/requests/{team['later']}/responses", {"approved": True})
    expect(later.locator(".row-quorum")).to_have_text("1 of 2")
    expect(later.locator("[data-approvals]")).to_have_text(f"1 of 2 · {team['sam']} · waiting for security")
    # Read again within the minute the server keeps each card (approvals/cards.py), the page says the same.
    page.reload()
    expect(page.locator(f"#request-{team['later']} .row-quorum")).to_have_text("1 of 2")
    expect(page.locator(f"#request-{team['later']} [data-approvals]")).to_contain_text(team["sam"])


def test_a_member_marks_themselves_away_and_the_form_edits_a_requirement(
    team: dict[str, str], sign_in: Callable[[str], Page], axe_source: str
) -> None:
    page = sign_in(team["sam"])
    origin = "/".join(page.url.split("/", 3)[:3])
    page.goto(f"{origin}/notifications/")
    away = page.get_by_role("region", name="Away")
    away.get_by_label("Until").fill("2031-01-02T09:00")
    away.get_by_label("Who answers for you").select_option(team["sue"])
    assert violations(page, axe_source) == []
    away.get_by_role("button", name="Mark me away").click()
    expect(page.get_by_role("region", name="Away")).to_contain_text(f"{team['sue']} answers for you")
    expect(page.get_by_role("button", name="I am back")).to_be_visible()

    admin = sign_in(team["ada"])
    admin.goto(f"{origin}/agents/releaser/edit/")
    row = admin.locator("tr[id^='external_tools-']").first
    expect(row.get_by_label("Requires")).to_have_value("2 from sre, security")
    expect(row.get_by_label("Escalation")).to_have_value("1h deny")
    row.get_by_label("Requires").fill("3 from sre, security")
    row.get_by_label("Escalation").fill("10m to sre; 1h deny")
    assert violations(admin, axe_source) == []
    admin.get_by_role("button", name="Save").first.click()
    expect(admin.locator("body")).to_contain_text("3 approvals (one from each of sre, security), not the requester")
    expect(admin.locator("body")).to_contain_text("escalates after 10m to sre; after 1h deny")
