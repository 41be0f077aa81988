"""A real Airlock server (daphne on a free port, its own SQLite file in a temporary folder) and a headless
Chromium page driving it through Playwright's sync API.

Browser tests talk to the server over HTTP only: they must not use pytest-django's `db` fixture, whose
test database the server process never sees.
"""

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parents[2]
PYTHON = str(ROOT / ".venv" / "bin" / "python")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@dataclass(frozen=True)
class Server:
    url: str
    username: str
    password: str


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _manage(env: dict[str, str], *args: str) -> None:
    result = subprocess.run(
        [PYTHON, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("airlock-data")
    env = {**os.environ, "AIRLOCK_DATA_DIR": str(data_dir), "DEBUG": "1"}
    # The server must use the temporary SQLite file and its in-memory channel layer, whatever the shell says.
    for name in ("DATABASE_URL", "REDIS_URL"):
        env.pop(name, None)
    password = "browser-tests-only-7f3a"
    _manage(env, "migrate", "--noinput")
    _manage(env, "collectstatic", "--noinput")
    _manage(env, "create_tenant", "acme", "--name", "Acme")
    _manage(env, "create_user", "ada", "--tenant", "acme", "--role", "admin", "--password", password)

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with (data_dir / "daphne.log").open("w") as log:
        process = subprocess.Popen(
            [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "console.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 30
            while not _answers(f"{url}/healthz"):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the server did not start:\n" + (data_dir / "daphne.log").read_text())
                time.sleep(0.2)
            yield Server(url, "ada", password)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def page(server: Server) -> Iterator[Page]:
    # One Playwright per test: its sync API cannot start while an asyncio loop runs in this thread, and
    # async tests elsewhere in the (randomly ordered) suite run loops between browser tests.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 900})
        context.set_default_timeout(10_000)
        try:
            yield context.new_page()
        finally:
            context.close()
            browser.close()


@pytest.fixture
def logged_in(page: Page, server: Server) -> Page:
    page.goto("/login/")
    page.get_by_label("Username").fill(server.username)
    page.get_by_label("Password").fill(server.password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{server.url}/")
    return page
