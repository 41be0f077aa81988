"""Who may answer a request (SPEC sections 11 and 14): the tenant's approver groups (`ApproverGroup`), what a
member may answer (`Rights`, `rights_of`), and delegation.

Delegation: a member away from `starts_at` until `ends_at` names a delegate, who may answer
what the away member may (chains are not followed: a delegate's own delegate is not theirs). An answer given that
way records both: `answeredBy` the delegate and `onBehalfOf` the away member (`approvals.decisions.Actor`).

Who may answer what, counting the members one stands in for, is `Rights`."""

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from console.models import Membership, Tenant
from console.problems import Refused


class Away(models.Model):
    """A member's absence and who stands in for them (one at a time per membership)."""

    membership = models.OneToOneField(Membership, on_delete=models.CASCADE, related_name="away")
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    delegate = models.ForeignKey(Membership, on_delete=models.CASCADE, related_name="standing_in")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["delegate", "ends_at"], name="away_delegate")]

    def __str__(self) -> str:
        return f"{self.membership} away, {self.delegate} stands in"

    def wire(self) -> dict[str, Any]:
        return {
            "from": self.starts_at.isoformat(),
            "until": self.ends_at.isoformat(),
            "delegate": self.delegate.user.username,
            "active": self.starts_at <= timezone.now() < self.ends_at,
        }


class AwayRefused(Refused):
    """A bad away setting: 400, nothing changed (`invalid_delegate`, or `invalid_request` for its dates)."""


def set_away(membership: Membership, starts_at: datetime | None, ends_at: datetime, delegate: str) -> Away:
    """Mark `membership` away (from now unless `starts_at`) until `ends_at`, `delegate` (a username) standing in:
    another member of the tenant with role operator or admin."""
    now = timezone.now()
    starts_at = starts_at or now
    if ends_at <= starts_at or ends_at <= now:
        raise AwayRefused("invalid_request", "Until must come after From, and after now.")
    stand_in = (
        Membership.objects.select_related("user")
        .filter(tenant_id=membership.tenant_id, user__username=delegate, user__is_active=True)
        .first()
    )
    if stand_in is None:
        raise AwayRefused("invalid_delegate", f"No active member {delegate!r} in this tenant.")
    if stand_in.pk == membership.pk:
        raise AwayRefused("invalid_delegate", "You cannot stand in for yourself.")
    if not stand_in.allows("operator"):
        raise AwayRefused("invalid_delegate", f"{delegate} is a {stand_in.role}: a delegate is an operator or admin.")
    away, _ = Away.objects.update_or_create(
        membership=membership, defaults={"starts_at": starts_at, "ends_at": ends_at, "delegate": stand_in}
    )
    away.delegate = stand_in
    return away


def stood_in_for(membership: Membership, now: datetime | None = None) -> list[Membership]:
    """The members `membership` stands in for now (away, naming them; active users)."""
    now = now or timezone.now()
    found = Away.objects.filter(
        delegate=membership, starts_at__lte=now, ends_at__gt=now, membership__user__is_active=True
    ).select_related("membership__user")
    # In one order, so that a delegate of several answers for the same one of them every time (`Rights`).
    return [away.membership for away in found.order_by("membership__user__username")]


@dataclass
class Rights:
    """What a member may answer (SPEC sections 11 and 14): in their own right (`admin`, their `groups`) and, for
    each away member they stand in for, that member's (`standing`: (user, admin, groups))."""

    operator: bool
    admin: bool
    groups: set[str]
    standing: list[tuple[Any, bool, set[str]]] = field(default_factory=list)

    @property
    def any_group(self) -> bool:
        """Whether they may answer a request of any group: an admin, or standing in for one."""
        return self.admin or any(admin for _, admin, _ in self.standing)

    @property
    def all_groups(self) -> set[str]:
        """The groups whose requests they may answer, their own and those of whom they stand in for."""
        return self.groups.union(*(theirs for _, _, theirs in self.standing))

    def on_behalf_of(self, groups: list[str], not_for: Any = None) -> tuple[bool, Any]:
        """Whether a request routed to `groups` (none: anyone) may be answered, and for whom: None in one's own
        right, else the away member's user, the first by username who may answer it. `not_for`: the id of a user
        to stand in for only when no other will do (the requester, where the request's requirement separates
        duties: their delegate may approve it for another away member, SPEC section 14)."""
        if not self.operator:
            return False, None
        if not groups or self.admin or not self.groups.isdisjoint(groups):
            return True, None
        able = [user for user, admin, theirs in self.standing if admin or not theirs.isdisjoint(groups)]
        if not able:
            return False, None
        return True, next((user for user in able if user.pk != not_for), able[0])


class ApproverGroup(models.Model):
    """A tenant's named group of members (SPEC section 11): a definition routes requests to it by name
    (`"approvers": "finance"`), and only its members and admins answer those."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="approver_groups")
    name = models.SlugField(max_length=63)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="approver_groups")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="approver_group_name_unique")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


def routed_to(groups: Iterable[str]) -> models.Q:
    """The requests routed to any of `groups` (a request stores its groups comma-joined, `PendingRequest.groups`)."""
    found = models.Q(pk__in=[])
    for group in groups:
        found |= (
            models.Q(approvers=group)
            | models.Q(approvers__startswith=f"{group},")
            | models.Q(approvers__endswith=f",{group}")
            | models.Q(approvers__contains=f",{group},")
        )
    return found


def groups_of(membership: Membership) -> set[str]:
    """The names of the tenant's groups the member belongs to."""
    groups = ApproverGroup.objects.filter(tenant_id=membership.tenant_id, members=membership.user_id)
    return set(groups.values_list("name", flat=True))


def rights_of(membership: Membership) -> Rights:
    """What the member may answer: in their own right, and for the away members they stand in for (SPEC sections 11
    and 14); two queries for an operator, none for an admin or a reader."""
    if not membership.allows("operator") or membership.allows("admin"):
        return Rights(membership.allows("operator"), membership.allows("admin"), set())
    standing = stood_in_for(membership)
    users = [membership.user_id, *(away.user_id for away in standing)]
    rows = ApproverGroup.objects.filter(tenant_id=membership.tenant_id, members__in=users).values_list(
        "members", "name"
    )
    groups: dict[int, set[str]] = {}
    for user_id, name in rows:
        groups.setdefault(user_id, set()).add(name)
    stand_ins = [(away.user, away.allows("admin"), groups.get(away.user_id, set())) for away in standing]
    return Rights(True, False, groups.get(membership.user_id, set()), stand_ins)
