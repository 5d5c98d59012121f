"""Benchmark: how fast a backlog of automatic bisections drains through a real worker, against the warm fork server
alone and against cold bisections, measured in the same run (issue #29).

1. drain: N issues, each with its own small repro, are queued by auto_bisect (AUTO_BISECT=cpu) in `cpu_auto`; one
   real registered runner (`celery -A triage_site.runner worker --concurrency 1`, no database) takes them as a
   coordinator (`-Q default`, a scratch database) gives them and records what it reports, on the filesystem brokers;
   timed from the first queued run to the last one done.
2. warm: the same N bisections through one warm fork server in this process (what the worker's harness does, with
   no queue, no database): the rate the warm fork server allows.
3. cold: --cold of them each on a fresh fork server (a worker that kept nothing warm), the start-up counted.

    .venv/bin/python bench/bench_auto_drain.py [--runs 8] [--cold 2]

Target: the drain within 1.25x of the warm fork server's own time (the queue, the database and the worker add
little), and well under the cold runs; printed as ratios measured in this one run. Needs root (the sandbox).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REPRO = """import torch

def f(x):
    return torch.nn.functional.gelu(x * {k}).sum(-1)

print(torch.compile(f)(torch.randn(4, 8)).sum().item())
"""


def repro(k: int) -> str:
    return REPRO.format(k=k + 2)


def drain(runs: int, tmp: Path) -> float:
    """Queue `runs` automatic bisections and time a real worker through them; returns seconds."""
    os.environ.update(
        DATABASE_URL=f"sqlite:///{tmp}/db.sqlite3",
        TRIAGE_VAR_DIR=str(tmp),
        CELERY_BROKER_URL="filesystem://",
        DJANGO_SETTINGS_MODULE="triage_site.settings",
        AUTO_BISECT="cpu",
        AUTO_BISECT_PER_HOUR=str(runs + 1),  # and the warm-up
        AUTO_BISECT_PER_AUTHOR=str(runs),
        LOG_LEVEL="WARNING",
    )
    import django

    django.setup()
    from django.core.management import call_command

    from rubric_app.models import BisectionRun, Issue
    from rubric_app.runs import auto_bisect, registration

    call_command("migrate", verbosity=0)
    # A registered runner (no database: only the runners' broker, in TRIAGE_VAR_DIR, its name and secret) and the
    # coordinator that gives it the runs and records what it reports.
    issued = registration.register(name="bench", device="cpu", by="bench")
    runner_env = {
        "RUNNER_NAME": "bench",
        "RUNNER_SECRET": issued.secret,
        "TRIAGE_VAR_DIR": str(tmp),
        "PATH": os.environ["PATH"],
    }
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", app, "worker", *queues]
            + ["--concurrency", "1", "--pool", "prefork", "--loglevel", "WARNING", "-n", f"bench-{name}@%h"],
            cwd=ROOT,
            env=env,
            stdout=open(tmp / f"{name}.log", "w"),
            stderr=subprocess.STDOUT,
        )
        for name, app, queues, env in (
            ("runner", "triage_site.runner", [], runner_env),
            ("coordinator", "triage_site", ["-Q", "default"], dict(os.environ)),
        )
    ]
    try:
        # Warm the worker's fork server first (its start-up is once per worker process, not per run).
        warmup = Issue.objects.create(number=1, title="warm-up", body=f"```python\n{repro(-1)}```", author="b")
        auto_bisect.queue_for_issue(warmup, cause="bench")
        _wait(BisectionRun.objects.filter(issue=warmup), 1, timeout=600)
        issues = [
            Issue.objects.create(number=100 + i, title=f"bench {i}", body=f"```python\n{repro(i)}```", author=f"u{i}")
            for i in range(runs)
        ]
        started = time.perf_counter()
        outcomes = auto_bisect.queue_for_issues([i.pk for i in issues], cause="bench")
        assert [o.reason for o in outcomes] == ["queued"] * runs, [o.reason for o in outcomes]
        _wait(BisectionRun.objects.filter(issue__in=issues), runs, timeout=60 * runs + 600)
        elapsed = time.perf_counter() - started
        done = BisectionRun.objects.filter(issue__in=issues, status="done", outcome="passed").count()
        if done != runs:
            sys.exit(f"only {done} of {runs} runs passed: see {tmp}/runner.log")
        return elapsed
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(timeout=60)


def _wait(runs, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while runs.filter(status__in=["done", "failed"]).count() < count:
        if time.monotonic() > deadline:
            sys.exit("the worker did not finish the runs in time")
        time.sleep(0.5)


def warm(runs: int) -> float:
    from rubric_app.bisection import ForkServer, Limits, bisect

    server = ForkServer()
    server.start()
    try:
        started = time.perf_counter()
        for i in range(runs):
            report = bisect(repro(i), server=server, limits=Limits(timeout_s=300))
            assert all(r["status"] == "passed" for r in report.results), report.summary
        return time.perf_counter() - started
    finally:
        server.close()


def cold(runs: int) -> float:
    from rubric_app.bisection import ForkServer, Limits, bisect

    started = time.perf_counter()
    for i in range(runs):
        server = ForkServer()
        try:
            bisect(repro(i), server=server, limits=Limits(timeout_s=300))
        finally:
            server.close()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8, help="automatic runs in the backlog")
    parser.add_argument("--cold", type=int, default=2, help="cold bisections for the baseline (per-run figures)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-drain-") as tmp:
        drained = drain(args.runs, Path(tmp))
    warmed = warm(args.runs)
    colded = cold(args.cold)
    per = {"drain": drained / args.runs, "warm": warmed / args.runs, "cold": colded / args.cold}
    print(f"automatic bisection backlog, {args.runs} runs ({args.cold} cold), {os.cpu_count()} CPUs")
    for name, what in (
        ("drain", "queued automatic runs through a real worker"),
        ("warm", "the same bisections on one warm fork server"),
        ("cold", "a fresh fork server per bisection"),
    ):
        print(f"  {name:<6} {per[name]:6.2f} s a run, {60 / per[name]:5.1f} runs a minute  ({what})")
    ratio_warm, ratio_cold = per["drain"] / per["warm"], per["drain"] / per["cold"]
    print(f"drain / warm = {ratio_warm:.2f} (target <= 1.25): {'MET' if ratio_warm <= 1.25 else 'NOT MET'}")
    print(f"drain / cold = {ratio_cold:.2f}")


if __name__ == "__main__":
    main()
