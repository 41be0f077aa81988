"""The console at 390 px wide (a phone): the menu folds behind a button and opens, the login page fits. (Every
other page is checked for sideways scrolling by the walks of tests/browser/test_pages.py, which also check that
the trial page shows its message box before the settings.)"""

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import PHONE, overflow

pytestmark = pytest.mark.browser


def test_it_fits_the_login_page_into_390_px(page: Page) -> None:
    page.set_viewport_size(PHONE)
    page.goto("/login/")
    assert overflow(page)[0] <= PHONE["width"]


def test_it_folds_the_menu_behind_a_button_on_a_phone(sign_in: Callable[[str], Page]) -> None:
    page = sign_in("ada")
    menu, button = page.locator("#site-menu"), page.get_by_role("button", name="Menu")
    expect(button).to_be_hidden()
    expect(menu.get_by_role("link", name="Audit")).to_be_visible()

    page.set_viewport_size(PHONE)
    expect(button).to_be_visible()
    expect(button).to_have_attribute("aria-expanded", "false")
    # The folded menu still shows how many requests wait.
    expect(button.locator(".badge")).to_have_text(page.locator("#pending-count").inner_text())
    expect(menu.get_by_role("link", name="Audit")).to_be_hidden()
    button.click()
    expect(button).to_have_attribute("aria-expanded", "true")
    menu.get_by_role("link", name="Audit").click()
    expect(page).to_have_url(f"{page.url.split('/audit')[0].rstrip('/')}/audit/")
    expect(page.locator("h1")).to_have_text("Audit")
    # Escape folds it again, focus back on the button.
    button.click()
    expect(menu.get_by_role("button", name="Log out")).to_be_visible()
    page.keyboard.press("Escape")
    expect(menu.get_by_role("button", name="Log out")).to_be_hidden()
    expect(button).to_be_focused()
