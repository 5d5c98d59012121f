from django.apps import AppConfig
from django.db.models.signals import post_migrate


class RubricAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "rubric_app"
    verbose_name = "PT2 triage"

    def ready(self) -> None:
        from rubric_app import search_index
        from rubric_app.web import queue_cache

        # SQLite drops triggers with the table when a later migration remakes it (search_index).
        post_migrate.connect(search_index.ensure_sqlite_triggers, sender=self, dispatch_uid="rubric_app_fts_triggers")
        # The queue cache's triggers: re-created when a migration dropped one or a watched table gained a column.
        post_migrate.connect(queue_cache.ensure_triggers, sender=self, dispatch_uid="rubric_app_queue_triggers")
