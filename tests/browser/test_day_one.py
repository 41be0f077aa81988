"""A newcomer's first hour in a real browser, on a console seeded as `make run` seeds it (`seed_demo`, no
DEMO_PASSWORD: the password is generated into the data folder): the login page says who to log in as and where
the password is, and only where the demo is installed; the trial page's examples make the agent pause in each
way it can; the Agents list says what each demo agent is for."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.axe import violations
from tests.browser.conftest import PHONE, Server, _close, _new_context, overflow
from tests.processes.cluster import new_cluster

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A console with the demo data, seeded without DEMO_PASSWORD; its operator's login."""
    folder = tmp_path_factory.mktemp("airlock-demo")
    cluster = new_cluster(folder)
    cluster.env.pop("DEMO_PASSWORD", None)
    cluster.manage("collectstatic", "--noinput")
    cluster.manage("seed_demo")
    try:
        console = cluster.serve(WORKER_THREADS="2")
        password = (Path(folder) / "demo-password").read_text().strip()
        yield Server(console.url, "operator", password, cluster.env)
    finally:
        cluster.stop_all()


@pytest.fixture
def demo_page(browser: Browser, demo: Server) -> Iterator[Page]:
    context = _new_context(browser, demo)
    try:
        yield context.new_page()
    finally:
        _close(context)


def log_in(page: Page, server: Server) -> None:
    page.goto("/login/")
    page.get_by_label("Username").fill(server.username)
    page.get_by_label("Password").fill(server.password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{server.url}/")


def test_the_login_page_says_nothing_of_a_demo_that_is_not_installed(page: Page) -> None:
    page.goto("/login/")
    expect(page.get_by_role("heading", name="Log in to Airlock")).to_be_visible()
    expect(page.locator(".demo-logins")).to_have_count(0)
    expect(page.locator("body")).not_to_contain_text("demo-password")


def test_the_login_page_names_the_demo_users_and_where_the_password_is(demo_page: Page, axe_source: str) -> None:
    page = demo_page
    page.goto("/login/")
    hint = page.get_by_role("complementary", name="Trying the demo?")
    expect(hint).to_contain_text("Log in as admin, operator or viewer.")
    expect(hint).to_contain_text("The password is in demo-password in the data folder (AIRLOCK_DATA_DIR)")
    assert violations(page, axe_source) == []
    page.set_viewport_size(PHONE)
    assert overflow(page)[0] <= PHONE["width"], overflow(page)


def test_the_agents_list_says_what_each_demo_agent_is_for(demo_page: Page, demo: Server) -> None:
    page = demo_page
    log_in(page, demo)
    page.goto("/agents/")
    planner = page.locator("tr", has=page.get_by_role("link", name="planner", exact=True))
    expect(planner).to_contain_text("Asks before it assumes")
    expect(page.locator(".agent-description")).to_have_count(5)


@pytest.mark.parametrize(
    ("agent", "group", "example", "kind", "ask"),
    [
        ("assistant", "Approval", "call send_email", "approval", "Approve send_email?"),
        ("assistant", "Client tool", "call get_user_location", "client_tool", "Client tool get_user_location"),
        ("assistant", "Input", "call book_meeting", "input", "Which day should I book?"),
        ("planner", "Question", "call ask_user", "question", "Which colour?"),
        ("planner", "Plan", "call propose_plan", "plan", "Approve the plan?"),
    ],
)
def test_a_trial_example_makes_its_kind_of_request(
    demo_page: Page, demo: Server, agent: str, group: str, example: str, kind: str, ask: str
) -> None:
    page = demo_page
    log_in(page, demo)
    page.goto(f"/trial/?agent={agent}")
    examples = page.get_by_role("region", name="Examples")
    heading = examples.get_by_role("heading", name=group, exact=True)
    expect(heading).to_be_visible()
    examples.get_by_role("button", name=example).first.click()
    message = page.get_by_label("Message")
    expect(message).to_be_focused()
    expect(message).to_have_value(page.locator(f"[data-example^='{example}']").first.get_attribute("data-example"))
    page.locator("#send").click()
    widget = page.locator(f".request-widget[data-kind='{kind}']")
    # The first call of the bundled MCP server starts it: on two shared cores that may take a while.
    expect(widget).to_contain_text(ask, timeout=45000)


def test_help_lists_what_the_scripted_model_takes(demo_page: Page, demo: Server, axe_source: str) -> None:
    page = demo_page
    log_in(page, demo)
    page.goto("/trial/?agent=planner")
    expect(page.locator("#empty-note")).to_contain_text("help")
    page.get_by_role("region", name="Examples").get_by_role("button", name="help", exact=True).click()
    page.locator("#send").click()
    reply = page.locator(".turn").last
    expect(reply).to_contain_text("I am the scripted model.", timeout=15000)
    expect(reply).to_contain_text("Tools I can call here: ask_user, propose_plan, get_time")
    assert violations(page, axe_source) == []
    page.set_viewport_size(PHONE)
    assert overflow(page)[0] <= PHONE["width"], overflow(page)
