"""The diff of two versions of a definition, a row per field, changed lines side by side."""

import copy
import difflib
import json
from typing import Any

from agents.definitions import DefinitionContent
from agents.forms import form_text, hooks_text
from agents.views.policy_pages import PolicySummary


def _policy_texts(hooks: dict[str, Any] | None) -> dict[str, str]:
    """A declaration for the diff: the document with its policy sources left out, then each source apart,
    so that a changed Rego line shows as text."""
    if hooks is None:
        return {"Policies": ""}
    summary = PolicySummary.of(hooks)
    elided = copy.deepcopy(hooks)
    for binding in elided.get("bindings", []):
        config = binding.get("config") or {}
        if binding.get("kind") == "airlock.acs":
            if "manifest" in config:
                config["manifest"] = "(below)"
            for files in (config.get("modules") or {}).values():
                files.update(dict.fromkeys(files, "(below)"))
    texts = {"Policies": hooks_text(elided)}
    for binding in summary.bindings:
        texts |= {f"Policy {binding.id}: {label}": text for label, text in binding.sources}
    return texts


_LIST_FIELDS = (
    ("Server tools", "tools"),
    ("Client tools", "clientTools"),
    ("MCP servers", "mcpServers"),
    ("Parameters", "parameters"),
)


def _comparable(content: DefinitionContent, cultures: list[str]) -> dict[str, str]:
    """Every field of a definition as text, under the label the diff shows it with."""
    wire = content.wire()
    fields = {
        "Name": content.name,
        "Display name": content.display_name,
        "Description": content.description,
        "Instructions": content.instructions,
        "Request deadline (seconds)": form_text(content.request_deadline_seconds),
        # An external agent or a gateway has no model (SPEC sections 12 and 15); an external agent's tools are the
        # ones it declares, a gateway's its servers' (their settings in "MCP servers", `tools`).
        "Model": "" if content.runs_elsewhere else content.model.label,
    }
    if content.runs_elsewhere:
        fields = {"Runtime": content.runtime, **fields}
    fields |= {f"Instructions ({culture})": content.instructions_by_culture.get(culture, "") for culture in cultures}
    lists = [("Declared tools" if content.external and key == "tools" else label, key) for label, key in _LIST_FIELDS]
    fields |= {label: json.dumps(wire[key], indent=2) if wire[key] else "" for label, key in lists}
    return fields | _policy_texts(content.hooks)


def diff_rows(a: DefinitionContent, b: DefinitionContent) -> list[dict[str, Any]]:
    """A row per field; a changed one with its lines paired (`lines`: removed, added, kept, folded)."""
    cultures = sorted(a.instructions_by_culture.keys() | b.instructions_by_culture.keys())
    left, right = _comparable(a, cultures), _comparable(b, cultures)
    labels = [*left, *(label for label in right if label not in left)]  # a policy source only one side has
    rows = [(label, left.get(label, ""), right.get(label, "")) for label in labels]
    return [
        {"label": label, "a": x, "b": y, "changed": x != y, "lines": _line_pairs(x, y) if x != y else []}
        for label, x, y in rows
    ]


# Unchanged lines kept around a change, and how many unchanged lines in a row are folded into one.
DIFF_CONTEXT, DIFF_FOLD = 2, 6


def _line_pairs(a: str, b: str) -> list[dict[str, Any]]:
    """The two texts' lines side by side: `kept` on both sides, `changed` (old, new), `removed`, `added`; a run
    of unchanged lines longer than DIFF_FOLD away from the changes is one `folded` row counting them."""
    old, new = a.splitlines(), b.splitlines()
    pairs: list[dict[str, Any]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag == "equal":
            kept: list[dict[str, Any]] = [{"kind": "kept", "a": line, "b": line} for line in old[i1:i2]]
            if len(kept) > DIFF_FOLD:
                head = kept[:DIFF_CONTEXT] if pairs else []
                tail = kept[-DIFF_CONTEXT:] if i2 < len(old) or j2 < len(new) else []
                folded = len(kept) - len(head) - len(tail)
                kept = [*head, {"kind": "folded", "count": folded}, *tail]
            pairs += kept
        else:
            removed, added = old[i1:i2], new[j1:j2]
            for index in range(max(len(removed), len(added))):
                x = removed[index] if index < len(removed) else None
                y = added[index] if index < len(added) else None
                kind = "changed" if x is not None and y is not None else ("removed" if x is not None else "added")
                pairs.append({"kind": kind, "a": x, "b": y})
    return pairs
