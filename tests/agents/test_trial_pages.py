"""The trial page's turn fragment (`/trial/turns/<id>/`, swapped in after each streamed turn): an
operator gets the turn with its answer forms; a reader is refused, another tenant's member finds nothing."""

import uuid

import pytest

from tests.helpers import EMAIL, ask_to_send, make_agent


@pytest.fixture
def asked(operator, assistant) -> dict:
    """A turn of acme's assistant waiting for approval of an email to ada@example.com."""
    return ask_to_send(operator, "trial-1")


def turn_page(client, run_id) -> tuple[int, str]:
    response = client.get(f"/trial/turns/{run_id}/")
    return response.status_code, response.content.decode()


def test_it_serves_an_operator_the_turn_with_its_answer_form(operator, asked):
    status, html = turn_page(operator.client, asked["runId"])

    assert status == 200
    assert f'id="turn-{asked["runId"]}"' in html
    assert f'data-request-id="{asked["pendingRequests"][0]["requestId"]}"' in html
    assert "<legend>Approve <code>send_email</code>?</legend>" in html
    assert EMAIL["to"] in html
    assert "<html" not in html  # the fragment only


def test_it_finds_no_turn_of_another_tenant(outsider, asked):
    make_agent(outsider)  # the outsider has an agent of the same name, and turns of its own
    theirs = ask_to_send(outsider, "trial-1")
    assert turn_page(outsider.client, theirs["runId"])[0] == 200

    status, html = turn_page(outsider.client, asked["runId"])

    assert status == 404
    # The console's 404 page repeats the id the caller sent ("No run … in this tenant."), nothing of the turn.
    assert f'id="turn-{asked["runId"]}"' not in html
    assert EMAIL["to"] not in html


def test_it_refuses_the_turn_to_a_reader(reader, asked):
    status, html = turn_page(reader.client, asked["runId"])

    assert status == 403
    assert asked["runId"] not in html
    assert EMAIL["to"] not in html


def test_it_finds_no_turn_that_does_not_exist(operator, asked):
    assert turn_page(operator.client, uuid.uuid4())[0] == 404


def test_it_sends_a_visitor_to_log_in(client, asked):
    response = client.get(f"/trial/turns/{asked['runId']}/")

    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
