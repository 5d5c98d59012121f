"""A gate a flood cannot steer (issue 45): near-duplicate issues count once in training and judging, the recent slice is
spread over authors and kinds of report, and a fixed reference slice no new history can fill stands beside it.

The escape: 500 copies of one text, each triaged `module: dynamo` (right for what it says), filed among the newest
issues. The gate judged on the newest slice, which the copies filled, and promoted a model trained on the copies whose
pre-selected precision on untouched held-out issues fell from .931 to .811; as the very newest issues the copies made
every later candidate fail the permutation test. bench/bench_gate_flood.py measures it on the 717 harvested issues."""

from __future__ import annotations

import math
import random

import pytest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from rubric_app.models import TrainedModel
from rubric_app.rubric.engine.assess import shipped_model
from rubric_app.rubric.engine.model import LabelModel
from rubric_app.rubric.offline import promotion
from rubric_app.rubric.offline.fitting import fit_model
from rubric_app.triage import model_store
from tests.triage.test_model_store import FILLER, KINDS, synthetic_history

# Above the shipped model's pool (promotion.SHIPPED_NEWEST): it never learned from any of these.
FIRST = 300_000
FLOOD = 500


def history(count: int = 160) -> list[dict]:
    """`count` triaged issues of the four KINDS by 40 reporters, ten numbers apart (room for copies between them)."""
    return synthetic_history(count, first=FIRST, step=10, noise=4, authors=40, seed=45)


def copies(numbers) -> list[dict]:
    """One text again and again, each triaged `module: dynamo` (right for what it says), each by another account;
    a few words differ (the flood's own numbering, a word added), as copies made to dodge an exact match would."""
    return [
        {
            "number": number,
            "title": f"walrus frobnicator regression report {i}",
            "body": "the walrus frobnicator misbehaves again on every step of the training loop" + " again" * (i % 2),
            "labels": ["module: dynamo", "triaged", "oncall: pt2"],
            "author": f"flood-{i}",
        }
        for i, number in enumerate(numbers)
    ]


def newest_flood(records: list[dict]) -> list[dict]:
    top = max(r["number"] for r in records)
    return copies(range(top + 1, top + 1 + FLOOD))


def recent_flood(records: list[dict]) -> list[dict]:
    """The copies among the newest 50 issues, in the numbers between theirs (the reference slice's bound is older)."""
    numbers = sorted(r["number"] for r in records)[-50:]
    free = [n for n in range(numbers[0], numbers[-1]) if n not in set(numbers)]
    return copies(free[: FLOOD // 2] + list(range(numbers[-1] + 1, numbers[-1] + 1 + FLOOD - FLOOD // 2)))


def _is_copy(record: dict) -> bool:
    return str(record.get("author", "")).startswith("flood-")


@pytest.mark.parametrize("flood", [newest_flood, recent_flood])
def test_it_counts_a_flood_of_copies_once_and_keeps_the_reference_slice_out_of_its_reach(flood):
    real = history()
    until = sorted(r["number"] for r in real)[-51]  # the reference slice's bound, fixed before the flood arrived
    calm = promotion.cut(real, until)
    flooded = promotion.cut(real + flood(real), until)

    assert flooded.collapsed >= calm.collapsed + FLOOD - 1
    judged_copies = [r for r in flooded.recent if _is_copy(r)]
    assert len(judged_copies) + sum(_is_copy(r) for r in flooded.pool) == 1  # one record, trained on or judged by
    assert flooded.reference == calm.reference  # no issue filed after the bound is ever in it
    assert abs(len(flooded.recent) - len(calm.recent)) <= 1 and len(calm.recent) >= promotion.MIN_HELD_OUT
    calm_numbers = {r["number"] for r in calm.recent + calm.pool}
    assert len({r["number"] for r in flooded.recent + flooded.pool} - calm_numbers) == 1  # the copy, nothing else
    # Decisions on any copy are kept out of training when a copy is judged (a copy would teach its answer).
    if judged_copies:
        assert {r["number"] for r in flood(real)} <= flooded.judged


def test_it_spreads_the_recent_slice_over_authors_and_kinds_of_report():
    real = history()
    # One prolific author files 60 distinct reports of one kind, the newest of all.
    prolific = [
        {
            "number": FIRST + 5000 + i,
            "title": f"ocelot gizmo {' '.join(random.Random(i).sample(FILLER, 4))}",
            "body": f"the ocelot gizmo misbehaves in case {i}",
            "labels": ["module: inductor", "oncall: cpu inductor", "triaged"],
            "author": "prolific",
        }
        for i in range(60)
    ]
    slices = promotion.cut(real + prolific, max(r["number"] for r in real))

    cap = math.ceil(len(slices.recent) * promotion.SPREAD)
    by_author = [r for r in slices.recent if r["author"] == "prolific"]
    assert len(by_author) <= cap
    kinds = {words: sum(words in r["title"] for r in slices.recent) for words, _labels in KINDS}
    assert all(count >= 2 for count in kinds.values()), kinds  # every kind judged, none filling the slice


def _fit(records: list[dict]) -> LabelModel:
    return LabelModel.from_json(fit_model(records, folds=3).to_json())


@pytest.mark.parametrize("flood", [newest_flood, recent_flood])
def test_a_flood_blocks_no_promotion_it_would_not_block_without_it(flood):
    """A fresh instance (the shipped model in use, which knows none of these words) trains on a good history: the
    candidate is promoted on both slices with the flood as without it. Before, 500 copies as the newest issues made
    the permutation test refuse every candidate (the held-out labels all `module: dynamo`: F1 1.000, shuffled 1.000)."""
    real = history(240)
    slices = promotion.cut(real + flood(real), sorted(r["number"] for r in real)[-51])
    candidate = _fit(slices.pool)

    verdict = promotion.judge(slices, candidate, shipped_model(), promotion.Learned(shipped=True))

    assert verdict.promote, verdict.reason
    assert verdict.reason.startswith("at least as good as the model in use on every gated figure, on the recent and")
    assert verdict.reference_compared == len(slices.reference) >= promotion.MIN_HELD_OUT
    assert verdict.candidate["component_f1"] > verdict.shuffled


def test_it_refuses_a_candidate_that_falls_on_the_reference_slice_and_the_page_says_why(client, viewer, db):
    """Equal on the recent slice (which holds no marmot sprocket report), worse on the reference slice (which does):
    refused, the reason names the slice, and /rubric/models shows it with the reference figures."""
    real = history(200)
    marmot = [r for r in real if "marmot" in r["title"]]
    others = [r for r in real if "marmot" not in r["title"]]
    mislabelled = [
        {**r, "labels": ["module: inductor", "triaged", "oncall: pt2"]} if "marmot" in r["title"] else r for r in real
    ]
    slices = promotion.Slices(pool=[], recent=others[-40:], reference=marmot[-25:] + others[:10], judged=frozenset())
    in_use, candidate = _fit(real[:120]), _fit(mislabelled[:120])

    verdict = promotion.judge(slices, candidate, in_use, promotion.Learned(numbers=frozenset()))

    assert not verdict.promote
    assert verdict.reason.startswith("worse than the model in use on the reference slice: component F1")
    assert "on the recent slice" not in verdict.reason
    row = TrainedModel.objects.create(
        status=TrainedModel.Status.REFUSED,
        reason=verdict.reason,
        held_out=verdict.held_out,
        compared=verdict.compared,
        compared_with="model 1",
        figures={
            "candidate": verdict.candidate,
            "in_use": verdict.in_use,
            "reference": {**verdict.reference, "size": verdict.reference_size, "compared": verdict.reference_compared},
            "collapsed": 499,
        },
        data=candidate.to_json(),
        created_at=timezone.now(),
    )
    client.force_login(viewer)
    page = client.get(reverse("rubric_app:models")).content.decode()
    assert escape(verdict.reason) in page and "499 near-duplicates counted once" in page
    assert f"+ {len(slices.reference)} reference ({len(slices.reference)} compared)" in page
    f1 = verdict.reference["candidate"]["component_f1"]
    assert f"component F1\n      {f1:.3f} / " in page
    assert model_store.figure_rows(row, "reference")[0][1] == f1
