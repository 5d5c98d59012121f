"""Server time of the queue page with 5,000 issues vs the Django admin changelist of the same rows.

Self-contained: a temporary SQLite database, migrated and filled with bulk_create,
then both pages are requested through Django's test client (the whole request:
middleware, session, permissions, queries, template) and timed in this one run.

    .venv/bin/python bench/bench_queue.py [--issues 5000] [--repeat 30]

Prints the median and p90 of each page, their query counts and the ratio
queue / admin (target: <= 1). Also times the queue's htmx partial (a filter swap).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup_django(tmp: Path) -> None:
    os.environ["DATABASE_URL"] = f"sqlite:///{tmp / 'bench.sqlite3'}"
    os.environ["TRIAGE_VAR_DIR"] = str(tmp)
    os.environ["CELERY_BROKER_URL"] = "memory://"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "triage_site.settings")
    os.environ["LOG_LEVEL"] = "WARNING"
    os.environ.pop("SECRET_KEY", None)  # DEBUG on: the embedded default, as a developer runs it
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.conf import settings

    settings.DEBUG = False  # DEBUG would keep every query in memory and skew both sides alike
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def make_rows(count: int) -> None:
    """count open PT2 issues, each with 2-3 labels, 3 suggestions and every tenth a finished bisection."""
    from django.utils import timezone

    from rubric_app.models import BisectionRun, Issue, Label, Suggestion

    labels = Label.objects.bulk_create(
        Label(name=name, color=color, allowed_for_triage=True)
        for name, color in [("oncall: pt2", "e99695"), ("module: dynamo", "c5def5"), ("module: inductor", "c5def5"),
                            ("triage review", "fbca04"), ("needs reproduction", "d4c5f9")]
    )
    now = timezone.now()
    issues = Issue.objects.bulk_create(
        Issue(number=100_000 + i, title=f"torch.compile graph break in model {i}", author=f"user{i % 97}",
              body="```python\nimport torch\n```\n" * 20, html_url=f"https://github.com/pytorch/pytorch/issues/{100_000 + i}",
              updated_at=now - timedelta(minutes=i), created_at=now - timedelta(days=i % 400),
              checklist=[{"rule_id": "G4", "text": "a module label", "state": "violated", "evidence": ""}])
        for i in range(count)
    )
    through = Issue.labels.through
    rows = [through(issue=issue, label=labels[0]) for issue in issues]
    rows += [through(issue=issue, label=labels[1 + i % 4]) for i, issue in enumerate(issues) if i % 3]
    through.objects.bulk_create(rows, batch_size=2000)
    Suggestion.objects.bulk_create(
        [Suggestion(issue=issue, label=name, rule_id=rule, confidence=conf, evidence="graph break", evidence_source="title")
         for issue in issues
         for name, rule, conf in [("module: dynamo", "R1.2", 0.9), ("triaged", "G6", 0.7), ("module: compile ux", "G4", 0.2)]],
        batch_size=2000,
    )
    BisectionRun.objects.bulk_create(
        BisectionRun(issue=issue, repro_code="import torch", status="done", verdict_summary="fails on inductor (R2.2)")
        for issue in issues[::10]
    )


def timed(client, url: str, repeat: int, headers=None) -> tuple[list[float], int]:
    """Return (seconds per request, queries of one request) after one warm-up request."""
    from django.db import connection

    queries = []
    with connection.execute_wrapper(lambda execute, sql, *rest: queries.append(sql) or execute(sql, *rest)):
        response = client.get(url, headers=headers or {})
    assert response.status_code == 200, (url, response.status_code)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        response = client.get(url, headers=headers or {})
        times.append(time.perf_counter() - start)
        assert response.status_code == 200
    return times, len(queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--issues", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-queue-") as tmp:
        setup_django(Path(tmp))
        from django.contrib.auth import get_user_model
        from django.test import Client

        started = time.perf_counter()
        make_rows(args.issues)
        print(f"data: {args.issues} issues made in {time.perf_counter() - started:.1f} s (SQLite, {tmp})")
        user = get_user_model().objects.create_superuser("bench", password="bench-password-1")
        client = Client()
        client.force_login(user)
        pages = [
            ("queue (/, 50 rows: labels, suggestions, verdict)", "/", None),
            ("queue htmx partial (filter swap)", "/?lane=pt2&q=model", {"HX-Request": "true"}),
            ("admin changelist (100 rows)", "/admin/rubric_app/issue/", None),
        ]
        results = {}
        print(f"{'page':52} {'median ms':>10} {'p90 ms':>8} {'queries':>8}")
        for name, url, headers in pages:
            times, queries = timed(client, url, args.repeat, headers)
            times.sort()
            results[name] = statistics.median(times)
            print(f"{name:52} {results[name] * 1000:10.1f} {times[int(len(times) * 0.9) - 1] * 1000:8.1f} {queries:8d}")
        queue, admin = results[pages[0][0]], results[pages[2][0]]
        print(f"ratio queue / admin changelist (median): {queue / admin:.2f}  (target <= 1)")


if __name__ == "__main__":
    main()
