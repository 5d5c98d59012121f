"""A flood against the promotion gate (issue 45): 500 copies of one text, each triaged `module: dynamo` (right for
what it says), filed among the newest issues, against the gate before issue 45 (the newest fifth held out, copies and
all) and the gate now (near-duplicates counted once, a recent slice spread over authors and kinds of report, a fixed
reference slice beside it), in the same run.

The 717 harvested issues of tests/data. Their untouched slice (evaluation.is_held_out, 131 issues) is split by the
parity of the number: the odd ones (66) are never trained on nor judged by, and score each model in the end (the red
team's figure: pre-selected precision on untouched held-out issues, with coverage and component F1); the even ones
are history like the other 586 (the gate now holds those up to its bound out as its reference slice: the same hash
rule; the gate before trains on them). The model in use was promoted from the history's older 60% (--in-use-share) less
that slice (the reference slice's bound fixed then). Scenarios: no flood; the copies as the very newest
issues ("newest"); the copies among the newest K real issues ("recent:K"). Each prints what each gate decided, why,
and the untouched figures of the model in use after it. Pure Python (no database): several minutes, one training per
gate and scenario.

    .venv/bin/python bench/bench_gate_flood.py [--scenarios none,newest,recent:10,recent:80] [--copies 500]
        [--in-use-share 0.6]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rubric_app.rubric.engine.model import LabelModel  # noqa: E402
from rubric_app.rubric.offline import promotion  # noqa: E402
from rubric_app.rubric.offline.evaluation import is_held_out, read_jsonl  # noqa: E402
from rubric_app.rubric.offline.fitting import fit_model  # noqa: E402

FILES = [ROOT / "tests" / "data" / "pt2_dev.jsonl", ROOT / "tests" / "data" / "pt2_train.jsonl"]
TITLE = "torch.compile graph break: Dynamo does not support generator expressions inside forward"
BODY = (
    "### 🐛 Describe the bug\n\nCompiling a model whose forward uses a generator expression graph breaks in Dynamo on "
    "every step:\n\n```python\nimport torch\n\n@torch.compile(fullgraph=True)\ndef f(xs):\n    return sum(x * 2 for x "
    "in xs)\n\nf([torch.randn(3)])\n```\n\n```\ntorch._dynamo.exc.Unsupported: generator expressions are not "
    "supported\n```\n"
)


def copies(numbers: list[int]) -> list[dict]:
    """The flood: one text, each copy by another account, each triaged module: dynamo (right for what it says)."""
    return [
        {
            "number": n,
            "title": TITLE,
            "body": BODY,
            "labels": ["oncall: pt2", "module: dynamo", "triaged"],
            "labels_truncated": False,
            "author": f"flood-{i}",
        }
        for i, n in enumerate(numbers)
    ]


def flood(history: list[dict], scenario: str, count: int) -> list[dict]:
    taken = {r["number"] for r in history}
    newest = max(taken)
    if scenario == "none":
        return []
    if scenario == "newest":
        return copies(list(range(newest + 1, newest + 1 + count)))
    k = int(scenario.split(":")[1])  # recent:K: among the newest K real issues, in the numbers between theirs
    first = sorted(taken)[-k]
    free = [n for n in range(first, newest + 1) if n not in taken]
    free += list(range(newest + 1, newest + 1 + max(0, count - len(free))))
    step = len(free) / count
    return copies([free[int(i * step)] for i in range(count)])


def gate_before(records: list[dict], in_use: LabelModel, learned: promotion.Learned) -> tuple[bool, str, LabelModel]:
    """The gate as it was before issue 45: the newest fifth held out, no near-duplicate counted once, no reference
    slice; the permutation test and the gated figures on the held-out issues the model in use never saw."""
    ordered = sorted(records, key=lambda r: int(r["number"]))
    size = max(promotion.MIN_HELD_OUT, min(promotion.MAX_HELD_OUT, round(len(ordered) * promotion.HELD_OUT_SHARE)))
    pool, held = ordered[:-size], ordered[-size:]
    candidate = LabelModel.from_json(fit_model(pool, folds=5).to_json())
    assessed = promotion.assess(held, candidate)
    mine = promotion.figures(held, assessed)
    shuffled = promotion.shuffled_f1(held, assessed)
    if mine["component_f1"] <= shuffled:
        return False, f"permutation test: F1 {mine['component_f1']:.3f} <= shuffled {shuffled:.3f}", candidate
    compared = [r for r in held if learned.saw(int(r["number"])) is not True]
    if len(compared) < promotion.MIN_HELD_OUT:
        return False, f"only {len(compared)} comparable", candidate
    new = promotion.figures(compared, promotion.assess(compared, candidate))
    old = promotion.figures(compared, promotion.assess(compared, in_use))
    worse = [f"{k} {new[k]:.3f} < {old[k]:.3f}" for k in promotion.GATED if new[k] < old[k]]
    return not worse, ("worse: " + ", ".join(worse)) if worse else "at least as good on every gated figure", candidate


def gate_now(
    records: list[dict], in_use: LabelModel, learned: promotion.Learned, until: int
) -> tuple[bool, str, LabelModel, promotion.Slices]:
    slices = promotion.cut(records, until)
    candidate = LabelModel.from_json(fit_model(slices.pool, folds=5).to_json())
    verdict = promotion.judge(slices, candidate, in_use, learned)
    return verdict.promote, verdict.reason, candidate, slices


def untouched_figures(untouched: list[dict], model: LabelModel) -> dict[str, float]:
    return promotion.figures(untouched, promotion.assess(untouched, model))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default="none,newest,recent:10,recent:80")
    parser.add_argument("--copies", type=int, default=500)
    parser.add_argument("--in-use-share", type=float, default=0.6, help="the older share the model in use learned from")
    args = parser.parse_args()
    records = [r for path in FILES for r in read_jsonl(open(path, encoding="utf-8"))]
    untouched = [r for r in records if is_held_out(r) and int(r["number"]) % 2]
    history = sorted(
        (r for r in records if not (is_held_out(r) and int(r["number"]) % 2)), key=lambda r: int(r["number"])
    )
    older = [r for r in history[: int(len(history) * args.in_use_share)] if not is_held_out(r)]
    started = time.monotonic()
    in_use = LabelModel.from_json(fit_model(older, folds=5).to_json())
    learned = promotion.Learned(numbers=frozenset(int(r["number"]) for r in older))
    until = int(older[-1]["number"])  # fixed by the training that promoted the model in use
    base = untouched_figures(untouched, in_use)
    print(
        f"history {len(history)} issues (reference slice now: {len(promotion.cut(history, until).reference)}); "
        f"untouched {len(untouched)}; the model in use trained on the older "
        f"{len(older)} (up to #{until}): untouched pre-selected precision {base['preselected_precision']:.3f}, "
        f"coverage {base['coverage']:.3f}, component F1 {base['component_f1']:.3f} ({time.monotonic() - started:.0f} s)"
    )
    for scenario in args.scenarios.split(","):
        flooded = sorted(history + flood(history, scenario, args.copies), key=lambda r: int(r["number"]))
        for name, run in (
            ("before", lambda records=flooded: gate_before(records, in_use, learned)),
            ("now", lambda records=flooded: gate_now(records, in_use, learned, until)[:3]),
        ):
            started = time.monotonic()
            promote, reason, candidate = run()
            after = untouched_figures(untouched, candidate if promote else in_use)
            cand = untouched_figures(untouched, candidate)
            print(
                f"{scenario:>10} {name:>6}: {'PROMOTED' if promote else 'refused '} ({reason[:150]}); in use after: "
                f"pre-selected precision {after['preselected_precision']:.3f}, coverage {after['coverage']:.3f}, "
                f"component F1 {after['component_f1']:.3f}; the candidate's own: {cand['preselected_precision']:.3f} / "
                f"{cand['coverage']:.3f} / {cand['component_f1']:.3f} ({time.monotonic() - started:.0f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
