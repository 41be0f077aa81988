"""The Tenant page in Chromium with a group on it (the page walks see it empty): an admin creates a group, adds
a member and removes them; a reader opts in to digests from the folded menu; both without sideways scrolling
at 390 px and without serious axe-core violations."""

from collections.abc import Callable
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.axe import violations
from tests.browser.conftest import PHONE, overflow

pytestmark = pytest.mark.browser


def test_an_admin_manages_a_group_on_a_phone(
    acme_team: dict[str, str],
    sign_in: Callable[[str], Page],
    axe_source: str,
) -> None:
    page = sign_in("ada")
    page.set_viewport_size(PHONE)
    page.goto("/tenant/")
    name = f"finance-{uuid4().hex[:6]}"
    page.get_by_label("New group").fill(name)
    page.get_by_role("button", name="Create group").click()
    expect(page.get_by_text(f"Group {name} created")).to_be_visible()

    group = page.get_by_role("region", name=name, exact=True)
    group.get_by_label("Add a member").select_option(label="otto")
    group.get_by_role("button", name=f"Add to {name}", exact=True).click()
    expect(page.get_by_text(f"otto added to {name}.")).to_be_visible()
    expect(group.get_by_role("button", name=f"Remove otto from {name}")).to_be_visible()

    assert overflow(page)[0] <= PHONE["width"], overflow(page)
    assert violations(page, axe_source) == []

    group.get_by_role("button", name=f"Remove otto from {name}").click()
    expect(page.get_by_text(f"otto removed from {name}.")).to_be_visible()
    group.get_by_role("button", name=f"Delete group {name}").click()
    expect(page.get_by_text(f"Group {name} deleted.")).to_be_visible()


def test_a_reader_opts_in_to_digests_on_a_phone(
    acme_team: dict[str, str],
    sign_in: Callable[[str], Page],
    axe_source: str,
) -> None:
    page = sign_in("rita")
    page.set_viewport_size(PHONE)
    page.goto("/")
    page.get_by_role("button", name="Menu").click()
    page.get_by_role("link", name="Notifications").click()
    page.get_by_label("E-mail me a digest").check()
    page.get_by_label("Send it to").fill("rita@example.com")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("go to rita@example.com")).to_be_visible()
    assert overflow(page)[0] <= PHONE["width"], overflow(page)
    assert violations(page, axe_source) == []
