"""The trial-run page in a real browser: a streamed turn, what it asks answered with the inbox card's widget
(each button answers at once, the continuation streams in), the next turn; at 1366 and 390 px wide nothing
scrolls sideways and axe-core finds no serious or critical violation."""

import json
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from agents.starter_policy import starter_hooks
from tests.browser.axe import violations

pytestmark = pytest.mark.browser

SEND = 'call send_email {"to": "ops@example.com", "subject": "Hi", "body": "Hello"}'


def create_agent(page: Page, name: str, **definition: object) -> None:
    """Create the agent through the JSON API with the browser's own session (and its CSRF token): the given
    definition, or a mailer with a parameter."""
    csrf = page.locator('meta[name="csrf-token"]').get_attribute("content")
    definition = definition or {
        "instructions": "You help the {{team}} team.",
        "tools": [{"name": "send_email", "approval": "always"}, {"name": "get_time"}],
        "parameters": [{"name": "team", "kind": "text", "default": "ops"}],
    }
    response = page.request.post(
        "/api/agents",
        data=json.dumps({"name": name, **definition}),
        headers={"Content-Type": "application/json", "X-CSRFToken": csrf},
    )
    assert response.status == 201, response.text()


def ask_to_send(page: Page) -> str:
    """Send the mail the agent asks approval for; the request's id."""
    send(page, SEND)
    widget = page.locator(".request-widget")
    expect(widget).to_contain_text("Approve send_email?")
    return widget.get_attribute("data-request-id") or ""


def send(page: Page, text: str) -> None:
    expect(page.locator("#send")).to_be_enabled()
    page.get_by_label("Message").fill(text)
    page.locator("#send").click()


def test_it_runs_an_approval_round_trip_turn_by_turn(logged_in: Page) -> None:
    page, name = logged_in, f"mailer-{uuid4().hex[:6]}"
    create_agent(page, name)
    page.goto(f"/trial/?agent={name}")

    send(page, "echo instructions")
    expect(page.locator(".turn").last).to_contain_text("You help the ops team.")

    send(page, SEND)
    widget = page.locator(".request-widget")
    expect(widget).to_contain_text("Approve send_email?")
    expect(page.locator(".turn").last).to_contain_text("Awaiting approval")
    widget.get_by_label("Reason").fill("not during the freeze")
    widget.get_by_role("button", name="Deny", exact=True).click()
    # The answer is stored at once, as from the inbox; the continuation streams in through the session stream.
    expect(page.locator(".turn").last).to_contain_text("send_email denied: not during the freeze", timeout=15000)
    expect(page.locator(".answered-elsewhere")).to_contain_text("Denied by")
    expect(page.locator(".request-widget")).to_have_count(0)
    # The turn that asked no longer says it waits, without a reload.
    asked = page.locator(".turn").filter(has=page.locator(".answered-elsewhere"))
    expect(asked.locator(".meta .pill")).to_have_text("Answered")

    send(page, SEND)
    page.locator(".request-widget").get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator(".turn").last).to_contain_text("send_email: sent to ops@example.com", timeout=15000)
    expect(page.locator(".turn").last).to_contain_text("Completed")
    page.screenshot(path="/tmp/airlock-trial.png", full_page=True)

    # The conversation survives a reload: the session is in the address.
    expect(page.locator("#send")).to_be_enabled()
    page.reload()
    expect(page.locator(".turn")).to_have_count(5)
    expect(page.locator(".turn").last).to_contain_text("send_email: sent to ops@example.com")


def test_a_message_while_requests_wait_is_kept_and_can_be_sent_anyway(logged_in: Page) -> None:
    page, name = logged_in, f"mailer-{uuid4().hex[:6]}"
    create_agent(page, name)
    page.goto(f"/trial/?agent={name}")
    send(page, SEND)
    expect(page.locator(".request-widget")).to_be_visible()
    # A new message while the approval is open is refused by the API (409 pending_requests): the page says so
    # in its own words, keeps the message, and offers to send it anyway.
    send(page, "something else")
    expect(page.locator("#send-error")).to_contain_text("This session still waits for answers above")
    expect(page.get_by_label("Message")).to_have_value("something else")
    expect(page.locator(".turn")).to_have_count(1)
    page.screenshot(path="/tmp/airlock-trial-refused.png")
    # Sent anyway (`abandonPending`): the approval is closed unanswered and the message is the next turn.
    page.locator("#send-anyway").click()
    expect(page.locator(".turn").last).to_contain_text("You said: something else", timeout=15000)
    expect(page.locator(".turn")).to_have_count(2)
    expect(page.get_by_label("Message")).to_have_value("")
    expect(page.locator("#send-error")).to_be_empty()
    # The approval's form gives way at once: it can no longer be sent stale.
    expect(page.locator(".answered-elsewhere")).to_contain_text("Closed: abandoned")
    expect(page.locator(".request-widget")).to_have_count(0)
    page.reload()
    # The first turn's approval reads abandoned; it is answered now only in a fork, behind "Answer differently".
    expect(page.locator(".turn").first).to_contain_text("to approve send_email · abandoned")
    expect(page.locator(".request-widget")).to_be_hidden()
    page.screenshot(path="/tmp/airlock-trial-abandoned.png", full_page=True)


def test_it_answers_a_question_a_plan_and_a_refused_client_tool(logged_in: Page) -> None:
    page, name = logged_in, f"asker-{uuid4().hex[:6]}"
    create_agent(
        page, name, tools=[{"name": "ask_user"}, {"name": "propose_plan"}], clientTools=[{"name": "get_user_location"}]
    )
    page.goto(f"/trial/?agent={name}")

    send(page, 'call ask_user {"question": "Which colour?", "choices": ["red", "blue"]}')
    widget = page.locator(".request-widget")
    expect(widget).to_contain_text("Which colour?")
    widget.get_by_role("button", name="blue", exact=True).click()
    expect(page.locator(".turn").last).to_contain_text("ask_user: blue", timeout=15000)
    expect(page.locator(".request-widget")).to_have_count(0)

    send(page, 'call propose_plan {"steps": ["Read the logs", "Restart"]}')
    widget = page.locator(".request-widget")
    expect(widget.locator(".plan-steps li")).to_have_count(2)
    widget.get_by_role("button", name="Send back to revise").click()
    # The inbox's own check, said once: beside the field, the card pointing to it.
    expect(widget.locator("[data-error-for=text]")).to_have_text("Say what to revise.")
    expect(widget.locator("[data-card-error]")).to_have_text("Check the highlighted field.")
    expect(widget.get_by_text("Say what to revise.")).to_have_count(1)
    widget.get_by_label("What to revise").fill("Check the disk first")
    widget.get_by_role("button", name="Send back to revise").click()
    expect(page.locator(".turn").last).to_contain_text("propose_plan: revise: Check the disk first", timeout=15000)

    send(page, "call get_user_location")
    widget = page.locator(".request-widget")
    widget.get_by_label("…or an error message, or why the client refuses").fill("The user said no")
    widget.get_by_role("button", name="Refuse to run it").click()
    expect(page.locator(".turn").last).to_contain_text("get_user_location rejected: The user said no", timeout=15000)


def test_the_trial_page_follows_an_answer_given_in_the_inbox(logged_in: Page, sign_in, acme_team) -> None:
    """Another operator approves from the inbox: the trial page's form gives way to who answered, and the
    continuation streams in, without a reload (issue 16, item 1; the session stream)."""
    page, name = logged_in, f"mailer-{uuid4().hex[:6]}"
    create_agent(page, name)
    page.goto(f"/trial/?agent={name}")
    send(page, "echo instructions")  # the session exists: the page follows its stream from here on
    expect(page.locator(".turn").last).to_contain_text("You help the ops team.")
    rid = ask_to_send(page)

    inbox = sign_in("otto")
    inbox.goto(f"/inbox/?agent={name}")  # the shared tenant may hold more than a page of older requests
    inbox.locator(f"#request-{rid}").get_by_role("button", name="Approve", exact=True).click()

    expect(page.locator(".answered-elsewhere")).to_contain_text("Approved by otto")
    expect(page.locator(f'.request-widget[data-request-id="{rid}"]')).to_have_count(0)
    asked = page.locator(".turn").filter(has=page.locator(".answered-elsewhere"))
    expect(asked.locator(".meta .pill")).to_have_text("Answered")  # not "Awaiting approval" until reloaded
    expect(page.locator(".turn").last).to_contain_text("send_email: sent to ops@example.com", timeout=15000)
    expect(page.locator(".turn").last).to_contain_text("Completed")


def test_it_answers_an_mcp_form(logged_in: Page) -> None:
    """The elicitation form has a field named `action` (its accept, decline and cancel buttons): the answer goes
    to the form's address all the same (`form.action` would be the field)."""
    page, name = logged_in, f"booker-{uuid4().hex[:6]}"
    create_agent(page, name, mcpServers=[{"connection": "meetings"}])
    page.goto(f"/trial/?agent={name}")

    send(page, 'call book_meeting {"topic": "Standup"}')
    widget = page.locator(".request-widget")
    expect(widget).to_contain_text("Which day should I book?")
    widget.get_by_label("Day").fill("Tuesday")
    widget.get_by_role("button", name="Accept").click()

    expect(page.locator(".turn").last).to_contain_text('book_meeting: Booked "Standup" on Tuesday', timeout=15000)
    expect(page.locator(".request-widget")).to_have_count(0)


def test_the_trial_page_follows_a_run_cancelled_in_the_inbox(logged_in: Page, sign_in, acme_team) -> None:
    page, name = logged_in, f"mailer-{uuid4().hex[:6]}"
    create_agent(page, name)
    page.goto(f"/trial/?agent={name}")
    rid = ask_to_send(page)

    inbox = sign_in("otto")
    inbox.goto(f"/inbox/?agent={name}")  # the shared tenant may hold more than a page of older requests
    inbox.once("dialog", lambda dialog: dialog.accept())
    inbox.locator(f"#request-{rid}").get_by_role("button", name="Cancel the run").click()

    expect(page.locator(".request-widget")).to_have_count(0)
    expect(page.locator(".turn").last).to_contain_text("Cancelled", timeout=15000)


def test_a_policy_verdict_reads_as_a_sentence(logged_in: Page, axe_source: str) -> None:
    """The line a turn gets for a policy's verdict is a sentence, in the reply's own type: not the timeline's
    badge (bold, upper case, monospace) it once borrowed the class of."""
    page, name = logged_in, f"shadowed-{uuid4().hex[:6]}"
    tools = [{"name": "send_email", "approval": "never"}, {"name": "get_time", "approval": "never"}]
    create_agent(page, name, tools=tools, hooks=starter_hooks("evaluate_only"))
    page.goto(f"/trial/?agent={name}")

    send(page, SEND.replace("ops@example.com", "someone@outside.test"))
    expect(page.locator(".turn").last).to_contain_text("Completed", timeout=15000)
    page.reload()  # the turn as the page renders it
    line = page.locator(".turn").last.locator(".policy-verdict")
    expect(line).to_contain_text("would have given escalate (shadow mode: not enforced) on send_email")
    style = line.evaluate(
        "e => { const s = getComputedStyle(e), body = getComputedStyle(document.body);"
        " return [s.textTransform, s.fontWeight, s.fontFamily === body.fontFamily]; }"
    )
    assert style == ["none", "400", True], style
    assert violations(page, axe_source) == []


@pytest.mark.parametrize("width", [1366, 390])
def test_the_widgets_fit_and_pass_axe(width: int, logged_in: Page, axe_source: str) -> None:
    page, name = logged_in, f"asker-{uuid4().hex[:6]}"
    tools = [{"name": "send_email", "approval": "always"}, {"name": "ask_user"}]
    create_agent(page, name, tools=tools, clientTools=[{"name": "get_user_location"}])
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/trial/?agent={name}")

    # Three requests at once: an approval, a question with choices, a client tool.
    colour = 'call ask_user {"question": "Which colour?", "choices": ["red", "blue"]}'
    send(page, f"{SEND}\n{colour}\ncall get_user_location")
    expect(page.locator(".request-widget")).to_have_count(3)
    page.locator(".request-widget summary", has_text="Edit arguments before approving").click()
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert violations(page, axe_source) == []
    page.screenshot(path=f"/tmp/airlock-trial-widgets-{width}.png", full_page=True)
