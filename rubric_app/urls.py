from django.urls import path, re_path

from rubric_app.github import webhooks
from rubric_app.web.views import groups, history, issue, lists, meeting, models, queue, runners

app_name = "rubric_app"

urlpatterns = [
    path("", queue.queue, name="queue"),
    path("health", lists.health, name="health"),
    path("issues/<int:number>", issue.issue_detail, name="issue"),
    path("issues/<int:number>/preview", issue.issue_preview, name="issue_preview"),
    path("issues/<int:number>/apply", issue.issue_apply, name="issue_apply"),
    path("issues/<int:number>/bot/confirm", issue.bot_confirm, name="bot_confirm"),
    path("issues/<int:number>/bot/correct", issue.bot_correct, name="bot_correct"),
    path("issues/<int:number>/bisect", issue.bisect, name="bisect"),
    path("decisions/<int:pk>", issue.decision_status, name="decision"),
    path("bisections", lists.bisections, name="bisections"),
    path("bisections/<int:pk>", issue.bisection_status, name="bisection"),
    path("meeting", meeting.meeting, name="meeting"),
    path("meeting/start", meeting.meeting_start, name="meeting_start"),
    path("meeting/end", meeting.meeting_end, name="meeting_end"),
    path("meeting/issues/<int:number>/decide", meeting.meeting_decide, name="meeting_decide"),
    path("meeting/<int:pk>/minutes.md", meeting.meeting_minutes, name="meeting_minutes"),
    path("meeting/issues/<int:number>/item", meeting.meeting_item, name="meeting_item"),
    path("decisions/<int:pk>/undo", meeting.decision_undo, name="decision_undo"),
    path("meeting/decisions/<int:pk>/card", meeting.meeting_card, name="meeting_card"),
    path("meeting/recorded", meeting.meeting_recorded, name="meeting_recorded"),
    path("meeting/followups/<int:pk>/readd", meeting.followup_readd, name="followup_readd"),
    path("meeting/followups/<int:pk>/dismiss", meeting.followup_dismiss, name="followup_dismiss"),
    path("audit", lists.audit, name="audit"),
    path("runners", runners.runners_page, name="runners"),
    path("runners/register", runners.runner_register, name="runner_register"),
    path("runners/<int:pk>/rotate", runners.runner_rotate, name="runner_rotate"),
    path("runners/<int:pk>/revoke", runners.runner_revoke, name="runner_revoke"),
    path("metrics", lists.metrics_page, name="metrics"),
    path("rubric", lists.rubric_health, name="rubric_health"),
    path("rubric/models", models.models_page, name="models"),
    path("history", history.history_page, name="history"),
    path("roster", meeting.roster_add, name="roster_add"),
    path("roster/<int:pk>/remove", meeting.roster_remove, name="roster_remove"),
    path("roster/share", meeting.share_out, name="share_out"),
    path("issues/<int:number>/assign", meeting.issue_assign, name="issue_assign"),
    path("rubric.csv", lists.rubric_health_csv, name="rubric_health_csv"),
    # A failure signature's key: 16 hex digits (rubric/likeness/signature.py).
    re_path(r"^signatures/(?P<key>[0-9a-f]{16})$", groups.signature_group, name="signature_group"),
    re_path(r"^signatures/(?P<key>[0-9a-f]{16})/preview$", groups.group_preview, name="group_preview"),
    re_path(r"^signatures/(?P<key>[0-9a-f]{16})/apply$", groups.group_apply, name="group_apply"),
    path("github/webhook", webhooks.github_webhook, name="github_webhook"),
]
