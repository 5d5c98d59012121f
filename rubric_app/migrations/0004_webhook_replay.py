from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("rubric_app", "0003_sync_claim"),
    ]

    operations = [
        migrations.AddField(
            model_name="label",
            name="event_stamp",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="webhookdelivery",
            name="body_sha256",
            field=models.CharField(blank=True, max_length=64, null=True, unique=True),
        ),
        migrations.AddField(
            model_name="webhookdelivery",
            name="ignored",
            field=models.CharField(blank=True, max_length=300),
        ),
    ]
