"""The runner: a worker of the runner app (triage_site/runner.py) that runs bisection jobs and holds nothing else
(docs/bisection.md#runners).

It knows the runners' broker as its own broker user (RUNNER_BROKER_URL), its registered name and secret (RUNNER_NAME,
RUNNER_SECRET) and its own settings (BISECTION_DEVICE, TORCH_BUILDS, RUNNER_LANES), nothing more: it refuses to
start holding anything else (refuse_secrets), and its database is sealed when it starts (seal_database: any query
fails, no SQLite file is made), so a repro that escaped the sandbox finds no database, no GitHub credential and no
key on the host. run_job takes a job the coordinator gave this runner (runs/jobs.py), runs it in the sandbox
(bisection/) and tells the coordinator how it goes through dispatch.report, each message signed with its secret:
started, each mode's progress, the result or why it failed. An automatic run makes way at a mode boundary when the
coordinator has given this runner a person's job meanwhile (it waits in this runner's queue); a runner stopping (cold
shutdown) puts its run back.

This module never touches the database (tests/runs/test_runner.py reads its imports).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping

from django.conf import settings

from rubric_app import bisection, dispatch
from rubric_app.bisection import builds
from rubric_app.runs import broker, hardware, jobs
from rubric_app.vocabulary import BISECTION_QUEUES, RUN_QUEUES

log = logging.getLogger(__name__)

# What a runner declaring BISECTION_DEVICE can run: a GPU box has a CPU too.
SERVES = {"cpu": {"cpu"}, "cuda": {"cuda", "both"}}
# What a runner must not hold (docs/deploy.md, "Who holds what"): it refuses to start with any of them set.
PRIVILEGED = (
    "DATABASE_URL",
    "SECRET_KEY",
    "CELERY_BROKER_URL",
    "GITHUB_TOKEN",
    "GITHUB_APP_PRIVATE_KEY",
    "GITHUB_APP_PRIVATE_KEY_FILE",
    "GITHUB_OAUTH_CLIENT_SECRET",
    "GITHUB_WEBHOOK_SECRETS",
    "TOKEN_ENCRYPTION_KEY",
    "SENTRY_DSN",
)


class HoldsSecrets(RuntimeError):
    """A runner started with something it must not hold: it does not start."""


def refuse_secrets(environment: Mapping[str, str]) -> None:
    """Raise HoldsSecrets when `environment` holds anything a runner must not, or lacks its own identity."""
    held = sorted(name for name in PRIVILEGED if environment.get(name))
    if held:
        raise HoldsSecrets(
            f"a runner must not hold {', '.join(held)} (it runs untrusted code): start it with RUNNER_BROKER_URL, "
            "RUNNER_NAME, RUNNER_SECRET and its own settings only (docs/deploy.md#runners)"
        )
    if not (settings.RUNNER_NAME and settings.RUNNER_SECRET):
        raise HoldsSecrets("RUNNER_NAME and RUNNER_SECRET are not set: register the runner on the runners page first")


def name() -> str:
    return settings.RUNNER_NAME


def lanes() -> list[str]:
    """The lanes this runner takes runs from (RUNNER_LANES, by default every lane of its device)."""
    own = BISECTION_QUEUES[RUN_QUEUES[settings.BISECTION_DEVICE]]
    return sorted(settings.RUNNER_LANES or own)


def sealed() -> bool:
    """Whether this process's database is sealed (seal_database): the one state in which it runs a job."""
    from django.db import connections

    return connections.settings["default"]["ENGINE"] == "django.db.backends.dummy"


def seal_database() -> None:
    """Make every database access of this process fail, before anything opens one: a runner holds no database (not
    even the SQLite file the settings default to). Any later query raises ImproperlyConfigured."""
    from django.db import connections

    for connection in connections.all(initialized_only=True):
        connection.close()
    connections.settings = connections.configure_settings({"default": {"ENGINE": "django.db.backends.dummy"}})
    for alias in list(connections.settings):
        try:
            del connections[alias]
        except AttributeError:  # never opened
            pass


class MakeWay(Exception):
    """An automatic run stops at a mode's boundary for a run a person asked for."""


def person_waiting() -> bool:
    """Whether the coordinator has given this runner another job while it runs an automatic one: it gives a runner
    a second job only for a person's run that no idle runner could take (runs/assignment.py)."""
    return bool(dispatch.waiting(broker.jobs_queue(name())))


def sender(secret: str | None = None) -> Callable[[str, dict], None]:
    """What sends this runner's messages: each an Envelope of `kind` signed with its secret, to its reports queue."""

    def send(kind: str, body: dict) -> None:
        envelope = jobs.Envelope(runner=name(), kind=kind, sent_at=time.time(), body=body)
        dispatch.report(envelope.signed(secret or settings.RUNNER_SECRET), queue=broker.reports_queue(name()))

    return send


def run_job(
    message: object,
    *,
    message_id: str,
    boot: str,
    send: Callable[[str, dict], None] | None = None,
) -> str:
    """Run one job (a Job's message) in the sandbox, reporting as it goes; returns the kind of its last report.

    message_id: the Celery message that carried it; boot: this worker process's start (the coordinator ends what a
    dead runner held); send: what sends a signed message (sender()). A malformed job is logged and dropped.
    """
    send = send or sender()
    try:
        job = jobs.Job.from_message(message)
    except jobs.Malformed as exc:
        log.warning("dropped a job: %s", exc)
        return "malformed"
    attempt = uuid.uuid4().hex

    def say(kind: str, **body) -> str:
        report = jobs.Report(kind, job.run_id, job.token, message_id, attempt, name(), boot, body)
        send(jobs.REPORT, report.as_message())
        return kind

    device = settings.BISECTION_DEVICE
    say(jobs.STARTED, device=device)
    if job.device not in SERVES.get(device, ()):
        return say(jobs.FAILED, error=f"this runner serves {device}, the run asked for {job.device}")
    hosted = settings.TORCH_BUILDS
    build = job.build or next(iter(hosted))
    if build not in hosted:
        return say(
            jobs.FAILED,
            error=f"this runner hosts the torch builds {', '.join(hosted)} (TORCH_BUILDS); the run asked for "
            f"{build!r}. Every runner of a queue should host the same builds.",
        )

    def progress(mode: str, results: list[dict]) -> None:
        if job.may_make_way and person_waiting():
            raise MakeWay
        say(jobs.PROGRESS, mode=mode, results=results)

    # "both" bisects on CPU; on a GPU runner the harness re-runs an Inductor failure on cuda (R2.4).
    mode_device = "cpu" if job.device == "both" else job.device
    try:
        report = bisection.bisect(
            job.repro,
            device=mode_device,
            style=job.style,
            limits=bisection.Limits(timeout_s=job.limits.timeout_s, memory_mb=job.limits.memory_mb),
            on_progress=progress,
            server=server_for(hosted[build]),
            budget_s=job.limits.budget_s,
        )
    except bisection.SandboxRefused as exc:
        # No isolation, no run: say why, and what isolation there was, on the run's page.
        return say(jobs.FAILED, error=str(exc), sandbox=exc.report, build=build)
    except bisection.ForkServerError as exc:
        return say(jobs.FAILED, error=str(exc), build=build)
    except MakeWay:
        return say(jobs.MADE_WAY)
    except (SystemExit, KeyboardInterrupt):
        # The worker is stopping (SIGTERM: a cold shutdown, triage_site/celery.py) and gives the message back to the
        # broker: the run goes back in the queue, and the message delivered again starts it afresh.
        say(jobs.PUT_BACK)
        raise
    return say(
        jobs.RESULT,
        build=build,
        results=report.results,
        torch_version=report.torch_version,
        sandbox=report.sandbox,
        log=report.log,
        hardware={"device": "cuda" if mode_device == "cuda" else "cpu", **hardware.this_machine()},
        # What this build's interpreter has installed: a repro importing anything else "cannot run here" (verdict.py).
        packages=list(builds.installed_packages(hosted[build])),
    )


def server_for(python: str) -> bisection.ForkServer:
    """The warm fork server of the build at `python`, restarted first when that build was upgraded in place (a
    new nightly installed under a running runner): a run must record, and run on, the torch installed now."""
    server = bisection.shared_server(python)
    if server.alive and server.installed != builds.installed_version(python):
        server.close()
    return server


def hosted_versions() -> dict[str, str]:
    """{build name: installed torch version} for this runner's TORCH_BUILDS, for its heartbeat."""
    return {build: builds.installed_version(python) for build, python in settings.TORCH_BUILDS.items()}


def heartbeat(*, boot: str, slots: int, active: list[int], stopped: bool = False) -> dict:
    """What this runner's heartbeat says: its process (boot), what it serves (device, lanes, torch builds, the
    machine), how many jobs it runs at once, the runs it holds (taken or prefetched) and how many jobs wait in its
    queue. The coordinator reads it for its registered runner only, and a device it was not registered for counts for
    nothing. A runner's last beat says it stopped."""
    if stopped:
        return {"boot": boot, "stopped": True}
    return {
        "boot": boot,
        "device": settings.BISECTION_DEVICE,
        "lanes": lanes(),
        "builds": hosted_versions(),
        "hardware": hardware.this_machine(),
        "packages": list(builds.installed_packages(next(iter(settings.TORCH_BUILDS.values())))),
        "slots": slots,
        "active": active,
        "waiting": dispatch.waiting(broker.jobs_queue(name())),
    }
