"""PostgreSQL parses and plans a statement a connection runs often once, not at every run (console/settings.py)."""

import pytest
from django.db import connection

from console.models import Tenant


@pytest.mark.django_db
@pytest.mark.postgresql
def test_a_statement_run_often_is_prepared_on_the_server():
    for slug in ("a", "b", "c", "d", "e", "f"):
        assert not Tenant.objects.filter(slug=slug).exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [statement for (statement,) in cursor.fetchall()]
    assert any('FROM "console_tenant"' in statement and "$1" in statement for statement in prepared), prepared
