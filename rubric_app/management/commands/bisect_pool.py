"""Bisect the repro of every issue in JSONL files once, in the sandbox, and cache what each mode did.

The cache is what `evaluate_verdicts` scores: the verdict's component against the humans' labels, for the
verdict rules of today and any later change to them, without running the repros again. Resumable: an issue
already in the cache is not run again (delete its line to rerun it).
"""

import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from rubric_app import bisection
from rubric_app.rubric.offline.evaluation import issue_from_record


def pool_repros(paths: list[str]):
    """Yield (record, repro) for each record whose text holds a repro that does not ask for CUDA."""
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                record = json.loads(line)
                issue = issue_from_record(record)
                repro = bisection.extract_repro([issue.body, *(c.body for c in issue.comments)])
                if repro is not None and not bisection.names_cuda(repro.original or repro.code):
                    yield record, repro


class Command(BaseCommand):
    help = "Run the bisection on every CPU repro of JSONL issue files and cache each mode's results (JSONL)."

    def add_arguments(self, parser):
        parser.add_argument("--input", nargs="+", required=True, help="JSONL issue files (tests/data/*.jsonl)")
        parser.add_argument("--output", required=True, help="the cache, one line per issue (appended)")
        parser.add_argument("--timeout", type=float, default=60, help="seconds per mode")
        parser.add_argument("--limit", type=int, default=0, help="stop after this many new runs (0: all)")

    def handle(self, *args, input, output, timeout, limit, **options):
        cache = Path(output)
        done = set()
        if cache.exists():
            done = {json.loads(line)["number"] for line in cache.read_text().splitlines() if line.strip()}
        limits = bisection.Limits(timeout_s=timeout, memory_mb=settings.BISECTION_MEMORY_MB)
        ran = 0
        with cache.open("a", encoding="utf-8") as out:
            for record, repro in pool_repros(input):
                if record["number"] in done:
                    continue
                # No CompilerBisector narrowing: it multiplies a run's time and the verdict's component
                # does not depend on it.
                report = bisection.bisect(repro.code, device="cpu", style=repro.style, limits=limits, narrow=False)
                line = {
                    "number": record["number"],
                    "style": report.style,
                    "torch": report.torch_version,
                    "results": report.results,
                }
                out.write(json.dumps(line) + "\n")
                out.flush()
                ran += 1
                first = next((r for r in report.results if r["status"] != "passed"), None)
                self.stdout.write(
                    f"#{record['number']}: " + (f"{first['mode']} {first['status']}" if first else "all passed")
                )
                if limit and ran >= limit:
                    break
        self.stdout.write(f"{ran} run, {len(done)} cached before")
