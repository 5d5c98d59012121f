"""What settles a component, read across issues and runs with the engine (pure Python).

- settled(): the components an issue's own evidence settles (a backend result or a diagnosis in its thread, a
  verdict the thread does not contradict), which the issues sharing its failure signature take as theirs
  (shared_among, weighing.shared_findings).
- run_notes(): where a finished run and the thread differ, in the words the bisection panel shows: "The reporter
  says aot_eager fails; this run saw aot_eager pass."
"""

from __future__ import annotations

from dataclasses import replace

from rubric_app.rubric.engine.assess import read
from rubric_app.rubric.engine.weighing import settles, weigh_verdicts, who
from rubric_app.rubric.reading.thread import ladder
from rubric_app.rubric.reading.types import BisectionEvidence, IssueText, SharedEvidence
from rubric_app.rubric.rules.general import backend_reports
from rubric_app.vocabulary import Kind

# The thread's names of the ladder's backends -> the bisection's modes (bisection/verdict.py).
MODES = {
    "eager": "dynamo_eager",
    "aot_eager": "aot_eager",
    "aot_eager_decomp_partition": "aot_eager_decomp_partition",
    "inductor": "inductor",
}
SAW = {
    "passed": "pass",
    "raised": "fail",
    "diverged": "differ from eager",
    "crashed": "crash",
    "timeout": "time out",
    "oom": "run out of memory",
}


def settled(issue: IssueText) -> tuple[SharedEvidence, ...]:
    """The components `issue`'s own evidence settles (weighing.settles), the strongest finding per label: what
    it shares with the issues that fail the same way. A verdict the thread contradicts settles nothing."""
    reading = read(replace(issue, shared=()))
    best = {}
    for x in weigh_verdicts(reading.facts, reading.findings):
        if settles(x) and (x.label not in best or x.weight > best[x.label].weight):
            best[x.label] = x
    return tuple(
        SharedEvidence(issue.number, x.label, x.rule_id, x.evidence, x.reason, x.weight) for x in best.values()
    )


def shared_among(group: dict[int, tuple[SharedEvidence, ...]]) -> dict[int, tuple[SharedEvidence, ...]]:
    """{number: what the group's other issues settle} for one failure signature's issues ({number: settled()}):
    per label the strongest (ties: the oldest issue), never the issue's own. Linear in the group's size."""
    top: dict[str, list[SharedEvidence]] = {}  # per label, the two strongest of distinct issues
    for evidence in group.values():
        for e in evidence:
            ranked = sorted([*top.get(e.label, []), e], key=lambda s: (-s.weight, s.number))
            top[e.label] = [ranked[0], *[s for s in ranked[1:] if s.number != ranked[0].number][:1]]
    return {
        number: tuple(
            next(s for s in best if s.number != number)
            for best in top.values()
            if any(s.number != number for s in best)
        )
        for number in group
    }


def run_notes(issue: IssueText, results: list[dict], verdict: list[dict], run_id: int | None = None) -> list[str]:
    """Where a finished run (its per-mode results and verdict labels) and the thread of `issue` differ: each
    backend the thread reports on that the run saw otherwise, and the run's verdict where it was weighed
    (weighing.weigh_verdicts), in plain words."""
    evidence = tuple(
        BisectionEvidence(v.get("label", ""), v.get("rule_id", ""), v.get("evidence", ""), run_id) for v in verdict
    )
    reading = read(replace(issue, bisection=evidence, shared=()))
    facts = reading.facts
    ran = {r.get("mode"): r.get("status") for r in results}
    notes = []
    for backend, said in ladder(backend_reports(facts)).items():
        status = ran.get(MODES.get(backend, ""))
        if status not in SAW or (status != "passed") == said.failed:
            continue
        speaker = who(facts, said.source)
        if not speaker.startswith(("the reporter", "comment")):  # a login is written as GitHub spells it
            speaker = f"On the thread, {speaker}"
        notes.append(
            f"{speaker[0].upper()}{speaker[1:]} says {backend} {'fails' if said.failed else 'passes'} "
            f'("{said.evidence}"); this run saw {backend} {SAW[status]}.'
        )
    weighed = [
        x for x in weigh_verdicts(facts, reading.findings) if x.kind == Kind.CHECK and x.source.startswith("run")
    ]
    return notes + [x.reason for x in weighed]
