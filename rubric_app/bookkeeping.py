"""The dashboard's own bookkeeping, beside the triage data of models.py (which imports and re-exports these):
where a sync stands, the webhook deliveries received, the registered bisection runners and the workers' heartbeats,
the queue table's version, people's encrypted GitHub tokens, the triage skill's files as last read, and the labeler's
trained models."""

from __future__ import annotations

import re
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.crypto import salted_hmac

from rubric_app.bisection.builds import newer as newer_version
from rubric_app.vocabulary import (
    BISECTION_QUEUES,
    WORKER_QUEUES,
)


class QueueVersion(models.Model):
    """One row whose token changes with every committed write to what the queue table shows.

    Database triggers change it (rubric_app/web/queue_cache.py lists the tables and columns), so
    every write path (the sync's bulk upserts, webhooks, decisions, the admin, `update()`) is
    covered; the queue page keeps its rendered table under the token it read (queue_cache.table).
    """

    token = models.CharField(max_length=36)

    def __str__(self) -> str:
        return self.token


# A runner's name is part of its broker queues and its broker user (runs/broker.py): no glob or separator characters.
RUNNER_NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")


class RunnerQuerySet(models.QuerySet):
    def active(self) -> RunnerQuerySet:
        """Registered and not revoked: the runners whose signed reports and heartbeats count."""
        return self.filter(revoked_at__isnull=True)


class Runner(models.Model):
    """A bisection runner an operator registered (runs/registration.py): the identity every report and heartbeat is
    authenticated with, and the runner a run is bound to when the coordinator gives it the job (runs/assignment.py).

    Its secret is never stored: it is derived from SECRET_KEY and this row's salt (secret()), shown once when it is
    made, and a new salt (rotate) or a revocation makes the old one worthless. A runner's heartbeat (its
    WorkerHeartbeat row) counts for its registered device only: a runner cannot make itself a GPU runner."""

    class Device(models.TextChoices):
        CPU = "cpu", "CPU"
        CUDA = "cuda", "GPU (cuda)"

    name = models.CharField(max_length=40, unique=True)
    device = models.CharField(max_length=10, choices=Device.choices)
    salt = models.CharField(max_length=64, default="", blank=True)
    registered_at = models.DateTimeField(default=timezone.now)
    registered_by = models.CharField(max_length=150, help_text="who registered it: a login, or the command")
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=150, blank=True)
    # The last report or heartbeat the dashboard refused from it, and why (the runners page shows it).
    refused_at = models.DateTimeField(null=True, blank=True)
    refused = models.CharField(max_length=300, blank=True)

    objects = RunnerQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        permissions = [("manage_runners", "Can register and revoke bisection runners")]

    def __str__(self) -> str:
        return f"runner {self.name} ({self.device})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def new_salt(self) -> None:
        """A new salt: a new secret, the old one worthless from now on."""
        self.salt = secrets.token_hex(16)

    def secret(self) -> str:
        """The secret this runner signs with (and, where the coordinator manages the broker's users, its broker
        password): derived, never stored. Rotating SECRET_KEY re-keys every runner."""
        return salted_hmac(
            "rubric_app.Runner.secret", f"{self.pk}:{self.name}:{self.salt}", algorithm="sha256"
        ).hexdigest()


class RunnerEvent(models.Model):
    """The audit of the runners: each registration, new secret and revocation, with who did it."""

    class Action(models.TextChoices):
        REGISTERED = "registered"
        ROTATED = "rotated", "new secret"
        REVOKED = "revoked"

    runner = models.ForeignKey(Runner, on_delete=models.CASCADE, related_name="events")
    action = models.CharField(max_length=20, choices=Action.choices)
    by = models.CharField(max_length=150)
    at = models.DateTimeField(default=timezone.now)
    note = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-at", "-pk"]

    def __str__(self) -> str:
        return f"{self.runner.name} {self.action} by {self.by}"


class WorkerHeartbeatQuerySet(models.QuerySet):
    def record(self, beat: WorkerHeartbeat) -> None:
        """Store a worker's beat over its last one, in one INSERT ... ON CONFLICT statement: no transaction around a
        read and a write (a periodic writer must never hold a lock while it asks for another)."""
        self.bulk_create(
            [beat],
            update_conflicts=True,
            unique_fields=["name"],
            update_fields=[
                "queues",
                "device",
                "builds",
                "hardware",
                "packages",
                "boot",
                "seen_at",
                "runner",
                "sent_at",
                "active",
                "waiting",
                "slots",
            ],
        )

    def live(self, now=None) -> WorkerHeartbeatQuerySet:
        """Workers heard from within WORKER_HEARTBEAT_STALE_S."""
        now = now or timezone.now()
        return self.filter(seen_at__gte=now - timedelta(seconds=settings.WORKER_HEARTBEAT_STALE_S))

    def queues(self, now=None) -> dict[str, list[str]]:
        """{queue: names of its live workers} for the `cpu`, `gpu` and `github` queues, in one query (liveness)."""
        return self.liveness(now)[0]

    def hosted_builds(self, now=None) -> dict[str, dict[str, str]]:
        """{"cpu": {build name: torch version}, "gpu": {...}}, in one query (liveness)."""
        return self.liveness(now)[1]

    def liveness(self, now=None) -> tuple[dict[str, list[str]], dict[str, dict[str, str]]]:
        """What the live workers' heartbeats say, read in one query: ({queue: names of its live workers} for the
        `cpu`, `gpu` and `github` queues, {"cpu": {build name: torch version}, "gpu": {...}}).

        A worker on `gpu` counts only if it declares BISECTION_DEVICE=cuda: one that serves cpu would fail every
        GPU run it took. A worker's builds (TORCH_BUILDS) count for the device queue whose person's, automatic or
        re-check runs it consumes; where two workers disagree on a build's version, the newer.
        """
        found: dict[str, list[str]] = {name: [] for name in WORKER_QUEUES}
        hosted: dict[str, dict[str, str]] = {queue: {} for queue in BISECTION_QUEUES}
        rows = self.live(now).order_by("name").values_list("name", "queues", "device", "builds")
        for name, queues, device, builds in rows:
            for queue in queues:
                if queue in found and (queue != "gpu" or device == "cuda"):
                    found[queue].append(name)
            for queue, versions in hosted.items():
                if BISECTION_QUEUES[queue].isdisjoint(queues) or (queue == "gpu" and device != "cuda"):
                    continue
                for build, version in (builds or {}).items():
                    if version and (build not in versions or newer_version(version, versions[build])):
                        versions[build] = version
        return found, hosted


def queue_state(live: dict[str, list[str]], queue: str) -> str:
    """Why work on `queue` was not taken, from WorkerHeartbeat.objects.queues(): no worker, or only busy ones."""
    workers = live.get(queue, [])
    return (
        f"{len(workers)} {queue} worker(s) are online but none took it" if workers else f"no {queue} worker is online"
    )


class WorkerHeartbeat(models.Model):
    """A Celery worker's last sign of life and the queues it consumes (written by the worker itself, or for a runner,
    which holds no database, by the coordinator from its heartbeat message)."""

    name = models.CharField(max_length=200, unique=True)
    queues = models.JSONField(default=list)
    device = models.CharField(max_length=10, blank=True, help_text="The worker's BISECTION_DEVICE.")
    # {build name: torch version} of the builds it hosts (TORCH_BUILDS), as installed at its last beat.
    builds = models.JSONField(default=dict, blank=True)
    # What the machine has (rubric_app/runs/hardware.py): {"cpu": model, "isa": [CPU flags], "gpu": name}.
    hardware = models.JSONField(default=dict, blank=True)
    # The Python packages its default build's interpreter has (builds.installed_packages): a repro importing one it
    # lacks "cannot run here" (bisection/verdict.py), which says nothing about the repro or the compiler.
    packages = models.JSONField(default=list, blank=True)
    # This worker process's start (runs/workers.py): a runner beating with another boot was restarted.
    boot = models.CharField(max_length=64, blank=True)
    seen_at = models.DateTimeField(default=timezone.now)
    # A registered runner's beat (its row is named after it): when the runner sent it (a beat older than the one
    # recorded is a replay, refused), the runs it holds (taken or prefetched), how many jobs wait in its queue on the
    # broker, and how many it runs at once. A job the coordinator sent that is neither held nor waiting was lost.
    runner = models.OneToOneField(Runner, on_delete=models.CASCADE, null=True, blank=True, related_name="heartbeat")
    sent_at = models.DateTimeField(null=True, blank=True)
    active = models.JSONField(default=list, blank=True)
    waiting = models.PositiveIntegerField(default=0)
    slots = models.PositiveSmallIntegerField(default=1)

    objects = WorkerHeartbeatQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({', '.join(self.queues)})"


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
    # "host:pid" of the process holding the claim (github/history.py): a killed backfill's claim is taken over at once.
    holder = models.CharField(max_length=200, blank=True)
    # Issues the last run could not store or read, and why ([{"number", "reason"}]): the rest went on; /health lists
    # them.
    skipped = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return self.key


class WebhookDeliveryQuerySet(models.QuerySet):
    def stuck(self, before) -> WebhookDeliveryQuerySet:
        """Received before `before` and still unprocessed: its task may never have reached a worker."""
        return self.filter(processed_at__isnull=True, received_at__lt=before)


class WebhookDelivery(models.Model):
    """A received GitHub webhook delivery; the unique id and body hash make replays no-ops.

    The delivery id header is not signed, so a captured delivery can be resent under a new
    id: body_sha256 (of the signed body) catches that. ignored says why a delivery was
    not applied (another repository's, say); error, why it could not be.
    """

    delivery_id = models.CharField(max_length=100, unique=True)
    body_sha256 = models.CharField(max_length=64, unique=True, null=True, blank=True)
    event = models.CharField(max_length=50)
    payload = models.JSONField(default=dict)
    received_at = models.DateTimeField(default=timezone.now)
    processed_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    ignored = models.CharField(max_length=300, blank=True)
    # What of the payload's text could not be stored as sent (data.storable_json): {"issue.title": "1 lone surrogate"}.
    replaced = models.JSONField(default=dict, blank=True)

    objects = WebhookDeliveryQuerySet.as_manager()

    class Meta:
        ordering = ["-received_at"]

    def __str__(self) -> str:
        return f"{self.event} {self.delivery_id}"


class GitHubCredential(models.Model):
    """A person's GitHub user token from sign-in, encrypted at rest (rubric_app/github/credentials.py owns it).

    The tokens are stored only as Fernet ciphertext; the rate-limit fields are what GitHub's headers
    said on this token's last request, so one triager's spent budget is visible and does not stop the others.
    """

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="github_credential")
    login = models.CharField(max_length=100, blank=True, help_text="GitHub login the token acts as")
    access_token_encrypted = models.TextField()
    refresh_token_encrypted = models.TextField(blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="None: the token does not expire")
    refresh_expires_at = models.DateTimeField(null=True, blank=True)
    scopes = models.CharField(max_length=300, blank=True)
    revoked_at = models.DateTimeField(
        null=True, blank=True, help_text="GitHub refused the token (401) or its refresh: sign in again"
    )
    rate_limit_remaining = models.PositiveIntegerField(null=True, blank=True)
    rate_limit_reset_at = models.DateTimeField(null=True, blank=True)
    # When GitHub last answered who this person is (their role from the org and teams, identity.py), and why
    # it could not the last time it was asked: a write needs an answer at most identity.WRITE_TRUST old.
    roles_checked_at = models.DateTimeField(null=True, blank=True)
    roles_check_error = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"GitHub credential of {self.user_id} ({self.login or '?'})"


class SkillFileQuerySet(models.QuerySet):
    def by_name(self) -> dict[str, SkillFile]:
        """{name: row} of what was read, in one query."""
        return {row.name: row for row in self}


class SkillFile(models.Model):
    """A file of PyTorch's triage skill (labels.json, templates.json) or the repository's latest release, as last read
    from GitHub (rubric_app/github/skill_files.py owns the rows). `content` is the last good copy, parsed: it stays
    when a later read cannot be read or parsed, and `error` says why. `etag` is the last answer's, so that GitHub
    answers an unchanged file with 304 and nothing is read again; `sha` is the git blob of the good copy (the version
    in use)."""

    LABELS, TEMPLATES, RELEASE = "labels.json", "templates.json", "release"

    name = models.CharField(max_length=40, unique=True)
    path = models.CharField(max_length=300, blank=True, help_text="where it was read: the file's path, or the API's")
    sha = models.CharField(max_length=64, blank=True)
    etag = models.CharField(max_length=200, blank=True)
    # labels.json: [{"name", "description"}]; templates.json: {name: {"action", "use_when", "comment"}};
    # release: {"tag", "name", "published_at"}. None until a good copy was read.
    content = models.JSONField(null=True, blank=True)
    read_at = models.DateTimeField(null=True, blank=True, help_text="when the good copy was read")
    checked_at = models.DateTimeField(null=True, blank=True, help_text="the last request, 304s included")
    error = models.TextField(blank=True, help_text="why the last answer was not taken; empty when it was")
    error_at = models.DateTimeField(null=True, blank=True)

    objects = SkillFileQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} @ {self.sha[:10] or '-'}"


class TrainedModelQuerySet(models.QuerySet):
    def in_use_pk(self) -> int | None:
        """The id of the model in use (the latest promoted), or None (the shipped file): one query on an index, what
        every process reads to notice a new promotion (model_store.in_use)."""
        return self.in_use_order().values_list("pk", flat=True).first()

    def in_use_order(self) -> TrainedModelQuerySet:
        return self.filter(status=TrainedModel.Status.PROMOTED).order_by("-promoted_at", "-pk")

    def for_page(self) -> TrainedModelQuerySet:
        """Newest first, without the weights and the numbers learned from (the page shows neither)."""
        return self.defer("data", "learned_numbers").order_by("-created_at", "-pk")


class TrainedModel(models.Model):
    """A learned labeler trained from the history (triage/model_store.py): its weights, what it learned from, its
    figures and the model in use's on the same held-out issues, and what the promotion gate decided
    (rubric/offline/promotion.py).

    The model in use is the promoted row with the latest promoted_at, in every web and worker process; with none,
    the file shipped in rubric_app/data/. Rows are kept: a refused candidate says why, an earlier model what it did.
    """

    class Status(models.TextChoices):
        PROMOTED = "promoted"
        REFUSED = "refused"

    created_at = models.DateTimeField(default=timezone.now)
    source = models.CharField(max_length=40, default="history", help_text="what it was trained from")
    trained_on = models.PositiveIntegerField(default=0, help_text="issues of history it learned from")
    decisions = models.PositiveIntegerField(default=0, help_text="triagers' decisions it learned from")
    trained_until = models.PositiveIntegerField(null=True, blank=True, help_text="the newest issue it learned from")
    held_out = models.PositiveIntegerField(default=0, help_text="the newest triaged issues kept out, to judge it by")
    compared = models.PositiveIntegerField(default=0, help_text="held-out issues the model in use never learned from")
    compared_with = models.CharField(max_length=100, blank=True, help_text="the model in use it was judged against")
    # {"candidate": {figure: value}, "in_use": {...}, "shuffled": F1, "reference": {"candidate", "in_use", "size",
    # "compared"}, "collapsed": n} (promotion.Verdict): the recent slice's figures, then the reference slice's.
    figures = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices)
    reason = models.TextField(blank=True)
    forced = models.BooleanField(default=False, help_text="promoted by --force against the gate's answer")
    trained_by = models.CharField(max_length=200, blank=True, help_text="who or what trained it")
    promoted_at = models.DateTimeField(null=True, blank=True)
    data = models.TextField(help_text="the model's JSON (LabelModel.to_json)")
    # The issue numbers it learned from (its records and its decisions): the gate never scores it on those.
    learned_numbers = models.JSONField(default=list, blank=True)
    # The bound of the gate's reference slice (promotion.cut): the first row's, kept by every later training.
    reference_until = models.PositiveIntegerField(null=True, blank=True)

    objects = TrainedModelQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["status", "-promoted_at"], name="trainedmodel_in_use_idx")]

    def __str__(self) -> str:
        return f"model {self.pk} ({self.status})"
