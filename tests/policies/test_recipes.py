"""docs/policies.md holds (issue 50, item 4). Its five recipes, read out of the page (the manifest and the Rego
module of each, put in the declaration the page shows), save as an agent's policy through the API, with every
check saving makes, and give in the Try panel — the emitter a run builds, each policy evaluated in the policy
sandbox — the verdict the page says, at calls they let through and at calls they stop. The contexts and the
policy `input` the page shows are the ones Airlock builds."""

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.forms import try_builder, try_context
from agents.policies import POINTS
from agents.views.policy_pages import TryOutcome
from console.management.commands.seed_demo import demo_agent
from tests.conftest import Persona

DOC = Path(__file__).resolve().parents[2] / "docs" / "policies.md"
HEADING = re.compile(r"^(#{2,3}) (.+)$", re.M)
BLOCK = re.compile(r"^```(?P<lang>[a-z]*)\n(?P<code>.*?)^```$", re.S | re.M)

# The agents the recipes were written for: the tools their manifests list.
MAILER = {"tools": [{"name": "send_email", "approval": "never"}, {"name": "get_time", "approval": "never"}]}
LOOKUP = {"tools": [{"name": "get_time", "approval": "never"}]}
REFUND = {
    "name": "issue_refund",
    "description": "Refund an order.",
    "parameters": {
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}, "reason": {"type": "string"}},
        "required": ["order_id", "amount"],
    },
}
REFUNDS = {"runtime": "external", "tools": [REFUND]}


def sections() -> dict[str, list[tuple[str, str]]]:
    """The page's code blocks (language, code) by the heading of the section (## or ###) they are in."""
    text = DOC.read_text()
    headings = list(HEADING.finditer(text))
    found = {}
    for heading, following in zip(headings, [*headings[1:], None], strict=True):
        body = text[heading.end() : following.start() if following else len(text)]
        found[heading.group(2).strip("`")] = [(block["lang"], block["code"]) for block in BLOCK.finditer(body)]
    return found


def block(title: str, lang: str, index: int = 0) -> str:
    codes = [code for found, code in sections()[title] if found == lang]
    assert len(codes) > index, f"docs/policies.md has no ```{lang} block under {title!r}"
    return codes[index]


def recipe_hooks(title: str) -> dict[str, Any]:
    """The recipe's policy as the page says to bind it: the declaration of "Where a policy lives", its binding the
    recipe's manifest (id: the manifest's name) and its module `<policy id>.rego`."""
    manifest, module = block(title, "yaml"), block(title, "rego")
    parsed = yaml.safe_load(manifest)
    [policy] = parsed["policies"]
    hooks = json.loads(block("Where a policy lives", "json"))
    [binding] = hooks["bindings"]
    binding["id"] = parsed["metadata"]["name"]
    binding["config"] = {"manifest": manifest, "modules": {policy: {f"{policy}.rego": module}}}
    return hooks


@dataclass
class Recipe:
    persona: Persona
    name: str

    def pre_tool_call(self, tool: str, args: dict[str, Any], **changes: Any) -> dict[str, Any]:
        context = dict(self._builder().pre_tool_call(call_id="call_1", name=tool, args=args))
        return context | changes

    def post_tool_call(self, tool: str, value: Any) -> dict[str, Any]:
        return dict(self._builder().post_tool_call(call_id="call_1", name=tool, args={"id": "42"}, value=value))

    def _builder(self) -> Any:
        return try_builder(self.name, 1, str(self.persona.tenant.pk))

    def evaluate(self, context: dict[str, Any]) -> TryOutcome:
        """The Try panel's evaluation of `context` with the agent's policies, as an admin posts it."""
        data = {"point": context["interception_point"], "context": json.dumps(context)}
        response = self.persona.client.post(f"/agents/{self.name}/try/", data, HTTP_HX_REQUEST="true")
        assert response.status_code == 200
        outcome: TryOutcome = response.context["outcome"]
        assert outcome is not None and not outcome.problem, outcome
        return outcome


def saved(persona: Persona, title: str, name: str, definition: dict[str, Any]) -> Recipe:
    """An agent with the recipe's policy, created through the API (which refuses a policy that fails its checks)."""
    body = {"name": name, **definition, "hooks": recipe_hooks(title)}
    response = persona.api("POST", "/api/agents", body)
    assert response.status_code == 201, response.content
    return Recipe(persona, name)


def mail(to: str | list[str]) -> dict[str, Any]:
    return {"to": to, "subject": "Quarterly figures", "body": "Here are the figures."}


def assert_allowed(outcome: TryOutcome) -> None:
    assert (outcome.decision, outcome.reason) == ("allow", None), outcome
    assert outcome.after is not None


def test_it_denies_mail_outside_a_domain(admin):
    recipe = saved(admin, "Deny mail outside a domain", "mailer", MAILER)

    for allowed in (
        recipe.pre_tool_call("send_email", mail("ada@example.com")),
        recipe.pre_tool_call("send_email", mail(["ada@example.com", "Bob@Example.com"])),
        recipe.pre_tool_call("get_time", {}),
    ):
        assert_allowed(recipe.evaluate(allowed))
    one = recipe.evaluate(recipe.pre_tool_call("send_email", mail("someone@outside.test")))
    listed = recipe.evaluate(recipe.pre_tool_call("send_email", mail(["ada@example.com", "x@example.com.evil.test"])))
    lookalike = recipe.evaluate(recipe.pre_tool_call("send_email", mail("eve@notexample.com")))

    assert (one.decision, one.reason, one.binding) == ("deny", "outside_domain", "mail-domain")
    assert one.message == "Mail goes to example.com only, not to someone@outside.test."
    assert one.after is None  # the call does not run
    assert listed.decision == "deny"
    assert listed.message == "Mail goes to example.com only, not to x@example.com.evil.test."
    assert (lookalike.decision, lookalike.reason) == ("deny", "outside_domain")


def test_it_escalates_above_an_amount(admin):
    recipe = saved(admin, "Escalate above an amount", "refunds", REFUNDS)

    for amount in (40, 100):
        assert_allowed(recipe.evaluate(recipe.pre_tool_call("issue_refund", {"order_id": "A-1", "amount": amount})))
    over = recipe.evaluate(recipe.pre_tool_call("issue_refund", {"order_id": "A-1", "amount": 150}))
    unread = recipe.evaluate(recipe.pre_tool_call("issue_refund", {"order_id": "A-1", "amount": "150"}))

    assert (over.decision, over.reason, over.binding) == ("escalate", "refund_over_limit", "refund-limit")
    assert over.message == "Refunds over 100 wait for an operator; this one is 150."
    assert over.liftable  # in a run an approval request opens and the run waits for it
    assert (unread.decision, unread.reason) == ("escalate", "refund_over_limit")


def test_it_redacts_an_output_field(admin):
    recipe = saved(admin, "Redact an output field", "support", LOOKUP)
    record = {"name": "Ada Lovelace", "email": "ada@example.com", "card_number": "4111 1111 1111 1111"}

    redacted = recipe.evaluate(recipe.post_tool_call("lookup_customer", record))

    assert (redacted.decision, redacted.reason) == ("transform", "card_redacted")
    assert redacted.binding == "customer-redaction"
    assert json.loads(redacted.before) == record
    assert redacted.after is not None and json.loads(redacted.after) == {**record, "card_number": "[redacted]"}
    for untouched in (
        recipe.post_tool_call("lookup_customer", {"name": "Ada Lovelace"}),
        recipe.post_tool_call("lookup_customer", "No customer 42."),
        recipe.post_tool_call("get_time", record),  # another tool's result is not the recipe's
    ):
        kept = recipe.evaluate(untouched)
        assert_allowed(kept)
        assert json.loads(kept.after or "") == untouched["target"]


def test_it_requires_a_reason(admin):
    recipe = saved(admin, "Require a reason", "refunds", REFUNDS)
    refund = {"order_id": "A-1", "amount": 20}

    assert_allowed(recipe.evaluate(recipe.pre_tool_call("issue_refund", refund | {"reason": "The parcel was broken."})))
    for without in (refund, refund | {"reason": "because"}, refund | {"reason": "           "}):
        denied = recipe.evaluate(recipe.pre_tool_call("issue_refund", without))
        assert (denied.decision, denied.reason, denied.binding) == ("deny", "reason_required", "refund-reason")
        assert denied.message == "Say why: call issue_refund again with a reason of at least 10 characters."


@pytest.mark.parametrize(
    ("timestamp", "decision"),
    [
        ("2026-12-08T07:30:00.123456Z", "allow"),  # Tuesday 8:30 in Berlin
        ("2026-12-08T16:59:59Z", "allow"),  # 17:59
        ("2026-12-08T19:30:00Z", "deny"),  # the page's Tuesday evening
        ("2026-12-08T06:30:00Z", "deny"),  # 7:30
        ("2026-12-12T10:00:00Z", "deny"),  # Saturday
        ("2026-07-07T15:59:00Z", "allow"),  # 17:59 in summer time
        ("2026-07-07T16:30:00Z", "deny"),  # 18:30 in summer time
    ],
)
def test_it_blocks_a_tool_after_hours(admin, timestamp, decision):
    recipe = saved(admin, "Block a tool after hours", "mailer", MAILER)

    outcome = recipe.evaluate(recipe.pre_tool_call("send_email", mail("ada@example.com"), timestamp=timestamp))
    other = recipe.evaluate(recipe.pre_tool_call("get_time", {}, timestamp=timestamp))

    assert outcome.decision == decision
    if decision == "deny":
        assert (outcome.reason, outcome.binding) == ("after_hours", "office-hours")
        assert outcome.message == "send_email is for office hours (Monday to Friday, 8:00 to 18:00, Berlin time)."
    assert_allowed(other)


def test_the_page_has_the_five_recipes_each_tested():
    found = sections()
    titles = list(found)
    recipes = titles[titles.index("Recipes") + 1 : titles.index("When a policy fails")]
    tested = [
        "Deny mail outside a domain",
        "Escalate above an amount",
        "Redact an output field",
        "Require a reason",
        "Block a tool after hours",
    ]
    assert recipes == tested
    for title in recipes:
        assert [lang for lang, _ in found[title]] == ["yaml", "rego"], title


# ---- what a policy reads ----------------------------------------------------------------------------------


def shape(value: Any) -> Any:
    """The fields of `value`, not their values: objects by their keys, a list by its first item."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__ if value is not None else None


def test_the_contexts_the_page_shows_are_the_ones_a_turn_of_the_demo_assistant_sends(admin):
    content = demo_agent()
    builder = try_builder("assistant", 1, str(admin.tenant.pk))
    common = json.loads(block("What a policy reads", "json", 1))

    for point in POINTS:
        sent = try_context(point, builder, content, None)
        shown = json.loads(block(point, "json")) | common
        assert shape(shown) == shape(sent), point


# A policy comparing the fields of its `input` with those of the page's (given as data): which it lacks, which
# it has besides.
ECHO = """package airlock.mail_domain

import rego.v1

fields(value) := {path | walk(value, [path, _])}

shown := fields(data.shown)

given := fields(input)

difference := {"lacks": shown - given, "besides": given - shown}

verdict := {"decision": "deny", "reason": "compared", "message": json.marshal(difference)}
"""


def test_a_policy_reads_the_input_the_page_shows(admin):
    """The page's `input` has the fields agent-control-spec gives a rule, no more, no fewer."""
    shown = json.loads(block("What a policy reads", "json", 0))
    hooks = recipe_hooks("Deny mail outside a domain")
    config = hooks["bindings"][0]["config"]
    config["modules"] = {"mail_domain": {"compare.rego": ECHO}}
    config["data"] = {"mail_domain": [{"mount": ["shown"], "document": shown}]}
    response = admin.api("POST", "/api/agents", {"name": "mailer", **MAILER, "hooks": hooks})
    assert response.status_code == 201, response.content
    recipe = Recipe(admin, "mailer")

    outcome = recipe.evaluate(recipe.pre_tool_call("send_email", mail("someone@outside.test")))

    assert outcome.reason == "compared"
    assert json.loads(outcome.message or "") == {"lacks": [], "besides": []}
