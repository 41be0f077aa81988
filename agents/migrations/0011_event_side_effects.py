"""`Event.side_effects`: whether a `tool.execution_start` was of a tool with side effects, a fact Airlock keeps
on the row since the SDK's `tool.execution_start` has no field for it (SPEC section 10). Filled from the
`sideEffects` the events stored before carried in their `data` (0012 takes it out of `data`)."""

from django.db import migrations, models


def copy_side_effects(apps, schema_editor):
    Event = apps.get_model("agents", "Event")
    Event.objects.filter(type="tool.execution_start", data__sideEffects=True).update(side_effects=True)


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0010_run_documents"),
    ]

    operations = [
        migrations.AddField(
            model_name="event",
            name="side_effects",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(copy_side_effects, migrations.RunPython.noop),
    ]
