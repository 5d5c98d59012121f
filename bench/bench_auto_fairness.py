"""Benchmark: what an automatic bisection costs and how long a triager waits behind one (issue 35), the old way and
the new way measured in the same run.

1. cost: a repro built to run every mode to just under the per-mode timeout (it sleeps), bisected the way a person's
   run is (every mode gets the whole timeout) and the way an automatic run is now (everything after the eager
   reference shares one timeout, AUTO_BISECT_BUDGET_S); in per-mode timeouts.
2. wait: an automatic run of a slow repro is running on a runner that also serves people's runs (the real setup's
   cpu runner); a triager asks for a run while it is in its second mode. Timed from the triager's click until the
   runner is free to take it: the old way (the automatic run finishes first) and now (the coordinator gives the
   person's run to that runner, and the automatic run makes way at its next mode). runner.run_job is called as the
   runner's task calls it, its reports recorded as the coordinator records a registered runner's, on a scratch SQLite
   database and kombu's in-memory broker (where the person's job waits, in the runner's queue).

    .venv/bin/python bench/bench_auto_fairness.py [--timeout 8] [--sleep 3]

Targets: cost at most about one timeout plus the eager run; the triager's wait within one per-mode timeout. Needs
root (the sandbox).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SLEEPER = """import time
import torch

def fn(x):
    time.sleep({seconds})
    return x + 1

def make_inputs():
    return (torch.ones(2),)
"""
# The attack's shape: fast in eager, and each compiled mode sleeps just under the timeout (every mode "passes").
STALLER = """import time
import torch

def fn(x):
    if torch.compiler.is_compiling():
        time.sleep({seconds})
    return x + 1

def make_inputs():
    return (torch.ones(2),)
"""


def cost(timeout: float, seconds: float) -> dict[str, float]:
    """Wall seconds of one bisection of STALLER, without and with the automatic budget, on one warm fork server."""
    from rubric_app.bisection import ForkServer, Limits, bisect

    server = ForkServer()
    server.start()
    try:
        bisect(SLEEPER.format(seconds=0), server=server, limits=Limits(timeout_s=60))  # warm: imports, caches
        out = {}
        for name, budget in (("every mode its timeout (before)", None), ("one budget after eager (now)", timeout)):
            started = time.perf_counter()
            report = bisect(
                STALLER.format(seconds=seconds), server=server, limits=Limits(timeout_s=timeout), budget_s=budget
            )
            out[name] = time.perf_counter() - started
            modes = ", ".join(f"{r['mode']} {r['status']} {r['wall_s']:.1f}s" for r in report.results)
            print(f"    {name}: {modes}")
        return out
    finally:
        server.close()


def wait(tmp: Path, seconds: float) -> dict[str, float]:
    """Seconds from a triager's click (a person's run queued) until the worker running an automatic run is free."""
    os.environ.update(
        DATABASE_URL=f"sqlite:///{tmp}/db.sqlite3",
        TRIAGE_VAR_DIR=str(tmp),
        CELERY_BROKER_URL="memory://",
        RUNNER_BROKER_URL="memory://",
        DJANGO_SETTINGS_MODULE="triage_site.settings",
        LOG_LEVEL="WARNING",
    )
    import django

    django.setup()
    from celery import current_app
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.utils import timezone

    from rubric_app.models import BisectionRun, Issue, Runner, WorkerHeartbeat
    from rubric_app.runs import assignment, coordinator, jobs, runner
    from rubric_app.triage import followups

    call_command("migrate", verbosity=0)
    settings.RUNNER_NAME = "bench"
    registered = Runner.objects.create(name="bench", device="cpu", registered_by="bench")
    issue = Issue.objects.create(number=1, title="slow", body="", author="a")
    out = {}
    budget = settings.AUTO_BISECT_BUDGET_S

    def record(kind: str, body: dict) -> None:
        if kind == jobs.REPORT:
            with transaction.atomic():
                finished = coordinator.record(registered, body)
                if finished is not None:
                    followups.run_finished(finished)

    for name, makes_way in (("the automatic run finishes (before)", False), ("it makes way (now)", True)):
        # Before: no budget and no making way (the old code); now: both.
        settings.AUTO_BISECT_BUDGET_S = budget if makes_way else 1e9
        automatic = BisectionRun.objects.create(
            issue=issue,
            automatic=True,
            repro_code=SLEEPER.format(seconds=seconds),
            repro_style="module",
            job_token="bench",
            assigned_to=registered,
            assigned_at=timezone.now(),
        )
        done = threading.Event()

        def work(pk=automatic.pk, done=done):
            try:
                job = assignment.job_for(BisectionRun.objects.get(pk=pk)).as_message()
                runner.run_job(job, message_id=f"bench-{pk}", boot="bench", send=record)
            except BaseException:
                traceback.print_exc()  # the bench would wait for ever on a run that will not come
                os._exit(1)
            finally:
                connection.close()
                done.set()

        threading.Thread(target=work, daemon=True).start()
        while not BisectionRun.objects.filter(pk=automatic.pk, current_mode="dynamo_eager").exists():
            if done.is_set():
                sys.exit("the automatic run ended before its second mode: see its row")
            time.sleep(0.05)
        clicked = time.perf_counter()
        person = BisectionRun.objects.create(issue=issue, repro_code=SLEEPER.format(seconds=0), repro_style="module")
        if makes_way:  # the coordinator gives it to the busy runner: its job waits in that runner's queue
            WorkerHeartbeat.objects.update_or_create(
                name="bench", defaults={"runner": registered, "queues": ["cpu", "cpu_auto"], "device": "cpu"}
            )
            assignment.assign()
        done.wait()
        out[name] = time.perf_counter() - clicked
        automatic.refresh_from_db()
        print(f"    {name}: the automatic run ended {automatic.status} ({len(automatic.results)} modes recorded)")
        BisectionRun.objects.filter(pk=person.pk).update(status="done")
        with current_app.connection_for_write() as conn:  # no runner takes the person's job here: it must not wait in
            conn.default_channel.queue_purge("runner.bench.jobs")  # the queue to make the next automatic run give way
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=8.0, help="the per-mode timeout (BISECTION_TIMEOUT_S)")
    parser.add_argument("--sleep", type=float, default=3.0, help="what the slow repro sleeps per call (wait)")
    parser.add_argument("--stall", type=float, default=0.0, help="what each compiled mode sleeps (cost): 0.9 timeout")
    args = parser.parse_args()
    stall = args.stall or 0.9 * args.timeout
    os.environ["BISECTION_TIMEOUT_S"] = os.environ["AUTO_BISECT_BUDGET_S"] = str(args.timeout)
    print(f"automatic runs, per-mode timeout {args.timeout:g} s")
    with tempfile.TemporaryDirectory(prefix="bench-fair-") as tmp:
        print(f"  wait of a triager's run behind an automatic one (a repro sleeping {args.sleep:g} s a call):")
        waited = wait(Path(tmp), args.sleep)
    print(f"  cost of one automatic run of a repro whose compiled modes each sleep {stall:g} s:")
    costs = cost(args.timeout, stall)
    for name, seconds in costs.items():
        print(f"  cost  {seconds:6.1f} s = {seconds / args.timeout:4.2f} timeouts  ({name})")
    for name, seconds in waited.items():
        print(f"  wait  {seconds:6.1f} s = {seconds / args.timeout:4.2f} timeouts  ({name})")


if __name__ == "__main__":
    main()
