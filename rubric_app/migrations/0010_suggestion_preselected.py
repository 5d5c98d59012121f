from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("rubric_app", "0003_sync_claim")]

    operations = [
        migrations.AddField(
            model_name="suggestion",
            name="preselected",
            field=models.BooleanField(default=True),
        ),
    ]
