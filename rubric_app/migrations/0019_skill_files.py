from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("rubric_app", "0018_meeting_items"),
    ]

    operations = [
        migrations.CreateModel(
            name="SkillFile",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=40, unique=True)),
                (
                    "path",
                    models.CharField(
                        blank=True, help_text="where it was read: the file's path, or the API's", max_length=300
                    ),
                ),
                ("sha", models.CharField(blank=True, max_length=64)),
                ("etag", models.CharField(blank=True, max_length=200)),
                ("content", models.JSONField(blank=True, null=True)),
                ("read_at", models.DateTimeField(blank=True, help_text="when the good copy was read", null=True)),
                (
                    "checked_at",
                    models.DateTimeField(blank=True, help_text="the last request, 304s included", null=True),
                ),
                (
                    "error",
                    models.TextField(blank=True, help_text="why the last answer was not taken; empty when it was"),
                ),
                ("error_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "ordering": ["name"],
            },
        ),
    ]
