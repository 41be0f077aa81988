"""The policy editor of the agent form (agents/forms/hooks.py): the declaration as fields and back, the
loader's and compiler's refusals at their field and line in words, and the warning naming the agent's tools
its policies would deny."""

from typing import Any

import agent_hooks.context
import pytest
from django.http import QueryDict

from agents.forms.hooks import PolicyEditor
from agents.models import Agent, Event, Run
from agents.payloads import EventType
from agents.policies import compile_problems, declaration_problems
from agents.starter_policy import starter_hooks
from agents.views.policy_pages import blocked_tools
from tests.agents.test_pages import browser_post, read
from tests.helpers import make_agent, run_ok, snapshot
from tests.policies.test_recipes import recipe_hooks

TOOLS = [{"name": "send_email", "approval": "never"}, {"name": "get_time", "approval": "never"}]
BROKEN_LINE = 5  # `default verdict := {"decision": "allow"}` in the starter's Rego


def posted(editor: PolicyEditor) -> QueryDict:
    """The editor's fields as a browser posts them."""
    data = QueryDict(mutable=True)
    data["hooks_editor"] = "fields"
    data["hooks_settings"] = editor.settings
    for row in editor.bindings:
        for field, value in row.values.items():
            if field == "at":
                data.setlist(f"binding-{row.key}-at", value.split(",") if value else [])
            else:
                data[f"binding-{row.key}-{field}"] = value.replace("\n", "\r\n")
    for row in editor.modules:
        for field, value in row.values.items():
            data[f"module-{row.key}-{field}"] = value.replace("\n", "\r\n")
    return data


def full_declaration() -> dict[str, Any]:
    """The starter with every field the editor has: two modules, data, points, a webhook and another key."""
    hooks = starter_hooks("evaluate_only")
    acs = hooks["bindings"][0]
    acs["at"] = ["input", "pre_tool_call", "output"]
    acs["config"]["modules"]["mail"]["extra.rego"] = "package airlock.extra\n"
    acs["config"]["data"] = {"mail": [{"mount": ["allowed"], "document": {"domains": ["example.com"]}}]}
    acs["timeout_ms"] = 500  # a key of its own the editor has no field for: under Other settings
    hooks["bindings"].append({"id": "hook", "kind": "airlock.webhook", "config": {"connection": "w", "timeoutMs": 900}})
    return hooks


def broken_starter() -> dict[str, Any]:
    hooks = starter_hooks()
    module = hooks["bindings"][0]["config"]["modules"]["mail"]
    lines = module["mail.rego"].split("\n")
    assert lines[BROKEN_LINE - 1] == 'default verdict := {"decision": "allow"}'
    lines[BROKEN_LINE - 1] = "default verdict := {"
    module["mail.rego"] = "\n".join(lines)
    return hooks


# ---- fields -> declaration -> fields ---------------------------------------------------------------------


def test_it_gives_back_the_declaration_the_fields_were_made_from():
    hooks = full_declaration()
    editor = PolicyEditor.of(hooks)

    assert not editor.raw
    assert [row.values["kind"] for row in editor.bindings] == ["airlock.acs", "airlock.webhook"]
    assert [row.values["file"] for row in editor.modules] == ["mail.rego", "extra.rego"]
    again = PolicyEditor.from_post(posted(editor))
    assert again.document() == hooks
    assert not again.has_errors
    # And back into fields again: the same values.
    assert [row.values for row in PolicyEditor.of(again.document()).bindings] == [row.values for row in editor.bindings]


def test_no_binding_is_no_policies():
    editor = PolicyEditor.from_post(posted(PolicyEditor.of(None)))

    assert editor.document() is None
    assert not editor.raw


def test_a_declaration_the_fields_cannot_hold_is_edited_as_raw_json():
    odd = starter_hooks()
    odd["bindings"][0]["kind"] = "vendor.policy"

    assert PolicyEditor.of(odd).raw
    assert PolicyEditor.of({"declaration": "agent-hooks-declaration/1.0", "bindings": []}).raw


def test_a_post_without_the_fields_reads_the_raw_json():
    assert PolicyEditor.from_post(QueryDict("hooks=%7B%7D")).raw
    assert PolicyEditor.from_post(QueryDict("hooks_editor=fields&hooks_raw=on")).raw
    assert not PolicyEditor.from_post(QueryDict("hooks_editor=fields")).raw


def test_what_cannot_be_converted_is_an_error_at_its_field():
    editor = PolicyEditor.of(full_declaration())
    acs, webhook = editor.bindings
    acs.values["data"] = '{"mail": ['
    webhook.values["timeout_ms"] = "soon"
    editor.modules[1].values["file"] = ""

    editor.document()

    assert editor.has_errors
    assert acs.errors["data"] == "Not valid JSON, line 1, column 11: Expecting value."
    assert acs.errors["data_line"] == "1"
    assert "whole number of milliseconds" in webhook.errors["timeout_ms"]
    assert editor.modules[1].errors["file"] == "Give the module a file name, like policy.rego."


# ---- refusals in words, at their line ----------------------------------------------------------------------


def test_a_rego_parse_error_is_shown_under_its_module_at_its_line(admin):
    hooks = broken_starter()
    problems = compile_problems(hooks, str(admin.tenant.pk))
    assert problems and problems[0].startswith("declaration_error:binding_rejected at /bindings/0/config")
    editor = PolicyEditor.of(hooks)

    editor.place(problems[0])

    module = editor.modules[0]
    assert module.errors["source"].startswith("Rego module mail.rego, line ")
    line = int(module.errors["source_line"])
    assert line >= BROKEN_LINE
    assert "declaration_error" not in module.errors["source"] and "runtime_error" not in module.errors["source"]
    assert not editor.problems


def test_a_manifest_that_is_no_yaml_is_shown_at_its_line():
    hooks = starter_hooks()
    hooks["bindings"][0]["config"]["manifest"] = "policies:\n  mail: [\n"
    editor = PolicyEditor.of(hooks)

    for problem in declaration_problems(hooks):
        editor.place(problem)

    acs = editor.bindings[0]
    assert acs.errors["manifest"].startswith("The manifest, line 3: this is not valid YAML")
    assert acs.errors["manifest_line"] == "3"


def test_a_manifest_key_that_reads_the_host_is_shown_at_its_line():
    hooks = starter_hooks()
    manifest = hooks["bindings"][0]["config"]["manifest"]
    hooks["bindings"][0]["config"]["manifest"] = manifest.replace("    type: rego\n", "    type: rego\n    bundle: x\n")
    editor = PolicyEditor.of(hooks)

    for problem in declaration_problems(hooks):
        editor.place(problem)

    acs = editor.bindings[0]
    assert acs.errors["manifest"].startswith("The manifest's key policies.mail.bundle is not allowed: names a file")
    lines = hooks["bindings"][0]["config"]["manifest"].split("\n")
    assert lines[int(acs.errors["manifest_line"]) - 1] == "    bundle: x"


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (lambda b: b.update(at=["bogus"]), "at", "A value is not allowed here. “bogus” is not one of"),
        (lambda b: b.update(kind="vendor.thing"), "kind", "This kind of binding is not one Airlock runs"),
        (lambda b: b["config"].update(data={"mail": "x"}), "data", "Config.data must map policy ids"),
        (lambda b: b.update(id="Bad Id"), "id", "Use lowercase letters, digits, - and _, starting with a letter"),
    ],
)
def test_loader_codes_read_as_sentences(change, field, words):
    hooks = starter_hooks()
    change(hooks["bindings"][0])
    editor = PolicyEditor.of(starter_hooks())  # the fields as typed: what the change posts

    for problem in declaration_problems(hooks):
        editor.place(problem)

    shown = editor.bindings[0].errors.get(field, "")
    assert words.replace("“bogus”", '"bogus"') in shown
    assert "declaration_error:" not in shown


def test_a_tool_the_manifest_does_not_name_is_said_in_words_at_the_manifest():
    problem = (
        "the manifest of binding 'mail-guard' governs tool calls but does not list book_meeting under `tools:`: "
        "every call of it would be denied"
    )
    editor = PolicyEditor.of(starter_hooks())

    editor.place(f"at /: {problem}")
    editor.place(problem)

    acs = editor.bindings[0]
    assert acs.errors["manifest"].startswith("The manifest does not name book_meeting under tools:")
    manifest = starter_hooks()["bindings"][0]["config"]["manifest"].split("\n")
    assert manifest[int(acs.errors["manifest_line"]) - 1] == "tools:"


# ---- the page ----------------------------------------------------------------------------------------------


def test_the_editor_shows_the_manifest_and_each_module_in_its_own_field(admin):
    hooks = starter_hooks()
    hooks["bindings"][0]["config"]["modules"]["mail"]["extra.rego"] = "package airlock.extra\n"
    make_agent(admin, tools=TOOLS, hooks=hooks)

    fields = dict(read(admin.client.get("/agents/assistant/edit/")).fields)

    manifests = [value for name, value in fields.items() if name.endswith("-manifest")]
    sources = [value for name, value in fields.items() if name.startswith("module-") and name.endswith("-source")]
    assert manifests == [starter_hooks()["bindings"][0]["config"]["manifest"]]
    assert sources == [hooks["bindings"][0]["config"]["modules"]["mail"]["mail.rego"], "package airlock.extra\n"]


def test_a_broken_module_saves_nothing_and_says_where(admin):
    make_agent(admin, tools=TOOLS, hooks=starter_hooks())
    data = browser_post(admin.client.get("/agents/assistant/edit/"))
    source = next(name for name in data if name.startswith("module-") and name.endswith("-source"))
    data[source] = data[source].replace('default verdict := {"decision": "allow"}', "default verdict := {")
    before = snapshot()

    response = admin.client.post("/agents/assistant/edit/", data)

    assert response.status_code == 200
    assert snapshot() == before
    html = response.content.decode()
    error = read(response).texts[f"{source}-error"]
    assert error.startswith("Rego module mail.rego, line ")
    assert f'data-error-line="{error.split("line ")[1].split(":")[0]}"' in html
    assert "declaration_error" not in read(response).texts["id_hooks-field"]


def test_it_warns_of_the_mcp_tools_the_agents_runs_called_that_the_manifest_does_not_name(admin):
    agent = make_agent(admin, tools=TOOLS, hooks=starter_hooks())
    run = Run.objects.get(id=run_ok(admin, {"message": "hello"})["runId"])
    Event.objects.create(
        run=run,
        sequence=999,
        type=EventType.TOOL_EXECUTION_START,
        data={"toolCallId": "c", "toolName": "book_meeting", "arguments": {}, "mcpServerName": "demo"},
    )

    page = admin.client.get("/agents/assistant/edit/")

    warning = " ".join(read(page).texts["policy-blocked-tools"].split())
    assert "would deny calls of book_meeting:" in warning
    assert "book_meeting, every call of it: its manifest does not name it under tools:" in warning
    assert "send_email" not in warning
    # The starter, asked for from this agent's editor, names it.
    starter = admin.client.get(f"/agents/policies/starter/?mode=enforce&agent={agent.name}", HTTP_HX_REQUEST="true")
    assert "policy-blocked-tools" not in starter.content.decode()
    assert "id: book_meeting" in dict(read(starter).fields)["hooks"]


def test_the_starter_of_another_tenants_agent_is_not_found(admin, outsider):
    make_agent(admin)
    assert outsider.client.get("/agents/policies/starter/?agent=assistant").status_code == 404


def test_blocked_tools_evaluates_each_tool_in_the_sandbox(admin):
    tenant = str(admin.tenant.pk)

    [unnamed] = blocked_tools(tenant, "a", starter_hooks(), ["send_email", "book_meeting"])
    assert unnamed.tool == "book_meeting" and unnamed.every, unnamed
    assert unnamed.why.startswith("its manifest does not name it under tools:"), unnamed
    assert blocked_tools(tenant, "a", starter_hooks("enforce", ["book_meeting"]), ["book_meeting"]) == []
    assert blocked_tools(tenant, "a", {"declaration": "nope"}, ["book_meeting"]) == []
    assert blocked_tools(tenant, "a", broken_starter(), ["book_meeting"]) == []  # what does not compile is not run


def test_a_policy_that_reads_the_time_is_said_to_deny_the_call_tried_now_not_every_call(admin, monkeypatch):
    """docs/policies.md's office hours on a Sunday: the one call the warning tries (now, no arguments) is denied,
    which says nothing of a Tuesday's; the policy's message, a sentence, is not given a second period."""
    monkeypatch.setattr(agent_hooks.context, "_now", lambda: "2026-12-06T12:00:00.000000Z")  # a Sunday
    make_agent(admin, tools=TOOLS, clientTools=[], hooks=recipe_hooks("Block a tool after hours"))

    page = admin.client.get("/agents/assistant/edit/")

    warning = " ".join(read(page).texts["policy-blocked-tools"].split())
    assert "every call" not in warning, warning
    assert "would deny calls of send_email: send_email, called now with no arguments (another time or other " in warning
    assert warning.endswith("(Monday to Friday, 8:00 to 18:00, Berlin time)."), warning
    monkeypatch.setattr(agent_hooks.context, "_now", lambda: "2026-12-08T12:00:00.000000Z")  # a Tuesday, at noon
    assert "policy-blocked-tools" not in admin.client.get("/agents/assistant/edit/").content.decode()


def test_the_editor_rows_are_for_admins(admin, operator):
    binding = admin.client.get("/agents/policies/row/binding/", HTTP_HX_REQUEST="true")
    assert binding.status_code == 200
    names = [name for name, _ in read(binding).fields]
    assert any(name.endswith("-manifest") for name in names)
    assert any(name.startswith("module-") and name.endswith("-source") for name in names)
    assert admin.client.get("/agents/policies/row/module/?binding=0123abcd").status_code == 200
    assert admin.client.get("/agents/policies/row/module/?binding=nope").status_code == 404
    assert admin.client.get("/agents/policies/row/other/").status_code == 404
    assert operator.client.get("/agents/policies/row/binding/").status_code == 403


def test_the_saved_policies_can_be_tried_beside_the_editor(admin):
    make_agent(admin, tools=TOOLS, hooks=starter_hooks())

    html = admin.client.get("/agents/assistant/edit/").content.decode()

    assert 'href="#try"' in html
    assert 'id="try"' in html
    assert Agent.objects.get(name="assistant").current_version == 1
