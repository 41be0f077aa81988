from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("agents", "0008_event_payloads")]

    operations = [
        migrations.AddField(
            model_name="event",
            name="agent_id",
            field=models.CharField(blank=True, default="", max_length=100),
        ),
    ]
