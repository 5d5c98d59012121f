"""The triage dashboard's data.

Issues, comments and labels mirror GitHub (GitHub is the source of truth; the
sync upserts). Suggestions are what the rubric engine derived from an issue.
BisectionRun is one sandboxed backend bisection. TriageDecision is one request
by a person to change an issue on GitHub and doubles as the audit entry;
GitHubWrite records each HTTP call it made and GitHub's answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import date, datetime, timedelta

from django.conf import settings
from django.db import connections, models
from django.db.models import Case, Exists, F, FloatField, OuterRef, Prefetch, Q, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone

from rubric_app import search, search_index

# The bookkeeping models live beside these (bookkeeping.py); the app's models are read from here.
from rubric_app.bookkeeping import (
    RUNNER_NAME_PATTERN,
    GitHubCredential,
    QueueVersion,
    Runner,
    RunnerEvent,
    RunnerQuerySet,
    SkillFile,
    SkillFileQuerySet,
    SyncState,
    TrainedModel,
    TrainedModelQuerySet,
    WebhookDelivery,
    WebhookDeliveryQuerySet,
    WorkerHeartbeat,
    WorkerHeartbeatQuerySet,
    queue_state,
)
from rubric_app.lanes import LANE_BY_CODE, LANES
from rubric_app.rubric.reading.automation import Automation, read_automation
from rubric_app.rubric.reading.catalog import known_label
from rubric_app.rubric.reading.text import sources_of
from rubric_app.rubric.reading.types import BisectionEvidence, CommentText, IssueText, Neighbour
from rubric_app.vocabulary import (
    AUTO_RUN_QUEUES,
    FEEDBACK_LABELS,
    LANE_ALL,
    LANE_BOT,
    LANE_PT2,
    MODULE_REGRESSION,
    RECHECK_RUN_QUEUES,
    REGRESSION,
    RUN_QUEUES,
    TRIAGE_REVIEW,
    is_component,
    is_module,
    is_oncall,
)
from rubric_app.vocabulary import Kind as FindingKind


class LabelQuerySet(models.QuerySet):
    def triage_catalog(self) -> frozenset[str]:
        """Names the dashboard may suggest or apply (the catalog minus G7's forbidden ones)."""
        return frozenset(self.filter(allowed_for_triage=True, in_catalog=True).values_list("name", flat=True))

    def feedback_catalog(self) -> frozenset[str]:
        """The feedback labels (FEEDBACK_LABELS) the repository's synced label list has: only these may be added."""
        return frozenset(self.filter(name__in=FEEDBACK_LABELS, in_catalog=True).values_list("name", flat=True))


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
    # Label events carry no updated_at: their ordering key is the repository's own clock in the
    # (signed) payload, see events.label_event_stamp. An event older than this is never applied.
    event_stamp = models.DateTimeField(null=True, blank=True)
    # Label events of equal or missing stamps cannot be ordered: they leave a label gone, and this set, until GitHub
    # says whether it has the label (the next sync asks it: mirror.confirm_labels).
    unconfirmed = models.BooleanField(default=False)

    objects = LabelQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_module(self) -> bool:
        return is_module(self.name)

    @property
    def is_oncall(self) -> bool:
        return is_oncall(self.name)


class IssueQuerySet(models.QuerySet):
    def in_queue(self) -> IssueQuerySet:
        return self.filter(in_queue=True, state=Issue.State.OPEN)

    def for_queue(self, lane: str = LANE_PT2) -> IssueQuerySet:
        """The rows of the queue page for one lane (LANES), with what each row shows prefetched."""
        qs = LANE_BY_CODE.get(lane, LANE_BY_CODE[LANE_ALL]).filter(self.in_queue())
        return (
            qs.select_related("possible_duplicate")
            .prefetch_related(
                "labels",
                Prefetch(
                    "suggestions",
                    queryset=Suggestion.objects.filter(kind=Suggestion.Kind.ADD).order_by("-confidence"),
                    to_attr="add_suggestions",
                ),
            )
            .order_by("-updated_at")
        )

    def with_decision_in_flight(self) -> IssueQuerySet:
        """These issues annotated with decision_in_flight: a decision of theirs is pending or being applied (the
        queue's `j` passes over them: someone has decided already). A subquery column: no query of its own."""
        return self.annotate(decision_in_flight=Exists(TriageDecision.objects.in_flight().filter(issue=OuterRef("pk"))))

    def not_waiting(self) -> IssueQuerySet:
        """These issues less the ones already waiting: flagged for the meeting (R11) or with a decision on its way
        to GitHub (what `j` passes over on the issue page)."""
        in_flight = TriageDecision.objects.in_flight().filter(issue=OuterRef("pk"))
        return self.exclude(labels__name=TRIAGE_REVIEW).exclude(Exists(in_flight))

    def bot_unreviewed(self, since=None) -> IssueQuerySet:
        """The "bot-triaged, not reviewed" lane (LANES), with for_queue's prefetches; `since`: the window's start,
        on updated_at."""
        qs = self.for_queue(LANE_BOT)
        return qs.filter(updated_at__gte=since) if since is not None else qs

    def search(self, text: str) -> IssueQuerySet:
        """These issues matching the search `text`, best match first, each annotated with `search_rank`.

        The database's full-text search with English stemming and the synonyms of
        rubric_app/search.py: PostgreSQL's stored tsvector, or SQLite's FTS5 table on the
        embedded default (rubric_app/search_index.py). Title matches outrank body matches, which
        outrank comment matches. Text that names an issue ("#170029", an issue URL) also matches
        that issue, ranked first. Never raises on what a person typed; no word: no issue.
        """
        number = search.issue_number(text)
        clauses = search.parse(str(number) if number is not None else text)
        if not any(not c.negated for c in clauses):
            return self.none()
        if connections[self.db].vendor == "postgresql":
            vector, query = search_index.postgres_match(clauses)
            match = Q(search_vector=query) | Q(number=number) if number is not None else Q(search_vector=query)
            qs, rank = self.alias(search_vector=vector).filter(match), search_index.postgres_rank(vector, query)
        else:  # SQLite's FTS5 indexes the number too: the join finds the issue itself
            qs, rank = search_index.sqlite_search(self, search.fts5_match(clauses), number is not None)
        exact = Case(When(number=number, then=Value(1000.0)), default=Value(0.0)) if number is not None else Value(0.0)
        return qs.annotate(search_rank=Coalesce(rank, Value(0.0), output_field=FloatField()) + exact).order_by(
            F("search_rank").desc(), "-updated_at"
        )

    def for_meeting(self) -> IssueQuerySet:
        """The meeting's agenda: every issue still flagged `triage review` (R11) that no decision has settled.

        An issue stays on it from meeting to meeting until a decision takes the flag off on GitHub.
        A meeting decision on its way there (pending, applying) takes it off the agenda; one that
        was refused, failed or met a conflict leaves it on, and the latest meeting decision's
        status, decision and message are annotated (last_try_*) so the page can mark it.
        """
        tries = TriageDecision.objects.filter(issue=OuterRef("pk"), meeting__isnull=False)
        in_flight = tries.in_flight()
        latest = tries.order_by("-created_at", "-pk")
        return (
            self.in_queue()
            .filter(labels__name=TRIAGE_REVIEW)
            .exclude(Exists(in_flight))
            .annotate(
                last_try_status=Subquery(latest.values("status")[:1]),
                last_try_decision=Subquery(latest.values("meeting_decision")[:1]),
                last_try_message=Subquery(latest.values("result_message")[:1]),
            )
            .prefetch_related("labels", "suggestions")
            .order_by("review_flagged_at", "number")
        )


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
    # GitHub's closed_at: the queue-health charts count outflow by it (rubric_app/triage/metrics.py).
    closed_at = models.DateTimeField(null=True, blank=True)
    # When its first decision from the dashboard was made (that decision applied): time to triage,
    # kept here so the metrics page reads the window's issues, not the whole audit log.
    first_decided_at = models.DateTimeField(null=True, blank=True, db_index=True)
    comments_count = models.PositiveIntegerField(default=0)
    labels = models.ManyToManyField(Label, related_name="issues", blank=True)
    in_queue = models.BooleanField(
        default=True, help_text="Open and labelled oncall: pt2 or oncall: cpu inductor at the last sync."
    )
    last_synced_at = models.DateTimeField(null=True, blank=True)
    comments_synced_at = models.DateTimeField(null=True, blank=True)
    # When the `triage review` label was first seen: the agenda lists the longest-waiting first.
    review_flagged_at = models.DateTimeField(null=True, blank=True)
    # What the rubric engine concluded, besides the per-label Suggestion rows.
    suggested_route = models.CharField(max_length=40, blank=True)
    checklist = models.JSONField(default=list, blank=True)
    suggestions_updated_at = models.DateTimeField(null=True, blank=True)
    # The failure signature (rubric/likeness/signature.py), recomputed with the suggestions: its key, only when
    # specific enough to group issues by ("" otherwise), and its parts for people.
    signature = models.CharField(max_length=16, blank=True, db_index=True)
    signature_text = models.CharField(max_length=400, blank=True, help_text="exception: message in innermost frame")
    signature_parts = models.JSONField(default=dict, blank=True)
    # What its repro's runs on several torch builds say (build_checks.py): "regression", "may_be_fixed", or ""
    # (nothing to compare, fails or passes on both), and the comparison itself for the page.
    build_finding = models.CharField(max_length=20, blank=True, db_index=True)
    build_comparison = models.JSONField(default=dict, blank=True)
    # GitHub's state_reason once closed (completed, not_planned, duplicate): "closed as completed on ..." (similar.py).
    state_reason = models.CharField(max_length=20, blank=True)
    # Read from its thread where the index is refreshed (rubric/likeness/duplicates.py): the issue someone named as the
    # one this duplicates ("Duplicate of #N"), and the fix someone named ("fixed by #123").
    named_original = models.PositiveIntegerField(null=True, blank=True)
    named_fix = models.CharField(max_length=40, blank=True)
    # Who named the original ("@login (member)", "GitHub: closed as a duplicate"): only standing names one (RUBRIC
    # possible duplicates: a stranger's sentence moves no mark), and the mark's evidence says who it was.
    named_original_by = models.CharField(max_length=120, blank=True)
    # The build its thread says the fix is in ("the 2026-09-20 nightly", "2.12"), said by someone with standing.
    fixed_in = models.CharField(max_length=60, blank=True)
    # The possible-duplicate mark (rubric_app/triage/duplicates.py): its best original when that clears the
    # calibrated threshold, the score, and why ("both name `diagonal_scatter`", "titles share ..."); none below it.
    possible_duplicate = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    possible_duplicate_score = models.FloatField(null=True, blank=True)
    possible_duplicate_reasons = models.JSONField(default=list, blank=True)
    # GitHub's text that could not be stored as sent (data.storable): {"title": "1 lone surrogate"}; its page shows it.
    replaced = models.JSONField(default=dict, blank=True)
    # A tombstone: deleted on GitHub or transferred away, as of GitHub's stamp (gone_at). Data no newer than it (a late
    # event sent before the deletion) never brings the issue back (mirror.store_issues).
    gone_at = models.DateTimeField(null=True, blank=True)
    gone = models.CharField(max_length=200, blank=True, help_text='Why it left GitHub: "deleted", "transferred to ..."')
    # When it left the queue open (handed off, transferred, deleted), as the mirror learned it: an applied decision's
    # moment, a tombstone's, or GitHub's stamp of the change a sync saw; the metrics count it "left" that week.
    left_queue_at = models.DateTimeField(null=True, blank=True)

    objects = IssueQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at"]
        indexes = [
            models.Index(fields=["in_queue", "state", "-updated_at"], name="issue_queue_idx"),
            models.Index(fields=["author"], name="issue_author_idx"),
            # The queue's rows alone: with the history beside them, the planner (SQLite's above all) knows the
            # queue is a few of the issues and starts there, not from the labels' or the signatures' index.
            models.Index(fields=["-updated_at"], condition=Q(in_queue=True, state="open"), name="issue_open_queue_idx"),
        ]

    def __str__(self) -> str:
        return f"#{self.number} {self.title}"

    def get_absolute_url(self) -> str:
        return reverse("rubric_app:issue", args=[self.number])

    @property
    def github_web_url(self) -> str:
        """The issue's page on the GitHub this dashboard uses (settings.GITHUB_URL): github.com, or the demo
        GitHub's own page of it in the demo, never github.com's page of an issue only the demo has."""
        return self.github_page(self.number, self.repo)

    @staticmethod
    def github_page(number: int, repo: str) -> str:
        """Issue `number` of `repo`'s page on the GitHub this dashboard uses, whether the mirror holds it or not."""
        return f"{settings.GITHUB_URL}/{repo}/issues/{number}"

    def label_names(self) -> list[str]:
        """Current label names, sorted; uses the prefetch cache when there is one."""
        return sorted(label.name for label in self.labels.all())

    def has_label(self, name: str) -> bool:
        return name in self.label_names()

    @property
    def module_labels(self) -> list[str]:
        return [name for name in self.label_names() if is_module(name)]

    @property
    def suggested_component(self) -> Suggestion | None:
        """The most confident suggested component (what G4 asks a triaged PT2 issue to carry; never a category label
        such as `module: crash`), or None.

        Reads the prefetched suggestions: no query per agenda item.
        """
        modules = [s for s in self.suggestions.all() if s.kind == Suggestion.Kind.ADD and is_component(s.label)]
        return max(modules, key=lambda s: s.confidence, default=None)

    @property
    def component_labels(self) -> list[str]:
        """Its `module:` labels that name a component (a category such as `module: crash` names none)."""
        return [name for name in self.label_names() if is_component(name)]

    def automation(self, comments: list[Comment]) -> Automation:
        """What PyTorch's automation said on this issue (the Repro Agent, other agents, the triage bot), read
        from its mirrored comments (the page's list, no query of its own) and labels (rubric/reading/automation.py)."""
        text = self.thread_text(comments)
        return read_automation(sources_of(text), self.label_names(), accounts=text.automation_accounts)

    def thread_text(self, comments: Iterable[Comment]) -> IssueText:
        """The issue's own words as the rubric reads them: title, body and `comments` (Comment rows), each with
        who wrote it, and who may speak for the automation. No labels, runs or neighbours: as_issue_text adds them."""
        return IssueText(
            number=self.number,
            title=self.title,
            body=self.body,
            comments=tuple(
                CommentText(body=c.body, author=c.author, github_id=c.github_id, association=c.author_association)
                for c in comments
            ),
            author=self.author,
            automation_accounts=settings.AUTOMATION_ACCOUNTS,
        )

    def as_issue_text(self, neighbours: tuple[Neighbour, ...] = ()) -> IssueText:
        """This issue as the rubric engine's input, with the verdicts of finished bisections and, when
        given, its most similar issues (rubric_app/triage/similar.py)."""
        runs = getattr(self, "finished_runs", None)  # prefetched by suggestions.refresh
        if runs is None:
            runs = self.bisection_runs.filter(status=BisectionRun.Status.DONE).order_by("-created_at")
        runs = runs[:3]
        bisection = (
            tuple(
                BisectionEvidence(
                    label=item["label"], rule_id=item["rule_id"], evidence=item.get("evidence", ""), run_id=run.pk
                )
                for run in runs
                for item in run.verdict_labels
            )
            + self.regression_evidence()
        )
        return replace(
            self.thread_text(self.comments.all()),
            labels=tuple(self.label_names()),
            bisection=bisection,
            bisected=tuple(run.verdict_summary for run in runs if run.verdict_summary),
            neighbours=neighbours,
        )

    def regression_evidence(self) -> tuple[BisectionEvidence, ...]:
        """A repro that passes on an older build and fails on a newer one is a regression: R11 flags it for the
        meeting, with `module: regression` where the catalog has it."""
        if self.build_finding != REGRESSION:
            return ()
        summary, run_id = self.build_comparison.get("summary", ""), self.build_comparison.get("newer")
        evidence = f"a regression: {summary}"
        labels = [TRIAGE_REVIEW] + ([MODULE_REGRESSION] if known_label(MODULE_REGRESSION) else [])
        return tuple(BisectionEvidence(label=x, rule_id="R11", evidence=evidence, run_id=run_id) for x in labels)

    def queue_lanes(self) -> list[str]:
        """The codes of the queue lanes (LANES) that list this issue; [] when it left the queue."""
        if not self.in_queue or self.state != self.State.OPEN:
            return []
        names = set(self.label_names())
        return [lane.code for lane in LANES if lane.lists(names, self.build_finding)]

    @property
    def state_as_original(self) -> str:
        """What a possible-duplicate mark says of this issue as the original, by its state: "closed as fixed on
        2026-09-18 by the linked PR (in the 2026-09-20 nightly)", "closed as not planned on ...", "closed as a
        duplicate on ...", "open". Never "closed" while it is open."""
        if (
            self.state == self.State.CLOSED
            and self.state_reason in ("completed", "")
            and (self.named_fix or self.fixed_in)
        ):
            when = f" on {self.closed_at:%Y-%m-%d}" if self.closed_at else ""
            by = f" by {self.named_fix}" if self.named_fix else ""
            build = f" (in {self.fixed_in})" if self.fixed_in else ""
            return f"closed as fixed{when}{by}{build}"
        return self.closed_how

    @property
    def fixed(self) -> bool:
        """Closed as completed with a fix its thread names: a duplicate of it is asked to try the build with the fix."""
        return (
            self.state == self.State.CLOSED
            and self.state_reason in ("completed", "")
            and bool(self.named_fix or self.fixed_in)
        )

    @property
    def closed_how(self) -> str:
        """How and when it was closed ("closed as completed on 2026-03-02", from GitHub's state_reason and
        closed_at); "open" while it is."""
        if self.state != self.State.CLOSED:
            return "open"
        how = {"completed": " as completed", "not_planned": " as not planned", "duplicate": " as a duplicate"}
        when = f" on {self.closed_at:%Y-%m-%d}" if self.closed_at else ""
        return f"closed{how.get(self.state_reason, '')}{when}"


class DuplicatePair(models.Model):
    """One of the repository's own duplicate pairs, as the history sync read it (triage/repository_pairs.py): the
    duplicate, the original it names, how it is known (GitHub's closed-as-duplicate state, a marked_as_duplicate
    timeline event, a member's or maintainer's "Duplicate of #N") and who said it. The weekly training calibrates the
    possible-duplicate mark on them; a stranger's sentence is never one."""

    class Source(models.TextChoices):
        STATE = "state", "closed as a duplicate"
        EVENT = "event", "marked as a duplicate"
        COMMENT = "comment", "a member's comment"

    duplicate = models.ForeignKey(Issue, on_delete=models.CASCADE, related_name="duplicate_pairs")
    original = models.PositiveIntegerField(help_text="the original's number")
    source = models.CharField(max_length=10, choices=Source.choices)
    said_by = models.CharField(max_length=100, blank=True, help_text="who said it (a login), or GitHub")
    association = models.CharField(max_length=30, blank=True)
    said_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["duplicate", "original", "source"], name="duplicatepair_unique")]

    def __str__(self) -> str:
        return f"#{self.duplicate_id} duplicates #{self.original} ({self.source}, {self.said_by})"


class IssueTerm(models.Model):
    """One term of an issue's similarity vector (rubric/likeness/neighbours.py): the index behind Similar issues.

    A term is a word or one of the failure signature's terms ("sig:<key>", "frame:<file:function>");
    weight is its share of the unit-length vector, so the dot product of two issues is their cosine.
    Rewritten with the issue's suggestions (rubric_app/triage/similar.py).
    """

    issue = models.ForeignKey(Issue, on_delete=models.CASCADE, related_name="+", db_index=False)
    term = models.CharField(max_length=100)
    weight = models.FloatField()
    # The issue carries a module: label: its neighbours may count its vote (rubric/likeness/neighbours.py).
    labelled = models.BooleanField(default=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issue", "term"], name="issueterm_issue_term_unique")]
        # The issues where a term weighs most come first: a lookup reads the head of each term's list
        # (the second index: of the labelled issues only, for the vote).
        indexes = [
            models.Index(fields=["term", "-weight", "issue"], name="issueterm_champion_idx"),
            models.Index(
                fields=["term", "-weight", "issue"], condition=models.Q(labelled=True), name="issueterm_labelled_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.term} {self.weight:.3f} of #{self.issue_id}"


class Comment(models.Model):
    issue = models.ForeignKey(Issue, on_delete=models.CASCADE, related_name="comments")
    github_id = models.BigIntegerField(unique=True)
    author = models.CharField(max_length=100, blank=True)
    # GitHub's author_association (MEMBER, OWNER, COLLABORATOR, CONTRIBUTOR, NONE...): whether the poster maintains
    # the repository, which decides whose repro counts (rubric_app/vocabulary.py); "" where GitHub did not say.
    author_association = models.CharField(max_length=30, blank=True)
    body = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # What of GitHub's text could not be stored as sent (data.storable): {"body": "1 NUL byte"}.
    replaced = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["created_at", "github_id"]

    def __str__(self) -> str:
        return f"comment {self.github_id} on #{self.issue.number}"


class Suggestion(models.Model):
    """One thing the rubric engine says about an issue's labels, with its rule and evidence."""

    class Kind(models.TextChoices):
        ADD = FindingKind.ADD, "add"
        AVOID = FindingKind.AVOID, "avoid"

    class Source(models.TextChoices):
        RULE = "rule", "rule"
        MODEL = "model", "model"
        BISECTION = "bisection", "bisection"
        SIMILAR = "similar", "similar issues"

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
        """Queued since before `before`: its task message may never have reached a worker.

        Automatic runs wait behind every human run by design: a long wait is their normal state, and
        re-sending each of a backlog every sweep would multiply its messages (see abandoned())."""
        return self.filter(status=BisectionRun.Status.QUEUED, created_at__lt=before, automatic=False)

    def abandoned(self, before) -> BisectionRunQuerySet:
        """Automatic runs still queued since before `before`: no worker got to them."""
        return self.filter(status=BisectionRun.Status.QUEUED, created_at__lt=before, automatic=True)

    def overdue(self, started_before) -> BisectionRunQuerySet:
        """Running since before `started_before` (longer than any run can last): its worker died."""
        return self.filter(status=BisectionRun.Status.RUNNING, started_at__lt=started_before)

    def recent(self) -> BisectionRunQuerySet:
        return self.select_related("issue", "requested_by").order_by("-created_at")


class BisectionRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        # An author's first automatic run while the hourly budget is spent: its place, sent when the budget frees.
        WAITING = "waiting"

    class Device(models.TextChoices):
        CPU = "cpu", "CPU"
        CUDA = "cuda", "GPU (cuda)"
        # Bisect on CPU on a GPU worker, re-running an Inductor failure on cuda: R2.4's test.
        BOTH = "both", "CPU, then cuda for an Inductor failure (R2.4)"

    # The Celery queue whose workers serve each device: a GPU box has a CPU too, so "both" goes to gpu.
    # The Celery queues of each device: a person's runs, automatic ones, re-checks (vocabulary.py).
    QUEUES, AUTO_QUEUES, RECHECK_QUEUES = RUN_QUEUES, AUTO_RUN_QUEUES, RECHECK_RUN_QUEUES

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
    # Who ran it, as the page shows it: the runner's Celery node name and device.
    worker = models.CharField(max_length=200, blank=True)
    # The assignment's token (runs/assignment.py): made each time the coordinator gives the job to a runner, so a report
    # of an earlier assignment (the job given back, or lost and given again) is stale. It is no secret on its own:
    # a report counts only signed by the runner the run is assigned to.
    job_token = models.CharField(max_length=100, blank=True)
    # What claimed the run: the Celery message that carried the job, and the attempt (one execution of it). A copy of
    # the job (another message) is refused; the same message run again (another attempt) means its runner died.
    message_id = models.CharField(max_length=64, blank=True)
    attempt = models.CharField(max_length=64, blank=True)
    # The registered runner the coordinator gave the job to (runs/assignment.py), and when: only that runner's
    # signed reports count for this run, whatever a message says. A new assignment makes a new job_token.
    assigned_to = models.ForeignKey(
        Runner, on_delete=models.SET_NULL, null=True, blank=True, related_name="assigned_runs"
    )
    assigned_at = models.DateTimeField(null=True, blank=True)
    # The runner holding it (its registered name, copied when it started) and that process's boot: a runner beating
    # with another boot, or none for WORKER_HEARTBEAT_STALE_S, died with the run.
    runner = models.CharField(max_length=200, blank=True)
    runner_boot = models.CharField(max_length=64, blank=True)
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
    # Queued by auto_bisect when the repro arrived, not by a person: caused_by says whose post brought it.
    automatic = models.BooleanField(default=False)
    caused_by = models.CharField(max_length=200, blank=True)
    caused_by_login = models.CharField(max_length=100, blank=True, help_text="for AUTO_BISECT_PER_AUTHOR")
    # Queued by an operator's pass over the open queue (manage.py auto_bisect, make run's demo): outside the hourly
    # budget, which bounds what outsiders' posts can start (runs/auto_bisect.py).
    backlog = models.BooleanField(default=False)
    repro_hash = models.CharField(max_length=64, blank=True, help_text="sha256 of the repro: one run per repro")
    # The torch build it ran on (a name of the worker's TORCH_BUILDS; "" for the worker's first): with
    # torch_version, what compares the same repro across builds (rubric_app/bisection/builds.py).
    build = models.CharField(max_length=40, blank=True)
    # A re-check of an earlier run on a newer build (build_checks.py): automatic, in the lowest-priority queues.
    recheck_of = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="rechecks")
    # Once done: reproduced, passed or inconclusive (builds.outcome): what comparisons and re-checks query.
    outcome = models.CharField(max_length=20, blank=True)
    # Whose post the repro is ("" when a person typed it), and whether it counts on its own (the reporter's, a
    # maintainer's, the automation's, or typed by a triager): another commenter's repro is run only when a triager
    # chooses it, and its runs never put an issue in "may be fixed" or call a regression (runs/repro_sources.py).
    repro_author = models.CharField(max_length=100, blank=True)
    repro_counts = models.BooleanField(default=True)
    # What ran it, written by the worker: {"device": "cpu", "cpu": model, "isa": [CPU flags], "gpu": name}
    # (rubric_app/runs/hardware.py). A report that names an ISA or a GPU the run lacked is not fixed by its pass.
    hardware = models.JSONField(default=dict, blank=True)

    objects = BisectionRunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["issue", "-created_at"], name="bisection_issue_idx"),
            models.Index(fields=["automatic", "created_at"], name="bisection_automatic_idx"),
        ]
        permissions = [("run_bisection", "Can run a sandboxed bisection of an issue's repro")]

    def __str__(self) -> str:
        return f"bisection {self.pk} of #{self.issue.number} on {self.device}: {self.status}"

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)

    @property
    def queue_name(self) -> str:
        """The lane its runners take it from (a person's, automatic or re-check; cuda and "both" need a GPU runner)."""
        return self.lane(self.device, automatic=self.automatic, recheck=bool(self.recheck_of_id))

    @classmethod
    def lane(cls, device: str, *, automatic: bool, recheck: bool) -> str:
        if recheck:
            return cls.RECHECK_QUEUES[device]
        return (cls.AUTO_QUEUES if automatic else cls.QUEUES)[device]

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


class AgendaItem(models.Model):
    """What a meeting recorded about one issue of its agenda besides a decision: who owns it and a note. Both go in
    the meeting's minutes; an item carried to the next meeting starts there without them."""

    meeting = models.ForeignKey(Meeting, on_delete=models.CASCADE, related_name="items")
    issue = models.ForeignKey("Issue", on_delete=models.CASCADE, related_name="+")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    note = models.TextField(blank=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["meeting", "issue"], name="agendaitem_meeting_issue_unique")]

    def __str__(self) -> str:
        return f"#{self.issue_id} in {self.meeting}"


class LabelEvent(models.Model):
    """Who added or removed a label when, from GitHub's issue events: read by the sync only for issues that carry
    `bot-triaged`, a Repro Agent label or `high priority` (needs_label_events), so the page can tell the bot's labels
    from a person's (and G12.2 who added `high priority`)."""

    issue = models.ForeignKey("Issue", on_delete=models.CASCADE, related_name="label_events")
    label = models.CharField(max_length=100)
    action = models.CharField(max_length=10)  # "labeled" or "unlabeled", as GitHub names them
    actor = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at", "pk"]

    def __str__(self) -> str:
        return f"#{self.issue_id} {self.action} {self.label} by {self.actor}"


class TriageDecisionQuerySet(models.QuerySet):
    def in_flight(self) -> TriageDecisionQuerySet:
        """Pending (held for its undo window, or waiting for the github worker) or being applied."""
        return self.filter(status__in=[TriageDecision.Status.PENDING, TriageDecision.Status.APPLYING])

    def stuck(self, before) -> TriageDecisionQuerySet:
        """Work to send again: pending since before `before` (its message may never have reached a
        worker), or applying with no sign of life since `before` (its worker died mid-write)."""
        return self.unclaimed(before) | self.abandoned(before)

    def due(self, before) -> TriageDecisionQuerySet:
        """Pending and due (past its undo window) since before `before`: its message vanished, or waits behind
        others (the sweep sends it again; the claim makes a copy a no-op)."""
        return self.filter(status=TriageDecision.Status.PENDING).filter(
            Q(not_before__lt=before) | Q(not_before__isnull=True, created_at__lt=before)
        )

    def unclaimed(self, before) -> TriageDecisionQuerySet:
        """Pending since before `before`: no worker has taken it."""
        return self.filter(status=TriageDecision.Status.PENDING, created_at__lt=before)

    def abandoned(self, before) -> TriageDecisionQuerySet:
        """Applying, with no heartbeat since `before` (rows from before heartbeats: created before it)."""
        return self.filter(status=TriageDecision.Status.APPLYING).filter(
            Q(heartbeat_at__lt=before) | Q(heartbeat_at__isnull=True, created_at__lt=before)
        )

    def for_audit(self) -> TriageDecisionQuerySet:
        return self.select_related("issue", "user").prefetch_related("writes").order_by("-created_at")

    def bot_reviews(self):
        """Applied reviews of the triage bot, newest first: (created_at, labels_seen, labels_removed); one query."""
        rows = self.filter(status=TriageDecision.Status.APPLIED, bot_review__gt="").order_by("-created_at", "-pk")
        return rows.values_list("created_at", "labels_seen", "labels_removed")


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
        # Taken back while it was held for its undo window (not_before): nothing was sent to GitHub.
        UNDONE = "undone"

    # A decision on its way or done: it covers the issue (the bot's lane leaves it out).
    COVERING = (Status.PENDING, Status.APPLYING, Status.APPLIED)

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
    # GitHub's state_reason for the close: completed, not_planned (a usage question, G1), duplicate.
    close_reason = models.CharField(max_length=20, blank=True)
    # A standard reply (rubric_app/data/pytorch_triage_templates.json) posted before the other changes, and its name.
    comment = models.TextField(blank=True)
    reply = models.CharField(max_length=40, blank=True)
    # The repository the issue is moved to (G2), last, after everything else.
    transfer_to = models.CharField(max_length=100, blank=True)
    # The issue this one was closed as a duplicate of (close_reason "duplicate", with the standard comment).
    duplicate_of = models.PositiveIntegerField(null=True, blank=True)
    note = models.TextField(blank=True)
    # The rubric's add-suggestions on the page when the triager decided: [{"label", "rule_id", "preselected"}, ...].
    # None for decisions recorded before it was kept: their outcomes are unknown, not "nothing shown".
    suggestions_shown = models.JSONField(null=True, blank=True, default=None)
    # A review of PyTorch's triage bot: "confirmed" (its labels kept; recorded, nothing sent to GitHub) or
    # "mislabeled" (labels corrected and `bot-mislabeled` added, one audited write); "" for other decisions.
    bot_review = models.CharField(
        max_length=12, blank=True, choices=[("confirmed", "confirmed"), ("mislabeled", "mislabeled")]
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    # Held until then for its undo window (a meeting's one-click decision): no worker writes it earlier, and
    # decisions.undo may take it back meanwhile. None: written as soon as a worker takes it.
    not_before = models.DateTimeField(null=True, blank=True)
    # Human-readable outcome: GitHub's answer, the conflict's difference, or why it was refused.
    result_message = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Set when a worker claims the decision and after each GitHub call: an `applying` decision whose
    # heartbeat is old lost its worker, and the sweep resumes it from what GitHub shows.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # "host:pid" of the process applying it: a worker that sees that process gone (or its host silent)
    # resumes the decision at once (rubric_app/github/recovery.py) instead of waiting for the sweep.
    worker = models.CharField(max_length=200, blank=True)
    # The Celery message that claimed it: the same message delivered again while the row is applying
    # means its worker died (acks_late), so it resumes at once instead of waiting for the sweep.
    task_id = models.CharField(max_length=64, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TriageDecisionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "created_at"], name="decision_status_idx"),
            # Queue health (metrics.py): decisions per triager in a window, read from the index alone
            # (an index-only scan: the user and status are in it too).
            models.Index(fields=["created_at", "user", "status"], name="decision_window_idx"),
        ]
        permissions = [
            ("apply_labels", "Can apply labels, flags and redirects to GitHub"),
            ("record_meeting_decision", "Can record triage-meeting decisions (including high priority)"),
        ]

    def __str__(self) -> str:
        return f"decision {self.pk} on #{self.issue.number}: {self.status}"

    @property
    def is_finished(self) -> bool:
        return self.status not in (self.Status.PENDING, self.Status.APPLYING)

    def is_held(self, now=None) -> bool:
        """Still in its undo window: pending, and not to be written before not_before."""
        return (
            self.status == self.Status.PENDING
            and self.not_before is not None
            and self.not_before > (now or timezone.now())
        )

    @property
    def held(self) -> bool:
        """is_held() now, for templates."""
        return self.is_held()


def week_start(day) -> date:
    """The Monday of `day`'s week (a date or an aware datetime, in the current time zone)."""
    if isinstance(day, datetime):
        day = timezone.localdate(day)
    return day - timedelta(days=day.weekday())


class FollowUpDismissal(models.Model):
    """A meeting's follow-up (triage/meeting_followups.py) the chair set aside, with why: the audit record. It holds
    for that decision only; a later decision on the issue can bring it back."""

    decision = models.OneToOneField(TriageDecision, on_delete=models.CASCADE, related_name="dismissal")
    meeting = models.ForeignKey(Meeting, on_delete=models.SET_NULL, null=True, blank=True, related_name="dismissals")
    by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    note = models.TextField()
    at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"follow-up of decision {self.decision_id} dismissed"


class DutyQuerySet(models.QuerySet):
    def for_week(self, week: date) -> DutyQuerySet:
        return self.filter(week=week).select_related("user").order_by("user__username")


class Duty(models.Model):
    """One triager on duty for one week (the roster), with the modules they prefer to take."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    week = models.DateField(help_text="The Monday of the week on duty.")
    # `module: ...` labels this triager takes first when untriaged issues are shared out.
    modules = models.JSONField(default=list, blank=True)

    objects = DutyQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "week"], name="duty_user_week_unique")]

    def __str__(self) -> str:
        return f"{self.user} on duty the week of {self.week}"


class Assignment(models.Model):
    """Who takes an untriaged issue in the dashboard (local: GitHub assignees are for the fixers)."""

    issue = models.OneToOneField(Issue, on_delete=models.CASCADE, related_name="assignment")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    assigned_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    assigned_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"#{self.issue_id} -> {self.user}"


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


__all__ = [
    "LabelQuerySet",
    "Label",
    "IssueQuerySet",
    "Issue",
    "IssueTerm",
    "Comment",
    "Suggestion",
    "BisectionRunQuerySet",
    "BisectionRun",
    "MeetingQuerySet",
    "Meeting",
    "AgendaItem",
    "LabelEvent",
    "TriageDecisionQuerySet",
    "TriageDecision",
    "DutyQuerySet",
    "Duty",
    "Assignment",
    "GitHubWrite",
    "GitHubCredential",
    "QueueVersion",
    "RUNNER_NAME_PATTERN",
    "Runner",
    "RunnerEvent",
    "RunnerQuerySet",
    "SkillFile",
    "SkillFileQuerySet",
    "SyncState",
    "TrainedModel",
    "TrainedModelQuerySet",
    "DuplicatePair",
    "WebhookDelivery",
    "WebhookDeliveryQuerySet",
    "WorkerHeartbeat",
    "WorkerHeartbeatQuerySet",
    "queue_state",
]
