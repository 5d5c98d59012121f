from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("rubric_app", "0011_similar_issues"),
    ]

    operations = [
        migrations.AddField(
            model_name="triagedecision",
            name="bot_review",
            field=models.CharField(
                blank=True, choices=[("confirmed", "confirmed"), ("mislabeled", "mislabeled")], max_length=12
            ),
        ),
    ]
