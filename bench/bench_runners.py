"""Benchmark: bisection runners scale out (issues 42, 49). The same jobs on 1, 2 and 4 runner processes, and a person's
run behind an automatic backlog, measured in one run.

Each runner is a registered runner (issue 49): a real `celery -A triage_site.runner worker --concurrency 1` started
with `env -i` and only its broker user's URL (a Redis user confined to its own queues, made by the coordinator:
RUNNER_BROKER_ACL=manage), its name and secret, its TRIAGE_VAR_DIR and PATH: no database. One coordinator
(`-Q default`) holds a scratch SQLite database, gives each run to one runner and records what they sign. The job: a
repro that waits 5 s and then fails in eager (one sandboxed mode: the wait is what a runner spends), queued as
coordinator.start_run queues a person's run.

1. scaling: for N in 1, 2, 4 runners (each fork server warmed by a first job), the wall time of --jobs jobs from
   the first sent to the last recorded, against N = 1 in the same run (ideal: 1/N).
2. priority: the runners busy with an automatic backlog (2 jobs per runner on cpu_auto), a person's run is sent;
   how long it waits until a runner takes it (at most the rest of the job under way), against the backlog's length.

    .venv/bin/python bench/bench_runners.py [--jobs 24] [--wait 5] [--runners 1,2,4] [--redis-db 3]

Needs root (the sandbox) and Redis on 127.0.0.1:6379 (the database --redis-db is emptied first).
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_STEP = itertools.count()
WAITS = "import time\ntime.sleep({wait})\nraise RuntimeError('waited {wait} s: job {n}')\n"
QUICK = "raise RuntimeError('warm-up {n}')\n"


def _worker(name: str, queues: str, env: dict, log: Path) -> subprocess.Popen:
    """The coordinator: a worker of the dashboard's app."""
    return _process(["-A", "triage_site", "worker", "-Q", queues, "-n", name, "--pool", "solo"], env, log)


def _runner(name: str, env: dict, log: Path) -> subprocess.Popen:
    """A registered runner: a worker of the runner app."""
    return _process(["-A", "triage_site.runner", "worker", "-n", f"{name}@bench", "--pool", "prefork"], env, log)


def _process(arguments: list[str], env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", *arguments, "--concurrency", "1", "--loglevel", "INFO"],
        cwd=ROOT,
        env=env,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


def _send(issue, code: str, *, automatic: bool = False):
    from django.db import transaction

    from rubric_app.models import BisectionRun
    from rubric_app.runs import coordinator

    with transaction.atomic():
        run = BisectionRun.objects.create(issue=issue, repro_code=code, repro_style="script", automatic=automatic)
        coordinator.start_run(run)
    return run


def _wait_done(runs, timeout: float) -> None:
    from rubric_app.models import BisectionRun

    deadline = time.monotonic() + timeout
    pks = [r.pk for r in runs]
    while BisectionRun.objects.filter(pk__in=pks, status__in=["done", "failed"]).count() < len(pks):
        if time.monotonic() > deadline:
            sys.exit("the runners did not finish in time: see the logs under the scratch folder")
        time.sleep(0.2)


def _start_runners(count: int, tmp: Path, broker: str) -> list[subprocess.Popen]:
    from rubric_app.models import BisectionRun, Issue
    from rubric_app.runs import broker as runners_broker
    from rubric_app.runs import registration

    procs = []
    for i in range(count):
        var = tmp / f"runner{i}"
        var.mkdir(exist_ok=True)
        # A name of its own each time (a registered name stays taken): the runners of each step are new ones.
        issued = registration.register(name=f"bench{i}-of-{count}-{next(_STEP)}", device="cpu", by="bench")
        registration.provision(issued.runner)
        user = runners_broker.broker_user(issued.runner.name)
        env = {
            "RUNNER_BROKER_URL": broker.replace("redis://", f"redis://{user}:{issued.secret}@"),
            "RUNNER_NAME": issued.runner.name,
            "RUNNER_SECRET": issued.secret,
            "TRIAGE_VAR_DIR": str(var),
            "PATH": os.environ["PATH"],
        }
        procs.append(_runner(issued.runner.name, env, tmp / f"runner{i}.log"))
    # Warm each runner's fork server (its start-up is once per runner process): quick jobs until every one ran one.
    issue = Issue.objects.get(number=1)
    warmed: set[str] = set()
    n = 0
    while len(warmed) < count:
        batch = [_send(issue, QUICK.format(n=n + i)) for i in range(count - len(warmed))]
        n += len(batch)
        _wait_done(batch, timeout=600)
        warmed |= set(BisectionRun.objects.filter(pk__in=[r.pk for r in batch]).values_list("runner", flat=True))
    return procs


def scaling(count: int, jobs: int, wait: float, tmp: Path, broker: str) -> float:
    from rubric_app.models import BisectionRun, Issue

    procs = _start_runners(count, tmp, broker)
    try:
        issue = Issue.objects.get(number=1)
        started = time.perf_counter()
        runs = [_send(issue, WAITS.format(wait=wait, n=i)) for i in range(jobs)]
        _wait_done(runs, timeout=jobs * (wait + 30) + 120)
        elapsed = time.perf_counter() - started
        ran = BisectionRun.objects.filter(pk__in=[r.pk for r in runs], status="done")
        if ran.count() != jobs:
            sys.exit(f"only {ran.count()} of {jobs} jobs ended done: see {tmp}")
        spread = sorted(ran.order_by().values_list("runner", flat=True).distinct())
        print(f"    {count} runner(s): {elapsed:6.1f} s for {jobs} jobs, taken by {len(spread)} runner(s)")
        return elapsed
    finally:
        _stop(procs)


def priority(count: int, wait: float, tmp: Path, broker: str) -> tuple[float, int]:
    from rubric_app.models import BisectionRun, Issue

    procs = _start_runners(count, tmp, broker)
    try:
        issue = Issue.objects.get(number=1)
        backlog = [_send(issue, WAITS.format(wait=wait, n=1000 + i), automatic=True) for i in range(2 * count)]
        deadline = time.monotonic() + 120
        while BisectionRun.objects.filter(pk__in=[r.pk for r in backlog], status="running").count() < count:
            if time.monotonic() > deadline:
                sys.exit("the backlog did not start")
            time.sleep(0.1)
        time.sleep(wait / 2)  # every runner is mid-job
        person = _send(issue, WAITS.format(wait=0, n=2000))
        _wait_done([person, *backlog], timeout=len(backlog) * (wait + 30) + 120)
        person.refresh_from_db()
        waited = (person.started_at - person.created_at).total_seconds()
        ahead = BisectionRun.objects.filter(pk__in=[r.pk for r in backlog], started_at__gt=person.created_at)
        return waited, ahead.filter(started_at__lt=person.started_at).count()
    finally:
        _stop(procs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=24)
    parser.add_argument("--wait", type=float, default=5.0, help="seconds each job's repro waits")
    parser.add_argument("--runners", default="1,2,4", help="runner counts to time, the first the baseline")
    parser.add_argument("--redis-db", type=int, default=3)
    args = parser.parse_args()
    counts = [int(c) for c in args.runners.split(",")]
    broker = f"redis://127.0.0.1:6379/{args.redis_db}"
    with tempfile.TemporaryDirectory(prefix="bench-runners-") as scratch:
        tmp = Path(scratch)
        os.environ.update(
            DATABASE_URL=f"sqlite:///{tmp}/db.sqlite3",
            TRIAGE_VAR_DIR=str(tmp),
            CELERY_BROKER_URL=broker,
            RUNNER_BROKER_ACL="manage",
            DJANGO_SETTINGS_MODULE="triage_site.settings",
            LOG_LEVEL="WARNING",
        )
        import django

        django.setup()
        from django.core.management import call_command

        from rubric_app.models import Issue
        from triage_site.celery import app

        with app.connection_for_write() as conn:
            conn.default_channel.client.flushdb()
        call_command("migrate", verbosity=0)
        Issue.objects.create(number=1, title="bench", body="", author="a")
        coordinator = _worker("coordinator@bench", "default", dict(os.environ), tmp / "coordinator.log")
        try:
            print(f"runners: {args.jobs} jobs of a repro that waits {args.wait:g} s (one sandboxed mode each)")
            walls = {n: scaling(n, args.jobs, args.wait, tmp, broker) for n in counts}
            base = walls[counts[0]]
            for n, wall in walls.items():
                print(
                    f"  {n} runner(s): {wall:6.1f} s  {wall / base:4.2f}x of {counts[0]} "
                    f"(ideal {counts[0] / n:4.2f}x), {args.jobs * args.wait / wall:4.2f} jobs' waits at once"
                )
            waited, ahead = priority(counts[-1], args.wait, tmp, broker)
            print(
                f"  a person's run behind {2 * counts[-1]} automatic jobs on {counts[-1]} runner(s): taken after "
                f"{waited:.1f} s, {ahead} automatic job(s) started before it (the backlog alone: "
                f"{2 * counts[-1] * args.wait / counts[-1]:.0f} s)"
            )
        finally:
            _stop([coordinator])
            from rubric_app.models import Runner
            from rubric_app.runs import broker as runners_broker

            for name in Runner.objects.values_list("name", flat=True):
                runners_broker.remove(name)  # the broker users are the Redis server's, not the scratch folder's


if __name__ == "__main__":
    main()
