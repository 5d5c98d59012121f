"""Measure the bisection's verdicts on real repros against each script's own check and the humans' labels.

Per repro it prints the script's own outcome (run as written in the sandbox, compilation disabled, then compiled
with the default backend: its assertion, exception or exit status decides), the verdict's outcome (before -> after
when --before holds an older harness's results) and whether the verdict's component agrees with the thread's human
labels. Then, per set (development, held-out, sample), how many verdicts fall in each outcome, how many contradict
the script's own check, and the components against the labels.

The held-out part is fixed by the thread's URL (sha256 % 3 == 0), never by what the verdicts say: figures on it
come from repros nobody tuned on. Resumable: a repro already in --cache is not run again.
"""

import hashlib
import json
from collections import Counter
from pathlib import Path

from django.core.management.base import BaseCommand

from rubric_app import bisection
from rubric_app.bisection import verdict
from rubric_app.rubric.offline.evaluation import COMPONENTS

# The script's own outcome, run as written.
PASSES, FAILS_COMPILED, FAILS_EAGER = "passes as written", "fails only compiled", "fails without compile"
OUTCOMES = (verdict.FAILURE, verdict.NO_FAILURE, verdict.CANNOT_RUN, verdict.NOT_RUNNABLE, verdict.EAGER_FAILS)


def held_out(url: str) -> bool:
    """The held-out third, by the thread's address alone (fixed before any tuning)."""
    return int(hashlib.sha256(url.encode()).hexdigest(), 16) % 3 == 0


def posted(row: dict) -> bisection.Repro | None:
    """The repro as the dashboard would pick it from the row's texts (or its one posted script)."""
    texts = row.get("texts") or [f"```python\n{row['code']}```"]
    return bisection.extract_repro(texts)


def contradicts(own: str, outcome: str) -> bool:
    """A verdict the script's own check refutes: it fails only compiled and the verdict says anything but a failure
    at a mode, or it runs without the compiler and the verdict says it fails in plain eager."""
    if own == FAILS_COMPILED:
        return outcome != verdict.FAILURE
    return own == PASSES and outcome == verdict.EAGER_FAILS


def component(results: list[dict]) -> str:
    labels = [x["label"] for x in verdict.decide(results, "cpu").labels]
    return next((x for x in labels if x in COMPONENTS), "")


class Command(BaseCommand):
    help = "Verdicts on real repros vs each script's own check and the humans' labels (before/after, held-out apart)."

    def add_arguments(self, parser):
        parser.add_argument("--input", nargs="+", required=True, help="JSONL repro sets (rubric_app/data/)")
        parser.add_argument("--cache", required=True, help="this harness's results, one line per repro (appended)")
        parser.add_argument("--before", help="an older harness's results in the same format, for before/after")
        parser.add_argument("--timeout", type=float, default=90, help="seconds per mode")

    def handle(self, *args, input, cache, before, timeout, **options):
        rows = [json.loads(line) for path in input for line in Path(path).read_text().splitlines() if line.strip()]
        done = _load(cache)
        old = _load(before) if before else {}
        limits = bisection.Limits(timeout_s=timeout)
        with open(cache, "a", encoding="utf-8") as out:
            for row in rows:
                if row["key"] not in done:
                    done[row["key"]] = _run(row, limits)
                    out.write(json.dumps(done[row["key"]]) + "\n")
                    out.flush()
        sets: dict[str, list] = {}
        for row in rows:
            part = row.get("set") or ("held-out" if held_out(row["url"]) else "development")
            sets.setdefault(part, []).append(row)
        for part, members in sets.items():
            self.stdout.write(f"== {part}: {len(members)} repros")
            self._report(members, done, old)

    def _report(self, rows: list[dict], after: dict, before: dict) -> None:
        counts = {"before": Counter(), "after": Counter()}
        wrong = Counter()
        agree = Counter()
        for row in rows:
            now = after[row["key"]]
            own = now["own"]
            line = []
            for name, runs in (("before", before), ("after", after)):
                run = runs.get(row["key"])
                if run is None:
                    continue
                outcome = verdict.outcome(run["results"])
                counts[name][outcome] += 1
                wrong[name] += contradicts(own, outcome)
                found, truth = component(run["results"]), set(row.get("labels") or ())
                if found:
                    agree[f"{name} named"] += 1
                    if truth:
                        agree[f"{name} judged"] += 1
                        agree[f"{name} agree"] += found in truth
                mark = " CONTRADICTS" if contradicts(own, outcome) else ""
                line.append(f"{name}: {outcome}{' -> ' + found if found else ''}{mark}")
            labels = ", ".join(row.get("labels") or ()) or "no component label"
            self.stdout.write(f"  {row['url']} | own: {own} | " + " | ".join(line) + f" | humans: {labels}")
        for name in ("before", "after"):
            if not counts[name]:
                continue
            spread = ", ".join(f"{o} {counts[name][o]}" for o in OUTCOMES if counts[name][o])
            others = sum(v for k, v in counts[name].items() if k not in OUTCOMES)
            spread += f", other {others}" if others else ""
            self.stdout.write(
                f"  {name}: {spread}; contradicting the script's own check: {wrong[name]}; components: "
                f"{agree[name + ' named']} named, {agree[name + ' agree']} of {agree[name + ' judged']} agree with a "
                "human component"
            )


def _load(path: str | None) -> dict:
    if not path or not Path(path).exists():
        return {}
    rows = (json.loads(line) for line in Path(path).read_text().splitlines() if line.strip())
    return {row["key"]: row for row in rows}


def _run(row: dict, limits: bisection.Limits) -> dict:
    """Bisect the row's repro and run it as written (its own outcome), both in the sandbox."""
    repro = posted(row)
    if repro is None:
        return {"key": row["key"], "own": "no repro", "results": [], "summary": "no repro found"}
    report = bisection.bisect(repro.code, style=repro.style, limits=limits, narrow=False)
    return {
        "key": row["key"],
        "own": own_outcome(repro.original or repro.code, limits),
        "results": report.results,
        "summary": report.summary,
    }


def own_outcome(code: str, limits: bisection.Limits) -> str:
    """The script as its author wrote it: with compilation disabled, then compiled with the default backend; its
    own exception, assertion or exit status decides (not the harness's comparison of outputs)."""
    server = bisection.shared_server()
    key = hashlib.sha256(code.encode()).hexdigest()
    try:
        eager = server.run_mode(key, "eager", code, "script", "cpu", limits)["result"]
        if eager["status"] not in ("passed", "diverged"):
            return FAILS_EAGER
        compiled = server.run_mode(key, "inductor", code, "script", "cpu", limits)["result"]
    finally:
        server.forget(key)
    return PASSES if compiled["status"] in ("passed", "diverged") else FAILS_COMPILED
