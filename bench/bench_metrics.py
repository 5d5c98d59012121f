"""Server time of the metrics page with 50,000 issues and 200,000 audit rows, on PostgreSQL.

Creates a scratch PostgreSQL database (dropped and re-created on each run), fills it with
bulk_create, then requests the metrics page, the meeting page (which shows its summary) and,
as the baseline, the queue page with its table rendered (not from its cache: a label changes
before each request) through Django's test client (the whole request: middleware,
session, permissions, queries, template), all in this one run.

    .venv/bin/python bench/bench_metrics.py [--issues 50000] [--decisions 200000] [--repeat 15]
        [--database-url postgres://postgres@127.0.0.1:5432/bench_metrics]

Prints the median and p90 of each page, their query counts, and the ratio metrics / queue.
Target: the metrics page under 200 ms (median).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_metrics"


def recreate_database(url: str) -> None:
    """Drop and create the scratch database named by url (never a database the dashboard uses)."""
    import psycopg

    base, name = url.rsplit("/", 1)
    if not name.startswith("bench"):
        sys.exit(f"refusing to drop {name!r}: the scratch database's name must start with 'bench'")
    conninfo = base.replace("postgres://", "postgresql://", 1) + "/postgres"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def setup_django(url: str, tmp: Path) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ["TRIAGE_VAR_DIR"] = str(tmp)
    os.environ["CELERY_BROKER_URL"] = "memory://"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "triage_site.settings")
    os.environ["LOG_LEVEL"] = "WARNING"
    os.environ.pop("SECRET_KEY", None)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.conf import settings

    settings.DEBUG = False  # DEBUG would keep every query in memory
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def make_rows(issues: int, decisions: int) -> None:
    """issues over two years (a fifth closed, a tenth handed off), labels, and decisions by 12 triagers."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from rubric_app.models import Issue, Label, TriageDecision

    rng = random.Random(14)
    names = ["oncall: pt2", "triaged", "module: dynamo", "module: inductor", "triage review", "oncall: export"]
    labels = {
        name: label
        for name, label in zip(
            names, Label.objects.bulk_create(Label(name=name, allowed_for_triage=True) for name in names)
        )
    }
    now = timezone.now()
    rows = []
    for i in range(issues):
        created = now - timedelta(days=rng.uniform(0, 730))
        closed = rng.random() < 0.2
        handed_off = not closed and rng.random() < 0.1
        rows.append(
            Issue(
                number=200_000 + i,
                title=f"torch.compile issue {i}",
                html_url=f"https://github.com/pytorch/pytorch/issues/{i}",
                created_at=created,
                updated_at=created + timedelta(days=rng.uniform(0, 30)),
                state="closed" if closed else "open",
                in_queue=not (closed or handed_off),
                closed_at=created + timedelta(days=rng.uniform(0, 60)) if closed else None,
            )
        )
    users = get_user_model().objects.bulk_create(get_user_model()(username=f"triager{n}") for n in range(12))
    statuses = ["applied"] * 8 + ["refused", "conflict"]
    plan = []  # (issue index, user, status, created_at): decided first, so first_decided_at is set at insert
    for _ in range(decisions):
        i = rng.randrange(issues)
        at = min(rows[i].created_at + timedelta(hours=rng.expovariate(1 / 72)), now)
        status = rng.choice(statuses)
        plan.append((i, rng.choice(users), status, at))
        if status == "applied" and (rows[i].first_decided_at is None or at < rows[i].first_decided_at):
            rows[i].first_decided_at = at
    made = Issue.objects.bulk_create(rows, batch_size=5000)
    through = Issue.labels.through
    links = []
    for i, issue in enumerate(made):
        links.append(
            through(
                issue=issue,
                label=labels["oncall: export" if not issue.in_queue and issue.state == "open" else "oncall: pt2"],
            )
        )
        if i % 2:
            links.append(through(issue=issue, label=labels["triaged"]))
            links.append(through(issue=issue, label=labels["module: dynamo" if i % 4 == 1 else "module: inductor"]))
    through.objects.bulk_create(links, batch_size=10_000)
    shown = [{"label": "module: dynamo", "rule_id": "R1.2"}, {"label": "triaged", "rule_id": "G6"}]
    TriageDecision.objects.bulk_create(
        (
            TriageDecision(
                issue=made[i],
                user=user,
                labels_seen=["oncall: pt2"],
                labels_added=["module: dynamo", "triaged"],
                status=status,
                suggestions_shown=shown,
                created_at=at,
            )
            for i, user, status, at in plan
        ),
        batch_size=5000,
    )
    from django.db import connection

    with connection.cursor() as cursor:
        # What autovacuum does after a bulk load: statistics, and the visibility map that lets the
        # decisions per triager be read from decision_window_idx alone (an index-only scan).
        cursor.execute("VACUUM ANALYZE")


def timed(client, url: str, repeat: int, before=None) -> tuple[list[float], int]:
    """Return (sorted seconds per request, queries of one request) after one warm-up request."""
    from bench.bench_queue import timed as timed_page

    times, queries = timed_page(client, url, repeat, before=before)
    return sorted(times), queries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--issues", type=int, default=50_000)
    parser.add_argument("--decisions", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument(
        "--reuse", action="store_true", help="keep the scratch database of the previous run (same sizes)"
    )
    args = parser.parse_args()
    if not args.reuse:
        recreate_database(args.database_url)
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        setup_django(args.database_url, Path(tmp))
        from django.contrib.auth import get_user_model
        from django.db import connection
        from django.test import Client

        started = time.perf_counter()
        if not args.reuse:
            make_rows(args.issues, args.decisions)
        print(
            f"data: {args.issues} issues, {args.decisions} decisions made in {time.perf_counter() - started:.1f} s "
            f"(PostgreSQL {args.database_url.rsplit('/', 1)[1]})"
        )
        user = get_user_model().objects.filter(username="bench").first() or get_user_model().objects.create_superuser(
            "bench", password="bench-password-1"
        )
        # How busy the machine is: one bare scan of the issues, the floor of any page that counts them
        # (of a column no index holds: after VACUUM, count(*) would read an index instead).
        with connection.cursor() as cursor:
            scans = []
            for _ in range(5):
                start = time.perf_counter()
                cursor.execute("SELECT count(created_at) FROM rubric_app_issue")
                scans.append(time.perf_counter() - start)
        print(
            "calibration: a scan of the issues (count(created_at)) "
            f"{statistics.median(scans) * 1000:.1f} ms (median of 5); "
            f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        )
        client = Client()
        client.force_login(user)
        from bench.bench_queue import label_changed

        pages = [
            ("metrics (/metrics, 12 weeks)", "/metrics", None),
            ("metrics (/metrics?weeks=52)", "/metrics?weeks=52", None),
            ("meeting (/meeting, with its 4-week summary)", "/meeting", None),
            # Its table rendered each time (a label changes before each request): the cache would answer otherwise.
            ("queue (/, baseline, table rendered)", "/", label_changed),
        ]
        results = {}
        print(f"{'page':46} {'median ms':>10} {'p90 ms':>8} {'queries':>8}")
        for name, url, before in pages:
            times, queries = timed(client, url, args.repeat, before)
            results[url] = statistics.median(times)
            print(f"{name:46} {results[url] * 1000:10.1f} {times[int(len(times) * 0.9) - 1] * 1000:8.1f} {queries:8d}")
        print(
            f"ratio metrics / queue (median): {results['/metrics'] / results['/']:.2f}; "
            f"metrics median {results['/metrics'] * 1000:.0f} ms (target < 200 ms)"
        )


if __name__ == "__main__":
    main()
