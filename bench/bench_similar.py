"""Similar issues at 50,000 issues: neighbours of one issue, and the index update per synced issue.

Fills a scratch database (a temporary SQLite file, the embedded default; or `--database-url` for a
PostgreSQL database whose name starts with "bench", dropped and re-created) with synthetic issues:
copies of the 717 PT2 issues of tests/data, each with its numbers changed, words of another issue and
of a made-up vocabulary mixed in, and for one in four a traceback of one of 300 failures, rendered
with other shapes, paths and line numbers each time; a third are open in the queue, most of the rest
closed with their labels. Then, in this one run:

- the index: similar.reindex over everything (the batch path, 500 a time), per issue; one issue's
  index() on its own (what a webhook costs), per issue;
- a sync's refresh of 500 open issues (engine, index and the neighbours' vote) against the same
  refresh with the index and the vote left out: their cost per issue;
- neighbours() of 200 random issues (the issue page's five queries), against the exact scoring of
  the same vectors by a plain join over every posting (the baseline), with how much of the exact
  top 8 the page shows.

    .venv/bin/python bench/bench_similar.py [--issues 50000] [--database-url postgres://postgres@127.0.0.1:5432/bench_similar]

Targets: neighbours <= 50 ms, index update <= 5 ms per synced issue.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from bench_metrics import recreate_database, setup_django  # the same scratch database and settings

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = 200

EXCEPTIONS = [
    "AssertionError",
    "RuntimeError",
    "torch._dynamo.exc.Unsupported",
    "IndexError",
    "KeyError",
    "torch._inductor.exc.InductorError: LoweringException: AssertionError",
    "TypeError",
    "torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode",
]
FRAMES = [
    "torch/_inductor/lowering.py",
    "torch/_inductor/ir.py",
    "torch/_inductor/scheduler.py",
    "torch/_inductor/codegen/triton.py",
    "torch/_dynamo/symbolic_convert.py",
    "torch/_dynamo/variables/builtin.py",
    "torch/_functorch/_aot_autograd/runtime_wrappers.py",
    "torch/_subclasses/fake_tensor.py",
    "torch/fx/experimental/symbolic_shapes.py",
    "torch/_decomp/decompositions.py",
]
VERBS = ["expected", "could not", "cannot", "failed to", "unsupported"]
NOUNS = [
    "static pad amount",
    "contiguous input",
    "stride",
    "guard on size",
    "layout",
    "symbolic size",
    "dtype",
    "kernel",
]


def failures(rng: random.Random, count: int = 300) -> list[tuple[str, str, str]]:
    """(exception, message template, innermost frame) of `count` distinct failures."""
    out = set()
    while len(out) < count:
        frame = (
            f'{rng.choice(FRAMES)}", line {{line}}, '
            f"in {rng.choice(['lower', 'create', 'codegen', 'call_function', 'run', 'wrap'])}_{rng.randrange(40)}"
        )
        out.add(
            (
                rng.choice(EXCEPTIONS),
                f"{rng.choice(VERBS)} a {rng.choice(NOUNS)} for {rng.choice(NOUNS)}, got {{shape}}",
                frame,
            )
        )
    return sorted(out)


def traceback(rng: random.Random, failure: tuple[str, str, str]) -> str:
    exception, message, frame = failure
    site = rng.choice(["/opt/conda/lib/python3.11/site-packages", "/usr/lib/python3/dist-packages", "/home/u/pytorch"])
    shape = "[" + ", ".join(str(rng.randrange(1, 4096)) for _ in range(rng.randint(1, 4))) + "]"
    return (
        "```\nTraceback (most recent call last):\n"
        f'  File "/home/u{rng.randrange(999)}/train.py", line {rng.randrange(900)}, in <module>\n'
        "    model(x)\n"
        f'  File "{site}/torch/_dynamo/eval_frame.py", line {rng.randrange(2000)}, in _fn\n    return fn(*args)\n'
        f'  File "{site}/{frame.format(line=rng.randrange(9000))}\n    raise\n'
        f"{exception}: {message.format(shape=shape)}\n```\n"
    )


def make_issues(count: int) -> None:
    """count synthetic issues (see the module docstring), bulk-created with their labels."""
    from django.utils import timezone

    from rubric_app.models import Issue, Label
    from rubric_app.rubric.offline.evaluation import read_jsonl

    rng = random.Random(13)
    records = [
        r for name in ("pt2_dev.jsonl", "pt2_train.jsonl") for r in read_jsonl(open(ROOT / "tests" / "data" / name))
    ]
    made_up = [
        "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(2, 4)))
        for _ in range(30_000)
    ]
    zipf = [1 / (i + 1) for i in range(len(made_up))]
    pool = failures(rng)
    words = [re.findall(r"\w+", r["body"]) for r in records]
    names = sorted({l for r in records for l in r["labels"]} | {"oncall: pt2"})
    labels = {
        label.name: label for label in Label.objects.bulk_create(Label(name=n, allowed_for_triage=True) for n in names)
    }
    now = timezone.now()
    rows, label_rows = [], []
    for i in range(count):
        base = records[i % len(records)]
        other = words[rng.randrange(len(words))]
        mixed = " ".join(rng.sample(other, k=min(30, len(other) // 3)))
        body = (
            re.sub(r"\d+", lambda m: str(rng.randrange(10_000)), base["body"])
            + "\n\n"
            + mixed
            + " "
            + " ".join(rng.choices(made_up, zipf, k=20))
        )
        if i % 4 == 0:
            body += "\n" + traceback(rng, pool[rng.randrange(len(pool))])
        state = "open" if i % 3 == 0 else "closed"
        rows.append(
            Issue(
                number=1_000_000 + i,
                title=f"{base['title']} {rng.choice(made_up)}",
                body=body,
                state=state,
                in_queue=state == "open",
                html_url=f"https://github.com/pytorch/pytorch/issues/{1_000_000 + i}",
                updated_at=now - timedelta(minutes=i),
            )
        )
        label_rows.append(
            ["oncall: pt2"] + ([l for l in base["labels"] if l != "triaged"] if state == "closed" else [])
        )
    made = Issue.objects.bulk_create(rows, batch_size=2000)
    through = Issue.labels.through
    through.objects.bulk_create(
        [
            through(issue=issue, label=labels[name])
            for issue, names in zip(made, label_rows)
            for name in dict.fromkeys(names)
        ],
        batch_size=10_000,
    )


def per_issue_ms(seconds: float, issues: int) -> float:
    return seconds * 1000 / issues


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--issues", type=int, default=50_000)
    parser.add_argument("--database-url", default="", help="a scratch PostgreSQL database (name starting with 'bench')")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite:///{Path(tmp) / 'bench.sqlite3'}"
        if args.database_url:
            recreate_database(url)
        setup_django(url, Path(tmp))
        run(args.issues)


def run(count: int) -> None:
    from django.db import connection

    from rubric_app.models import Issue, IssueTerm, Label
    from rubric_app.triage import similar, suggestions

    version = connection.Database.sqlite_version if connection.vendor == "sqlite" else connection.pg_version
    print(f"database: {connection.vendor} {version}")
    start = time.perf_counter()
    make_issues(count)
    print(f"{count} synthetic issues created in {time.perf_counter() - start:.0f} s")

    start = time.perf_counter()
    similar.reindex(Issue.objects.all())
    bulk = time.perf_counter() - start
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE rubric_app_issueterm")
    terms = IssueTerm.objects.count()
    groups = Issue.objects.exclude(signature="").values("signature").distinct().count()
    print(f"index: {terms} terms ({terms / count:.1f} an issue), {groups} distinct failure signatures")
    print(f"index update, batch path (reindex, 500 a batch): {per_issue_ms(bulk, count):.2f} ms per issue")

    rng = random.Random(5)
    ids = list(Issue.objects.values_list("pk", flat=True))
    sample = [Issue.objects.prefetch_related("labels", "comments").get(pk=pk) for pk in rng.sample(ids, SAMPLES)]
    single = []
    for issue in sample:
        text = issue.as_issue_text()
        t = time.perf_counter()
        similar.index([issue], [text])
        single.append(time.perf_counter() - t)
    print(
        f"index update, one issue at a time (a webhook): median {statistics.median(single) * 1000:.2f} ms, "
        f"p90 {sorted(single)[int(0.9 * len(single))] * 1000:.2f} ms per issue"
    )

    open_ids = list(Issue.objects.in_queue().values_list("pk", flat=True)[:500])
    catalog = frozenset(Label.objects.values_list("name", flat=True))
    batch = Issue.objects.filter(pk__in=open_ids)
    start = time.perf_counter()
    suggestions.refresh(batch, catalog)
    with_similar = time.perf_counter() - start
    index, votes = similar.index, similar.neighbours_for_votes
    similar.index, similar.neighbours_for_votes = (lambda issues, texts: None), (lambda issues: {})
    start = time.perf_counter()
    suggestions.refresh(batch, catalog)
    without = time.perf_counter() - start
    similar.index, similar.neighbours_for_votes = index, votes
    print(
        f"sync refresh of {len(open_ids)} open issues: "
        f"{per_issue_ms(with_similar, len(open_ids)):.2f} ms per issue with the "
        f"index and the vote, {per_issue_ms(without, len(open_ids)):.2f} without (the engine alone): "
        f"+{per_issue_ms(with_similar - without, len(open_ids)):.2f} ms, ratio {with_similar / without:.2f}"
    )

    table = IssueTerm._meta.db_table
    exact_sql = (
        f"SELECT t.issue_id, SUM(q.weight * t.weight) AS s FROM {table} q JOIN {table} t ON t.term = q.term "
        "WHERE q.issue_id = %s AND t.issue_id <> %s GROUP BY t.issue_id "
        f"ORDER BY s DESC, t.issue_id LIMIT {similar.SHOWN}"
    )
    ours, exact, overlap, ratios = [], [], [], []
    for issue in sample:
        t = time.perf_counter()
        found = similar.neighbours(issue)
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(exact_sql, [issue.pk, issue.pk])
            best = cursor.fetchall()
        exact.append(time.perf_counter() - t)
        if best:
            overlap.append(len({n.issue.pk for n in found} & {pk for pk, _ in best}) / len(best))
            ratios.append(
                sum(sorted((n.similarity for n in found), reverse=True)[: len(best)]) / sum(s for _, s in best)
            )

    def line(name: str, times: list[float]) -> str:
        ordered = sorted(times)
        return (
            f"{name}: median {statistics.median(times) * 1000:.1f} ms, "
            f"p90 {ordered[int(0.9 * len(ordered))] * 1000:.1f} ms, "
            f"max {ordered[-1] * 1000:.1f} ms"
        )

    print(line(f"neighbours() of {SAMPLES} issues (the issue page)", ours))
    print(line("baseline: exact scoring over every posting (one join)", exact))
    print(f"ratio neighbours / baseline (median): {statistics.median(ours) / statistics.median(exact):.2f}")
    print(
        f"agreement with the exact top {similar.SHOWN}: {statistics.mean(overlap):.2f} of the same issues, "
        f"{statistics.mean(ratios):.3f} of their summed cosine"
    )
    print(
        json.dumps(
            {
                "vendor": connection.vendor,
                "issues": count,
                "neighbours_median_ms": round(statistics.median(ours) * 1000, 1),
                "index_batch_ms": round(per_issue_ms(bulk, count), 2),
                "index_single_median_ms": round(statistics.median(single) * 1000, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
