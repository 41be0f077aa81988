"""Cards with context (issue 16, item 6): the tool's description as sanitised Markdown, the user message that
led to the call (a continuation's too), how long ago it opened and its deadline, and the arguments as a
key/value table with the JSON editor one click away."""

import json
import re

from django.test import Client

from approvals.models import PendingRequest
from approvals.push import render_request
from tests.approvals.test_inbox_pages import ask, make_agent, request_id
from tests.helpers import drain_queued

EMAIL = {"to": "a@b.co", "subject": "Hi <there>", "body": "line one\nline two"}
SEND = f"call send_email {json.dumps(EMAIL)}"
SNEAKY = (
    "Finds **where** the user is. <script>alert(1)</script> <img src=x onerror=alert(2)>"
    " [docs](javascript:alert(3)) [help](https://example.com/help) ![pixel](https://evil.test/p.png)"
)


def test_a_client_tools_description_is_rendered_as_markdown_without_anything_scriptable(operator, admin):
    make_agent(admin, "locator", tools=[], clientTools=[{"name": "get_user_location", "description": SNEAKY}])
    ask(operator, message="call get_user_location", agent="locator")

    page = operator.client.get("/inbox/").content.decode()

    description = re.search(r'<div class="tool-description">(.*?)</div>', page, re.S).group(1)
    assert "<strong>where</strong>" in description
    assert '<a href="https://example.com/help">help</a>' in description
    assert "<script" not in description and "&lt;script&gt;" in description
    assert "<img" not in description and "onerror=alert(2)" in description  # shown as text, never an element
    assert 'href="javascript' not in page and 'src="https://evil.test' not in page


def test_a_server_tools_description_the_users_message_the_age_and_the_deadline(operator, admin):
    make_agent(admin, requestDeadlineSeconds=600)
    asked = ask(operator, message=f"Please mail Ada.\n{SEND}")
    pending = PendingRequest.objects.get(id=request_id(asked))

    page = operator.client.get("/inbox/").content.decode()

    assert "Send an email through the console" in page
    assert re.search(r'<blockquote class="asked-by">.*Please mail Ada\.', page, re.S)
    assert re.search(r"opened <time datetime=\"[^\"]+\" data-age[^>]*>0\xa0minutes ago</time>", page)
    assert f'deadline <time datetime="{pending.expires_at.isoformat()}">' in page


def test_the_arguments_are_a_table_with_the_json_editor_one_click_away(operator, admin):
    make_agent(admin)
    asked = ask(operator, message=SEND)
    rid = request_id(asked)
    PendingRequest.objects.filter(id=rid).update(arguments={**EMAIL, "cc": ["x@y.co"]})  # a value that is no text

    page = operator.client.get("/inbox/").content.decode()

    table = re.search(r'<table class="args-table"[^>]*>(.*?)</table>', page, re.S).group(1)
    rows = re.findall(r"<th scope=\"row\"><code>(\w+)</code></th><td>(.*?)</td>", table)
    assert sorted(rows) == [  # in the stored order, which PostgreSQL's jsonb does not keep as given
        ("body", "line one<br>line two"),
        ("cc", "<code>[&quot;x@y.co&quot;]</code>"),
        ("subject", "Hi &lt;there&gt;"),
        ("to", "a@b.co"),
    ]
    card = page.split(f'id="request-{rid}"')[1]
    assert card.index("data-edit-json>Edit as JSON</button>") < card.index('<details class="edit-args">')
    watched = render_request(PendingRequest.objects.get(id=rid), can_answer=False)
    assert "Edit as JSON" not in watched and '<details class="args-json"><summary>As JSON</summary>' in watched


def test_a_continuations_request_shows_the_message_that_started_the_session(operator, admin):
    make_agent(admin)
    asked = ask(operator, message=SEND)
    operator.api("POST", f"/api/runs/{asked['runId']}/responses", {"requestId": request_id(asked), "approved": True})
    drain_queued()
    # The next turn carries answers only: a request it opened goes back to the message of the run before.
    continued = PendingRequest.objects.get(id=request_id(asked)).answered_in
    assert continued is not None and not continued.message
    later = PendingRequest.objects.get(id=request_id(asked))
    later.pk, later.run, later.answer, later.status = None, continued, None, "pending"
    later.save()

    assert "call send_email" in render_request(later, can_answer=True).split('class="asked-by"')[1]


def test_the_list_keeps_each_card_yet_every_reader_gets_their_own_token_and_claim_button(operator, admin, reader):
    """The list's cards are kept between pages (approvals/cards.py); what differs per reader and per response
    is still theirs: the CSRF token of each form (the answer goes through with it), Claim or Release, the forms
    or none."""
    make_agent(admin)
    rid = request_id(ask(operator))
    strict = {}
    for persona in (operator, admin, reader):
        strict[persona.user.username] = client = Client(enforce_csrf_checks=True)
        client.force_login(persona.user)
    card = r'<article class="request-card.*?</article>'
    pages = {
        name: re.search(card, client.get("/inbox/").content.decode(), re.S).group(0) for name, client in strict.items()
    }
    assert "<form" not in pages["rita"] and "csrf" not in pages["rita"].replace("csrfmiddlewaretoken", "")
    tokens = {
        name: set(re.findall(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)) for name, html in pages.items()
    }
    assert len(tokens["otto"]) == len(tokens["ada"]) == 1 and tokens["otto"] != tokens["ada"]
    assert all(re.fullmatch(r"[A-Za-z0-9]{64}", token) for token in tokens["otto"] | tokens["ada"])

    assert (
        strict["ada"]
        .post(f"/inbox/{rid}/claim/", {"action": "claim", "csrfmiddlewaretoken": next(iter(tokens["ada"]))})
        .status_code
        == 302
    )
    theirs, mine = (strict[name].get("/inbox/").content.decode() for name in ("otto", "ada"))
    assert "claimed by <strong>ada</strong>" in theirs and 'value="claim">Claim</button>' in theirs
    assert "claimed by <strong>ada</strong>" in mine and 'value="release">Release</button>' in mine

    [token] = re.findall(r'name="csrfmiddlewaretoken" value="([^"]+)"', re.search(card, theirs, re.S).group(0))[:1]
    approved = strict["otto"].post(f"/inbox/{rid}/answer/", {"decision": "approve", "csrfmiddlewaretoken": token})
    assert approved.status_code == 302
    assert PendingRequest.objects.get(id=rid).answer["approved"] is True
