"""axe-core (from the npm registry: tests/browser/axe.py) on every console page, for an admin, an operator and a
reader, at desktop and phone widths: no serious or critical violation."""

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from tests.browser.axe import AxeUnavailable, fetch
from tests.browser.conftest import Server
from tests.browser.console_pages import ConsolePage, prepare
from tests.processes.cluster import Api

pytestmark = pytest.mark.browser

LOGINS = {"admin": "ada", "operator": "otto", "reader": "rita"}
BLOCKING = ("serious", "critical")


@pytest.fixture(scope="session")
def axe_source() -> str:
    try:
        return Path(fetch()).read_text()
    except AxeUnavailable as unavailable:
        if os.environ.get("CI"):
            pytest.fail(f"axe-core is needed under CI: {unavailable}")
        pytest.skip(f"axe-core could not be fetched (npm or its registry unreachable): {unavailable}")


@pytest.fixture(scope="module")
def pages(server: Server, acme_team: dict[str, str]) -> list[ConsolePage]:
    return prepare(Api(server.url, acme_team["ada"]), Api(server.url, acme_team["otto"]), prefix="a11y")


def violations(page: Page, axe_source: str) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it stands (injected through the DevTools
    protocol, which the page's Content-Security-Policy does not govern)."""
    if not page.evaluate("typeof window.axe === 'object'"):
        page.evaluate(axe_source)
    found = page.evaluate("axe.run(document, {resultTypes: ['violations']}).then((r) => r.violations)")
    return [
        {
            "rule": v["id"],
            "impact": v["impact"],
            "help": v["help"],
            "where": [" ".join(node["target"]) for node in v["nodes"][:5]],
        }
        for v in found
        if v["impact"] in BLOCKING
    ]


def walk(page: Page, paths: list[str], axe_source: str) -> dict[str, list[dict[str, Any]]]:
    failures = {}
    for path in paths:
        response = page.goto(path)
        assert response is not None and response.status in (200, 403, 404), path
        page.wait_for_load_state("networkidle")
        if found := violations(page, axe_source):
            failures[path] = found
    return failures


@pytest.mark.parametrize("width", [1366, 390])
@pytest.mark.parametrize("role", LOGINS)
def test_it_finds_no_serious_violation_on_any_page(
    role: str, width: int, pages: list[ConsolePage], sign_in: Callable[[str], Page], axe_source: str
) -> None:
    page = sign_in(LOGINS[role])
    page.set_viewport_size({"width": width, "height": 900})
    failures = walk(page, [p.path for p in pages], axe_source)
    if width == 390:  # the folded menu, opened
        page.get_by_role("button", name="Menu").click()
        if found := violations(page, axe_source):
            failures["(menu open)"] = found
    assert failures == {}, f"axe-core violations for the {role} at {width} px: {failures}"


def test_it_finds_no_serious_violation_on_the_login_page(page: Page, axe_source: str) -> None:
    assert walk(page, ["/login/"], axe_source) == {}


def test_it_would_notice_a_violation(logged_in: Page, axe_source: str) -> None:
    """The check is not vacuous: an unlabelled input and grey-on-grey text are reported."""
    page = logged_in
    page.goto("/")
    page.evaluate(
        """document.querySelector("main").insertAdjacentHTML("beforeend",
        '<input type="file" id="unlabelled"><p class="muted"><code>low contrast</code></p>')"""
    )
    rules = {v["rule"] for v in violations(page, axe_source)}
    assert "label" in rules
