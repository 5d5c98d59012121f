"""Time the rubric engine over 5,000 issues on one core, against a trivial regex labeler on the same input.

Usage: .venv/bin/python bench/bench_suggestions.py [--issues 5000] [--input tests/data/pt2_dev.jsonl]
Target: all 5,000 suggestions in under 10 s. The issues are the dev set cycled, each copy given a new
number and a distinct title suffix so nothing can be cached across copies.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from itertools import cycle, islice
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rubric_app.rubric.engine.assess import evaluate  # noqa: E402
from rubric_app.rubric.offline.evaluation import issue_from_record, keyword_baseline, read_jsonl  # noqa: E402

TARGET_S = 10.0


def timed(fn, issues) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process): on a loaded machine the CPU time is the fair figure."""
    wall, cpu = time.perf_counter(), time.process_time()
    for issue in issues:
        fn(issue)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--issues", type=int, default=5000)
    parser.add_argument("--input", default=str(ROOT / "tests" / "data" / "pt2_dev.jsonl"))
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the target says

    with open(args.input, encoding="utf-8") as fh:
        records = list(read_jsonl(fh))
    issues = []
    for i, record in enumerate(islice(cycle(records), args.issues)):
        issue = issue_from_record({**record, "number": i + 1, "title": f"{record['title']} #{i}"}, use_labels=False)
        issues.append(issue)

    evaluate(issues[0])  # load the catalog once, outside the timing
    base_wall, base_cpu = timed(keyword_baseline, issues)
    wall, cpu = timed(evaluate, issues)
    n = len(issues)
    print(f"issues:            {n} (dev set of {len(records)} cycled), one core")
    print(f"baseline regex:    {base_cpu:7.3f} s CPU ({base_wall:.3f} s wall)  {n / base_cpu:8.0f} issues/s")
    print(f"rubric engine:     {cpu:7.3f} s CPU ({wall:.3f} s wall)  {n / cpu:8.0f} issues/s")
    print(f"engine / baseline: {cpu / base_cpu:7.1f}x the CPU time of the regex labeler")
    print(
        f"target:            {cpu:7.3f} s CPU of {TARGET_S:.0f} s -> {'met' if cpu < TARGET_S else 'MISSED'}"
        f" ({cpu / TARGET_S:.0%} of the budget; wall {wall:.1f} s, load average {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
