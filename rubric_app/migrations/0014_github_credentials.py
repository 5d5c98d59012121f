import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("rubric_app", "0013_decision_worker"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="GitHubCredential",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("login", models.CharField(blank=True, help_text="GitHub login the token acts as", max_length=100)),
                ("access_token_encrypted", models.TextField()),
                ("refresh_token_encrypted", models.TextField(blank=True)),
                (
                    "expires_at",
                    models.DateTimeField(blank=True, help_text="None: the token does not expire", null=True),
                ),
                ("refresh_expires_at", models.DateTimeField(blank=True, null=True)),
                ("scopes", models.CharField(blank=True, max_length=300)),
                (
                    "revoked_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="GitHub refused the token (401) or its refresh: sign in again",
                        null=True,
                    ),
                ),
                ("rate_limit_remaining", models.PositiveIntegerField(blank=True, null=True)),
                ("rate_limit_reset_at", models.DateTimeField(blank=True, null=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "user",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="github_credential",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
    ]
