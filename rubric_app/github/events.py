"""A webhook delivery applied to the mirror: which repository it is from, the issue, comment and label events it
carries, each stored as the sync would store it. The receiver (webhooks.py) stores the delivery; a worker runs
process_webhook on it (tasks.process_webhook_task)."""

from __future__ import annotations

from datetime import UTC, datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rubric_app.github import client as github
from rubric_app.github import skill_files
from rubric_app.github.data import parse_time
from rubric_app.github.mirror import SyncReport, bury, gone_label, store_issues
from rubric_app.models import Comment, Issue, Label, WebhookDelivery
from rubric_app.rubric.reading.catalog import allowed_for_triage


def foreign_repository(payload: dict) -> str:
    """Why a webhook payload is not for GITHUB_REPO ("" when it is), whatever its event kind.

    Every event GitHub sends about a repository names it; one that names none (an org hook's
    ping, or a hand-made payload) cannot be shown to be ours, so it is not applied either.
    GitHub compares repository names case-insensitively, and so does this.
    """
    repository = payload.get("repository")
    name = repository.get("full_name") if isinstance(repository, dict) else None
    if not isinstance(name, str) or not name:
        return f"the payload names no repository (this dashboard mirrors {settings.GITHUB_REPO})"
    if name.lower() != settings.GITHUB_REPO.lower():
        return f"from repository {name[:100]}, not {settings.GITHUB_REPO}"
    return ""


def process_webhook(delivery_id: int) -> tuple[list[int], str]:
    """Apply one stored WebhookDelivery to the local mirror, never overwriting newer data; returns the ids of the
    issues it changed and why, for what follows (the caller's: triage/followups.issues_changed): "webhook" for an
    issue's or a comment's event, "label gone" for a label's (its issues lost it: their text did not change, so
    nothing of theirs is bisected on arrival, as after a sync that finds a label gone).

    issues / issue_comment: the payload's issue is upserted if newer (comments of
    issue_comment events are upserted or dropped too); label: the catalog row is
    created, renamed, updated or marked gone, unless it saw a newer label event. A
    delivery of another repository (any event kind) is marked ignored, with the reason,
    and not applied; unknown events are marked processed.
    """
    # Claim, apply and mark processed in one transaction: if the database fails midway,
    # nothing is marked and the (idempotent) task can run again; nothing is lost.
    with transaction.atomic():
        delivery = WebhookDelivery.objects.select_for_update().filter(pk=delivery_id, processed_at__isnull=True).first()
        if delivery is None:
            return [], "webhook"  # already processed (a redelivered task)
        changed: list[int] = []
        try:
            payload = delivery.payload
            delivery.ignored = foreign_repository(payload) if isinstance(payload, dict) else "not a JSON object"
            if not delivery.ignored:
                with transaction.atomic():
                    changed, delivery.ignored, delivery.error = _apply_event(
                        delivery.event, delivery.payload, delivery.replaced
                    )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            delivery.error = f"payload not understood: {exc.__class__.__name__}: {exc}"
        delivery.processed_at = timezone.now()
        delivery.save(update_fields=["processed_at", "error", "ignored"])
    return changed, "label gone" if delivery.event == "label" else "webhook"


def _apply_event(event: str, payload: dict, replaced: dict[str, str] | None = None) -> tuple[list[int], str, str]:
    """Apply an event of our repository; returns (ids of issues changed, why it was not applied or "", what of it
    the database refused or "").

    replaced: what the receiver replaced in the payload's text before storing it (the rows say so)."""
    report = SyncReport(mode="webhook")
    if event == "label":
        changed, ignored = _apply_label_event(payload)
        return changed, ignored, ""
    if event not in ("issues", "issue_comment") or "issue" not in payload:
        return [], "", ""
    data = github.parse_issue(payload["issue"], earlier=_under("issue", replaced))
    action = payload.get("action", "")
    if event == "issues" and action in ("deleted", "transferred"):
        # A tombstone as of the issue's own stamp: an event sent before this one, arriving later, never revives it.
        moved = (((payload.get("changes") or {}).get("new_repository") or {}).get("full_name")) or "another repository"
        bury(data.number, data.updated_at, "deleted on GitHub" if action == "deleted" else f"transferred to {moved}")
        return [], "", ""
    changed = store_issues([data], gh=None, report=report, authoritative=False)
    if event == "issue_comment" and "comment" in payload:
        issue = Issue.objects.filter(number=data.number, gone_at__isnull=True).first()
        comment = github.parse_comment(payload["comment"], earlier=_under("comment", replaced))
        if issue is not None:
            if action == "deleted":
                deleted, _ = Comment.objects.filter(github_id=comment.github_id).delete()
                changed += [issue.pk] if deleted else []
            elif _store_comment(issue, comment):
                changed.append(issue.pk)
    refused = "; ".join(f"issue #{number} {why}" for number, why in report.skipped_issues)
    return sorted(set(changed)), "", refused


def _under(key: str, replaced: dict[str, str] | None) -> dict[str, str]:
    """The receiver's replacements inside the payload's `key` object, by their path there ("title")."""
    prefix = f"{key}."
    return {path[len(prefix) :]: what for path, what in (replaced or {}).items() if path.startswith(prefix)}


def _store_comment(issue: Issue, data: github.CommentData) -> bool:
    """Upsert one comment unless ours is newer; returns True when it changed."""
    current = Comment.objects.filter(github_id=data.github_id).first()
    if current is not None and current.updated_at >= data.updated_at:
        return False
    Comment.objects.update_or_create(
        github_id=data.github_id,
        defaults={
            "issue": issue,
            "author": data.author[:100],
            "author_association": data.association,
            "body": data.body,
            "created_at": data.created_at,
            "updated_at": data.updated_at,
            "replaced": dict(data.replaced),
        },
    )
    return True


def label_event_stamp(payload: dict) -> datetime | None:
    """The ordering key of a label event: the repository's clock in the payload, or None.

    Label payloads carry no updated_at, and no header is signed; but every payload has the
    repository as it was when the event was sent, and its pushed_at / updated_at only move
    forward (a repository like pytorch/pytorch is pushed to every few minutes). An event
    whose stamp is older than the label's event_stamp was sent before an event already
    applied. Equal stamps (no push between two label changes) and missing ones cannot be
    ordered: they resolve towards "gone" (_apply_label_event), and a resent copy of the same
    delivery is caught by its body hash.
    """
    repository = payload.get("repository") or {}
    stamps = []
    for key in ("pushed_at", "updated_at"):
        value = repository.get(key)
        if isinstance(value, int):  # push events give pushed_at as a Unix time
            stamps.append(datetime.fromtimestamp(value, tz=UTC))
        elif isinstance(value, str) and value:
            stamps.append(parse_time(value))
    return max(stamps) if stamps else None


def _apply_label_event(payload: dict) -> tuple[list[int], str]:
    """Apply a label event unless a newer one was applied to its label(s); returns (the ids of the issues that lost a
    label, why it was not applied or "").

    A deleted label leaves every issue; a renamed one is the same row under its new name (its issues follow), and its
    old name is kept gone with the event's stamp (a late event, or an issue's late payload, naming it finds it gone).
    Events whose order cannot be told (equal or missing stamps) resolve towards "gone": a deletion applies, and a
    creation or rename onto a label left gone that way is applied out of the catalog, unconfirmed until GitHub says
    whether it has it (the next sync asks: mirror.confirm_labels, which takes a label it lacks off every issue). Never
    the other way round: a label the catalog has only by a guess could be offered to a triager, and GitHub creates a
    label it is asked to add.
    """
    data = github.parse_label(payload["label"])
    action = payload.get("action", "")
    stamp = label_event_stamp(payload)
    old_name = ((payload.get("changes") or {}).get("name") or {}).get("from") if action == "edited" else None
    names = {data.name, old_name} - {None}
    rows = {label.name: label for label in Label.objects.select_for_update().filter(name__in=names)}
    newest = max(filter(None, (label.event_stamp for label in rows.values())), default=None)
    if stamp is not None and newest is not None and stamp < newest:
        older = (
            f"an older label event ({stamp:%Y-%m-%d %H:%M:%S}) than one already applied ({newest:%Y-%m-%d %H:%M:%S})"
        )
        return [], older
    unsure = stamp is None or stamp == newest
    if action == "deleted":
        # A row even for a label we never had: it keeps the deletion's stamp, so that a late
        # "created" or "edited" sent before the deletion does not bring the label back.
        return gone_label(data.name, stamp, unconfirmed=unsure), ""
    label = rows.get(data.name)
    # Onto a label left gone by an event it cannot be ordered against: applied, but out of the catalog until GitHub
    # says it has the label (the next sync asks), so no triager is offered it meanwhile.
    doubt = label is not None and not label.in_catalog and (unsure or label.event_stamp is None)
    renamed = rows.get(old_name) if old_name and old_name != data.name else None
    renamed = renamed if renamed is not None and renamed.in_catalog else None
    if renamed is not None and label is not None:
        # Renamed onto a name we already have a row for (GitHub deleted that label and we missed
        # the event, or an issue carried it first): one label now, its issues keep it.
        label.issues.add(*renamed.issues.all())
        renamed.delete()
    label = label or renamed or Label(name=data.name)
    label.name, label.color, label.description = data.name, data.color, data.description
    label.in_catalog, label.unconfirmed = not doubt, doubt
    label.allowed_for_triage = allowed_for_triage(data.name, skill_files.in_use().names())
    label.event_stamp = stamp or label.event_stamp
    label.save()
    lost = []
    if old_name and old_name != data.name:
        # The old name is gone: late events and payloads naming it find it so. Issues still carrying it (a row out
        # of the catalog, whose issues the rename did not follow) lose it.
        lost = gone_label(old_name, stamp)
    if doubt:
        when = f"{stamp:%Y-%m-%d %H:%M:%S}" if stamp else "no stamp"
        return lost, (
            f"a {action} event ({when}) that cannot be ordered against the label's deletion: applied, but kept out "
            "of the catalog until GitHub says it has the label (the next sync asks)"
        )
    return lost, ""
