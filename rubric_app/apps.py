from django.apps import AppConfig


class RubricAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "rubric_app"
    verbose_name = "PT2 triage"
