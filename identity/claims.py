"""A person's tenants, roles and approver groups from their identity provider's claims (SPEC section 19), kept in
step at every sign-in: what the mapping gives is added, what an earlier sign-in through the same connection gave
and the mapping no longer gives is removed. Memberships and group places kept by hand are left alone, but for the
groups the mapping names: those follow the claims."""

from typing import Any

from django.db import transaction

from approvals.answerers import ApproverGroup
from console.connections import OidcSettings
from console.models import ROLE_RANK, Membership, Role, Tenant


def claim_values(claims: dict[str, Any], name: str) -> set[str]:
    """The values of the claim `name`: a list of strings, or one string."""
    value = claims.get(name)
    if isinstance(value, str):
        return {value}
    if isinstance(value, list):
        return {item for item in value if isinstance(item, str)}
    return set()


def grants(settings: OidcSettings, claims: dict[str, Any]) -> dict[str, tuple[str, set[str]]]:
    """Tenant slug -> (role, approver groups) the claims give: a tenant one of whose roles matched, with the
    highest role matched, and the groups of its mapping the claims name."""
    values = claim_values(claims, settings.groups_claim)
    given = {}
    for slug, mapping in settings.tenants.items():
        roles = [Role(role) for value, role in mapping.roles.items() if value in values]
        if roles:
            groups = {group for value, group in mapping.groups.items() if value in values}
            given[slug] = (max(roles, key=ROLE_RANK.__getitem__).value, groups)
    return given


@transaction.atomic
def follow_claims(user: Any, method: str, settings: OidcSettings, claims: dict[str, Any]) -> list[str]:
    """Make `user`'s memberships kept by `method` ("oidc:<connection>") and their places in the mapped approver
    groups what `claims` give; the slugs of the tenants they are in by it now (none: they are refused)."""
    given = grants(settings, claims)
    tenants = {tenant.slug: tenant for tenant in Tenant.objects.filter(slug__in=list(given))}
    locked = Membership.objects.select_for_update(of=("self",)).select_related("tenant").filter(user=user)
    kept = {membership.tenant_id: membership for membership in locked}
    for slug, tenant in tenants.items():
        role, groups = given[slug]
        membership = kept.get(tenant.pk)
        if membership is None:
            Membership.objects.create(user=user, tenant=tenant, role=role, managed_by=method)
        elif (membership.role, membership.managed_by) != (role, method):
            membership.role, membership.managed_by = role, method
            membership.save(update_fields=["role", "managed_by"])
        _follow_groups(user, tenant, set(settings.tenants[slug].groups.values()), groups)
    staying = {tenant.pk for tenant in tenants.values()}
    gone = [m for m in kept.values() if m.managed_by == method and m.tenant_id not in staying]
    for membership in gone:
        mapped = settings.tenants.get(membership.tenant.slug)
        _follow_groups(user, membership.tenant, set(mapped.groups.values()) if mapped else set(), set())
        membership.delete()  # its tokens with it: they stop working
    return sorted(tenants)


def _follow_groups(user: Any, tenant: Tenant, mapped: set[str], wanted: set[str]) -> None:
    """Put `user` in the groups of `wanted` (created when missing) and out of the other `mapped` ones."""
    for name in wanted:
        ApproverGroup.objects.get_or_create(tenant=tenant, name=name)[0].members.add(user)
    for group in ApproverGroup.objects.filter(tenant=tenant, name__in=mapped - wanted, members=user):
        group.members.remove(user)
