"""The decisions' window index: the metrics page reads decisions per triager from it alone (an index-only scan)."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('rubric_app', '0008_health'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='triagedecision',
            name='decision_created_idx',
        ),
        migrations.AddIndex(
            model_name='triagedecision',
            index=models.Index(fields=['created_at', 'user', 'status'], name='decision_window_idx'),
        ),
    ]
