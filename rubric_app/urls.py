from django.urls import path

from . import views, webhooks

app_name = "rubric_app"

urlpatterns = [
    path("", views.queue, name="queue"),
    path("github/webhook", webhooks.github_webhook, name="github_webhook"),
]
