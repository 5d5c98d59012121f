"""The queue cache's version row, and the decisions' window index (an index-only scan for the metrics).

The triggers that change the version's token are not installed here: queue_cache.ensure_triggers
installs them after every migrate (post_migrate), from the columns the tables have by then.
"""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('rubric_app', '0009_decision_replies'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='QueueVersion',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('token', models.CharField(max_length=36)),
            ],
        ),
        migrations.RemoveIndex(
            model_name='triagedecision',
            name='decision_created_idx',
        ),
        migrations.AddIndex(
            model_name='triagedecision',
            index=models.Index(fields=['created_at', 'user', 'status'], name='decision_window_idx'),
        ),
    ]
