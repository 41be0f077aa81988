"""Remembered rules made, edited and revoked by hand: the rules page's "New rule" and Edit forms and Revoke button,
`POST /api/rules`, `PATCH /api/rules/{id}` and `DELETE /api/rules/{id}` (admins; the routes check the role
first). A rule remembered with an approval is made where the turn carries that answer (`approvals.kinds`)."""

from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.models import Agent, Session
from agents.rule_matching import arguments_hash
from approvals.models import Rule, RuleVersion
from approvals.remembered_rules import RuleEdit, RuleIn, RuleRefused, rule_refusal
from console.models import Membership


def remember_rule(membership: Membership, user: Any, wanted: RuleIn) -> Rule:
    """Store a rule made by hand in the member's tenant; raises RuleRefused (and stores nothing) when it
    cannot be made under the agent's current definition."""
    tenant = membership.tenant
    agent = Agent.objects.live().filter(tenant=tenant, name=wanted.agent).first()
    if agent is None:
        raise RuleRefused(404, "agent_not_found", "agent", f"No agent named {wanted.agent!r} in this tenant.")
    refused = rule_refusal(agent.current.definition, wanted)
    if refused is not None:
        raise refused
    return Rule.objects.create(
        tenant=tenant,
        agent=agent,
        tool_name=wanted.tool_name,
        arguments_hash=arguments_hash(wanted.arguments) if wanted.arguments is not None else "",
        arguments=wanted.arguments,
        conditions=[condition.model_dump(mode="json") for condition in wanted.conditions],
        expires_at=wanted.expires_at,
        created_by=_person(user),
    )


def do_edit_rule(user: Any, rule: Rule, edit: RuleEdit) -> Rule:
    """Make the next version of `rule` from the fields `edit` gives, keeping what the current version said in
    `RuleVersion` (receipts name `rule:<id>@<version>`; the record must still say what that version approved).
    Raises RuleRefused (and changes nothing) for a revoked rule or an edit that cannot be made."""
    given = edit.model_fields_set
    if not given:
        raise RuleRefused(400, "nothing_to_edit", "body", "Give at least one field to change.")
    if rule.revoked_at is not None:
        raise RuleRefused(409, "rule_revoked", "ruleId", "A revoked rule is kept as it was; make a new one instead.")
    if "arguments" in given and edit.arguments is not None and edit.conditions:
        detail = "Give exact `arguments` or `conditions`, not both."
        raise RuleRefused(400, "arguments_and_conditions", "conditions", detail)
    session = _edited_session(rule, edit)
    now = timezone.now()
    with transaction.atomic():
        locked = Rule.objects.select_for_update().get(pk=rule.pk)
        if locked.revoked_at is not None:
            raise RuleRefused(409, "rule_revoked", "ruleId", "The rule was revoked meanwhile.")
        RuleVersion.objects.create(
            rule=locked,
            version=locked.version,
            arguments_hash=locked.arguments_hash,
            arguments=locked.arguments,
            conditions=locked.conditions,
            session=locked.session,
            expires_at=locked.expires_at,
            # Who made that version: its editor, or (version 1) the rule's creator.
            edited_by=locked.edited_by if locked.edited_at else locked.created_by,
            edited_at=locked.edited_at or locked.created_at,
        )
        if "arguments" in given:
            rule.arguments = edit.arguments
            rule.arguments_hash = arguments_hash(edit.arguments) if edit.arguments is not None else ""
            rule.conditions = []
        if edit.conditions is not None:
            rule.conditions = [condition.model_dump(mode="json") for condition in edit.conditions]
            if "arguments" not in given and rule.conditions:
                rule.arguments, rule.arguments_hash = None, ""
        if "expires_at" in given:
            rule.expires_at = edit.expires_at
        rule.session = session
        rule.version, rule.edited_by, rule.edited_at = locked.version + 1, _person(user), now
        rule.save(
            update_fields=[
                "arguments",
                "arguments_hash",
                "conditions",
                "expires_at",
                "session",
                "version",
                "edited_by",
                "edited_at",
            ]
        )
    return rule


def _edited_session(rule: Rule, edit: RuleEdit) -> Session | None:
    """The session the edited rule holds in: none for "always", the one `sessionId` names for "session" (a live
    session of the rule's tenant), else the rule's own."""
    if edit.scope == "always":
        if edit.session_id is not None:
            raise RuleRefused(400, "scope_conflict", "sessionId", 'A rule of scope "always" holds in no one session.')
        return None
    if edit.session_id is None:
        if edit.scope == "session" and rule.session is None:
            raise RuleRefused(
                400, "session_required", "sessionId", 'Scope "session" needs the `sessionId` it holds in.'
            )
        return rule.session
    if edit.scope is None and rule.session is None:
        detail = 'A `sessionId` narrows a rule to one session: send it with scope "session".'
        raise RuleRefused(400, "session_required", "scope", detail)
    session = Session.objects.live().filter(tenant=rule.tenant_id, key=edit.session_id).first()
    if session is None:
        raise RuleRefused(404, "session_not_found", "sessionId", f"No session {edit.session_id!r} in this tenant.")
    return session


def do_revoke_rule(user: Any, rule: Rule) -> None:
    """Calls the rule approved ask again. Revoking a revoked rule keeps the first revocation, its time and who
    made it (the audit lists it)."""
    now, person = timezone.now(), _person(user)
    if Rule.objects.filter(pk=rule.pk, revoked_at__isnull=True).update(revoked_at=now, revoked_by=person):
        rule.revoked_at, rule.revoked_by = now, person


def _person(user: Any) -> Any:
    return user if getattr(user, "is_authenticated", False) else None
