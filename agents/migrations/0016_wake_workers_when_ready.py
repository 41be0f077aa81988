"""PostgreSQL: a task that ends wakes the workers only when a task of its queue is ready (issue 32 item 3).

A task's end was announced on every end, so every idle claimer asked the database after each turn, to find nothing
most of the time; its lane's room matters only to a task that waits for it. The check reads the ready tasks of one
queue (the partial index of ready tasks), inside the ending transaction."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION airlock_wake_workers_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM django_tasks_database_dbtaskresult WHERE status = 'READY' AND queue_name = NEW.queue_name)
    THEN
        PERFORM pg_notify('airlock_runs', NEW.queue_name);
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS airlock_wake_workers_ended ON django_tasks_database_dbtaskresult;
CREATE TRIGGER airlock_wake_workers_ended AFTER UPDATE OF status ON django_tasks_database_dbtaskresult
    FOR EACH ROW WHEN (OLD.status = 'RUNNING' AND NEW.status <> 'RUNNING') EXECUTE FUNCTION
    airlock_wake_workers_ended();
"""

DROP = """
DROP TRIGGER IF EXISTS airlock_wake_workers_ended ON django_tasks_database_dbtaskresult;
DROP FUNCTION IF EXISTS airlock_wake_workers_ended();
CREATE TRIGGER airlock_wake_workers_ended AFTER UPDATE OF status ON django_tasks_database_dbtaskresult
    FOR EACH ROW WHEN (OLD.status = 'RUNNING' AND NEW.status <> 'RUNNING') EXECUTE FUNCTION airlock_wake_workers();
"""


def _on_postgresql(sql: str):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("agents", "0015_wake_workers_trigger")]

    operations = [migrations.RunPython(_on_postgresql(CREATE), _on_postgresql(DROP))]
