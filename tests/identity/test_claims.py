"""A person's tenants, roles and approver groups follow their identity provider's claims (SPEC section 19,
identity/claims.py): the highest mapped role wins, a tenant is given by a role only, the groups claim may be one
string; every sign-in adds and removes memberships and approver group places the mapping gives, creating a missing
group, and deletes what an earlier sign-in gave that the claims no longer give, with the memberships' API tokens.
What was kept by hand outside the mapping, and what another connection keeps, is left alone."""

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from approvals.answerers import ApproverGroup
from console.connections import OidcSettings
from console.models import ApiToken, Membership, Tenant
from identity.claims import follow_claims, grants

CORP = "oidc:corp"


def mapping(**tenants: dict[str, Any]) -> OidcSettings:
    return OidcSettings.model_validate({"clientId": "airlock", "tenants": tenants})


# acme: a role for three groups of the directory and two approver groups; globex: a reader role, one approver group.
SETTINGS = mapping(
    acme={
        "roles": {"staff": "reader", "sre": "operator", "airlock-admins": "admin"},
        "groups": {"finance-approvers": "finance", "oncall-approvers": "oncall"},
    },
    globex={"roles": {"globex-staff": "reader"}, "groups": {"globex-legal": "legal"}},
)


@pytest.fixture
def alice(db: None) -> User:
    return User.objects.create_user("alice")


def signs_in(user: User, *groups: str, claim: Any = None) -> list[str]:
    """`user` signs in through corp with `groups` in their claims (or the groups claim `claim` as it is)."""
    return follow_claims(user, CORP, SETTINGS, {"sub": "s-1", "groups": list(groups) if claim is None else claim})


def places(user: User) -> dict[str, tuple[str, str]]:
    """Tenant slug -> (role, managed_by) of the user's memberships."""
    return {
        m.tenant.slug: (m.role, m.managed_by) for m in Membership.objects.filter(user=user).select_related("tenant")
    }


def groups_of(user: User, tenant: Tenant) -> list[str]:
    return sorted(ApproverGroup.objects.filter(tenant=tenant, members=user).values_list("name", flat=True))


def test_it_gives_the_highest_role_matched(acme: Tenant, alice: User) -> None:
    assert grants(SETTINGS, {"groups": ["staff", "airlock-admins", "sre"]}) == {"acme": ("admin", set())}

    assert signs_in(alice, "staff", "airlock-admins", "sre") == ["acme"]
    assert places(alice) == {"acme": ("admin", CORP)}

    signs_in(alice, "sre", "staff")
    assert places(alice) == {"acme": ("operator", CORP)}


def test_it_gives_no_tenant_for_an_approver_group_alone(acme: Tenant, alice: User) -> None:
    assert grants(SETTINGS, {"groups": ["finance-approvers"]}) == {}

    assert signs_in(alice, "finance-approvers") == []
    assert places(alice) == {}
    assert not ApproverGroup.objects.exists()


def test_it_reads_a_groups_claim_that_is_one_string(acme: Tenant, alice: User) -> None:
    assert grants(SETTINGS, {"groups": "sre"}) == {"acme": ("operator", set())}

    assert signs_in(alice, claim="sre") == ["acme"]
    assert places(alice) == {"acme": ("operator", CORP)}


def test_it_reads_the_claim_the_connection_names(acme: Tenant) -> None:
    settings = OidcSettings.model_validate(
        {"clientId": "airlock", "groupsClaim": "roles", "tenants": {"acme": {"roles": {"sre": "operator"}}}}
    )

    assert grants(settings, {"groups": ["sre"]}) == {}
    assert grants(settings, {"roles": ["sre"], "groups": []}) == {"acme": ("operator", set())}


def test_it_ignores_claim_values_that_are_not_strings(acme: Tenant) -> None:
    assert grants(SETTINGS, {"groups": [{"sre": True}, 7, None]}) == {}
    assert grants(SETTINGS, {"groups": {"sre": "sre"}}) == {}
    assert grants(SETTINGS, {}) == {}


def test_it_adds_approver_groups_creating_a_missing_one_and_removes_them_when_the_claim_goes(
    acme: Tenant, alice: User
) -> None:
    existing = ApproverGroup.objects.create(tenant=acme, name="oncall")

    signs_in(alice, "sre", "finance-approvers", "oncall-approvers")

    assert groups_of(alice, acme) == ["finance", "oncall"]
    assert ApproverGroup.objects.get(tenant=acme, name="oncall") == existing

    signs_in(alice, "sre", "oncall-approvers")

    assert groups_of(alice, acme) == ["oncall"]
    assert ApproverGroup.objects.filter(tenant=acme, name="finance").exists()  # the group stays, without her

    signs_in(alice, "sre")

    assert groups_of(alice, acme) == []


def test_it_takes_a_hand_kept_place_in_a_mapped_group_away_when_the_claim_lacks_it(acme: Tenant, alice: User) -> None:
    ApproverGroup.objects.create(tenant=acme, name="finance").members.add(alice)

    signs_in(alice, "sre")

    assert groups_of(alice, acme) == []


def test_it_leaves_hand_kept_places_in_groups_the_mapping_does_not_name(acme: Tenant, alice: User) -> None:
    ApproverGroup.objects.create(tenant=acme, name="security").members.add(alice)

    signs_in(alice, "sre", "finance-approvers")
    assert groups_of(alice, acme) == ["finance", "security"]

    signs_in(alice, "sre")
    assert groups_of(alice, acme) == ["security"]


def test_it_leaves_a_hand_kept_membership_in_a_tenant_the_mapping_does_not_name(
    acme: Tenant, alice: User, db: None
) -> None:
    initech = Tenant.objects.create(slug="initech", name="Initech")
    Membership.objects.create(user=alice, tenant=initech, role="admin")

    signs_in(alice, "sre")
    assert places(alice) == {"acme": ("operator", CORP), "initech": ("admin", "")}

    assert signs_in(alice) == []  # refused by the mapping: no tenant by it
    assert places(alice) == {"initech": ("admin", "")}


def test_it_takes_over_a_hand_kept_membership_in_a_tenant_the_mapping_names(acme: Tenant, alice: User) -> None:
    Membership.objects.create(user=alice, tenant=acme, role="admin")

    signs_in(alice, "staff")
    assert places(alice) == {"acme": ("reader", CORP)}

    signs_in(alice)
    assert places(alice) == {}


def test_it_leaves_a_hand_kept_membership_the_claims_do_not_match_in_a_tenant_the_mapping_names(
    acme: Tenant, alice: User
) -> None:
    Membership.objects.create(user=alice, tenant=acme, role="admin")

    assert signs_in(alice, "globex-staff") == []

    assert places(alice) == {"acme": ("admin", "")}


def test_it_deletes_what_an_earlier_sign_in_gave_with_its_api_tokens(acme: Tenant, globex: Tenant, alice: User) -> None:
    signs_in(alice, "sre", "globex-staff", "globex-legal")
    assert places(alice) == {"acme": ("operator", CORP), "globex": ("reader", CORP)}
    membership = Membership.objects.get(user=alice, tenant=globex)
    _, raw = ApiToken.issue(membership, "laptop")
    assert Client().get("/api/connections", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200

    assert signs_in(alice, "sre") == ["acme"]

    assert places(alice) == {"acme": ("operator", CORP)}
    assert not ApiToken.objects.filter(membership__user=alice).exists()
    assert Client().get("/api/connections", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401
    assert groups_of(alice, globex) == []


def test_it_leaves_the_memberships_another_connection_keeps(acme: Tenant, globex: Tenant, alice: User) -> None:
    Membership.objects.create(user=alice, tenant=globex, role="operator", managed_by="oidc:partners")

    signs_in(alice, "sre")
    assert places(alice) == {"acme": ("operator", CORP), "globex": ("operator", "oidc:partners")}

    assert signs_in(alice) == []
    assert places(alice) == {"globex": ("operator", "oidc:partners")}


def test_it_leaves_other_people_alone(acme: Tenant, alice: User) -> None:
    bob = User.objects.create_user("bob")
    signs_in(bob, "airlock-admins", "finance-approvers")

    signs_in(alice, "sre")
    signs_in(alice)

    assert places(bob) == {"acme": ("admin", CORP)}
    assert groups_of(bob, acme) == ["finance"]
