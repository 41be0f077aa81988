"""What an external agent's request may carry (SPEC section 12, issue 48): each JSON field and text over its limit
is refused, 413 for its bytes and 400 for its shape, naming the field and the limit, and nothing is stored; the
inbox shows large arguments cut, with a link to the request's JSON, so a page of them stays small."""

import re
import uuid
from typing import Any

import pytest

from agents.definitions import DefinitionContent
from agents.models import Agent
from approvals.models import PendingRequest
from tests.conftest import Persona
from tests.helpers import assert_problem, snapshot

pytestmark = pytest.mark.django_db

UPLOAD = {"name": "upload", "description": "Upload a blob", "parameters": {"type": "object"}}
# Just under the arguments' 256 KB: allowed, and a card shows it cut.
LARGE = {"blob": "x" * 250_000, "note": "the end"}


@pytest.fixture
def uploader(admin: Persona) -> Agent:
    content = DefinitionContent.model_validate({"name": "uploader", "runtime": "external", "tools": [UPLOAD]})
    return Agent.create(admin.tenant, content, admin.user)


def open_request(persona: Persona, **fields: Any) -> Any:
    body = {"kind": "approval", "toolName": "upload", "arguments": {"blob": "small"}, **fields}
    return persona.api("post", "/api/agents/uploader/requests", body)


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def schema_with(prop: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"choice": prop}}


OVER_LIMIT = [
    # (the request's fields, status, code, the field named, the limit named)
    ({"arguments": {"blob": "x" * 300_000}}, 413, "content_too_large", "arguments", "262144 bytes"),
    ({"arguments": {f"k{i}": 0 for i in range(10_001)}}, 400, "content_too_complex", "arguments", "10000 keys"),
    ({"arguments": {"deep": nested(40)}}, 400, "content_too_complex", "arguments", "32 levels"),
    (
        {"kind": "input", "message": "Pick", "requestedSchema": schema_with({"description": "x" * 70_000})},
        413,
        "content_too_large",
        "requestedSchema",
        "65536 bytes",
    ),
    (
        {"kind": "input", "message": "Pick", "requestedSchema": schema_with({"enum": list(range(501))})},
        400,
        "content_too_complex",
        "requestedSchema.properties.choice.enum",
        "limit of 500",
    ),
    (
        {
            "kind": "input",
            "message": "Pick",
            "requestedSchema": {"type": "object", "properties": {f"f{i}": {} for i in range(2_001)}},
        },
        400,
        "content_too_complex",
        "requestedSchema",
        "2000 keys",
    ),
    (
        {"kind": "input", "message": "Pick", "requestedSchema": schema_with(nested(40))},
        400,
        "content_too_complex",
        "requestedSchema",
        "32 levels",
    ),
    ({"kind": "question", "question": "q" * 10_001}, 400, "invalid_request", "question", "10000 characters"),
    ({"kind": "question", "question": "Which?", "choices": ["c"] * 51}, 400, "invalid_request", "choices", "50 items"),
    (
        {"kind": "question", "question": "Which?", "choices": ["ok", "c" * 501]},
        400,
        "invalid_request",
        "choices.1",
        "500 characters",
    ),
    (
        {"kind": "plan", "planContent": "\n".join(f"step {i}" for i in range(101))},
        400,
        "content_too_complex",
        "planContent",
        "limit of 100",
    ),
    (
        {"kind": "plan", "planContent": "step 1\n" + "s" * 2_001},
        400,
        "content_too_complex",
        "planContent",
        "limit of 2000",
    ),
    ({"kind": "plan", "planContent": "p" * 100_001}, 400, "invalid_request", "planContent", "100000 characters"),
    ({"description": "d" * 2_001}, 400, "invalid_request", "description", "2000 characters"),
]


@pytest.mark.parametrize(("fields", "status", "code", "field", "limit"), OVER_LIMIT)
def test_it_refuses_each_field_over_its_limit_naming_it_and_stores_nothing(
    uploader, operator, fields, status, code, field, limit
):
    before = snapshot()
    refused = assert_problem(open_request(operator, requestId=str(uuid.uuid4()), **fields), status, code)
    [error] = refused["errors"]
    assert error["field"] == field
    assert limit in error["message"]
    assert snapshot() == before


def test_it_refuses_a_reported_result_over_the_limit(uploader, operator, admin):
    rid = open_request(operator).json()["requestId"]
    admin.api("post", f"/api/requests/{rid}/responses", {"approved": True})
    before = snapshot()
    big = operator.api("post", f"/api/requests/{rid}/outcome", {"success": True, "result": "r" * 300_000})
    refused = assert_problem(big, 413, "content_too_large")
    assert refused["detail"].startswith("result is 300002 bytes") and "262144 bytes" in refused["detail"]
    assert snapshot() == before
    assert operator.api("post", f"/api/requests/{rid}/outcome", {"success": True, "result": "ok"}).status_code == 200


def test_it_refuses_a_body_over_the_upload_limit(uploader, operator, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
    before = snapshot()
    assert_problem(open_request(operator, arguments={"blob": "x" * 100_000}), 413, "body_too_large")
    assert snapshot() == before


def test_it_opens_a_request_just_under_every_limit(uploader, operator):
    opened = open_request(operator, arguments=LARGE)
    assert opened.status_code == 201, opened.content
    form = {
        "kind": "input",
        "message": "Pick",
        "requestedSchema": schema_with({"enum": [f"option {i}" for i in range(500)]}),
    }
    assert open_request(operator, **form).status_code == 201
    plan = "\n".join(f"step {i} " + "s" * 1_990 for i in range(100))
    assert open_request(operator, kind="plan", planContent=plan[:100_000]).status_code == 201


@pytest.mark.parametrize("persona", ["reader", "operator"])
def test_it_shows_large_arguments_cut_in_the_inbox_with_a_link_to_the_whole(uploader, operator, request, persona):
    ids = [open_request(operator, arguments=LARGE).json()["requestId"] for _ in range(6)]
    small = open_request(operator).json()["requestId"]
    viewer: Persona = request.getfixturevalue(persona)
    page = viewer.client.get("/inbox/")
    assert page.status_code == 200
    html = page.content.decode()
    # Six cards of 250 KB arguments each: the whole page stays smaller than one of them.
    assert len(page.content) < 200_000, len(page.content)
    assert "the end" in html  # the rows after the cut one are shown
    for rid in ids:
        card = html[html.index(f'id="request-{rid}"') :]
        card = card[: card.index("</article>")]
        assert "The arguments are cut here" in card
        assert f'href="/api/requests/{rid}"' in card
        assert 'name="arguments"' not in card  # no editor with a part of them
    small_card = html[html.index(f'id="request-{small}"') :]
    small_card = small_card[: small_card.index("</article>")]
    assert "The arguments are cut here" not in small_card
    if persona == "operator":
        assert 'name="arguments"' in small_card
    # The link has them whole, for whoever may see the inbox.
    whole = viewer.client.get(f"/api/requests/{ids[0]}")
    assert whole.status_code == 200
    assert whole.json()["arguments"] == LARGE
    assert PendingRequest.objects.filter(id__in=ids).count() == 6
    assert len(re.findall("The arguments are cut here", html)) == 6
