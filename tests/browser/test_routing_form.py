"""Routing set in the agent form, end to end in real browsers: an admin routes a tool to a group, the agent page
says so, a trial run of the tool asks for approval; an operator outside the group sees the request read-only and
the API refuses their answer (403 `not_an_approver`); a member approves it from the inbox and the run goes on."""

from collections.abc import Callable
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Server
from tests.browser.test_inbox import EMAIL, SEND, api, create_agent, open_inbox  # noqa: F401
from tests.processes.cluster import Api

pytestmark = pytest.mark.browser


def test_a_tool_routed_in_the_form_is_answered_by_the_groups_members_only(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
    server: Server,
) -> None:
    tag = uuid4().hex[:6]
    group, member, outsider = f"payroll-{tag}", f"mia-{tag}", f"ned-{tag}"
    for name in (member, outsider):
        server.manage("create_user", name, "--tenant", "acme", "--role", "operator", "--password", server.password)
    server.manage("create_group", group, "--tenant", "acme", "--member", member)
    outsider_api = Api(server.url, server.manage("create_token", outsider, "--tenant", "acme").strip())
    agent = create_agent(api, tools=[{"name": "send_email", "approval": "always"}, {"name": "get_time"}])

    admin = sign_in("ada")
    admin.goto(f"/agents/{agent}/edit/")
    row = admin.locator("#tools-rows tr").first
    expect(row.get_by_label("Server tool")).to_have_value("send_email")
    row.get_by_label("Approvers").select_option(group)
    admin.get_by_role("button", name="Save as version 2").click()
    expect(admin.get_by_text("Saved version 2.")).to_be_visible()
    routing = admin.locator("#routing")
    expect(routing.locator("tr", has_text="send_email")).to_contain_text(f"for {group}")
    admin.goto(f"/agents/{agent}/edit/")  # and the form shows it when edited again
    expect(admin.locator("#tools-rows tr").first.get_by_label("Approvers")).to_have_value(group)

    trial = sign_in(outsider)
    trial.goto(f"/trial/?agent={agent}")
    expect(trial.locator("#send")).to_be_enabled()
    trial.get_by_label("Message").fill(SEND)
    trial.locator("#send").click()
    widget = trial.locator(".request-widget")
    expect(widget).to_contain_text("Approve send_email?")
    expect(widget).to_contain_text(f"For {group}: waiting for one of its members (or an admin) to answer.")
    expect(widget.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    rid = widget.get_attribute("data-request-id")
    status, pending = api["otto"]("GET", f"/api/requests/{rid}")
    assert (status, pending["approvers"]) == (200, group)

    answer = {"requestId": rid, "approved": True}
    status, refused = outsider_api("POST", f"/api/runs/{pending['runId']}/responses", answer)
    assert (status, refused["code"]) == (403, "not_an_approver"), refused
    assert f"for {group}" in refused["detail"]
    assert api["otto"]("GET", f"/api/requests/{rid}")[1]["answered"] is False

    inbox = sign_in(member)
    open_inbox(inbox, agent)
    card = inbox.locator(f"#request-{rid}")
    expect(card).to_contain_text(f"for {group}")
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(card).to_have_count(0)
    expect(trial.locator(".turn").last).to_contain_text(f"send_email: sent to {EMAIL['to']}", timeout=15000)
