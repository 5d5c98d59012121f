"""Server time of the queue page with 5,000 issues vs the Django admin changelist of the same rows.

Self-contained: a temporary SQLite database, migrated and filled with bulk_create,
then both pages are requested through Django's test client (the whole request:
middleware, session, permissions, queries, template) and timed in this one run.

    .venv/bin/python bench/bench_queue.py [--issues 5000] [--repeat 30]

Prints the median and p90 of each page, their query counts and the ratio
queue / admin (target: <= 1). The queue's table is rendered each time (a label changes before
each request, as a sync would) and, in one more row, answered from its cache (rubric_app/web/queue_cache.py:
nothing changed). Also times the queue's htmx partial (a filter swap), and the
search (count and first page of IssueQuerySet.search: FTS5 here) against the icontains filter it
replaced, with how many issues each finds for "segfault" (the bodies say "Segmentation fault").
`--database-url` runs it all on an empty, throwaway database instead (PostgreSQL's tsvector search).
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


def setup_django(tmp: Path, database_url: str = "") -> None:
    os.environ["DATABASE_URL"] = database_url or f"sqlite:///{tmp / 'bench.sqlite3'}"
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


SYMPTOMS = [
    "Segmentation fault (core dumped)",
    "a graph break in the loop",
    "a recompilation per step",
    "NaN in the output",
    "CUDA out of memory",
    "a wrong stride",
]


def make_rows(count: int) -> None:
    """count open PT2 issues, each with 2-3 labels, 3 suggestions and every tenth a finished bisection."""
    from django.utils import timezone

    from rubric_app.models import BisectionRun, Issue, Label, Suggestion

    labels = Label.objects.bulk_create(
        Label(name=name, color=color, allowed_for_triage=True)
        for name, color in [
            ("oncall: pt2", "e99695"),
            ("module: dynamo", "c5def5"),
            ("module: inductor", "c5def5"),
            ("triage review", "fbca04"),
            ("needs reproduction", "d4c5f9"),
        ]
    )
    now = timezone.now()
    issues = Issue.objects.bulk_create(
        Issue(
            number=100_000 + i,
            title=f"torch.compile graph break in model {i}",
            author=f"user{i % 97}",
            body="```python\nimport torch\n```\n" * 20 + f"It fails with {SYMPTOMS[i % len(SYMPTOMS)]}.",
            html_url=f"https://github.com/pytorch/pytorch/issues/{100_000 + i}",
            updated_at=now - timedelta(minutes=i),
            created_at=now - timedelta(days=i % 400),
            checklist=[{"rule_id": "G4", "text": "a module label", "state": "violated", "evidence": ""}],
        )
        for i in range(count)
    )
    through = Issue.labels.through
    rows = [through(issue=issue, label=labels[0]) for issue in issues]
    rows += [through(issue=issue, label=labels[1 + i % 4]) for i, issue in enumerate(issues) if i % 3]
    through.objects.bulk_create(rows, batch_size=2000)
    Suggestion.objects.bulk_create(
        [
            Suggestion(
                issue=issue, label=name, rule_id=rule, confidence=conf, evidence="graph break", evidence_source="title"
            )
            for issue in issues
            for name, rule, conf in [
                ("module: dynamo", "R1.2", 0.9),
                ("triaged", "G6", 0.7),
                ("module: compile ux", "G4", 0.2),
            ]
        ],
        batch_size=2000,
    )
    BisectionRun.objects.bulk_create(
        BisectionRun(issue=issue, repro_code="import torch", status="done", verdict_summary="fails on inductor (R2.2)")
        for issue in issues[::10]
    )


def label_changed() -> None:
    """A write every queue table shows (as a sync or webhook makes): the next request renders its table again."""
    from rubric_app.models import Label

    Label.objects.filter(name="oncall: pt2").update(color="e99695")


def timed(client, url: str, repeat: int, headers=None, before=None) -> tuple[list[float], int]:
    """Return (seconds per request, queries of one request) after one warm-up request; before() runs,
    untimed, before each request."""
    from django.db import connection

    queries = []
    if before:
        before()
    with connection.execute_wrapper(lambda execute, sql, *rest: queries.append(sql) or execute(sql, *rest)):
        response = client.get(url, headers=headers or {})
    assert response.status_code == 200, (url, response.status_code)
    times = []
    for _ in range(repeat):
        if before:
            before()
        start = time.perf_counter()
        response = client.get(url, headers=headers or {})
        times.append(time.perf_counter() - start)
        assert response.status_code == 200
    return times, len(queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--issues", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument(
        "--database-url",
        default="",
        help="an empty, throwaway database to fill (e.g. PostgreSQL); default: a temporary SQLite file",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-queue-") as tmp:
        setup_django(Path(tmp), args.database_url)
        from django.contrib.auth import get_user_model
        from django.test import Client

        started = time.perf_counter()
        make_rows(args.issues)
        from django.db import connection

        print(f"data: {args.issues} issues made in {time.perf_counter() - started:.1f} s ({connection.vendor})")
        user = get_user_model().objects.create_superuser("bench", password="bench-password-1")
        client = Client()
        client.force_login(user)
        pages = [
            ("queue (/, 50 rows: labels, suggestions, verdict)", "/", None, label_changed),
            ("queue, its table from the cache (nothing changed)", "/", None, None),
            ("queue htmx partial (filter swap)", "/?lane=pt2&q=model", {"HX-Request": "true"}, label_changed),
            ("admin changelist (100 rows)", "/admin/rubric_app/issue/", None, None),
        ]
        results = {}
        print("queue pages: a label changes before each request (its table is rendered), unless said otherwise")
        print(f"{'page':52} {'median ms':>10} {'p90 ms':>8} {'queries':>8}")
        for name, url, headers, before in pages:
            times, queries = timed(client, url, args.repeat, headers, before)
            times.sort()
            results[name] = statistics.median(times)
            print(f"{name:52} {results[name] * 1000:10.1f} {times[int(len(times) * 0.9) - 1] * 1000:8.1f} {queries:8d}")
        queue, cached, admin = (results[pages[i][0]] for i in (0, 1, 3))
        print(
            f"ratio queue / admin changelist (median): {queue / admin:.2f}  (target <= 1); "
            f"from the cache: {cached / admin:.2f}"
        )
        bench_search(args.repeat)


def bench_search(repeat: int) -> None:
    """The queue's search (count + first 50 rows, ranked) vs the icontains filter it replaced."""
    from django.db.models import Q

    from rubric_app.models import Issue

    def run(qs) -> tuple[float, int]:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            found = qs.count()
            list(qs[:50])
            times.append(time.perf_counter() - start)
        return statistics.median(times), found

    print(f"{'search (lane all, count + first page)':52} {'median ms':>10} {'found':>8}")
    rows = Issue.objects.for_queue("all").defer("body")
    for text in ("graph break", "segfault"):
        old, old_found = run(rows.filter(Q(title__icontains=text) | Q(body__icontains=text)))
        new, new_found = run(rows.search(text))
        print(f"{'icontains ' + repr(text):52} {old * 1000:10.1f} {old_found:8d}")
        print(f"{'full-text ' + repr(text) + ' (ranked)':52} {new * 1000:10.1f} {new_found:8d}")
        print(f"ratio full-text / icontains for {text!r} (median): {new / old:.2f}")


if __name__ == "__main__":
    main()
