from django.contrib import admin

from .models import (
    BisectionRun,
    Comment,
    GitHubWrite,
    Issue,
    Label,
    Meeting,
    Suggestion,
    SyncState,
    TriageDecision,
    WebhookDelivery,
)


@admin.register(Label)
class LabelAdmin(admin.ModelAdmin):
    list_display = ("name", "color", "allowed_for_triage", "in_catalog")
    list_filter = ("allowed_for_triage", "in_catalog")
    search_fields = ("name", "description")


class CommentInline(admin.TabularInline):
    model = Comment
    extra = 0
    fields = ("github_id", "author", "created_at")
    readonly_fields = fields
    show_change_link = True


class SuggestionInline(admin.TabularInline):
    model = Suggestion
    extra = 0
    fields = ("kind", "label", "rule_id", "confidence", "source", "evidence")
    readonly_fields = fields


@admin.register(Issue)
class IssueAdmin(admin.ModelAdmin):
    list_display = ("number", "title", "state", "author", "in_queue", "updated_at")
    list_filter = ("state", "in_queue", "is_pull_request")
    search_fields = ("=number", "title", "author")
    filter_horizontal = ("labels",)
    date_hierarchy = "updated_at"
    inlines = [SuggestionInline, CommentInline]


@admin.register(Comment)
class CommentAdmin(admin.ModelAdmin):
    list_display = ("github_id", "issue", "author", "created_at")
    list_select_related = ("issue",)
    search_fields = ("=issue__number", "author")
    raw_id_fields = ("issue",)


@admin.register(Suggestion)
class SuggestionAdmin(admin.ModelAdmin):
    list_display = ("issue", "kind", "label", "rule_id", "confidence", "source")
    list_filter = ("kind", "source", "rule_id")
    list_select_related = ("issue",)
    raw_id_fields = ("issue",)


@admin.register(BisectionRun)
class BisectionRunAdmin(admin.ModelAdmin):
    list_display = ("pk", "issue", "device", "status", "requested_by", "created_at")
    list_filter = ("status", "device")
    list_select_related = ("issue", "requested_by")
    raw_id_fields = ("issue",)


class GitHubWriteInline(admin.TabularInline):
    model = GitHubWrite
    extra = 0
    readonly_fields = ("action", "target", "status_code", "ok", "response", "at")


@admin.register(TriageDecision)
class TriageDecisionAdmin(admin.ModelAdmin):
    list_display = ("pk", "issue", "user", "status", "redirect", "meeting_decision", "created_at")
    list_filter = ("status",)
    list_select_related = ("issue", "user")
    raw_id_fields = ("issue", "meeting")
    inlines = [GitHubWriteInline]


@admin.register(GitHubWrite)
class GitHubWriteAdmin(admin.ModelAdmin):
    list_display = ("decision", "action", "target", "status_code", "ok", "at")
    list_select_related = ("decision",)


@admin.register(Meeting)
class MeetingAdmin(admin.ModelAdmin):
    list_display = ("started_at", "ended_at", "chair")


@admin.register(SyncState)
class SyncStateAdmin(admin.ModelAdmin):
    list_display = ("key", "high_water_mark", "last_finished_at", "last_requests", "last_error")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ("delivery_id", "event", "received_at", "processed_at", "ignored", "error")
    list_filter = ("event",)
