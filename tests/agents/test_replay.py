"""Replaying a run (SPEC section 10): `POST /api/runs/{runId}/replay` (admins) starts a new sessionless run
with the run's message, bound parameter values and culture, on the run's version or another one, and its
result links the original (`replayOf`)."""

from typing import Any

from django.test import Client

from agents.definitions import DefinitionContent
from agents.models import Agent, Attachment, Event, Run, RunStatus
from tests.conftest import Persona
from tests.helpers import ASSISTANT, ask_to_send, assert_problem, drain_queued, run_ok, snapshot, upload

ECHO = "echo instructions"


def replay(persona: Persona, run_id: str, body: dict[str, Any] | None = None, **headers: str) -> Any:
    return persona.api("POST", f"/api/runs/{run_id}/replay", {} if body is None else body, **headers)


def replay_ok(persona: Persona, run_id: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    response = replay(persona, run_id, body)
    assert response.status_code == 200, response.content
    return response.json()


def in_turkish(operator: Persona) -> dict[str, Any]:
    """A run in a session, in Turkish, with a parameter given: its output is the instructions it ran with."""
    result = run_ok(operator, {"message": ECHO, "sessionId": "s1", "culture": "tr", "parameters": {"team": "veri"}})
    assert result["output"] == "Merhaba veri ekibi.", result
    return result


def new_version(assistant: Agent, admin: Persona) -> None:
    """Version 2 of the assistant, which greets Turkish speakers differently."""
    content = {**ASSISTANT, "instructionsByCulture": {"tr": "Selam {{team}} ekibi, imza {{signature}}."}}
    assistant.append_version(DefinitionContent.model_validate(content), admin.user)


def test_it_replays_a_run_on_its_version_with_the_same_output(operator, admin, assistant):
    original = in_turkish(operator)

    replayed = replay_ok(admin, original["runId"])

    assert replayed["replayOf"] == original["runId"]
    assert replayed["runId"] != original["runId"]
    assert replayed["status"] == "completed"
    assert replayed["output"] == original["output"]
    assert replayed["definitionVersion"] == original["definitionVersion"] == 1
    assert replayed["parameters"] == original["parameters"]
    assert replayed["sessionId"] is None
    assert replayed["omittedDocuments"] == []
    run = Run.objects.get(id=replayed["runId"])
    assert (run.message, run.culture, run.session_id, run.created_by) == (ECHO, "tr", None, admin.user)
    started = Event.objects.get(run=run, type="run.started")
    assert started.data["replayOf"] == original["runId"]
    assert started.data["culture"] == "tr"
    assert started.sequence == 1
    # The replay is a run like any other: its own history, the original and its session untouched.
    assert admin.api("GET", f"/api/runs/{replayed['runId']}").json()["output"] == original["output"]
    assert admin.api("GET", "/api/sessions/s1/state").json()["lastRunId"] == original["runId"]


def test_it_replays_a_run_on_another_version_to_compare(operator, admin, assistant):
    original = in_turkish(operator)
    new_version(assistant, admin)

    on_two = replay_ok(admin, original["runId"], {"definitionVersion": 2})
    by_default = replay_ok(admin, original["runId"])

    assert on_two["definitionVersion"] == 2
    assert on_two["output"] == "Selam veri ekibi, imza Airlock."
    assert on_two["replayOf"] == original["runId"]
    # Without a version, the run's own, not the agent's current one.
    assert by_default["definitionVersion"] == 1
    assert by_default["output"] == original["output"]


def test_it_queues_a_replay_when_asked_to(operator, admin, assistant):
    original = in_turkish(operator)

    response = replay(admin, original["runId"], HTTP_PREFER="respond-async")

    assert response.status_code == 202, response.content
    accepted = response.json()
    assert accepted["replayOf"] == original["runId"]
    assert accepted["status"] == "queued"
    assert response["Location"] == f"/api/runs/{accepted['runId']}"
    drain_queued(1)
    run = Run.objects.get(id=accepted["runId"])
    assert (run.status, run.output) == (RunStatus.COMPLETED, original["output"])
    assert Event.objects.get(run=run, type="run.started").data["replayOf"] == original["runId"]


def test_it_replays_the_documents_and_attachments_the_run_was_given(operator, admin, assistant, media):
    attachment = upload(operator, "plan.md", b"# Plan").json()
    original = run_ok(
        operator,
        {
            "message": "echo documents",
            "documents": [{"name": "a.txt", "content": "a"}],
            "attachmentIds": [attachment["id"]],
        },
    )
    assert original["output"] == "a.txt\nplan.md"
    Attachment.objects.all().delete()  # the replay reads what the run kept, not the upload

    replayed = replay_ok(admin, original["runId"])

    assert replayed["omittedDocuments"] == []
    assert replayed["output"] == "a.txt\nplan.md"
    assert Run.objects.get(id=replayed["runId"]).documents == [["a.txt", "a"], ["plan.md", "# Plan"]]
    attached = Event.objects.filter(run_id=replayed["runId"], type="document.attached").order_by("sequence")
    assert [e.data for e in attached] == [{"name": "a.txt", "size": 1}, {"name": "plan.md", "size": 6}]


def test_it_replays_a_run_from_before_documents_were_kept_without_them(operator, admin, assistant):
    original = run_ok(operator, {"message": "echo documents", "documents": [{"name": "plan.md", "content": "# Plan"}]})
    Run.objects.filter(id=original["runId"]).update(documents=[])  # as such a run was stored

    replayed = replay_ok(admin, original["runId"])

    assert replayed["omittedDocuments"] == [{"name": "plan.md", "size": len("# Plan")}]
    assert replayed["output"] == "No documents attached."
    assert not Event.objects.filter(run_id=replayed["runId"], type="document.attached").exists()


def test_it_is_for_admins_only(operator, reader, assistant):
    original = in_turkish(operator)
    before = snapshot()

    assert_problem(replay(operator, original["runId"]), 403, "forbidden")
    assert_problem(replay(reader, original["runId"]), 403, "forbidden")

    assert snapshot() == before


def test_it_hides_another_tenants_run(operator, outsider, assistant):
    original = in_turkish(operator)
    before = snapshot()

    assert_problem(replay(outsider, original["runId"]), 404, "run_not_found")

    assert snapshot() == before


def test_it_refuses_a_run_without_a_message_of_its_own(operator, admin, assistant):
    asked = ask_to_send(operator)
    approval = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True}
    continuation = run_ok(operator, {"sessionId": "s1", "approvals": [approval]})
    assert continuation["status"] == "completed"
    before = snapshot()

    problem = assert_problem(replay(admin, continuation["runId"]), 409, "not_replayable")

    assert "message" in problem["detail"]
    assert snapshot() == before


def test_it_refuses_an_unknown_version(operator, admin, assistant):
    original = in_turkish(operator)
    before = snapshot()

    assert_problem(replay(admin, original["runId"], {"definitionVersion": 7}), 404, "version_not_found")
    assert_problem(replay(admin, original["runId"], {"definitionVersion": 0}), 400, "invalid_request")

    assert snapshot() == before


def test_it_refuses_a_run_of_a_deleted_agent(operator, admin, assistant):
    original = in_turkish(operator)
    assert admin.api("DELETE", "/api/agents/assistant").status_code == 204
    before = snapshot()

    assert_problem(replay(admin, original["runId"]), 404, "agent_not_found")

    assert snapshot() == before


# ---- the run page's Replay button ----------------------------------------------------------------------


def test_the_run_page_replays_on_the_version_picked_and_shows_the_two_outputs(operator, admin, assistant):
    original = in_turkish(operator)
    new_version(assistant, admin)
    page = admin.client.get(f"/runs/{original['runId']}/").content.decode()
    assert 'name="version"' in page and ">version 2</option>" in page

    response = admin.client.post(f"/runs/{original['runId']}/replay/", {"version": "2"})

    replayed = Run.objects.exclude(pk=original["runId"]).get()
    assert response.status_code == 302 and response["Location"] == f"/runs/{replayed.id}/"
    assert (replayed.status, replayed.version.number, replayed.session) == (RunStatus.QUEUED, 2, None)
    drain_queued()
    page = admin.client.get(f"/runs/{replayed.id}/").content.decode()
    assert "Replay of" in page and "Version 1 (the original)" in page and "Version 2 (this replay)" in page
    assert "Merhaba veri ekibi." in page and "Selam veri ekibi, imza Airlock." in page


def test_only_an_admin_replays_from_the_run_page_and_a_bad_version_changes_nothing(operator, admin, assistant):
    original = in_turkish(operator)
    assert (
        'action="/runs/' + original["runId"] + '/replay/"'
        not in operator.client.get(f"/runs/{original['runId']}/").content.decode()
    )
    before = snapshot()

    assert operator.client.post(f"/runs/{original['runId']}/replay/", {"version": "1"}).status_code == 403
    for version in ("x", "7", "-1"):
        response = admin.client.post(f"/runs/{original['runId']}/replay/", {"version": version}, follow=True)
        assert response.status_code == 200
    assert snapshot() == before


def test_another_tenants_run_is_not_replayed(outsider, operator, assistant):
    original = in_turkish(operator)
    assert outsider.client.post(f"/runs/{original['runId']}/replay/", {"version": "1"}).status_code == 404


def test_a_replay_needs_no_body(operator, admin, assistant):
    original = in_turkish(operator)

    # No body at all (as `curl -X POST` sends), not even the `{}` the contract's example would be.
    response = Client().post(
        f"/api/runs/{original['runId']}/replay", data=b"", content_type="", HTTP_AUTHORIZATION=f"Bearer {admin.token}"
    )

    assert response.status_code == 200, response.content
    assert response.json()["replayOf"] == original["runId"]
    assert response.json()["output"] == original["output"]
