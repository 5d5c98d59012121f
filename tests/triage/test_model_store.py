"""Training from the history behind the promotion gate (rubric_app/triage/model_store.py, rubric/offline/promotion.py),
models in the database used by every process, and their page (/rubric/models)."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from rubric_app import tasks
from rubric_app.demo import github_seeds
from rubric_app.github import history
from rubric_app.models import Issue, Suggestion, TrainedModel
from rubric_app.rubric.engine.model import LabelModel, train
from rubric_app.rubric.offline import promotion
from rubric_app.rubric.offline.evaluation import training_examples
from rubric_app.triage import model_store, suggestions
from tests.factories import make_issue, make_label
from tests.helpers import ROOT, child_database_url, wait_until

URL = reverse("rubric_app:models")
# Kinds of issue in words no rule knows, so only a learned model can tell them apart: what each kind's triagers applied.
KINDS = [
    ("walrus frobnicator", ["module: dynamo"]),
    ("quokka zephyr", ["module: inductor"]),
    ("marmot sprocket", ["module: dynamic shapes"]),
    ("ocelot gizmo", ["module: inductor", "oncall: cpu inductor"]),
]
FILLER = "lorem ipsum dolor amet consectetur adipiscing elit sed eiusmod tempor incididunt labore magna".split()


def synthetic_history(
    count: int = 120, *, first: int = 5000, step: int = 1, noise: int = 3, authors: int = 0, seed: int = 3
) -> list[dict]:
    """`count` triaged issues of the four KINDS, interleaved by number (the newest fifth holds every kind), closed,
    `step` numbers apart, with `noise` filler words each; with `authors`, reported by that many people in turn."""
    rng = random.Random(seed)
    records = []
    for i in range(count):
        words, labels = KINDS[i % len(KINDS)]
        filler = " ".join(rng.sample(FILLER, noise))
        records.append(
            {
                "number": first + step * i,
                "title": f"{words} {filler} case {i}",
                "body": f"the {words} misbehaves, {filler}",
                "labels": [*labels, "triaged"] + ([] if "oncall: cpu inductor" in labels else ["oncall: pt2"]),
                "state": "closed",
                **({"author": f"reporter-{i % authors}"} if authors else {}),
            }
        )
    return records


HISTORY = synthetic_history()


def scrambled(records: list[dict], seed: int = 7) -> list[dict]:
    """The same issues, each with another one's label list (the labels no longer follow from the text)."""
    lists = [list(r["labels"]) for r in records]
    random.Random(seed).shuffle(lists)
    return [{**r, "labels": labels} for r, labels in zip(records, lists)]


def lines(out: StringIO) -> str:
    return out.getvalue()


@pytest.mark.django_db
def test_it_refuses_a_scrambled_history_and_promotes_a_good_candidate_through_the_gate(fake_github):
    github_seeds.seed_history(fake_github, scrambled(HISTORY))
    history.sync_history(out=lambda line: None)

    out = StringIO()
    call_command("train_label_model", from_db=True, stdout=out)
    refused = TrainedModel.objects.get()
    assert refused.status == "refused" and "labels do not follow from their text" in refused.reason
    assert model_store.in_use_version() is None and model_store.in_use() is None  # the engine keeps its file
    assert "Not promoted: the held-out issues' labels do not follow" in lines(out) and "* component F1" in lines(out)

    call_command("train_label_model", from_db=True, force=True, stdout=out)  # --force: promoted whatever the gate says
    forced = TrainedModel.objects.latest("pk")
    assert forced.status == "promoted" and forced.forced and model_store.in_use_version() == forced.pk
    assert forced.reason.startswith("promoted by --force; the gate said: the held-out issues")

    # The labels put right on GitHub and synced: trained again (the weekly task), the candidate is judged against the
    # forced model on the newest issues neither learned from, and promoted by the gate, figures side by side.
    for record in HISTORY:
        labels = list(record["labels"]) + (
            [] if {"oncall: pt2", "oncall: cpu inductor"} & set(record["labels"]) else ["oncall: pt2"]
        )
        fake_github.set_labels(record["number"], labels)
    history.sync_history(out=lambda line: None)
    tasks.train_label_model_task()
    good = TrainedModel.objects.latest("pk")
    assert good.status == "promoted" and not good.forced, good.reason
    assert (
        good.reason == "at least as good as the model in use on every gated figure, on the recent and reference slices"
    )
    assert good.compared_with == f"model {forced.pk}" and good.compared == good.held_out >= promotion.MIN_HELD_OUT
    assert good.trained_by == "the weekly task" and model_store.in_use_version() == good.pk
    new, old = good.figures["candidate"], good.figures["in_use"]
    assert all(new[k] >= old[k] for k in promotion.GATED) and new["component_f1"] > good.figures["shuffled"]
    reference = good.figures["reference"]
    assert reference["compared"] >= promotion.MIN_HELD_OUT and good.reference_until == forced.reference_until
    assert all(reference["candidate"][k] >= reference["in_use"][k] for k in promotion.GATED)
    # Held out by time (the newest triaged issues, one author here) and the reference slice: none of which it learned
    # from (nor the decisions on them).
    records = model_store.history_records()
    slices = promotion.cut(records, good.reference_until)
    held = sorted(r["number"] for r in slices.recent)
    assert len(held) == good.held_out and good.trained_until < held[0] and not slices.judged & set(good.learned_numbers)
    assert {r["number"] for r in slices.reference} == {
        r["number"] for r in records if promotion.is_held_out(r) and r["number"] <= good.reference_until
    }

    # And the gate refuses a scrambled history against a good model in use.
    for record, labels in zip(HISTORY, (r["labels"] for r in scrambled(HISTORY, seed=11))):
        fake_github.set_labels(record["number"], list(labels) + ["oncall: pt2"])
    history.sync_history(out=lambda line: None)
    out = StringIO()
    call_command("train_label_model", from_db=True, stdout=out)
    again = TrainedModel.objects.latest("pk")
    assert again.status == "refused" and model_store.in_use_version() == good.pk, again.reason


@pytest.mark.django_db
def test_it_says_when_history_is_too_small_to_train_and_judge():
    for number in range(1, 30):
        make_issue(number, labels=("oncall: pt2", "module: dynamo", "triaged"))
    with pytest.raises(CommandError, match="only 29 triaged issues in history: too few"):
        call_command("train_label_model", from_db=True, stdout=StringIO())
    tasks.train_label_model_task()  # the weekly task logs it and stores nothing
    assert not TrainedModel.objects.exists()


def test_it_compares_only_on_issues_the_model_in_use_never_learned_from():
    held_out_number = next(n for n in range(150_000, 150_100) if promotion.is_held_out({"number": n}))
    assert promotion.Learned(shipped=True).saw(held_out_number) is False  # the files' held-out slice
    assert promotion.Learned(shipped=True).saw(promotion.SHIPPED_NEWEST + 1) is False
    assert promotion.Learned(numbers=frozenset({5})).saw(5) is True
    assert promotion.Learned().saw(5) is None  # a file trained elsewhere: unknown


# --- the model in use, in every process ------------------------------------------------------------------------

WALRUS = [
    {
        "number": i,
        "title": f"frobnicator walrus case {i}",
        "body": "the walrus frobnicator misbehaves",
        "labels": ["module: dynamo", "oncall: pt2", "triaged"],
    }
    for i in range(1, 21)
] + [
    {
        "number": 100 + i,
        "title": f"zephyr quokka case {i}",
        "body": "the quokka zephyr misbehaves",
        "labels": ["module: inductor", "oncall: pt2", "triaged"],
    }
    for i in range(1, 21)
]


def promote(model: LabelModel, **fields) -> TrainedModel:
    return TrainedModel.objects.create(
        status=TrainedModel.Status.PROMOTED,
        promoted_at=timezone.now(),
        data=model.to_json(),
        trained_by="a test",
        **fields,
    )


@pytest.mark.django_db
def test_it_refreshes_suggestions_with_the_promoted_model():
    for name in ("module: dynamo", "module: inductor", "triaged"):
        make_label(name)
    issue = make_issue(7, title="walrus frobnicator again", body="the walrus frobnicator misbehaves")
    suggestions.refresh(Issue.objects.filter(pk=issue.pk))
    assert not Suggestion.objects.filter(issue=issue, label="module: dynamo", source="model").exists()

    promote(train(training_examples(WALRUS)))
    suggestions.refresh(Issue.objects.filter(pk=issue.pk))

    learned = Suggestion.objects.get(issue=issue, label="module: dynamo", source="model")
    assert "walrus" in learned.reason or "frobnicator" in learned.reason


SHELL = (
    "import hashlib, sys, time\n"
    "from rubric_app.triage import model_store\n"
    "for _ in range(300):\n"
    "    model = model_store.in_use()\n"
    "    digest = hashlib.sha256(model.to_json().encode()).hexdigest() if model else 'file'\n"
    "    print('in use:', model_store.in_use_version(), digest, flush=True)\n"
    "    time.sleep(0.1)\n"
)


@pytest.mark.django_db(transaction=True)
def test_it_gives_two_processes_the_same_promoted_model_and_a_new_one_without_a_restart():
    first = promote(train(training_examples(WALRUS)))
    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(),
    }
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "shell", "-c", SHELL], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:

        def seen() -> tuple[str, str]:
            line = ""
            while not line.startswith("in use: "):  # past anything else the shell prints
                line = proc.stdout.readline()
            _, _, version, digest = line.split()
            return version, digest

        def digest_here() -> str:
            return hashlib.sha256(model_store.in_use().to_json().encode()).hexdigest()

        assert seen() == (str(first.pk), digest_here())
        second = promote(train(training_examples(WALRUS[:20] + WALRUS[25:])))
        assert second.pk != first.pk and digest_here() != hashlib.sha256(first.data.encode()).hexdigest()
        wait_until(lambda: seen() == (str(second.pk), digest_here()), timeout=20)  # the same process, no restart
    finally:
        proc.kill()
        proc.wait()


# --- the page ---------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_shows_the_model_in_use_and_every_candidate_in_constant_queries(client, viewer, django_assert_num_queries):
    client.force_login(viewer)
    html = client.get(URL).content.decode()
    assert 'data-in-use="file"' in html and "the shipped model" in html

    figures = {"candidate": {k: 0.8 for k in promotion.SHOWN}, "in_use": {k: 0.7 for k in promotion.SHOWN}}
    in_use = promote(train(training_examples(WALRUS)), trained_on=160, held_out=40, compared=40, figures=figures)
    TrainedModel.objects.create(
        status=TrainedModel.Status.REFUSED,
        reason="worse than the model in use on routing F1 (0.400 < 0.500)",
        data="{}",
        figures=figures,
    )
    # session, user, permissions (2), the model in use, the candidates, the mark's threshold in use (issue 52)
    with django_assert_num_queries(7):
        html = client.get(URL).content.decode()
    assert f'data-in-use="{in_use.pk}"' in html and "worse than the model in use on routing F1" in html
    assert 'data-status="refused"' in html and "component F1" in html
    for _ in range(20):
        TrainedModel.objects.create(status=TrainedModel.Status.REFUSED, reason="r", data="{}", figures=figures)
    with django_assert_num_queries(7):
        assert client.get(URL).status_code == 200


def test_it_keeps_the_page_from_outsiders(client, outsider, db):
    client.force_login(outsider)
    assert client.get(URL).status_code == 403
    assert client.post(URL).status_code in (403, 405)
