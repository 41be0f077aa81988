"""Rule revocations in the audit: who revoked which rule and when, on the page, in the CSV and JSON exports and
under the "rule revoked" filter, whether revoked on the rules page or by `DELETE /api/rules/{id}`; never another
tenant's."""

from typing import Any

import pytest

from agents.models import Agent
from approvals.models import Rule
from tests.approvals.test_audit import (
    ask,
    audit_html,
    cell,
    cell_html,
    deny,
    exported_csv,
    exported_json,
    local,
    make_mailer,
    rows,
)
from tests.conftest import Persona


@pytest.fixture
def mailer(admin) -> Agent:
    return make_mailer(admin)


def remembered(persona: Persona, **body: Any) -> Rule:
    response = persona.api("POST", "/api/rules", {"agent": "mailer", "toolName": "send_email", **body})
    assert response.status_code == 201, response.content
    return Rule.objects.get(pk=response.json()["ruleId"])


def revoked_on_the_page(persona: Persona, rule: Rule) -> Rule:
    response = persona.client.post(f"/rules/{rule.id}/revoke/")
    assert response.status_code == 302, response.content
    rule.refresh_from_db()
    return rule


def revoked_by_the_api(persona: Persona, rule: Rule) -> Rule:
    response = persona.api("DELETE", f"/api/rules/{rule.id}")
    assert response.status_code == 204, response.content
    rule.refresh_from_db()
    return rule


def test_it_shows_a_rule_revoked_on_the_page_with_who_when_and_which(admin, reader, mailer):
    rule = revoked_on_the_page(admin, remembered(admin))
    [row] = rows(audit_html(reader))
    assert 'class="entry entry-revocation"' in row
    assert cell(row, "when") == local(rule.revoked_at)
    assert cell(row, "actor") == "ada"
    assert cell(row, "outcome") == f"revoked a rule rule {str(rule.id)[:8]}…"
    assert f'href="/rules/#rule-{rule.id}"' in cell_html(row, "outcome")
    assert cell(row, "why") == f"Revoked rule {rule.id} (version 1): the calls it approved ask again."
    assert "send_email" in cell(row, "request")
    assert cell(row, "run") == "—"
    assert cell(row, "agent") == "mailer"


def test_it_exports_a_rule_revoked_by_the_api_with_who_when_and_which(admin, reader, mailer):
    rule = revoked_by_the_api(admin, remembered(admin, arguments={"to": "a@b.co"}))
    assert rule.revoked_by == admin.user
    [line] = exported_csv(reader)
    assert line["when"] == rule.revoked_at.isoformat()
    assert line["who"] == "ada"
    assert line["decision"] == "revoked"
    assert line["ruleId"] == str(rule.id)
    assert line["toolName"] == "send_email"
    assert line["agent"] == "mailer"
    assert line["runId"] == line["requestId"] == ""
    [entry] = exported_json(reader)
    assert entry["actor"] == "user"
    assert entry["ruleId"] == str(rule.id)
    assert entry["arguments"] == {"to": "a@b.co"}
    assert entry["runId"] is None


def test_it_keeps_the_first_revocation_and_who_made_it(admin, mailer):
    rule = revoked_on_the_page(admin, remembered(admin))
    first = rule.revoked_at
    again = revoked_by_the_api(admin, rule)
    assert again.revoked_at == first
    assert [line["decision"] for line in exported_csv(admin)] == ["revoked"]


def test_it_filters_revocations_by_their_kind_who_agent_and_tool(admin, operator, mailer):
    deny(operator, ask(operator), "not now")
    rule = revoked_by_the_api(admin, remembered(admin))
    revoked = [entry["ruleId"] for entry in exported_json(admin, "?format=json&decision=revoked")]
    assert revoked == [str(rule.id)]
    assert [entry["decision"] for entry in exported_json(admin, "?format=json")] == ["revoked", "denied"]
    assert [entry["decision"] for entry in exported_json(admin, "?format=json&who=ada")] == ["revoked"]
    assert [entry["decision"] for entry in exported_json(admin, "?format=json&who=otto")] == ["denied"]
    assert len(rows(audit_html(admin, "?agent=mailer&tool=send_email&decision=revoked"))) == 1
    for query in ("?tool=other", "?policy=pii", "?decision=denied", "?who=system"):
        assert "entry-revocation" not in audit_html(admin, query), query


def test_it_never_shows_another_tenants_revocations(admin, outsider, mailer):
    make_mailer(outsider)
    revoked_by_the_api(outsider, remembered(outsider))
    revoked_on_the_page(admin, remembered(admin))
    assert [line["who"] for line in exported_csv(admin)] == ["ada"]
    assert [line["who"] for line in exported_csv(outsider)] == ["oscar"]
    assert "oscar" not in audit_html(admin)
