"""The runner: a worker that runs bisection jobs and holds nothing else (docs/bisection.md#runners).

A worker that consumes only the bisection queues (cpu, cpu_auto, cpu_recheck, and the gpu ones) is a runner; nothing
else tells it so. It needs the broker's URL and its own settings (BISECTION_DEVICE, TORCH_BUILDS) and nothing more:
its database is sealed when it starts (seal_database: any query fails, no SQLite file is made), so a repro that
escaped the sandbox finds no database, no GitHub credential and no key on the host. run_job takes a job
(runs/jobs.py), runs it in the sandbox (bisection/) and tells the coordinator how it goes through dispatch.report:
started, each mode's progress, the result or why it failed; an automatic run makes way at a mode boundary for a
person's run waiting on the broker; a runner stopping (cold shutdown) puts its run back.

This module never touches the database (tests/test_runner.py reads its imports).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

from django.conf import settings

from rubric_app import bisection, dispatch
from rubric_app.bisection import builds
from rubric_app.runs import hardware, jobs
from rubric_app.vocabulary import RUN_QUEUES, RUNNER_QUEUES

log = logging.getLogger(__name__)

# What a runner declaring BISECTION_DEVICE can run: a GPU box has a CPU too.
SERVES = {"cpu": {"cpu"}, "cuda": {"cuda", "both"}}
# A person's job waiting this long on the broker with no runner taking it means every runner of its queue is busy
# (an idle one takes it at once).
MAKE_WAY_AFTER_S = 2.0


def is_runner(queues) -> bool:
    """Whether a worker consuming `queues` is a runner: it reads the bisection queues and nothing else."""
    queues = set(queues)
    return bool(queues) and queues <= RUNNER_QUEUES


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


def person_waiting(queue: str) -> bool:
    """Whether a person's job has waited MAKE_WAY_AFTER_S on `queue` (cpu, gpu) with no runner taking it."""
    if not dispatch.waiting(queue):
        return False
    time.sleep(MAKE_WAY_AFTER_S)
    return bool(dispatch.waiting(queue))


def run_job(
    message: object,
    *,
    message_id: str,
    runner: str,
    boot: str,
    consumed: frozenset[str] = frozenset(),
    send: Callable[[dict], None] = dispatch.report,
) -> str:
    """Run one job (a Job's message) in the sandbox, reporting as it goes; returns the kind of its last report.

    message_id: the Celery message that carried it; runner, boot: this worker's node name and process start (the
    coordinator ends what a dead runner held); consumed: the queues this worker reads (an automatic run makes way only
    on a runner that also reads the person's queue of its device). A malformed job is logged and dropped.
    """
    try:
        job = jobs.Job.from_message(message)
    except jobs.Malformed as exc:
        log.warning("dropped a job: %s", exc)
        return "malformed"
    attempt = uuid.uuid4().hex

    def say(kind: str, **body) -> str:
        report = jobs.Report(kind, job.run_id, job.token, message_id, attempt, runner, boot, body)
        send(report.as_message())
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
    person_queue = RUN_QUEUES[job.device]
    makes_way = job.may_make_way and person_queue in consumed

    def progress(mode: str, results: list[dict]) -> None:
        if makes_way and person_waiting(person_queue):
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
    return {name: builds.installed_version(python) for name, python in settings.TORCH_BUILDS.items()}
