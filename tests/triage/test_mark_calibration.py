"""The possible-duplicate mark calibrated each week on the repository's own duplicate pairs (issue 52): the history
sync (over HTTP to the fake GitHub) records the pairs, the weekly training calibrates the threshold on them (the lowest
score keeping 80% of its marks right while marking at most 1% of other issues), and the threshold is used only once
its row passes the label model's gate; refused, the mark keeps the calibration in use (the shipped one at first)."""

from __future__ import annotations

import random
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from rubric_app import tasks
from rubric_app.demo import github_seeds
from rubric_app.github import history
from rubric_app.models import DuplicatePair, Issue, TrainedModel
from rubric_app.rubric.likeness import duplicates
from rubric_app.triage import duplicates as marking
from rubric_app.triage import mark_calibration, similar

KINDS = [
    ("walrus frobnicator", ["module: dynamo"]),
    ("quokka zephyr", ["module: inductor"]),
    ("marmot sprocket", ["module: dynamic shapes"]),
    ("ocelot gizmo", ["module: inductor", "oncall: cpu inductor"]),
]
# Filler enough that no two issues of history are copies of each other (the mark would rightly call those duplicates).
FILLER = """lorem ipsum dolor amet consectetur adipiscing elit sed eiusmod tempor incididunt labore magna aliqua
enim minim veniam quis nostrud exercitation ullamco laboris nisi aliquip commodo consequat duis aute
irure reprehenderit voluptate velit esse cillum fugiat nulla pariatur excepteur sint occaecat
cupidatat proident sunt culpa officia deserunt mollit anim""".split()
# Each pair's own failure, in words no other issue uses.
FAILURES = [
    "heliotrope cascade overflow in the reduction kernel",
    "tamarind lattice mismatch after recompilation",
    "sassafras vortex stride assertion on transpose",
    "juniper quiver guard failure with nested closures",
    "mandolin thicket deadlock in the async compile pool",
    "pelican archway dtype promotion differs from eager",
    "bramble lantern segfault when autotuning matmul",
    "corvid trellis graph break on generator expressions",
    "saffron kettle wrong gradient through scatter reduce",
    "orchid bellows recompiles on every dictionary mutation",
    "falcon meadow illegal memory access in fused softmax",
    "tundra beacon symbolic shape guard never satisfied",
]


def history_records(scramble: bool) -> list[dict]:
    """120 triaged issues of four kinds (the label model's history), then 12 originals and their duplicates filed
    later, word for word, each with a member's "Duplicate of #N" (closed as a duplicate)."""
    rng = random.Random(3)
    records = []
    for i in range(120):
        words, labels = KINDS[i % len(KINDS)]
        filler = " ".join(rng.sample(FILLER, 3))
        records.append(
            {
                "number": 5000 + i,
                "title": f"{words} {filler} case {i}",
                "body": f"the {words} misbehaves, {filler}",
                "labels": [*labels, "triaged"] + ([] if "oncall: cpu inductor" in labels else ["oncall: pt2"]),
                "state": "closed",
            }
        )
    if scramble:
        lists = [list(r["labels"]) for r in records]
        random.Random(7).shuffle(lists)
        records = [{**r, "labels": labels} for r, labels in zip(records, lists)]
    return records


def seed_pairs(fake) -> None:
    for i, failure in enumerate(FAILURES):
        original, duplicate = 6000 + i, 6100 + i
        fake.add_issue(original, title=f"torch.compile: {failure}", body=f"Repro: {failure}.", state="closed")
        fake.add_issue(
            duplicate,
            title=f"torch.compile: {failure}",
            body=f"Repro: {failure}.",
            state="closed",
            state_reason="duplicate",
            comments=[{"body": f"Duplicate of #{original}", "user": "wy-maintainer", "association": "MEMBER"}],
        )


def sync(fake) -> None:
    history.sync_history(out=lambda line: None)
    similar.reindex(Issue.objects.all())


@pytest.mark.django_db
def test_it_calibrates_the_mark_on_the_repositorys_pairs_and_uses_it_only_through_the_gate(client, viewer, fake_github):
    github_seeds.seed_history(fake_github, history_records(scramble=True))
    seed_pairs(fake_github)
    sync(fake_github)
    assert DuplicatePair.objects.filter(source="comment").count() == len(FAILURES)
    assert marking.mark_threshold() == duplicates.MARK_AT  # no history trained on: the shipped calibration

    # The label model's gate refuses the candidate (scrambled labels): its calibrated threshold is not used.
    tasks.train_label_model_task()
    refused = TrainedModel.objects.get()
    mark = refused.figures["mark"]
    assert refused.status == "refused" and mark["sound"] and not mark["promoted"]
    assert mark["candidate"]["pairs"] == len(FAILURES) and mark["threshold"] != duplicates.MARK_AT
    assert marking.mark_threshold() == duplicates.MARK_AT

    # --force promotes the row whatever the gate said, and its mark with it (the shipped model, having seen every
    # issue numbered below its newest, is no fair comparison here: test_model_store forces a model in use likewise).
    call_command("train_label_model", from_db=True, force=True, stdout=StringIO())
    forced = TrainedModel.objects.latest("pk")
    assert forced.forced and marking.mark_threshold() == forced.figures["mark"]["threshold"]

    # The labels put right on GitHub: the gate promotes the candidate, and its threshold with it.
    for record in history_records(scramble=False):
        fake_github.set_labels(record["number"], record["labels"])
    sync(fake_github)
    tasks.train_label_model_task()
    promoted = TrainedModel.objects.latest("pk")
    mark = promoted.figures["mark"]
    assert promoted.status == "promoted" and mark["promoted"], promoted.reason
    new = mark["candidate"]
    assert new["precision"] is not None, mark
    assert new["precision"] >= 0.8 and new["rate"] <= 0.01 and new["right"] >= 1
    assert marking.mark_threshold() == mark["threshold"]
    # Before and after, on the same repository pairs, on the models page.
    client.force_login(viewer)
    page = client.get(reverse("rubric_app:models")).content.decode()
    assert page.count("data-mark-figures") >= 2 and f"calibrated at {mark['threshold']:.4f}" in page
    assert f"in use at {forced.figures['mark']['threshold']:.4f}" in page and "used from now on" in page
    assert f"in use at {duplicates.MARK_AT:.4f}" in page  # the refused row's: the shipped calibration then


def test_it_refuses_a_threshold_calibrated_on_too_few_pairs_or_marking_too_often():
    few = mark_calibration.figures([(1, True, 2.0, [])] * 3, [(None, None, 0.5, [])] * 100, 1.5)
    assert mark_calibration.judge(few) == (False, "only 3 repository pairs: too few to calibrate on (need 10)")
    noisy = mark_calibration.figures([(1, True, 2.0, [])] * 12, [(None, None, 1.6, [])] * 100, 1.5)
    sound, why = mark_calibration.judge(noisy)
    assert not sound and why.startswith("it marks 100.0% of the other issues")
    wrong = mark_calibration.figures([(2, False, 2.0, [])] * 12, [(None, None, 0.5, [])] * 100, 1.5)
    assert mark_calibration.judge(wrong)[0] is False
