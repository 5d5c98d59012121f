# Stuck work: decisions carry a heartbeat, bisection runs the id of the message that claimed them,
# and workers record their own heartbeats (which queues have a live worker).

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [("rubric_app", "0004_webhook_replay")]

    operations = [
        migrations.AddField(
            model_name="triagedecision",
            name="heartbeat_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="bisectionrun",
            name="task_id",
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.CreateModel(
            name="WorkerHeartbeat",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=200, unique=True)),
                ("queues", models.JSONField(default=list)),
                ("device", models.CharField(blank=True, help_text="The worker's BISECTION_DEVICE.", max_length=10)),
                ("seen_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={"ordering": ["name"]},
        ),
    ]
