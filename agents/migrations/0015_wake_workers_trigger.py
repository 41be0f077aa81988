"""PostgreSQL: a queued task wakes the idle workers of every process (issue 32 item 3, agents/wakeups.py).

Triggers on the task table notify the channel `airlock_runs` with the task's queue when a task is queued,
and when one ends (its lane may have room again); PostgreSQL delivers it when the transaction commits, to
every connection listening. In the database, not in `agents.queue`: no statement more for the request that
queues a run or the worker that ends one. Nothing on SQLite, whose workers poll."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION airlock_wake_workers() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('airlock_runs', NEW.queue_name);
    RETURN NULL;
END $$;
CREATE TRIGGER airlock_wake_workers AFTER INSERT ON django_tasks_database_dbtaskresult
    FOR EACH ROW WHEN (NEW.status = 'READY') EXECUTE FUNCTION airlock_wake_workers();
CREATE TRIGGER airlock_wake_workers_ended AFTER UPDATE OF status ON django_tasks_database_dbtaskresult
    FOR EACH ROW WHEN (OLD.status = 'RUNNING' AND NEW.status <> 'RUNNING') EXECUTE FUNCTION airlock_wake_workers();
"""

DROP = """
DROP TRIGGER IF EXISTS airlock_wake_workers ON django_tasks_database_dbtaskresult;
DROP TRIGGER IF EXISTS airlock_wake_workers_ended ON django_tasks_database_dbtaskresult;
DROP FUNCTION IF EXISTS airlock_wake_workers();
"""


def _on_postgresql(sql: str):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0014_run_status_labels"),
        ("django_tasks_database", "0021_conditional_partial_index_ordering"),
    ]

    operations = [migrations.RunPython(_on_postgresql(CREATE), _on_postgresql(DROP))]
