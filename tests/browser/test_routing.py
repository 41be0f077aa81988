"""Routing in real browsers: a request routed to a group reaches every inbox, live and on a reload, with its
forms only for the group's members and admins; another operator sees it read-only, "for <group>", until an
admin adds them to the group: then their open inbox shows its forms without a reload."""

from collections.abc import Callable
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Server
from tests.browser.test_inbox import SEND, api, continuation_of, create_agent, open_inbox, run  # noqa: F401
from tests.processes.cluster import Api

pytestmark = pytest.mark.browser


def test_a_group_routed_request_is_read_only_for_a_non_member(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
    server: Server,
) -> None:
    group = f"finance-{uuid4().hex[:6]}"
    server.manage("create_user", "nell", "--tenant", "acme", "--role", "operator", "--password", server.password)
    server.manage("create_group", group, "--tenant", "acme", "--member", "otto")
    agent = create_agent(api, tools=[{"name": "send_email", "approval": "always", "approvers": group}])
    member, outsider_operator = sign_in("otto"), sign_in("nell")
    for page in (member, outsider_operator):
        open_inbox(page)

    asked = run(api["otto"], agent, f"{SEND}\n{SEND}", uuid4().hex)  # two approvals: a batch bar for members
    rid = asked["pendingRequests"][0]["requestId"]
    bar = f'.batch-bar[data-batch-run="{asked["runId"]}"]'

    theirs, ours = outsider_operator.locator(f"#request-{rid}"), member.locator(f"#request-{rid}")
    for page in (outsider_operator, member):  # pushed, then as the page renders it
        card = page.locator(f"#request-{rid}")
        expect(card).to_contain_text(f"for {group}")
        if page is outsider_operator:
            expect(card).to_contain_text(f"For {group}: waiting for one of its members (or an admin) to answer.")
            expect(card.get_by_role("button")).to_have_count(0)
            expect(card.get_by_role("checkbox")).to_have_count(0)
            expect(page.locator(bar)).to_have_count(0)  # pushed: no batch bar for what they cannot answer
            # Reloaded with its agent's filter: earlier tests may leave more than a page of requests in the tenant.
            page.goto(f"/inbox/?agent={agent}")
            expect(theirs.get_by_role("button")).to_have_count(0)
            expect(theirs).to_contain_text(f"For {group}")
        else:
            expect(card.get_by_role("button", name="Approve", exact=True)).to_be_visible()
    expect(member.locator(bar)).to_be_visible()
    expect(outsider_operator.locator(bar)).to_have_count(0)
    theirs.focus()
    outsider_operator.keyboard.press("a")  # no form, so nothing to press
    outsider_operator.wait_for_timeout(300)
    status, body = api["otto"]("GET", f"/api/requests/{rid}")
    assert (status, body["answered"]) == (200, False)

    admin = sign_in("ada")
    admin.goto("/tenant/")
    section = admin.get_by_role("region", name=group, exact=True)  # its own section, not the panel holding all
    section.get_by_label("Add a member").select_option(label="nell")
    section.get_by_role("button", name=f"Add to {group}").click()
    expect(admin.get_by_text(f"nell added to {group}.")).to_be_visible()
    expect(theirs.get_by_role("button", name="Approve", exact=True)).to_be_visible()  # no reload

    member.locator(bar).get_by_role("button", name="Approve all").click()
    expect(theirs).to_have_count(0)
    expect(ours).to_have_count(0)
    assert continuation_of(api["otto"], asked)["output"] == "send_email: sent to a@b.co\nsend_email: sent to a@b.co"
