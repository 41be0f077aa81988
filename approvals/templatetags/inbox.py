"""Filters of the request card (templates/approvals/request.html).

The card is rendered by the inbox views and by approvals/push.py, which passes nothing but the request
(and whether its reader may answer), so whatever the card derives from a request is computed here.
"""

import json
from typing import Any

from django import template

from agents.schema_forms import SchemaField, schema_fields
from approvals.cards import listed_card
from approvals.kinds import KINDS, Kind, parameters_schema
from approvals.models import PendingRequest
from approvals.tallies import Tally, standing

register = template.Library()


@register.simple_tag(takes_context=True)
def card(context: template.Context, pending: PendingRequest) -> str:
    """`pending`'s card in the inbox list (approvals/cards.py), `pending.answerable` saying whether the reader
    may answer it."""
    return listed_card(
        pending,
        can_answer=pending.answerable,  # type: ignore[attr-defined]  # set by the inbox view
        user=context.get("user"),
        csrf_token=context.get("csrf_token"),
    )


@register.filter
def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


@register.filter
def form_fields(schema: dict[str, Any] | None) -> list[SchemaField]:
    return schema_fields(schema)


@register.filter
def request_kind(pending: PendingRequest) -> Kind:
    return KINDS[pending.kind]


@register.filter
def kind_part(pending: PendingRequest, part: str) -> str:
    """The partial `part` of the template of `pending`'s kind: `{% include r|kind_part:"card" %}`."""
    return f"{KINDS[pending.kind].template}#{part}"


@register.filter
def lookup(mapping: Any, key: str) -> Any:
    """`mapping[key]`, or None: field errors and posted values by a computed name."""
    return mapping.get(key) if mapping else None


@register.filter
def tool_parameters(pending: PendingRequest) -> list[dict[str, Any]]:
    """The declared parameters of the requested tool (name, type, required), to help edit or answer."""
    schema = parameters_schema(pending) or {}
    required = set(schema.get("required") or [])
    return [
        {
            "name": name,
            "type": "|".join(map(str, prop["enum"])) if "enum" in prop else prop.get("type", "any"),
            "required": name in required,
            "description": prop.get("description", ""),
        }
        for name, prop in (schema.get("properties") or {}).items()
        if isinstance(prop, dict)
    ]


@register.filter
def can_remember(pending: PendingRequest) -> bool:
    """Whether "don't ask again" is offered: never for a tool that asks every time, nor for a policy's escalation."""
    return KINDS[pending.kind].remembers(pending)


@register.filter
def key_argument(pending: PendingRequest) -> str:
    """What a request's row in the dense inbox quotes (its kind's `glance`: a question's words, a plan's first
    step, a call's first argument), cut to a glance."""
    said = KINDS[pending.kind].glance(pending)
    return said if len(said) <= 120 else f"{said[:119]}…"


@register.filter
def quorum(pending: PendingRequest) -> Tally | None:
    """Where the request's quorum stands (SPEC section 14): the approvals given and who is still needed; None for
    a request one answer decides."""
    return standing(pending)
