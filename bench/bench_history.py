"""History at scale, and the labeler trained from it (issue #38).

Two parts, in a scratch database each:

- `--part files`: the 717 harvested PT2 issues of tests/data served as the repository's history by the fake GitHub
  (github_seeds.seed_history), backfilled by `sync_history` through PyGithub over HTTP (its requests counted against
  the budget), then the labeler trained from the database against the one trained from the files, both scored on the
  files' held-out slice (evaluation.is_held_out: 131 issues neither learned from), over three training orders each;
  the promotion gate's own run (the newest history held out) against the shipped model; and the learning curve of
  the history, extrapolated.
- `--part scale`: a queue of 1,000 open issues, then 50,000 history issues (closed, labelled, triaged, a quarter with
  tracebacks, bulk-created and indexed), and the pages before and after: the queue (its table rendered), an issue
  page (similar issues included), the history page and its search, the metrics page, and neighbours() of 200 queue
  issues: the same queries at both sizes, within the current targets (bench/README.md).

    .venv/bin/python bench/bench_history.py --part files [--database-url postgres://postgres@127.0.0.1:5432/bench_history]
    .venv/bin/python bench/bench_history.py --part scale [--history 50000] [--database-url ...] [--repeat 15]

Without --database-url, a temporary SQLite file.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_metrics import recreate_database, setup_django  # noqa: E402  (the same scratch database and settings)

ROOT = Path(__file__).resolve().parent.parent
# part scale: the history beside the queue at the first measure (the same pages, queries and plans, but few rows).
SMALL_HISTORY = 1_000
FILES = [ROOT / "tests" / "data" / "pt2_dev.jsonl", ROOT / "tests" / "data" / "pt2_train.jsonl"]


def file_records() -> list[dict]:
    from rubric_app.rubric.offline.evaluation import read_jsonl

    return [r for path in FILES for r in read_jsonl(open(path, encoding="utf-8"))]


# --- part "files" -------------------------------------------------------------------------------------------------


def part_files(orders: int, curve_only: bool) -> None:
    from django.conf import settings

    from rubric_app.demo import github_http, github_seeds
    from rubric_app.github import history
    from rubric_app.models import Comment, Issue
    from rubric_app.rubric.engine.assess import shipped_model
    from rubric_app.rubric.engine.model import LabelModel
    from rubric_app.rubric.offline import promotion
    from rubric_app.rubric.offline.evaluation import is_held_out
    from rubric_app.rubric.offline.fitting import fit_model, learning_curve
    from rubric_app.triage import followups, model_store

    files = file_records()
    fake, server = github_http.start_server(token="bench-token")
    try:
        github_seeds.seed_history(fake, files)
        settings.GITHUB_API_URL, settings.GITHUB_TOKEN, settings.GITHUB_REPO = fake.url, "bench-token", fake.repo
        start = time.perf_counter()
        report = history.sync_history(out=lambda line: None, on_changed=followups.issues_changed)
        took = time.perf_counter() - start
    finally:
        server.shutdown()
        server.server_close()
    with_comments = sum(1 for issue in fake.issues.values() if issue["comments"])
    pages = len(fake.requests_to(r"/issues$"))
    print(
        f"backfill: {Issue.objects.count()} issues, {Comment.objects.count()} comments in {took:.1f} s; "
        f"{report.requests} requests = {pages} listing pages + {len(fake.requests_to(r'/comments$'))} comment "
        f"requests ({with_comments} issues have comments) + {len(fake.requests_to(r'/events$'))} label events"
    )

    everything = [model_store.issue_record(i) for i in Issue.objects.prefetch_related("labels", "comments")]
    triaged = model_store.history_records()
    held_files = [r for r in files if is_held_out(r)]
    print(f"history: {len(everything)} issues, {len(triaged)} triaged; the files' held-out slice: {len(held_files)}")

    def score(model, truth: list[dict]) -> dict[str, float]:
        return promotion.figures(truth, promotion.assess(truth, model))

    def shuffled(records: list[dict], seed: int) -> list[dict]:
        out = list(records)
        random.Random(seed).shuffle(out)
        return out

    if curve_only:
        orders = 0
    rows = [("the shipped model (files, shipped order)", score(shipped_model(), held_files), None)]
    pools = {
        "files": [r for r in files if not is_held_out(r)],
        "history, every issue": [r for r in everything if not is_held_out(r)],
        "history, triaged": [r for r in triaged if not is_held_out(r)],
    }
    held_db = [r for r in everything if is_held_out(r)]
    for name, pool in pools.items():
        for order in range(orders):
            start = time.perf_counter()
            model = LabelModel.from_json(fit_model(shuffled(pool, order) if order else pool).to_json())
            rows.append(
                (
                    f"{name} ({len(pool)} issues), order {order}",
                    score(model, held_files),
                    score(model, held_db),
                )
            )
            print(f"  trained {rows[-1][0]} in {time.perf_counter() - start:.0f} s", flush=True)
    keys = ("component_f1", "component_precision", "preselected_precision", "coverage", "routing_f1", "review_recall")
    print(f"\non the files' held-out slice ({len(held_files)} issues; truth: the files' labels, truncation-aware)")
    print(f"{'model':52}" + "".join(f"{k[:14]:>15}" for k in keys) + f"{'F1 (db truth)':>15}")
    for name, figures, db_truth in rows:
        tail = f"{db_truth['component_f1']:>15.3f}" if db_truth else f"{'':>15}"
        print(f"{name:52}" + "".join(f"{figures[k]:>15.3f}" for k in keys) + tail)

    if not curve_only:
        print("\nthe promotion gate on this history (the newest triaged issues held out, against the shipped model):")
        for line in _gate_lines(model_store):
            print("  " + line)

    curve = learning_curve(everything)
    print("\nlearning curve of the history (the labeler alone, core components, out of fold, 3 seeds):")
    for fraction, size, mean, low, high in curve:
        print(f"  {fraction:.2f}: {size} issues, micro-F1 {mean:.3f} ({low:.3f}-{high:.3f})")
    sizes, means = [size for _, size, *_ in curve], [mean for _, _, mean, _, _ in curve]
    gain = (means[-1] - means[-2]) / math.log2(sizes[-1] / sizes[-2])
    a, b, c = _saturating(sizes, means)
    print(f"  the last doubling's gain carried on: +{gain:.3f} a doubling")
    print(f"  a saturating fit: F1 = {a:.3f} - {b:.2f} * issues^-{c:.2f} (ceiling {a:.3f})")
    for size in (1_000, 2_000, 5_000, 10_000):
        carried = means[-1] + gain * math.log2(size / sizes[-1])
        print(
            f"  at {size:>6} issues: {carried:.3f} (the last doubling carried on), {a - b * size**-c:.3f} (saturating)"
        )


def _saturating(sizes: list[int], means: list[float]) -> tuple[float, float, float]:
    """(a, b, c) of F1 = a - b * n^-c fitted by least squares (c on a grid, a and b by regression)."""
    best = None
    for step in range(5, 301):
        c = step / 100
        xs = [n**-c for n in sizes]
        b = -_slope(xs, means)
        a = statistics.mean(means) + b * statistics.mean(xs)
        error = sum((a - b * x - y) ** 2 for x, y in zip(xs, means))
        if best is None or error < best[0]:
            best = (error, a, b, c)
    return best[1], best[2], best[3]


def _slope(xs: list[float], ys: list[float]) -> float:
    mx, my = statistics.mean(xs), statistics.mean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def _gate_lines(model_store) -> list[str]:
    lines: list[str] = []
    row, _verdict = model_store.train_from_history(trained_by="bench_history", out=lines.append)
    return lines + [f"stored as model {row.pk}: {row.status}"]


# --- part "scale" -------------------------------------------------------------------------------------------------


def make_issues(count: int, *, first: int, open_queue: bool, labels: dict, rng: random.Random) -> list:
    """`count` issues from the harvested ones, renumbered, their words mixed, a quarter with a traceback of one of
    300 failures (bench_similar's); queue issues open, history issues closed (completed or not planned) with their
    labels and `triaged`."""
    from django.utils import timezone

    from bench.bench_similar import failures, traceback
    from rubric_app.models import Issue, Label

    records = file_records()
    pool = failures(random.Random(13))
    words = [re.findall(r"\w+", r["body"]) for r in records]
    for name in sorted({l for r in records for l in r["labels"]} | {"oncall: pt2", "triaged"}):
        if name not in labels:
            labels[name] = Label.objects.get_or_create(name=name, defaults={"allowed_for_triage": True})[0]
    now = timezone.now()
    rows, names = [], []
    for i in range(count):
        base = records[rng.randrange(len(records))]
        other = words[rng.randrange(len(words))]
        body = re.sub(r"\d+", lambda m: str(rng.randrange(10_000)), base["body"]) + "\n\n"
        body += " ".join(rng.sample(other, k=min(30, len(other) // 3)))
        if i % 4 == 0:
            body += "\n" + traceback(rng, pool[rng.randrange(len(pool))])
        created = now - timedelta(days=rng.uniform(0, 1000 if not open_queue else 90))
        closed = not open_queue
        rows.append(
            Issue(
                number=first + i,
                title=base["title"],
                body=body,
                state="closed" if closed else "open",
                state_reason=("completed" if i % 5 else "not_planned") if closed else "",
                in_queue=not closed,
                html_url=f"https://github.com/pytorch/pytorch/issues/{first + i}",
                created_at=created,
                updated_at=created + timedelta(days=rng.uniform(0, 30)),
                closed_at=created + timedelta(days=rng.uniform(1, 60)) if closed else None,
            )
        )
        kept = [l for l in base["labels"] if l != "triaged"]
        names.append(["oncall: pt2", *kept] + (["triaged"] if closed else []))
    made = Issue.objects.bulk_create(rows, batch_size=2000)
    through = Issue.labels.through
    through.objects.bulk_create(
        [through(issue=issue, label=labels[n]) for issue, ns in zip(made, names) for n in dict.fromkeys(ns)],
        batch_size=10_000,
    )
    return made


def part_scale(history_count: int, repeat: int) -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.urls import reverse

    from bench.bench_queue import label_changed, timed
    from rubric_app.github import history
    from rubric_app.models import Issue, Label
    from rubric_app.triage import similar, suggestions

    rng, labels = random.Random(38), {}
    queue = make_issues(1000, first=300_000, open_queue=True, labels=labels, rng=rng)
    catalog = frozenset(Label.objects.values_list("name", flat=True))
    suggestions.refresh(Issue.objects.filter(pk__in=[i.pk for i in queue]), catalog)
    user = get_user_model().objects.create_superuser("bench", password="bench-password-1")
    client = Client()
    client.force_login(user)
    sample = rng.sample([i.pk for i in queue], 200)
    issue_number = Issue.objects.filter(pk__in=sample, signature__gt="").values_list("number", flat=True).first()
    issue_url = reverse("rubric_app:issue", args=[issue_number])
    pages = [
        ("queue (/, table rendered)", "/", label_changed),
        ("queue search (/?q=inductor)", "/?q=inductor&lane=all", label_changed),
        (f"issue page ({issue_url})", issue_url, None),
        ("history (/history)", "/history", None),
        ("history search (/history?q=inductor)", "/history?q=inductor", None),
        ("metrics (/metrics, 12 weeks)", "/metrics", None),
    ]

    def measure() -> dict[str, tuple[float, float, int]]:
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("VACUUM ANALYZE")
        out = {}
        for name, url, before in pages:
            times, queries = timed(client, url, repeat, before=before)
            times = sorted(times)
            out[name] = (statistics.median(times), times[int(len(times) * 0.9) - 1], queries)
        found = []
        for pk in sample:
            issue = Issue.objects.get(pk=pk)
            with CaptureQueriesContext(connection) as captured:
                start = time.perf_counter()
                similar.neighbours(issue)
                found.append((time.perf_counter() - start, len(captured)))
        times = sorted(t for t, _ in found)
        out["neighbours() of 200 queue issues"] = (
            statistics.median(times),
            times[int(len(times) * 0.9) - 1],
            max(q for _, q in found),
        )
        return out

    first = make_issues(SMALL_HISTORY, first=400_000, open_queue=False, labels=labels, rng=rng)
    similar.reindex(Issue.objects.filter(pk__gte=first[0].pk))
    history.refresh_statistics()  # what the backfill does when it ends
    before = measure()
    start = time.perf_counter()
    made = make_issues(history_count - SMALL_HISTORY, first=500_000, open_queue=False, labels=labels, rng=rng)
    created = time.perf_counter() - start
    start = time.perf_counter()
    similar.reindex(Issue.objects.filter(pk__gte=made[0].pk))
    history.refresh_statistics()
    print(
        f"{history_count} history issues created in {created:.0f} s, indexed in {time.perf_counter() - start:.0f} s; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    after = measure()
    small, large = f"{SMALL_HISTORY:,} history issues", f"{history_count:,} history issues"
    print(f"\n{'1,000 queue issues and':44}{small:>28}{large:>28}")
    print(f"{'page':44}{'median / p90 ms':>20}{'queries':>8}{'median / p90 ms':>20}{'queries':>8}")
    for name in before:
        (m0, p0, q0), (m1, p1, q1) = before[name], after[name]
        print(f"{name:44}{m0 * 1000:11.1f} / {p0 * 1000:6.1f}{q0:8d}{m1 * 1000:11.1f} / {p1 * 1000:6.1f}{q1:8d}")
    same = all(before[name][2] == after[name][2] for name in before)
    print(f"\nqueries the same at both sizes: {same}")
    queue = "queue (/, table rendered)"
    print(
        f"targets: metrics < 200 ms: {after['metrics (/metrics, 12 weeks)'][0] * 1000:.0f} ms; neighbours <= 50 ms: "
        f"{after['neighbours() of 200 queue issues'][0] * 1000:.1f} ms; queue page (rendered) "
        f"{after[queue][0] / before[queue][0]:.2f}x its time without history"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["files", "scale"], required=True)
    parser.add_argument("--database-url", default="", help="a scratch PostgreSQL database (name starting with 'bench')")
    parser.add_argument("--history", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--orders", type=int, default=3, help="training orders per model (part files)")
    parser.add_argument("--curve-only", action="store_true", help="part files: the backfill and the learning curve")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        url = args.database_url or f"sqlite:///{Path(tmp) / 'bench.sqlite3'}"
        if args.database_url:
            recreate_database(url)
        setup_django(url, Path(tmp))
        from django.db import connection

        print(f"database: {connection.vendor}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        if args.part == "files":
            part_files(args.orders, args.curve_only)
        else:
            part_scale(args.history, args.repeat)


if __name__ == "__main__":
    main()
