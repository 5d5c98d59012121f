"""Refreshing an issue's suggestions: the rubric engine's answer stored for the pages to read.

A workflow across models (issues, their comments, labels and bisection runs; the similar issues' index and
the neighbours' vote; suggestions), so it lives here rather than in models.py: the sync, the webhooks, a
finished bisection, an applied decision, the demo and the management commands call it.
"""

from __future__ import annotations

from dataclasses import asdict, replace

from django.db import transaction
from django.db.models import Prefetch
from django.utils import timezone

from rubric_app.github import skill_files
from rubric_app.models import BisectionRun, Issue, IssueQuerySet, Label, LabelEvent, Suggestion
from rubric_app.rubric.engine.assess import evaluate
from rubric_app.rubric.reading.types import Assessment
from rubric_app.triage import evidence, model_store, similar
from rubric_app.vocabulary import HIGH_PRIORITY


def refresh(issues: IssueQuerySet, catalog: frozenset[str] | None = None, batch: int = 500) -> int:
    """Recompute and store the rubric engine's suggestions of these issues; returns how many.

    A few queries per `batch` issues, not per issue: a cold sync refreshes thousands.
    """
    if catalog is None:
        catalog = Label.objects.triage_catalog()
    finished = BisectionRun.objects.filter(status=BisectionRun.Status.DONE).order_by("-created_at")
    ids = list(issues.order_by("pk").values_list("pk", flat=True))
    model = model_store.in_use()  # the promoted model, checked once per refresh (None: the engine's file)
    for start in range(0, len(ids), batch):
        chunk = (
            Issue.objects.filter(pk__in=ids[start : start + batch])
            .order_by("pk")
            .prefetch_related(
                "labels", "comments", Prefetch("bisection_runs", queryset=finished, to_attr="finished_runs")
            )
        )
        _store(list(chunk), catalog, model, later=frozenset(ids[start + batch :]))
    return len(ids)


def refresh_issue(issue: Issue, catalog: frozenset[str] | None = None) -> Assessment:
    """Recompute and store one issue's suggestions; return the Assessment (a finished bisection, a decision)."""
    if catalog is None:
        catalog = Label.objects.triage_catalog()
    return _store([issue], catalog, model_store.in_use())[0]


def _store(
    issues: list[Issue],
    catalog: frozenset[str],
    model=None,
    siblings: bool = True,
    later: frozenset[int] = frozenset(),
) -> list[Assessment]:
    """Run the engine (with `model`, the promoted one, or None: its file) on each issue and replace their stored
    suggestions, route and checklist.

    The issues' rows are locked while theirs are replaced, so two refreshes of one issue (the sync
    and a finished bisection) never leave both sets of suggestions behind. The other open issues sharing
    a failure signature with them take their components from the same evidence (evidence.shared_evidence):
    with `siblings`, they are refreshed next, but those a later batch of the same refresh stores (`later`).
    """
    now = timezone.now()
    texts = [issue.as_issue_text() for issue in issues]
    similar.index(issues, texts)
    votes = similar.neighbours_for_votes(issues)
    shared, others = evidence.shared_evidence(issues, texts)
    # G12: the latest release as last read from the repository (never guessed), and who added `high priority`.
    release, adders = skill_files.current_release(), _high_priority_adders(issues)
    assessments = [
        evaluate(
            replace(
                text,
                neighbours=votes.get(issue.pk, ()),
                shared=shared.get(issue.pk, ()),
                release=release,
                labelled_by=((HIGH_PRIORITY, adders[issue.pk]),) if issue.pk in adders else (),
            ),
            catalog,
            model,
        )
        for issue, text in zip(issues, texts)
    ]
    rows = []
    for issue, assessment in zip(issues, assessments):
        rows += [
            Suggestion(
                issue=issue,
                label=s.label,
                kind=Suggestion.Kind.ADD,
                rule_id=s.rule_id,
                evidence=s.evidence,
                evidence_source=s.evidence_source,
                reason=s.reason,
                confidence=s.confidence,
                source=s.source,
                preselected=s.preselected,
                created_at=now,
            )
            for s in assessment.add
        ] + [
            Suggestion(
                issue=issue,
                label=a.label,
                kind=Suggestion.Kind.AVOID,
                rule_id=a.rule_id,
                evidence=a.evidence,
                evidence_source=a.evidence_source,
                reason=a.reason,
                confidence=1.0,
                created_at=now,
            )
            for a in assessment.avoid
        ]
        issue.suggested_route = assessment.route
        issue.checklist = [asdict(item) for item in assessment.checklist]
        issue.suggestions_updated_at = now
    ids = [issue.pk for issue in issues]
    with transaction.atomic():
        list(Issue.objects.select_for_update().filter(pk__in=ids).order_by("pk").values_list("pk", flat=True))
        Suggestion.objects.filter(issue_id__in=ids).delete()
        Suggestion.objects.bulk_create(rows)
        Issue.objects.bulk_update(issues, ["suggested_route", "checklist", "suggestions_updated_at"])
    others = [other for other in others if other.pk not in later]
    if others and siblings:
        _store(others, catalog, model, siblings=False)
    return assessments


def _high_priority_adders(issues: list[Issue]) -> dict[int, str]:
    """{issue id: who last added `high priority`} from the synced label events (G12.2 asks whether a human did); one
    query, and none when no issue carries the label."""
    ids = [issue.pk for issue in issues if HIGH_PRIORITY in issue.label_names()]
    if not ids:
        return {}
    events = LabelEvent.objects.filter(issue_id__in=ids, label=HIGH_PRIORITY, action="labeled").order_by("created_at")
    return dict(events.values_list("issue_id", "actor"))
