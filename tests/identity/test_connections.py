"""An OpenID Connect connection (SPEC section 19) as the installation defines it: `manage.py load_connections` loads
one (its issuer in `url`, its secret's variable in `secret_env`, the rest in `oidc`; its `tenants` map claims and
grant the connection to no tenant), refuses a file whose settings are wrong with an error naming what is wrong and
saves nothing of it, and the model refuses `oidc` settings on another kind. A tenant never sees it in the list of
connections its definitions may name."""

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from console.models import Connection, Tenant
from tests.conftest import Persona

ISSUER = "https://login.corp.example/realms/staff"


def corp(**changes: Any) -> dict[str, Any]:
    """The `corp` entry of a connections file, with `changes` (None: the field left out)."""
    entry = {
        "name": "corp",
        "kind": "oidc",
        "issuer": ISSUER,
        "clientId": "airlock",
        "clientSecretEnv": "CORP_OIDC_SECRET",
        "scopes": "openid email profile groups",
        "displayName": "Corp SSO",
        "groupsClaim": "memberOf",
        "tenants": {"acme": {"roles": {"sre": "operator", "airlock-admins": "admin"}, "groups": {"fin": "finance"}}},
    } | changes
    return {key: value for key, value in entry.items() if value is not None}


def load(tmp_path: Path, *entries: dict[str, Any]) -> str:
    path = tmp_path / "connections.json"
    path.write_text(json.dumps({"connections": list(entries)}))
    out = StringIO()
    call_command("load_connections", str(path), stdout=out)
    return out.getvalue()


def refusal(tmp_path: Path, entry: dict[str, Any]) -> str:
    """What load_connections says refusing a file of `entry`, once it is sure nothing of the file was saved."""
    with pytest.raises(CommandError) as refused:
        load(tmp_path, entry)
    assert not Connection.objects.exists()
    return str(refused.value)


def test_it_loads_an_oidc_connection_into_its_fields(acme: Tenant, tmp_path: Path) -> None:
    assert load(tmp_path, corp()) == "Loaded 1 connection(s).\n"

    connection = Connection.objects.get(name="corp")
    assert (connection.kind, connection.url, connection.secret_env) == ("oidc", ISSUER, "CORP_OIDC_SECRET")
    assert connection.oidc == {
        "clientId": "airlock",
        "scopes": "openid email profile groups",
        "displayName": "Corp SSO",
        "groupsClaim": "memberOf",
        "tenants": {"acme": {"roles": {"sre": "operator", "airlock-admins": "admin"}, "groups": {"fin": "finance"}}},
    }
    assert connection.all_tenants is False
    assert list(connection.tenants.all()) == []
    settings = connection.oidc_settings
    assert (settings.client_id, settings.groups_claim, settings.display_name) == ("airlock", "memberOf", "Corp SSO")


def test_it_loads_the_defaults_of_the_scopes_and_the_groups_claim(acme: Tenant, tmp_path: Path) -> None:
    load(tmp_path, corp(scopes=None, groupsClaim=None, displayName=None))

    settings = Connection.objects.get(name="corp").oidc_settings
    assert (settings.scopes, settings.groups_claim, settings.display_name) == ("openid email profile", "groups", "")


def test_it_refuses_an_oidc_connection_without_its_client_id(acme: Tenant, tmp_path: Path) -> None:
    said = refusal(tmp_path, corp(clientId=None))

    assert "connections[0] (corp)" in said and "clientId" in said and "required" in said.lower()


def test_it_refuses_an_oidc_connection_without_its_issuer(acme: Tenant, tmp_path: Path) -> None:
    said = refusal(tmp_path, corp(issuer=None))

    assert "needs its issuer" in said


def test_it_refuses_an_oidc_connection_without_its_secret_variable(acme: Tenant, tmp_path: Path) -> None:
    said = refusal(tmp_path, corp(clientSecretEnv=None))

    assert "needs the variable holding its client secret" in said


def test_it_refuses_a_mapping_of_an_unknown_tenant(acme: Tenant, tmp_path: Path) -> None:
    tenants = {"acme": {"roles": {"sre": "reader"}}, "initech": {"roles": {"sre": "reader"}}}

    said = refusal(tmp_path, corp(tenants=tenants))

    assert "no tenant initech" in said
    assert "acme" not in said


def test_it_refuses_a_role_that_is_not_admin_operator_or_reader(acme: Tenant, tmp_path: Path) -> None:
    said = refusal(tmp_path, corp(tenants={"acme": {"roles": {"sre": "owner"}}}))

    assert "tenants.acme.roles.sre" in said
    assert "'admin', 'operator' or 'reader'" in said


def test_it_refuses_scopes_without_openid(acme: Tenant, tmp_path: Path) -> None:
    said = refusal(tmp_path, corp(scopes="email profile"))

    assert 'the scopes must include "openid"' in said


def test_it_refuses_an_unknown_field_in_a_tenant_mapping(acme: Tenant, tmp_path: Path) -> None:
    said = refusal(tmp_path, corp(tenants={"acme": {"roles": {"sre": "reader"}, "approvers": {"fin": "finance"}}}))

    assert "tenants.acme.approvers" in said and "not permitted" in said


def test_it_refuses_an_approver_group_name_that_is_not_a_slug(acme: Tenant, tmp_path: Path) -> None:
    said = refusal(tmp_path, corp(tenants={"acme": {"roles": {"sre": "reader"}, "groups": {"fin": "Finance Team"}}}))

    assert "tenants.acme.groups.fin" in said and "pattern" in said


def test_it_saves_nothing_of_a_file_with_one_bad_oidc_connection(acme: Tenant, tmp_path: Path) -> None:
    hook = {"name": "policy-svc", "kind": "webhook", "url": "http://127.0.0.1:9000/verdict", "tenants": ["acme"]}

    with pytest.raises(CommandError, match=r"connections\[1\] \(corp\)"):
        load(tmp_path, hook, corp(scopes="profile"))

    assert not Connection.objects.exists()


def test_it_refuses_oidc_settings_on_a_webhook(acme: Tenant) -> None:
    hook = Connection(
        name="policy-svc",
        kind="webhook",
        url="http://127.0.0.1:9000/verdict",
        oidc={"clientId": "airlock", "tenants": {"acme": {"roles": {"sre": "reader"}}}},
    )

    with pytest.raises(ValidationError) as refused:
        hook.full_clean()

    assert refused.value.message_dict == {"oidc": ["A webhook connection has no oidc."]}


def test_it_does_not_list_the_oidc_connection_to_a_tenant(admin: Persona, tmp_path: Path) -> None:
    load(tmp_path, corp())

    listed = admin.api("GET", "/api/connections")

    assert listed.status_code == 200
    assert "corp" not in [connection["name"] for connection in listed.json()]
    assert [connection["name"] for connection in listed.json()] == ["meetings", "scripted"]


def test_it_keeps_definitions_from_using_an_oidc_connection_granted_by_hand(admin: Persona, tmp_path: Path) -> None:
    """Granted to every tenant in the Django admin, it is still no model provider or MCP server: its secret's
    variable is never sent anywhere a definition chooses."""
    load(tmp_path, corp())
    Connection.objects.filter(name="corp").update(all_tenants=True)

    for field in ({"model": {"connection": "corp", "name": "m"}}, {"mcpServers": [{"connection": "corp"}]}):
        refused = admin.api("POST", "/api/agents", {"name": "sneaky", "instructions": "hi", **field})
        assert refused.status_code == 400, refused.content
        assert "is of kind" in refused.json()["errors"][0]["message"]
