"""`make screens`: screenshots of every console page at 1366 and 390 px wide into docs/screens/.

Starts the console as `make run` does (`manage.py serve`, the demo tenant from `seed_demo`), in a data folder
of its own, adds a weekly-report agent with a waiting run and a remembered rule (tests/browser/console_pages.py),
and photographs each page with Chromium: as the admin, then the reader's 403 on the trial page and the login.
"""

import os
import tempfile
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

from tests.browser.conftest import CHROMIUM_ARGS
from tests.browser.console_pages import ConsolePage, prepare
from tests.processes.cluster import ROOT, Api, Cluster, manage

OUT = ROOT / "docs" / "screens"
WIDTHS = {1366: 900, 390: 844}
PASSWORD = "screens-only-5d1c"
# A long page is cut here: the top of a page is what a reader of the README needs.
MAX_HEIGHT = 2400


def shoot(page: Page, name: str, width: int) -> Path:
    page.wait_for_load_state("networkidle")
    height = min(page.evaluate("document.documentElement.scrollHeight"), MAX_HEIGHT)
    path = OUT / f"{name}-{width}.png"
    page.screenshot(path=path, full_page=True, clip={"x": 0, "y": 0, "width": width, "height": height})
    return path


def log_in(page: Page, url: str, username: str) -> None:
    page.goto(f"{url}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{url}/")


def photograph(url: str, pages: list[ConsolePage]) -> list[Path]:
    taken = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        for width, height in WIDTHS.items():
            context = browser.new_context(viewport={"width": width, "height": height})
            page = context.new_page()
            page.goto(f"{url}/login/")
            taken.append(shoot(page, "login", width))
            log_in(page, url, "admin")
            for console_page in pages:
                page.goto(f"{url}{console_page.path}")
                taken.append(shoot(page, console_page.name, width))
            if width < 700:
                page.goto(f"{url}/")
                page.get_by_role("button", name="Menu").click()
                taken.append(shoot(page, "menu", width))
            context.close()

            context = browser.new_context(viewport={"width": width, "height": height})
            page = context.new_page()
            log_in(page, url, "viewer")
            page.goto(f"{url}/trial/")
            taken.append(shoot(page, "forbidden", width))
            context.close()
        browser.close()
    return taken


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="airlock-screens-") as data:
        env = {**os.environ, "AIRLOCK_DATA_DIR": data, "DEBUG": "1", "DEMO_PASSWORD": PASSWORD}
        for name in ("DATABASE_URL", "REDIS_URL"):
            env.pop(name, None)
        for command in (["migrate", "--noinput"], ["collectstatic", "--noinput"], ["seed_demo"]):
            manage(env, *command)
        tokens = {name: manage(env, "create_token", name, "--tenant", "demo").strip() for name in ("admin", "operator")}
        cluster = Cluster(env, Path(data))
        try:
            url = cluster.serve(WORKER_THREADS="4").url
            pages = prepare(Api(url, tokens["admin"]), Api(url, tokens["operator"]), name="weekly-report")
            taken = photograph(url, pages)
        finally:
            cluster.stop_all()
    print(f"{len(taken)} screenshots in {OUT.relative_to(ROOT)}/")


if __name__ == "__main__":
    main()
