"""docs/sign-in.md says what the product does: every connection it shows loads as written (the Okta, Entra ID and
Keycloak entries included), and the redirect and post-logout URIs it tells admins to register are the console's."""

import json
import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from console.models import Connection, Tenant

DOC = Path(__file__).resolve().parents[2] / "docs" / "sign-in.md"


def blocks() -> list[dict]:
    found = [json.loads(text) for text in re.findall(r"```json\n(.*?)```", DOC.read_text(), re.S)]
    return [block if "connections" in block else {"connections": [block]} for block in found]


def test_it_shows_four_connections_the_doc_names():
    names = [entry["name"] for block in blocks() for entry in block["connections"]]
    assert names == ["corp", "okta", "entra", "keycloak"]


@pytest.mark.parametrize("block", blocks(), ids=lambda block: block["connections"][0]["name"])
def test_it_loads_each_connection_the_doc_shows(db, tmp_path, block):
    Tenant.objects.create(slug="acme", name="Acme")
    file = tmp_path / "connections.json"
    file.write_text(json.dumps(block))
    call_command("load_connections", str(file))
    entry = block["connections"][0]
    loaded = Connection.objects.get(name=entry["name"])
    assert (loaded.kind, loaded.url, loaded.secret_env) == ("oidc", entry["issuer"], entry["clientSecretEnv"])
    assert loaded.oidc_settings.client_id == entry["clientId"]
    assert loaded.oidc_settings.tenants["acme"].roles == entry["tenants"]["acme"]["roles"]


def test_it_names_the_uris_the_console_serves():
    text = DOC.read_text()
    assert f"https://airlock.example.com{reverse('oidc_callback')}" in text
    assert f"https://airlock.example.com{reverse('login')}" in text
