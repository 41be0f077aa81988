"""Who a Slack user is in a tenant (SPEC section 17): a member links their Slack user with a one-time code sent to the
bot as `/airlock link CODE` (shown on the Notifications page), or an admin links it for them."""

import hashlib
import secrets
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from console.models import Connection, Membership, Tenant
from slackapp.models import SlackLink, SlackLinkCode

# No 0/O, 1/I/L: a code is read off one screen and typed into another.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
CODE_LIFETIME = timedelta(minutes=15)


def _hash(code: str) -> str:
    normal = "".join(code.upper().split()).replace("-", "")
    return hashlib.sha256(normal.encode()).hexdigest()


def new_code(membership: Membership) -> str:
    """A fresh one-time code for the member (any earlier one stops working), as they type it: `ABCD-EFGH`."""
    code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
    expires_at = timezone.now() + CODE_LIFETIME
    SlackLinkCode.objects.update_or_create(
        membership=membership, defaults={"code_hash": _hash(code), "expires_at": expires_at}
    )
    return f"{code[:4]}-{code[4:]}"


def link(membership: Membership, team_id: str, user_id: str) -> SlackLink:
    """Link the member to the Slack user `team_id`/`user_id` (any earlier link of either is replaced: a Slack user is
    one member of a tenant)."""
    with transaction.atomic():
        SlackLink.objects.filter(tenant_id=membership.tenant_id, team_id=team_id, user_id=user_id).exclude(
            membership=membership
        ).delete()
        found, _ = SlackLink.objects.update_or_create(
            membership=membership,
            defaults={
                "tenant_id": membership.tenant_id,
                "team_id": team_id,
                "user_id": user_id,
                "linked_at": timezone.now(),
            },
        )
    return found


def redeem(code: str, connection: Connection, team_id: str, user_id: str) -> str:
    """Link the Slack user who sent `code` through `connection` to the code's member; what to tell them."""
    with transaction.atomic():
        found = SlackLinkCode.objects.select_for_update().filter(code_hash=_hash(code)).first()
        # A code of a tenant the connection is not granted to is as unknown as a wrong one.
        granted = found is not None and (
            Connection.objects.granted_to(Tenant(pk=found.membership.tenant_id)).filter(pk=connection.pk).exists()
        )
        if found is None or not granted or found.expires_at <= timezone.now():
            return "That code is unknown or expired: get a new one on Airlock's Notifications page."
        membership = Membership.objects.select_related("user", "tenant").get(pk=found.membership_id)
        found.delete()
        link(membership, team_id, user_id)
    return f"Linked: your answers here are {membership.user.username}'s in {membership.tenant.name}."


def linked_member(tenant_id: int, team_id: str, user_id: str) -> Membership | None:
    """The tenant's active member the Slack user is linked to, or None."""
    found = (
        SlackLink.objects.select_related("membership__user", "membership__tenant")
        .filter(tenant_id=tenant_id, team_id=team_id, user_id=user_id, membership__user__is_active=True)
        .first()
    )
    return found.membership if found is not None else None
