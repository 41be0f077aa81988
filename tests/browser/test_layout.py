"""The console at 390 px wide (a phone): no page scrolls sideways, for an admin, an operator and a reader; the
menu folds behind a button and opens; the trial page shows its message box before the settings."""

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Server
from tests.browser.console_pages import ConsolePage, prepare
from tests.processes.cluster import Api

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
LOGINS = {"admin": "ada", "operator": "otto", "reader": "rita"}


@pytest.fixture(scope="module")
def pages(server: Server, acme_team: dict[str, str]) -> list[ConsolePage]:
    return prepare(Api(server.url, acme_team["ada"]), Api(server.url, acme_team["otto"]), prefix="layout")


def overflow(page: Page) -> tuple[int, list[str]]:
    """The document's scroll width, and the elements sticking out of the viewport (to say what to fix)."""
    width = page.evaluate("document.documentElement.scrollWidth")
    culprits = page.evaluate(
        """() => [...document.querySelectorAll("body *")]
          .filter((el) => el.getBoundingClientRect().right > window.innerWidth + 0.5)
          .filter((el) => !el.closest("[data-scrolls]") && getComputedStyle(el).position !== "absolute")
          .slice(0, 8).map((el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
            + (el.className && typeof el.className === "string" ? "." + el.className.split(" ").join(".") : ""))"""
    )
    return width, culprits


@pytest.mark.parametrize("role", LOGINS)
def test_it_fits_every_page_into_390_px(role: str, pages: list[ConsolePage], sign_in: Callable[[str], Page]) -> None:
    page = sign_in(LOGINS[role])
    page.set_viewport_size(PHONE)
    wide = {}
    for console_page in pages:
        response = page.goto(console_page.path)
        assert response is not None and response.status in (200, 403, 404), console_page
        page.wait_for_load_state("networkidle")
        width, culprits = overflow(page)
        if width > PHONE["width"]:
            wide[console_page.path] = (width, culprits)
    assert wide == {}, f"pages wider than {PHONE['width']} px for the {role}: {wide}"


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


def test_it_shows_the_trial_message_box_first_on_a_phone(
    pages: list[ConsolePage], sign_in: Callable[[str], Page]
) -> None:
    page = sign_in("otto")
    page.set_viewport_size(PHONE)
    page.goto(next(p.path for p in pages if p.name == "trial"))
    message, settings = page.get_by_label("Message", exact=True), page.locator("#trial-settings")
    assert message.bounding_box()["y"] < settings.bounding_box()["y"]  # type: ignore[index]
    assert message.bounding_box()["y"] < PHONE["height"] * 2  # type: ignore[index]
