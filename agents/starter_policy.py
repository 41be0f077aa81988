"""The starter policy (SPEC section 8): an agent-hooks declaration binding one `airlock.acs` policy in Rego
that shows each verdict kind on the tools every tenant has. The agent editor offers it as a template,
`seed_demo` gives it to `assistant` (shadow mode) and `guarded` (enforced).

- `input`: a message asking to ignore the instructions is denied (the run ends `blocked`);
- `pre_tool_call` on `send_email` (every recipient checked, `to` being one address or a list): a mail to
  anyone at `evil.test` is denied, one to anyone outside `example.com` escalates to an operator, a subject
  in capitals is rewritten (transform), a body over 2,000 characters is allowed with a warning;
- `output`: card numbers are redacted (transform).

Its `surface` leaves out the model points (it governs none of them), so a turn under it emits six points,
not eight, and its model calls pay nothing for policies.
"""

import copy
from collections.abc import Sequence
from typing import Any

MANIFEST = """\
agent_control_specification_version: "0.4.0-alpha.1"
metadata:
  name: "mail-guard"
extends: []
policies:
  mail:
    type: rego
    query: data.airlock.mail.verdict
tools:
  send_email:
    type: Tool
    id: send_email
  get_time:
    type: Tool
    id: get_time
  get_user_location:
    type: Tool
    id: get_user_location
intervention_points:
  input:
    policy_target: "$.input"
    policy_target_kind: user_input
    policy:
      id: mail
      query: data.airlock.mail.input_verdict
  pre_tool_call:
    policy_target: "$.tool_call.args"
    policy_target_kind: tool_args
    tool_name_from: "$.tool_call.name"
    policy:
      id: mail
      query: data.airlock.mail.pre_tool_call_verdict
  output:
    policy_target: "$.output"
    policy_target_kind: assistant_output
    policy:
      id: mail
      query: data.airlock.mail.output_verdict
"""

# The lifecycle floor (agent_startup, input, output, agent_shutdown) and the tool points, in pairs (agent-hooks
# 0.1 section 3.2).
SURFACE = ["agent_startup", "input", "pre_tool_call", "post_tool_call", "output", "agent_shutdown"]

REGO = r"""package airlock.mail

import rego.v1

default verdict := {"decision": "allow"}

default input_verdict := {"decision": "allow"}

input_verdict := {
	"decision": "deny",
	"reason": "prompt_injection",
	"message": "The message asks to ignore the instructions.",
} if {
	contains(lower(input.policy_target.value.content), "ignore previous instructions")
}

args := input.policy_target.value

# `to` is one address or a list of them: every one is checked.
recipients := [args.to] if is_string(args.to)

recipients := args.to if is_array(args.to)

default pre_tool_call_verdict := {"decision": "allow"}

pre_tool_call_verdict := {
	"decision": "deny",
	"reason": "blocked_domain",
	"message": "Mail to evil.test is never sent.",
} if {
	input.tool.name == "send_email"
	some to in recipients
	endswith(lower(to), "@evil.test")
} else := {
	"decision": "escalate",
	"reason": "external_recipient",
	"message": "Mail outside example.com needs a human.",
} if {
	input.tool.name == "send_email"
	some to in recipients
	not endswith(lower(to), "@example.com")
} else := {
	"decision": "transform",
	"reason": "calm_subject",
	"message": "The subject was in capitals.",
	"transform": {"path": "$target.subject", "value": lower(args.subject)},
} if {
	input.tool.name == "send_email"
	args.subject == upper(args.subject)
	args.subject != lower(args.subject)
} else := {
	"decision": "allow",
	"warnings": [{"reason": "long_body", "message": "The mail is over 2,000 characters."}],
} if {
	input.tool.name == "send_email"
	count(args.body) > 2000
}

card := `\d{4}[- ]?\d{4}[- ]?\d{4}[- ]?\d{4}`

default output_verdict := {"decision": "allow"}

output_verdict := {
	"decision": "transform",
	"reason": "card_redacted",
	"message": "A card number was redacted.",
	"transform": {
		"path": "$target.content",
		"value": regex.replace(input.policy_target.value.content, card, "[card]"),
	},
} if {
	regex.match(card, input.policy_target.value.content)
}
"""


def starter_hooks(mode: str = "enforce", tools: Sequence[str] = ()) -> dict[str, Any]:
    """The starter declaration, in `mode` (`enforce` or `evaluate_only`); its manifest also names `tools`, the
    agent's other tools (a manifest that governs tool calls denies every tool it does not name)."""
    listed = MANIFEST.split("intervention_points:")[0]
    more = "".join(f"  {name}:\n    type: Tool\n    id: {name}\n" for name in tools if f"id: {name}\n" not in listed)
    manifest = MANIFEST.replace("\nintervention_points:", f"\n{more}intervention_points:", 1) if more else MANIFEST
    return copy.deepcopy(
        {
            "declaration": "agent-hooks-declaration/1.0",
            "configuration": {"mode": mode, "approval": {"resolver": "airlock-inbox"}},
            # The points its manifest governs need no model calls: the model points are not emitted at all.
            "surface": {"interception_points": SURFACE, "capabilities": ["host_declaration", "tool_calls"]},
            "bindings": [
                {
                    "id": "mail-guard",
                    "kind": "airlock.acs",
                    "config": {"manifest": manifest, "modules": {"mail": {"mail.rego": REGO}}},
                }
            ],
        }
    )
