import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("rubric_app", "0014_github_credentials"),
    ]

    operations = [
        migrations.AddField(
            model_name="triagedecision",
            name="bot_review",
            field=models.CharField(
                blank=True, choices=[("confirmed", "confirmed"), ("mislabeled", "mislabeled")], max_length=12
            ),
        ),
        migrations.CreateModel(
            name="LabelEvent",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("label", models.CharField(max_length=100)),
                ("action", models.CharField(max_length=10)),
                ("actor", models.CharField(blank=True, max_length=100)),
                ("created_at", models.DateTimeField()),
                (
                    "issue",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="label_events",
                        to="rubric_app.issue",
                    ),
                ),
            ],
            options={"ordering": ["created_at", "pk"]},
        ),
    ]
