from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("rubric_app", "0006_issue_search")]

    operations = [
        migrations.AddField(
            model_name="suggestion",
            name="preselected",
            field=models.BooleanField(default=True),
        ),
    ]
