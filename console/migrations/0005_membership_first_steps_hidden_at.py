from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0004_tenant_request_webhook"),
    ]

    operations = [
        migrations.AddField(
            model_name="membership",
            name="first_steps_hidden_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
