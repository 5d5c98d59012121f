"""Benchmark: a full sync of 5,000 issues with 20,000 comments, and a no-op incremental sync.

    .venv/bin/python bench/bench_sync.py [--issues 5000] [--database-url postgres://...]

The fake GitHub server runs in a child process (so it does not share the GIL
with the sync). Prints the requests made against the floor (ceil(issues/100)
list pages + one page per 100 comments of each issue that has comments), the
wall time and peak memory of the sync, the time to fetch the same pages with
bare `requests` calls (the baseline, measured in the same run) and the ratio,
then a no-op incremental sync's requests and 304s.

Self-contained: it uses a throwaway SQLite database unless --database-url is given.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BODY = (
    "### Describe the bug\nUsing torch.compile on this model fails with a graph break in dynamo.\n\n"
    "```python\nimport torch\n\n@torch.compile\ndef f(x):\n    return torch.sin(x) + x.item()\n\n"
    "f(torch.randn(3))\n```\n"
    "### Versions\nPyTorch 2.6.0, CUDA 12.4, Python 3.11\n"
)
COMMENTS_CYCLE = (0, 2, 4, 6, 8)  # mean 4: 5,000 issues -> 20,000 comments, 1 in 5 without comments


# Each sync reads the triage skill's labels.json and templates.json and the latest release
# (rubric_app/github/skill_files.py).
SKILL_REQUESTS = 3


def serve(conn, issues: int) -> None:
    """Child process: populate a fake GitHub, send its URL, then answer stats requests."""
    from rubric_app.demo.github_seeds import seed_skill
    from rubric_app.rubric.reading.catalog import load_catalog
    from tests.fakegithub import start_server

    fake, server = start_server()
    seed_skill(fake)  # the triage skill's two files and a release: every sync asks whether they changed
    for item in load_catalog():
        fake.add_label(item["name"], "ededed", item["description"])
    # Distinct updated_at, one second apart, all in the past (as on GitHub).
    start = fake.tick() - timedelta(seconds=issues + 10)
    for number in range(1, issues + 1):
        label = "oncall: cpu inductor" if number % 10 == 0 else "oncall: pt2"
        count = COMMENTS_CYCLE[number % len(COMMENTS_CYCLE)]
        comments = [
            {"body": f"I can reproduce this on nightly ({number}/{i}); fails on aot_eager too.", "user": "someone"}
            for i in range(count)
        ]
        fake.add_issue(
            number,
            title=f"[dynamo] graph break #{number}",
            body=BODY,
            labels=[label],
            comments=comments,
            updated_at=start + timedelta(seconds=number),
        )
    conn.send(fake.url)
    while True:
        command = conn.recv()
        if command == "stats":
            with fake.lock:
                conn.send((len(fake.requests), sum(1 for r in fake.requests if r.status == 304)))
        elif command == "clear":
            with fake.lock:
                fake.requests.clear()
            conn.send(True)
        else:
            server.shutdown()
            conn.send(True)
            return


def setup_django(database_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("CELERY_BROKER_URL", "memory://")
    os.environ["TRIAGE_VAR_DIR"] = tempfile.mkdtemp(prefix="bench-var-")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "triage_site.settings")
    os.environ["LOG_LEVEL"] = "WARNING"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def bare_fetch(base_url: str, token: str, repo: str, issue_numbers_with_comments: list[int]) -> tuple[float, int]:
    """The baseline: the same pages with a bare requests.Session, JSON decoded. Returns (seconds, requests)."""
    import requests

    session = requests.Session()
    session.headers["Authorization"] = f"token {token}"
    count = 0
    started = time.perf_counter()

    def walk(url: str, params: dict | None) -> None:
        nonlocal count
        while url:
            response = session.get(url, params=params, timeout=15)
            response.raise_for_status()
            response.json()
            count += 1
            url, params = response.links.get("next", {}).get("url", ""), None

    walk(f"{base_url}/repos/{repo}/labels", {"per_page": 100})
    for label in ("oncall: pt2", "oncall: cpu inductor"):
        walk(
            f"{base_url}/repos/{repo}/issues",
            {"state": "open", "sort": "created", "direction": "asc", "per_page": 100, "labels": label},
        )
    for number in issue_numbers_with_comments:
        walk(f"{base_url}/repos/{repo}/issues/{number}/comments", {"per_page": 100})
    return time.perf_counter() - started, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--issues", type=int, default=5000)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()

    parent, child = mp.get_context("fork").Pipe()
    server = mp.get_context("fork").Process(target=serve, args=(child, args.issues), daemon=True)
    server.start()
    url = parent.recv()

    db_file = Path(tempfile.mkdtemp(prefix="bench-db-")) / "bench.sqlite3"
    setup_django(args.database_url or f"sqlite:///{db_file}")
    from django.conf import settings

    from rubric_app.github import sync
    from rubric_app.models import Comment, Issue, Label
    from rubric_app.triage import followups, suggestions
    from tests.fakegithub import TOKEN

    settings.GITHUB_API_URL, settings.GITHUB_TOKEN, settings.GITHUB_REPO = url, TOKEN, "pytorch/pytorch"

    counts = [COMMENTS_CYCLE[n % len(COMMENTS_CYCLE)] for n in range(1, args.issues + 1)]
    with_comments = [n for n, c in zip(range(1, args.issues + 1), counts) if c]
    pt2 = sum(1 for n in range(1, args.issues + 1) if n % 10)
    list_floor = math.ceil(pt2 / 100) + math.ceil((args.issues - pt2) / 100)
    comment_floor = sum(math.ceil(c / 100) for c in counts if c)
    print(
        f"data: {args.issues} issues ({pt2} oncall: pt2, {args.issues - pt2} oncall: cpu inductor), "
        f"{sum(counts)} comments on {len(with_comments)} issues; "
        f"database {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}"
    )

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    report = sync.sync_queue(full=True)  # nothing follows: the sync alone is timed
    sync_s = time.perf_counter() - started
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    parent.send("stats")
    server_requests, _ = parent.recv()
    label_pages = report.requests - list_floor - comment_floor - SKILL_REQUESTS
    assert Issue.objects.count() == args.issues and Comment.objects.count() == sum(counts), "the sync lost data"

    print(f"full sync: {report.summary()}")
    print(
        f"  requests: {report.requests} made (server saw {server_requests}); floor {list_floor + comment_floor} "
        f"= {list_floor} list pages + {comment_floor} comment pages; "
        f"the other {label_pages} are the label catalog's pages, "
        f"and {SKILL_REQUESTS} the triage skill's files and release"
    )
    print(f"  wall time: {sync_s:.2f} s (fetch + store, rubric suggestions excluded)")
    print(
        f"  peak memory: {rss_after / 1024:.0f} MiB RSS "
        f"(grew {(rss_after - rss_before) / 1024:.0f} MiB during the sync)"
    )

    baseline_s, baseline_requests = bare_fetch(url, TOKEN, "pytorch/pytorch", with_comments)
    print(f"baseline: bare requests for the same {baseline_requests} pages: {baseline_s:.2f} s")
    print(f"  ratio sync / baseline: {sync_s / baseline_s:.2f}x (target <= 2x)")

    ids = list(Issue.objects.values_list("pk", flat=True))
    started = time.perf_counter()
    followups.issues_changed(ids, "sync")  # what the sync task has follow each page (triage/followups.py)
    refresh_s = time.perf_counter() - started
    print(
        f"rubric suggestions for the {len(ids)} changed issues (run by the sync after each page): "
        f"{refresh_s:.2f} s, {1000 * refresh_s / len(ids):.1f} ms/issue"
    )
    # Baseline: the same refresh one issue at a time (its own queries and transaction each), against
    # the batched one on the same 1,000 issues, both replacing the suggestions stored above.
    sample = ids[:1000]
    catalog = Label.objects.triage_catalog()
    started = time.perf_counter()
    for issue in Issue.objects.filter(pk__in=sample).prefetch_related("labels", "comments"):
        suggestions.refresh_issue(issue, catalog)
    one_by_one_s = time.perf_counter() - started
    started = time.perf_counter()
    suggestions.refresh(Issue.objects.filter(pk__in=sample), catalog)
    batched_s = time.perf_counter() - started
    print(
        f"  re-refresh of {len(sample)} issues: batched {batched_s:.2f} s, "
        f"baseline one issue at a time {one_by_one_s:.2f} s; "
        f"ratio {batched_s / one_by_one_s:.2f}x"
    )

    for label in ("first incremental (primes the ETag)", "no-op incremental"):
        parent.send("clear")
        parent.recv()
        started = time.perf_counter()
        report = sync.sync_queue()
        elapsed = time.perf_counter() - started
        parent.send("stats")
        seen, not_modified = parent.recv()
        print(
            f"{label}: {report.requests} request(s), {not_modified} answered 304 (server saw {seen}), "
            f"{report.issues_changed} changed, {elapsed * 1000:.0f} ms"
        )
    print(f"target: no-op incremental <= 2 requests plus the skill's {SKILL_REQUESTS}, all answered 304")
    parent.send("stop")
    parent.recv()


if __name__ == "__main__":
    main()
