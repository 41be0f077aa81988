"""The decision log's sinks are installation connections (SPEC sections 2 and 18): loaded from a file in SPEC 18's
words, checked before anything is stored, listed to tenants by name and kind only, never usable as anything else."""

import json
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from console.connections import ConnectionSpec, split_address
from console.models import Connection
from decisionlog.models import SinkCursor

pytestmark = pytest.mark.django_db

SINKS = {
    "connections": [
        {
            "name": "siem",
            "kind": "otlp",
            "url": "https://otel.example.com:4318",
            "headersEnv": "SIEM_OTLP_HEADERS",
            "tenants": ["acme"],
        },
        {"name": "syslog-tls", "kind": "syslog", "address": "logs.example.com:6514", "tls": True, "tenants": "*"},
        {"name": "syslog-local", "kind": "syslog", "address": "[::1]:514", "tenants": ["globex"]},
    ]
}


def load(tmp_path: Path, data: object) -> str:
    path = tmp_path / "connections.json"
    path.write_text(json.dumps(data))
    out = StringIO()
    call_command("load_connections", str(path), stdout=out)
    return out.getvalue()


def test_sinks_load_from_a_file_in_the_specs_words(tmp_path, acme, globex):
    assert load(tmp_path, SINKS).strip() == "Loaded 3 connection(s)."

    assert Connection.objects.get(name="siem").spec == ConnectionSpec(
        "siem", "otlp", url="https://otel.example.com:4318", secret_env="SIEM_OTLP_HEADERS"
    )
    assert Connection.objects.get(name="syslog-tls").spec == ConnectionSpec(
        "syslog-tls", "syslog", address="logs.example.com:6514", tls=True
    )
    assert Connection.objects.get(name="syslog-local").spec.tls is False
    assert set(Connection.objects.specs_for(acme)) - {"scripted", "meetings"} == {"siem", "syslog-tls"}
    assert set(Connection.objects.specs_for(globex)) - {"scripted", "meetings"} == {"syslog-tls", "syslog-local"}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "x", "kind": "otlp", "tenants": "*"}, "needs its endpoint's url"),
        ({"name": "x", "kind": "otlp", "url": "otel.example.com:4318"}, "url"),
        ({"name": "x", "kind": "otlp", "url": "https://o.example", "headersEnv": "lower-case"}, "environment variable"),
        ({"name": "x", "kind": "otlp", "url": "https://o.example", "address": "a:1"}, "has no address"),
        ({"name": "x", "kind": "syslog", "tenants": "*"}, "give host:port"),
        ({"name": "x", "kind": "syslog", "address": "logs.example.com"}, "give host:port"),
        ({"name": "x", "kind": "syslog", "address": "logs.example.com:0"}, "1 to 65535"),
        ({"name": "x", "kind": "syslog", "address": "logs.example.com:70000"}, "1 to 65535"),
        ({"name": "x", "kind": "syslog", "address": "::1:514"}, "brackets"),
        ({"name": "x", "kind": "syslog", "address": "a b:514"}, "not a host"),
        ({"name": "x", "kind": "syslog", "address": "a:514", "tls": "yes"}, "tls is true or false"),
        ({"name": "x", "kind": "syslog", "address": "a:514", "url": "https://a.example"}, "has no url"),
        ({"name": "x", "kind": "syslog", "address": "a:514", "headersEnv": "H"}, "unknown field"),
        ({"name": "x", "kind": "webhook", "url": "https://a.example", "tls": True}, "has no tls"),
    ],
)
def test_a_bad_sink_entry_loads_nothing(tmp_path, acme, entry, message):
    with pytest.raises(CommandError, match=message):
        load(tmp_path, {"connections": [SINKS["connections"][0], entry]})
    assert not Connection.objects.exists()


def test_an_address_is_split_into_its_host_and_port():
    assert split_address("logs.example.com:6514") == ("logs.example.com", 6514)
    assert split_address("[2001:db8::1]:514") == ("2001:db8::1", 514)
    for bad in ("", ":514", "host:", "host:port", "host:٥١٤", "[]:514"):
        with pytest.raises(ValueError):
            split_address(bad)


def test_tenants_see_a_sink_by_name_and_kind_and_cannot_use_it_as_a_model_or_mcp_server(tmp_path, admin, globex):
    load(tmp_path, SINKS)
    listed = admin.api("GET", "/api/connections").json()
    assert [item for item in listed if item["kind"] in ("otlp", "syslog")] == [
        {"name": "siem", "kind": "otlp"},
        {"name": "syslog-tls", "kind": "syslog"},
    ]
    for field in ({"model": {"connection": "siem", "name": "m"}}, {"mcpServers": [{"connection": "syslog-tls"}]}):
        refused = admin.api("POST", "/api/agents", {"name": "sneaky", "instructions": "hi", **field})
        assert refused.status_code == 400, refused.content
        assert "is of kind" in refused.json()["errors"][0]["message"]


def test_superusers_see_where_each_sink_stands_in_the_admin_and_no_one_else(admin, acme):
    sink = Connection.objects.create(name="siem", kind="otlp", url="https://o.example", all_tenants=True)
    SinkCursor.objects.create(tenant=acme, connection=sink, sequence=41, attempts=3, last_error="HTTP 503")
    root = Client()
    root.force_login(User.objects.create_superuser("root", password="x-7f3a-long-enough"))
    page = root.get("/admin/decisionlog/sinkcursor/")
    assert page.status_code == 200 and "HTTP 503" in page.text and "41" in page.text
    assert root.post("/admin/decisionlog/sinkcursor/add/").status_code == 403
    assert admin.client.get("/admin/decisionlog/sinkcursor/").status_code == 302  # to the admin's login
