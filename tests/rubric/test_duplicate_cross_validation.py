"""The duplicate ranking's knobs chosen by cross-validation (issue 52): leave-one-out over the development pairs for
the weights, k-fold for the mark's threshold, and evaluate_similar --duplicates printing the cross-validated figures
beside the held-out ones and TF-IDF's, on a small fixture."""

from __future__ import annotations

import json
import re

from django.core.management import call_command

from rubric_app.rubric.likeness import duplicates
from rubric_app.rubric.offline import duplicate_recall as offline

W1, W2 = duplicates.SHIPPED, duplicates.Weights(title=0.5, name=0.0, margin=0.0)


def _outcome(rank: int | None, score: float = 1.0) -> tuple:
    return rank, rank == 1, score, []


def test_it_scores_each_development_pair_with_the_weights_the_other_pairs_chose():
    """On all three pairs W2 wins (two originals first against one); left out one at a time, each pair is ranked by
    the weights the other two chose, and the cross-validated top-1 is what a new pair may expect: none, not two."""
    per_weights = {
        W1: ([_outcome(1), _outcome(3), _outcome(3)], []),
        W2: ([_outcome(3), _outcome(1), _outcome(1)], []),
    }
    assert offline.choose_weights({w: asked for w, (asked, _o) in per_weights.items()}) == W2

    figures = offline.cross_validated(per_weights, [0, 1, 2], folds=3)

    # Without pair 0, W2 wins (it puts pair 0 third); without pair 1 or 2 they tie and the shipped weights are kept.
    assert figures.ranks == [3, 3, 3] and figures.top(1) == 0


def test_it_marks_each_fold_at_the_threshold_the_other_folds_calibrated():
    pairs = [_outcome(1, 2.0), _outcome(1, 2.1), _outcome(2, 1.9), _outcome(1, 2.2)]
    others = [_outcome(None, s / 100) for s in range(100)] + [_outcome(None, 2.05)]
    figures = offline.cross_validated({W1: (pairs, others)}, [0, 1, 2, 3], folds=2)
    assert figures.queries == 4 and figures.pair_marks + figures.other_marks >= 1
    assert figures.other_marks <= 2  # each fold's budget is about 1% of its own other issues


def _issue(number: int, title: str, body: str, state: str = "closed") -> dict:
    return {"number": number, "title": title, "body": body, "labels": ["oncall: pt2"], "state": state}


def test_it_prints_the_cross_validated_figures_beside_the_held_out_ones_and_tf_idfs(tmp_path, capsys):
    failures = {
        100: "heliotrope cascade overflow in the reduction kernel",  # development (by the hash of 100)
        101: "tamarind lattice mismatch after recompilation",  # development
        103: "sassafras vortex stride assertion on transpose",  # development
        102: "juniper quiver guard failure with nested closures",  # held-out
        104: "mandolin thicket deadlock in the async compile pool",  # held-out
    }
    records = [_issue(n, f"torch.compile: {text}", f"Repro: {text} fails.") for n, text in failures.items()]
    records += [_issue(120 + i, f"unrelated report {word}", f"{word} misbehaves") for i, word in enumerate("abcdefgh")]
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    pairs = {
        "pairs": [
            {
                "duplicate": {"number": 200 + n, "title": f"{text} with torch.compile", "body": f"Repro: {text}."},
                "original": {"number": n, "in_pool_file": True},
                "evidence": {"where": f"https://github.com/pytorch/pytorch/issues/{200 + n}"},
            }
            for n, text in failures.items()
        ],
        "others": [],
    }
    pairs_file = tmp_path / "pairs.json"
    pairs_file.write_text(json.dumps(pairs), encoding="utf-8")

    call_command("evaluate_similar", "--input", str(pool), "--duplicates", str(pairs_file))

    out = capsys.readouterr().out
    assert "(3 development, 2 held-out: split by a hash of the original's number" in out
    rows = {
        (part, method): (int(n), int(one), int(five))
        for part, method, n, one, five in re.findall(
            r"(development \(CV\)|development|held-out)\s+(ours|TF-IDF): +(\d+) pairs +top-1 +(\d+) +top-5 +(\d+)", out
        )
    }
    assert set(rows) == {(p, m) for p in ("development (CV)", "development", "held-out") for m in ("ours", "TF-IDF")}
    assert rows[("development (CV)", "ours")] == (3, 3, 3) and rows[("held-out", "ours")] == (2, 2, 2)
    assert "weights chosen on the development pairs: title 1.0, name 0.08, margin 0.1" in out
