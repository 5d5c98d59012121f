from django.db import migrations, models


class Migration(migrations.Migration):
    """Runners that hold no database (issue 42): a run's job token, the message and attempt that claimed it, the
    runner holding it and its boot; a worker heartbeat's boot."""

    dependencies = [("rubric_app", "0021_history")]

    operations = [
        migrations.RenameField(model_name="bisectionrun", old_name="task_id", new_name="message_id"),
        migrations.AddField(
            model_name="bisectionrun", name="job_token", field=models.CharField(blank=True, max_length=100)
        ),
        migrations.AddField(
            model_name="bisectionrun", name="attempt", field=models.CharField(blank=True, max_length=64)
        ),
        migrations.AddField(
            model_name="bisectionrun", name="runner", field=models.CharField(blank=True, max_length=200)
        ),
        migrations.AddField(
            model_name="bisectionrun", name="runner_boot", field=models.CharField(blank=True, max_length=64)
        ),
        migrations.AddField(
            model_name="workerheartbeat", name="boot", field=models.CharField(blank=True, max_length=64)
        ),
    ]
