from django.urls import path, re_path

from . import views, views_history, views_models, webhooks

app_name = "rubric_app"

urlpatterns = [
    path("", views.queue, name="queue"),
    path("health", views.health, name="health"),
    path("issues/<int:number>", views.issue_detail, name="issue"),
    path("issues/<int:number>/preview", views.issue_preview, name="issue_preview"),
    path("issues/<int:number>/apply", views.issue_apply, name="issue_apply"),
    path("issues/<int:number>/bot/confirm", views.bot_confirm, name="bot_confirm"),
    path("issues/<int:number>/bot/correct", views.bot_correct, name="bot_correct"),
    path("issues/<int:number>/bisect", views.bisect, name="bisect"),
    path("decisions/<int:pk>", views.decision_status, name="decision"),
    path("bisections", views.bisections, name="bisections"),
    path("bisections/<int:pk>", views.bisection_status, name="bisection"),
    path("meeting", views.meeting, name="meeting"),
    path("meeting/start", views.meeting_start, name="meeting_start"),
    path("meeting/end", views.meeting_end, name="meeting_end"),
    path("meeting/issues/<int:number>/decide", views.meeting_decide, name="meeting_decide"),
    path("meeting/<int:pk>/minutes.md", views.meeting_minutes, name="meeting_minutes"),
    path("audit", views.audit, name="audit"),
    path("metrics", views.metrics_page, name="metrics"),
    path("rubric", views.rubric_health, name="rubric_health"),
    path("rubric/models", views_models.models_page, name="models"),
    path("history", views_history.history_page, name="history"),
    path("roster", views.roster_add, name="roster_add"),
    path("roster/<int:pk>/remove", views.roster_remove, name="roster_remove"),
    path("roster/share", views.share_out, name="share_out"),
    path("issues/<int:number>/assign", views.issue_assign, name="issue_assign"),
    path("rubric.csv", views.rubric_health_csv, name="rubric_health_csv"),
    # A failure signature's key: 16 hex digits (rubric/signature.py).
    re_path(r"^signatures/(?P<key>[0-9a-f]{16})$", views.signature_group, name="signature_group"),
    re_path(r"^signatures/(?P<key>[0-9a-f]{16})/preview$", views.group_preview, name="group_preview"),
    re_path(r"^signatures/(?P<key>[0-9a-f]{16})/apply$", views.group_apply, name="group_apply"),
    path("github/webhook", webhooks.github_webhook, name="github_webhook"),
]
