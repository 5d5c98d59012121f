"""Score the bisection verdict's component against the humans' labels, on the repros bisect_pool cached.

Prints, for the verdict by the first failing mode alone and for the verdict that also reads where the failure
was raised (verdict.read_failure): how many repros reproduce, how many verdicts name a component, and how often
that component is one the humans applied, on the issues where humans applied a component.
"""

import json
from collections import Counter

from django.core.management.base import BaseCommand

from rubric_app.bisection import builds, verdict
from rubric_app.rubric.offline.evaluation import COMPONENTS


def outcome(results: list[dict]) -> str:
    """ "eager fails", "no failure", "needs GPU", or the first failing mode."""
    bad = next((r for r in results if r["status"] not in ("passed", "skipped")), None)
    if bad is None:
        return "no failure"
    if verdict.needs_gpu(bad):
        return "needs GPU"
    return "eager fails" if bad["mode"] == "eager" else bad["mode"]


class Command(BaseCommand):
    help = "The bisection verdict's component vs the humans', before and after reading where the failure was raised."

    def add_arguments(self, parser):
        parser.add_argument("--cache", required=True, help="bisect_pool's output")
        parser.add_argument("--input", nargs="+", required=True, help="the JSONL issue files it was made from")
        parser.add_argument("--show", action="store_true", help="a line per verdict with a component")

    def handle(self, *args, cache, input, show, **options):
        humans, records = {}, {}
        for path in input:
            with open(path, encoding="utf-8") as fh:
                for line in fh:
                    record = json.loads(line)
                    humans[record["number"]] = {label for label in record.get("labels", []) if label in COMPONENTS}
                    records[record["number"]] = record
        runs = [json.loads(line) for line in open(cache, encoding="utf-8") if line.strip()]
        outcomes = Counter(outcome(run["results"]) for run in runs)
        self.stdout.write(f"{len(runs)} repros run: " + ", ".join(f"{k} {v}" for k, v in outcomes.most_common()))
        for name, read in (("first failing mode", False), ("reading the failure", True)):
            named = agree = judged = 0
            for run in runs:
                labels = [l["label"] for l in verdict.decide(run["results"], "cpu", read_failures=read).labels]
                components = [l for l in labels if l in COMPONENTS]
                if not components:
                    continue
                named += 1
                truth = humans.get(run["number"], set())
                if truth:
                    judged += 1
                    agree += components[0] in truth
                if show:
                    mark = "" if not truth else ("ok " if components[0] in truth else "NO ")
                    self.stdout.write(f"  {mark}#{run['number']} {components[0]} vs {sorted(truth)}")
            rate = f"{agree / judged:.2f}" if judged else "-"
            self.stdout.write(
                f"{name}: {named} verdicts name a component; {judged} on issues with a human component, "
                f"{agree} agree ({rate})"
            )
        self._may_be_fixed(runs, records)

    def _may_be_fixed(self, runs: list[dict], records: dict[int, dict]) -> None:
        """How the "may be fixed" finding would fare on the pool: runs that pass on this build where the reporter
        gave an older version, and how many of those issues were closed since (a proxy for fixed)."""
        readable = passed_newer = closed = 0
        for run in runs:
            record = records.get(run["number"])
            if record is None:
                continue
            reported = builds.reported_version(record["body"])
            readable += bool(reported)
            found = builds.compare([builds.BuildRun(0, "", run["torch"], run["results"])], reported)
            if found and found.kind == "may_be_fixed":
                passed_newer += 1
                closed += record.get("state") == "closed"
        everyone = [records[r["number"]] for r in runs if r["number"] in records]
        base = sum(r.get("state") == "closed" for r in everyone)
        passing = [
            records[r["number"]] for r in runs if r["number"] in records and builds.outcome(r["results"]) == "passed"
        ]
        passing_closed = sum(r.get("state") == "closed" for r in passing)
        rate = f"{closed / passed_newer:.2f}" if passed_newer else "-"
        self.stdout.write(
            f"may be fixed: the reporter's version is readable on {readable} of {len(runs)}; {passed_newer} pass "
            f"here on a newer build than theirs, {closed} of them closed since ({rate}; of every issue run: "
            f"{base} of {len(everyone)}, {base / max(1, len(everyone)):.2f}; of every run that passes here, whatever "
            f"the reporter's version: {passing_closed} of {len(passing)}, {passing_closed / max(1, len(passing)):.2f})"
        )
