import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "triage_site.settings")

app = Celery("triage_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
