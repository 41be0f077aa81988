"""Schemathesis over the live ASGI app: every operation of /api/openapi.json gets generated requests (valid and
invalid ones) as an admin and as a reader; no answer is a server error, and every answer is the one documented
(status code, content type, headers, body schema; 405 with `Allow` for a method the path does not have)."""

from typing import Any

import pytest
import schemathesis
from django.test import override_settings
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from console.asgi import application
from tests.conftest import Persona

pytestmark = pytest.mark.django_db(transaction=True)

CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
    "unsupported_method",
    "allow_header_conformance",
)


def served_schema(**phases: Any) -> schemathesis.BaseSchema:
    """The schema the app serves, read when the module is collected (before pytest-django lets the test
    client's host in; the schema needs no database), with a fixed seed and a bounded number of cases."""
    config = SchemathesisConfig.from_dict(
        {
            "seed": 20261130,
            "generation": {"max-examples": 20, "deterministic": True, "database": "none"},
            "phases": {"stateful": {"enabled": False}, **phases},
            # What the API promises. Not checked: that every schema-valid body is accepted (a definition
            # naming a connection the tenant lacks is valid JSON, and a 400).
            "checks": {"enabled": False, **{check: {"enabled": True} for check in CHECKS}},
            # The first request imports the whole project: more than the default 10 s on a busy machine.
            "request-timeout": 60,
        }
    )
    with override_settings(ALLOWED_HOSTS=["testserver"]):
        return schemathesis.openapi.from_asgi("/api/openapi.json", application, config=config, timeout=60)


# The admin gets every phase: the coverage phase's boundary and invalid values of each parameter and body
# field, then generated ones. The reader, refused every write once its body is read, gets fewer generated
# ones: what it adds is the 403s and its reads.
as_admin = served_schema()
as_reader = served_schema(
    examples={"enabled": False}, coverage={"enabled": False}, fuzzing={"generation": {"max-examples": 10}}
)

# An operation's cases share the persona and its tenant on purpose: what one case leaves (an agent created, a
# rule revoked) is what the next one meets, as with a real client.
SHARED_STATE = settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None
)


def call_as(case: schemathesis.Case, persona: Persona) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {persona.token}"})


@as_admin.parametrize()
@SHARED_STATE
def test_it_answers_an_admin_as_documented(case: schemathesis.Case, admin: Persona, agent) -> None:
    call_as(case, admin)


@as_reader.parametrize()
@SHARED_STATE
def test_it_answers_a_reader_as_documented(case: schemathesis.Case, reader: Persona, agent) -> None:
    call_as(case, reader)
