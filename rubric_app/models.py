"""The triage dashboard's data.

Issues, comments and labels mirror GitHub (GitHub is the source of truth; the
sync upserts). Suggestions are what the rubric engine derived from an issue.
BisectionRun is one sandboxed backend bisection. TriageDecision is one request
by a person to change an issue on GitHub and doubles as the audit entry;
GitHubWrite records each HTTP call it made and GitHub's answer.
"""

from __future__ import annotations

from dataclasses import asdict

from django.conf import settings
from django.db import models, transaction
from django.db.models import Prefetch, Q
from django.urls import reverse
from django.utils import timezone

from rubric_app import rubric

PT2_ONCALL = "oncall: pt2"
CPU_INDUCTOR_ONCALL = "oncall: cpu inductor"
TRIAGED = "triaged"
TRIAGE_REVIEW = "triage review"
NEEDS_REPRODUCTION = "needs reproduction"
HIGH_PRIORITY = "high priority"


def readable_text_color(background: str) -> str:
    """Black or white, whichever reads better on a label's hex colour (as GitHub does)."""
    try:
        r, g, b = (int(background[i : i + 2], 16) for i in (0, 2, 4))
    except ValueError:
        return "000000"
    return "000000" if (r * 299 + g * 587 + b * 114) / 1000 > 140 else "ffffff"


class LabelQuerySet(models.QuerySet):
    def triage_catalog(self) -> frozenset[str]:
        """Names the dashboard may suggest or apply (the catalog minus G7's forbidden ones)."""
        return frozenset(self.filter(allowed_for_triage=True, in_catalog=True).values_list("name", flat=True))


class Label(models.Model):
    """A label of the repo's catalog, as GitHub has it.

    allowed_for_triage is False for labels the rubric forbids (G7) or that are
    not in the shipped triage catalog: the dashboard shows them but never applies them.
    """

    name = models.CharField(max_length=100, unique=True)
    color = models.CharField(max_length=6, default="ededed")
    description = models.TextField(blank=True)
    allowed_for_triage = models.BooleanField(default=False)
    in_catalog = models.BooleanField(default=True, help_text="Present on GitHub at the last catalog sync.")

    objects = LabelQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_module(self) -> bool:
        return self.name.startswith("module:")

    @property
    def is_oncall(self) -> bool:
        return self.name.startswith("oncall:")


class IssueQuerySet(models.QuerySet):
    def in_queue(self) -> IssueQuerySet:
        return self.filter(in_queue=True, state=Issue.State.OPEN)

    def for_queue(self, lane: str = "pt2") -> IssueQuerySet:
        """The rows of the queue page for one lane, with what each row shows prefetched.

        Lanes: "pt2" (oncall: pt2, not yet triaged), "cpu" (oncall: cpu inductor),
        "review" (flagged triage review), "repro" (needs reproduction), "all".
        """
        qs = self.in_queue()
        if lane == "pt2":
            qs = qs.filter(labels__name=PT2_ONCALL).exclude(labels__name=TRIAGED)
        elif lane == "cpu":
            qs = qs.filter(labels__name=CPU_INDUCTOR_ONCALL)
        elif lane == "review":
            qs = qs.filter(labels__name=TRIAGE_REVIEW)
        elif lane == "repro":
            qs = qs.filter(labels__name=NEEDS_REPRODUCTION)
        return qs.prefetch_related(
            "labels",
            Prefetch(
                "suggestions",
                queryset=Suggestion.objects.filter(kind=Suggestion.Kind.ADD).order_by("-confidence"),
                to_attr="add_suggestions",
            ),
        ).order_by("-updated_at")

    def refresh_suggestions(self, catalog: frozenset[str] | None = None, batch: int = 500) -> int:
        """Recompute and store the rubric engine's suggestions of these issues; returns how many.

        A few queries per `batch` issues, not per issue: a cold sync refreshes thousands.
        """
        if catalog is None:
            catalog = Label.objects.triage_catalog()
        finished = BisectionRun.objects.filter(status=BisectionRun.Status.DONE).order_by("-created_at")
        ids = list(self.order_by("pk").values_list("pk", flat=True))
        for start in range(0, len(ids), batch):
            issues = Issue.objects.filter(pk__in=ids[start : start + batch]).order_by("pk").prefetch_related(
                "labels", "comments", Prefetch("bisection_runs", queryset=finished, to_attr="finished_runs")
            )
            _store_suggestions(list(issues), catalog)
        return len(ids)

    def for_meeting(self, since) -> IssueQuerySet:
        """Issues flagged `triage review` (R11) since `since` and still undecided."""
        qs = self.in_queue().filter(labels__name=TRIAGE_REVIEW)
        if since is not None:
            qs = qs.filter(Q(review_flagged_at__gte=since) | Q(review_flagged_at__isnull=True))
        return qs.prefetch_related("labels", "suggestions").order_by("review_flagged_at", "number")


class Issue(models.Model):
    class State(models.TextChoices):
        OPEN = "open"
        CLOSED = "closed"

    number = models.PositiveIntegerField(unique=True)
    repo = models.CharField(max_length=200, default="pytorch/pytorch")
    title = models.CharField(max_length=1024)
    body = models.TextField(blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.OPEN)
    author = models.CharField(max_length=100, blank=True)
    html_url = models.URLField(max_length=500, blank=True)
    is_pull_request = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now, help_text="GitHub's updated_at.")
    comments_count = models.PositiveIntegerField(default=0)
    labels = models.ManyToManyField(Label, related_name="issues", blank=True)
    in_queue = models.BooleanField(
        default=True, help_text="Open and labelled oncall: pt2 or oncall: cpu inductor at the last sync."
    )
    last_synced_at = models.DateTimeField(null=True, blank=True)
    comments_synced_at = models.DateTimeField(null=True, blank=True)
    # When the `triage review` label was first seen: the meeting agenda is "since the last meeting".
    review_flagged_at = models.DateTimeField(null=True, blank=True)
    # What the rubric engine concluded, besides the per-label Suggestion rows.
    suggested_route = models.CharField(max_length=40, blank=True)
    checklist = models.JSONField(default=list, blank=True)
    suggestions_updated_at = models.DateTimeField(null=True, blank=True)

    objects = IssueQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at"]
        indexes = [
            models.Index(fields=["in_queue", "state", "-updated_at"], name="issue_queue_idx"),
            models.Index(fields=["author"], name="issue_author_idx"),
        ]

    def __str__(self) -> str:
        return f"#{self.number} {self.title}"

    def get_absolute_url(self) -> str:
        return reverse("rubric_app:issue", args=[self.number])

    def label_names(self) -> list[str]:
        """Current label names, sorted; uses the prefetch cache when there is one."""
        return sorted(label.name for label in self.labels.all())

    def has_label(self, name: str) -> bool:
        return name in self.label_names()

    @property
    def module_labels(self) -> list[str]:
        return [name for name in self.label_names() if name.startswith("module:")]

    def as_issue_text(self) -> rubric.IssueText:
        """This issue as the rubric engine's input, with the verdicts of finished bisections."""
        runs = getattr(self, "finished_runs", None)  # prefetched by IssueQuerySet.refresh_suggestions
        if runs is None:
            runs = self.bisection_runs.filter(status=BisectionRun.Status.DONE).order_by("-created_at")
        runs = runs[:3]
        bisection = tuple(
            rubric.BisectionEvidence(
                label=item["label"], rule_id=item["rule_id"], evidence=item.get("evidence", ""), run_id=run.pk
            )
            for run in runs
            for item in run.verdict_labels
        )
        return rubric.IssueText(
            number=self.number,
            title=self.title,
            body=self.body,
            comments=tuple(
                rubric.CommentText(body=c.body, author=c.author, github_id=c.github_id) for c in self.comments.all()
            ),
            labels=tuple(self.label_names()),
            bisection=bisection,
            author=self.author,
        )

    def refresh_suggestions(self, catalog: frozenset[str] | None = None) -> rubric.Assessment:
        """Recompute and store the rubric engine's suggestions; return the Assessment.

        Called when a bisection run finishes or a decision is applied; the sync refreshes many
        issues at once through IssueQuerySet.refresh_suggestions.
        """
        if catalog is None:
            catalog = Label.objects.triage_catalog()
        return _store_suggestions([self], catalog)[0]

    @property
    def lane(self) -> str:
        names = self.label_names()
        if CPU_INDUCTOR_ONCALL in names:
            return "cpu"
        return "pt2"


def _store_suggestions(issues: list[Issue], catalog: frozenset[str]) -> list[rubric.Assessment]:
    """Run the engine on each issue and replace their stored suggestions, route and checklist.

    The issues' rows are locked while theirs are replaced, so two refreshes of one issue (the sync
    and a finished bisection) never leave both sets of suggestions behind.
    """
    now = timezone.now()
    assessments = [rubric.evaluate(issue.as_issue_text(), catalog) for issue in issues]
    rows = []
    for issue, assessment in zip(issues, assessments):
        rows += [
            Suggestion(
                issue=issue, label=s.label, kind=Suggestion.Kind.ADD, rule_id=s.rule_id, evidence=s.evidence,
                evidence_source=s.evidence_source, reason=s.reason, confidence=s.confidence, source=s.source,
                preselected=s.preselected, created_at=now,
            )
            for s in assessment.add
        ] + [
            Suggestion(
                issue=issue, label=a.label, kind=Suggestion.Kind.AVOID, rule_id=a.rule_id, evidence=a.evidence,
                evidence_source=a.evidence_source, reason=a.reason, confidence=1.0, created_at=now,
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
    return assessments


class Comment(models.Model):
    issue = models.ForeignKey(Issue, on_delete=models.CASCADE, related_name="comments")
    github_id = models.BigIntegerField(unique=True)
    author = models.CharField(max_length=100, blank=True)
    body = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "github_id"]

    def __str__(self) -> str:
        return f"comment {self.github_id} on #{self.issue.number}"


class Suggestion(models.Model):
    """One thing the rubric engine says about an issue's labels, with its rule and evidence."""

    class Kind(models.TextChoices):
        ADD = "add", "add"
        AVOID = "avoid", "avoid"

    class Source(models.TextChoices):
        RULE = "rule", "rule"
        MODEL = "model", "model"
        BISECTION = "bisection", "bisection"

    issue = models.ForeignKey(Issue, on_delete=models.CASCADE, related_name="suggestions")
    # A name, not a FK: the rubric may name a label the catalog lacks (R7.4).
    label = models.CharField(max_length=100)
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.ADD)
    rule_id = models.CharField(max_length=20)
    evidence = models.TextField(blank=True)
    # Where the evidence was found: "title", "body", "comment:<github id>", "bisection:<run id>", "code".
    evidence_source = models.CharField(max_length=60, blank=True)
    reason = models.TextField(blank=True)
    # A calibrated probability (of labels shown at 0.9, about 9 in 10 are right).
    confidence = models.FloatField(default=0.5)
    # Ticked on the issue page: what "accept" (the `a` key) applies; the rest are shown as "possible".
    # Rows written before calibration existed were all ticked: the default keeps that meaning.
    preselected = models.BooleanField(default=True)
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.RULE)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-confidence", "label"]
        indexes = [models.Index(fields=["issue", "kind"], name="suggestion_issue_kind_idx")]

    def __str__(self) -> str:
        return f"{self.kind} {self.label} ({self.rule_id})"


class BisectionRunQuerySet(models.QuerySet):
    def stuck(self, before) -> BisectionRunQuerySet:
        """Queued since before `before`: its task message may never have reached a worker."""
        return self.filter(status=BisectionRun.Status.QUEUED, created_at__lt=before)

    def recent(self) -> BisectionRunQuerySet:
        return self.select_related("issue", "requested_by").order_by("-created_at")


class BisectionRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    class Device(models.TextChoices):
        CPU = "cpu", "CPU"
        CUDA = "cuda", "GPU (cuda)"
        # Bisect on CPU on a GPU worker, re-running an Inductor failure on cuda: R2.4's test.
        BOTH = "both", "CPU, then cuda for an Inductor failure (R2.4)"

    issue = models.ForeignKey(Issue, on_delete=models.CASCADE, related_name="bisection_runs")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    device = models.CharField(max_length=10, choices=Device.choices, default=Device.CPU)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    # The exact code that ran, after the triager's edits.
    repro_code = models.TextField()
    repro_style = models.CharField(max_length=10, default="script", help_text="script or module")
    torch_version = models.CharField(max_length=100, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    # One entry per mode, in order: {"mode", "status", "phase", "exception", "message", "wall_s", ...}.
    results = models.JSONField(default=list, blank=True)
    current_mode = models.CharField(max_length=60, blank=True)
    verdict_labels = models.JSONField(default=list, blank=True)
    verdict_summary = models.TextField(blank=True)
    sandbox_report = models.JSONField(default=dict, blank=True)
    log = models.TextField(blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = BisectionRunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["issue", "-created_at"], name="bisection_issue_idx")]
        permissions = [("run_bisection", "Can run a sandboxed bisection of an issue's repro")]

    def __str__(self) -> str:
        return f"bisection {self.pk} of #{self.issue.number} on {self.device}: {self.status}"

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)

    @property
    def duration_s(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None


class MeetingQuerySet(models.QuerySet):
    def last_held(self) -> Meeting | None:
        return self.filter(ended_at__isnull=False).order_by("-ended_at").first()


class Meeting(models.Model):
    """A weekly triage meeting: the agenda is what was flagged since the previous one ended."""

    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    chair = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    minutes = models.TextField(blank=True)

    objects = MeetingQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"meeting of {self.started_at:%Y-%m-%d}"


class TriageDecisionQuerySet(models.QuerySet):
    def stuck(self, before) -> TriageDecisionQuerySet:
        """Pending since before `before`: its task message may never have reached a worker."""
        return self.filter(status=TriageDecision.Status.PENDING, created_at__lt=before)

    def for_audit(self) -> TriageDecisionQuerySet:
        return self.select_related("issue", "user").prefetch_related("writes").order_by("-created_at")


class TriageDecision(models.Model):
    """A person's request to change an issue on GitHub, and its audit record.

    labels_seen is what the triager's page showed: the apply step re-reads
    GitHub and stops with CONFLICT if the issue's labels differ from it.
    """

    class Status(models.TextChoices):
        PENDING = "pending"
        APPLYING = "applying"
        APPLIED = "applied"
        FAILED = "failed"
        CONFLICT = "conflict"
        REFUSED = "refused"

    issue = models.ForeignKey(Issue, on_delete=models.CASCADE, related_name="decisions")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    labels_seen = models.JSONField(default=list, blank=True)
    labels_added = models.JSONField(default=list, blank=True)
    labels_removed = models.JSONField(default=list, blank=True)
    # The oncall queue the issue was redirected to, if this decision handed it off.
    redirect = models.CharField(max_length=100, blank=True)
    # For meeting decisions: "high priority", "triaged", "needs reproduction", "low priority", "close".
    meeting_decision = models.CharField(max_length=40, blank=True)
    meeting = models.ForeignKey(Meeting, on_delete=models.SET_NULL, null=True, blank=True, related_name="decisions")
    close_issue = models.BooleanField(default=False)
    note = models.TextField(blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    # Human-readable outcome: GitHub's answer, the conflict's difference, or why it was refused.
    result_message = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TriageDecisionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "created_at"], name="decision_status_idx")]
        permissions = [
            ("apply_labels", "Can apply labels, flags and redirects to GitHub"),
            ("record_meeting_decision", "Can record triage-meeting decisions (including high priority)"),
        ]

    def __str__(self) -> str:
        return f"decision {self.pk} on #{self.issue.number}: {self.status}"

    @property
    def is_finished(self) -> bool:
        return self.status not in (self.Status.PENDING, self.Status.APPLYING)


class GitHubWrite(models.Model):
    """One mutating HTTP request made to GitHub for a decision, with GitHub's answer."""

    decision = models.ForeignKey(TriageDecision, on_delete=models.CASCADE, related_name="writes")
    action = models.CharField(max_length=40, help_text="add_label, remove_label, close, comment")
    target = models.CharField(max_length=200, blank=True)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    ok = models.BooleanField(default=False)
    response = models.TextField(blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return f"{self.action} {self.target}: {self.status_code}"


class SyncState(models.Model):
    """Where a sync of one queue stands: its high-water mark, ETag and resume point."""

    key = models.CharField(max_length=100, unique=True)
    high_water_mark = models.DateTimeField(null=True, blank=True)
    etag = models.CharField(max_length=200, blank=True)
    # The page URL to resume an interrupted full sync from; empty when none is in progress.
    resume_url = models.TextField(blank=True)
    last_started_at = models.DateTimeField(null=True, blank=True)
    last_finished_at = models.DateTimeField(null=True, blank=True)
    last_full_sync_at = models.DateTimeField(null=True, blank=True)
    last_requests = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    # Set while a sync holds the row's claim, so two syncs (beat, a webhook-triggered or a manual
    # one) never run at once; a claim older than the lease is a dead worker's and is taken over.
    running_since = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.key


class WebhookDeliveryQuerySet(models.QuerySet):
    def stuck(self, before) -> WebhookDeliveryQuerySet:
        """Received before `before` and still unprocessed: its task may never have reached a worker."""
        return self.filter(processed_at__isnull=True, received_at__lt=before)


class WebhookDelivery(models.Model):
    """A received GitHub webhook delivery; the unique id makes replays no-ops."""

    delivery_id = models.CharField(max_length=100, unique=True)
    event = models.CharField(max_length=50)
    payload = models.JSONField(default=dict)
    received_at = models.DateTimeField(default=timezone.now)
    processed_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)

    objects = WebhookDeliveryQuerySet.as_manager()

    class Meta:
        ordering = ["-received_at"]

    def __str__(self) -> str:
        return f"{self.event} {self.delivery_id}"


__all__ = [
    "Label",
    "Issue",
    "Comment",
    "Suggestion",
    "BisectionRun",
    "Meeting",
    "TriageDecision",
    "GitHubWrite",
    "SyncState",
    "WebhookDelivery",
]
