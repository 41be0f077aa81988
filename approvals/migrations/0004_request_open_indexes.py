# The open requests get two small partial indexes: the inbox list (oldest first), its tool list and the
# pending counts read them instead of a tenant's whole history (bench/inbox_scale.py).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("approvals", "0003_rule_arguments"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="pendingrequest",
            index=models.Index(
                condition=models.Q(("answer__isnull", True), ("status", "pending")),
                fields=["tenant", "opened_at", "id"],
                name="request_open",
            ),
        ),
        migrations.AddIndex(
            model_name="pendingrequest",
            index=models.Index(
                condition=models.Q(("answer__isnull", True), ("status", "pending")),
                fields=["tenant", "tool_name"],
                name="request_open_tool",
            ),
        ),
    ]
