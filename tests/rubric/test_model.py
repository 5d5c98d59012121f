"""The learned labeler: trained from labelled issues, explainable, held out by k-fold, never above the invariants."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from rubric_app.models import Issue, TrainedModel, TriageDecision
from rubric_app.rubric.engine.assess import evaluate, read
from rubric_app.rubric.engine.model import LEARNED_TEXT, LabelModel, feature_name, features, train
from rubric_app.rubric.offline import promotion
from rubric_app.rubric.offline.evaluation import training_examples
from rubric_app.rubric.offline.fitting import cross_validate
from rubric_app.rubric.reading.text import Source
from rubric_app.rubric.reading.types import CommentText, IssueText
from rubric_app.triage.model_store import decision_examples
from rubric_app.vocabulary import is_module
from tests.factories import make_issue

# Two recognisable kinds of issue, in words the rules do not know, so only a learned model can tell them apart.
DYNAMO_LIKE = [
    {
        "number": i,
        "title": f"frobnicator walrus case {i}",
        "body": "the walrus frobnicator misbehaves",
        "comments": [],
        "labels": ["module: dynamo", "oncall: pt2", "triaged"],
    }
    for i in range(1, 21)
]
INDUCTOR_LIKE = [
    {
        "number": 100 + i,
        "title": f"zephyr quokka case {i}",
        "body": "the quokka zephyr misbehaves",
        "comments": [],
        "labels": ["module: inductor", "oncall: pt2", "triaged"],
    }
    for i in range(1, 21)
]
RECORDS = DYNAMO_LIKE + INDUCTOR_LIKE
# The same two kinds as a triaged history to train from in the database: 30 reports of each, each with words of its
# own (copies of one text would count once: promotion.cut), enough to hold out the gate's two slices.
OWN_WORDS = (
    "alder birch cedar dogwood elm fir ginkgo hazel ironwood juniper larch maple nutmeg oak poplar quince rowan "
    "spruce tamarind umbrella viburnum willow yew zelkova acacia baobab catalpa dogrose eucalyptus fig"
).split()
HISTORY_RECORDS = [
    {
        **kind,
        "number": first + k,
        "title": f"{kind['title'].rsplit(' case', 1)[0]} {word} {OWN_WORDS[(7 * k + 3) % 30]}",
    }
    for first, kind in ((1, DYNAMO_LIKE[0]), (101, INDUCTOR_LIKE[0]))
    for k, word in enumerate(OWN_WORDS)
]


def test_it_learns_words_the_rules_do_not_know_and_shows_them():
    model = train(training_examples(RECORDS))
    a = evaluate(IssueText(1, "walrus frobnicator again", "the walrus frobnicator misbehaves"), model=model)
    s = next(s for s in a.add if s.label == "module: dynamo")
    assert s.source == "model" and s.rule_id == "R1.2"
    assert "walrus" in s.reason or "frobnicator" in s.reason  # top features as evidence
    assert s.evidence in "walrus frobnicator again" + "the walrus frobnicator misbehaves"
    rules_only = evaluate(
        IssueText(1, "walrus frobnicator again", "the walrus frobnicator misbehaves"), use_model=False
    )
    assert "module: dynamo" not in rules_only.labels()


def test_it_reads_tags_module_paths_and_word_pairs_but_not_mentions_or_build_tags():
    sources = [
        Source("title", "[Inductor][CPU] Wrong strides"),
        Source("body", "torch._inductor.lowering fails\nPyTorch version: 2.5.1+cpu\ncc @ezyang @voznesenskym"),
    ]
    feats = features(sources, [])
    assert {"tag:inductor", "tag:cpu", "t2:wrong_strides", "b:_inductor", "b:lowering"} <= set(feats)
    # The bot writes "cc @..." from the labels already applied, and "+cpu" names the build, not the bug (R2.4).
    assert not {"b:ezyang", "b:voznesenskym"} & set(feats)
    assert feats["b:cpu"] == ("CPU", "title")  # the title's [CPU] (its words count as text too), never the build's
    for evidence, source in feats.values():  # evidence is quoted verbatim from its source
        assert evidence in next(s.text for s in sources if s.name == source)
    assert feature_name("tag:inductor") == "[inductor]" and feature_name("rule:R1.2:add:module: dynamo") == "rule R1.2"


def test_it_reads_as_much_of_the_thread_as_the_issues_it_learned_from():
    # The labeler learned from excerpts of about LEARNED_TEXT characters: a synced issue's long traceback, read in
    # full, would be another distribution. The rules read everything, and their findings are its features too.
    late = "Setting dynamic=False makes it pass."
    body = "The walrus frobnicator fails.\n" + '  File "torch/_dynamo/convert_frame.py", line 1, in f\n' * 40
    assert len(body) > LEARNED_TEXT
    feats = read(
        IssueText(1, "Recompiles on every call", body + late, comments=(CommentText("quokka zephyr"),))
    ).features()
    assert {"t:recompiles", "b:walrus", "b:frobnicator"} <= set(feats)
    assert not {"b:setting", "b:quokka", "b:zephyr"} & set(feats)  # past the window, however they are split up
    assert "rule:R1.1:add:module: dynamic shapes" in feats  # R1.1 read the late sentence all the same
    short = read(
        IssueText(1, "Recompiles on every call", "The walrus frobnicator fails.", comments=(CommentText("quokka"),))
    )
    assert "b:quokka" in short.features()


def test_it_reads_the_words_inside_compound_names_apart_from_the_words_themselves():
    sources = [
        Source("title", "TorchInGraphFunctionVariable fails"),
        Source(
            "body", "aot_eager_decomp_partition raised GuardOnDataDependentSymNode at torch._dynamo.exc; cc @FooBar"
        ),
    ]
    feats = features(sources, [])
    assert {
        "t:~graph",
        "t:~function",
        "t:~variable",
        "b:~aot",
        "b:~eager",
        "b:~decomp",
        "b:~partition",
        "b:~guard",
        "b:~dependent",
        "b:~sym",
        "b:~node",
        "b:~dynamo",
        "b:~exc",
    } <= set(feats)
    assert feats["t:~variable"] == ("TorchInGraphFunctionVariable", "title")  # the whole name is the evidence
    # A plain word has no pieces, a mention none either, and STOP words stay out (`torch`).
    assert not {"t:~fails", "b:~raised", "b:~foo", "b:~bar", "t:~torch", "b:~torch"} & set(feats)
    assert feature_name("t:~variable") == "variable (in a name)"


def test_it_learns_a_kind_of_name_and_knows_one_it_never_saw():
    # Every issue names a different class, so no whole name is seen twice (min_df): only its pieces can teach.
    dynamo_like = [
        {
            "number": i,
            "title": f"crash in {w}Variable",
            "body": "it breaks",
            "comments": [],
            "labels": ["module: dynamo", "oncall: pt2"],
        }
        for i, w in enumerate(
            ("Alpha", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot", "Golf", "Hotel", "India", "Juliet"), 1
        )
    ]
    inductor_like = [
        {
            "number": 100 + i,
            "title": f"crash in {w}Kernel",
            "body": "it breaks",
            "comments": [],
            "labels": ["module: inductor", "oncall: pt2"],
        }
        for i, w in enumerate(
            ("Kilo", "Lima", "Mike", "November", "Oscar", "Papa", "Quebec", "Romeo", "Sierra", "Tango"), 1
        )
    ]
    model = train(training_examples(dynamo_like + inductor_like))
    seen_never = model.predict(features([Source("title", "crash in ZuluVariable"), Source("body", "it breaks")], []))
    assert seen_never["module: dynamo"][0] > seen_never["module: inductor"][0]
    assert "t:~variable" in seen_never["module: dynamo"][1]


def test_it_keeps_the_invariants_with_a_model():
    model = train(training_examples(RECORDS))
    a = evaluate(IssueText(1, "walrus frobnicator", "torch.export.export(m, x) fails", labels=()), model=model)
    assert a.route == "handoff" and not any(is_module(l) for l in a.labels())


def test_it_saves_and_loads_the_model(tmp_path):
    model = train(training_examples(RECORDS))
    model.save(tmp_path / "m.json")
    loaded = LabelModel.load(tmp_path / "m.json")
    assert loaded.trained_on == 40 and set(loaded.weights) == set(model.weights)
    assert LabelModel.load(tmp_path / "missing.json") is None
    # The older layout, {label: {feature: weight}}, still loads (a model trained before the compact one).
    (tmp_path / "old.json").write_text(
        json.dumps(
            {"trained_on": 2, "bias": {"module: dynamo": -1.0}, "weights": {"module: dynamo": {"t:walrus": 2.0}}}
        )
    )
    old = LabelModel.load(tmp_path / "old.json")
    assert old.predict({"t:walrus": ("walrus", "title")})["module: dynamo"][0] > 0.7


def test_it_holds_each_fold_out_of_its_own_training():
    predictions = cross_validate(RECORDS, folds=4)
    assert len(predictions) == len(RECORDS)
    hits = sum("module: dynamo" in p for p in predictions[:20]) + sum("module: inductor" in p for p in predictions[20:])
    assert hits >= 36  # the two kinds stay separable on issues each fold never saw


def test_it_trains_from_a_file_with_the_command(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in RECORDS))
    out = StringIO()
    call_command("train_label_model", input=str(src), output=str(tmp_path / "m.json"), stdout=out)
    assert "Trained on 40 issues" in out.getvalue() and (tmp_path / "m.json").exists()
    src.write_text("\n".join(json.dumps(r) for r in RECORDS[:5]))
    with pytest.raises(CommandError, match="too few"):
        call_command("train_label_model", input=str(src), output=str(tmp_path / "m.json"), stdout=StringIO())


@pytest.mark.django_db
def test_it_trains_from_the_synced_triaged_issues(tmp_path):
    for r in HISTORY_RECORDS:
        make_issue(number=r["number"], title=r["title"], body=r["body"], labels=r["labels"])
    make_issue(number=999, title="walrus untriaged", labels=("oncall: pt2",))
    out = StringIO()
    call_command("train_label_model", from_db=True, stdout=out)
    # 20 recent triaged issues (the fewest the gate judges by) and the reference slice are held out (the bound the
    # newest triaged issue, #130, this first training); the untriaged one is no answer.
    reference = [r["number"] for r in HISTORY_RECORDS if promotion.is_held_out(r)]
    slices = promotion.cut(HISTORY_RECORDS, 130)
    trained = TrainedModel.objects.get()
    assert [r["number"] for r in slices.reference] == reference and len(slices.recent) == 20
    assert trained.trained_on == len(slices.pool) == 60 - slices.collapsed - 20 - len(reference) >= 20
    assert trained.reference_until == 130 and trained.held_out == 20
    assert (
        f"Training on {trained.trained_on} triaged issues of history (#{slices.pool[0]['number']} to #"
        in out.getvalue()
    )
    assert "judged on 20 recent issues" in out.getvalue() and f"the {len(reference)} of the reference" in out.getvalue()
    assert Issue.objects.count() == 61 and not (tmp_path / "m.json").exists()  # in the database, not a file


def _decided(number: int, user, *, seen=("oncall: pt2",), added=(), removed=(), shown=(), status="applied", **fields):
    issue = Issue.objects.filter(number=number).first() or make_issue(
        number, title=f"kiwi heron case {number}", body="the kiwi heron misbehaves"
    )
    return TriageDecision.objects.create(
        issue=issue,
        user=user,
        labels_seen=list(seen),
        labels_added=list(added),
        labels_removed=list(removed),
        suggestions_shown=None if shown is None else [{"label": l, "rule_id": "R1.2"} for l in shown],
        status=status,
        **fields,
    )


def test_it_reads_what_triagers_added_removed_and_left_unticked_from_what_the_page_showed(triager):
    # #1: a first decision added Inductor; the newest took it back, added Dynamo and left two shown labels unticked.
    _decided(1, triager, added=["module: inductor"])
    _decided(
        1,
        triager,
        seen=["oncall: pt2", "module: inductor"],
        added=["module: dynamo", "triaged"],
        removed=["module: inductor"],
        shown=["module: dynamo", "module: dynamic shapes", "triage review", "triaged"],
    )
    # #2: handed off to export: the module label it was shown is no verdict on the components (no component, G5).
    _decided(2, triager, added=["oncall: export"], shown=["module: dynamo", "oncall: export"])
    # #3: from before the page's suggestions were kept, under the old name of the dispatcher label.
    _decided(3, triager, added=["module: aotdispatch"], shown=None)
    # Not the triager's labelling: a refused decision, a meeting's, and one that names no learned label.
    _decided(4, triager, added=["module: dynamo"], status="refused")
    _decided(5, triager, added=["high priority"], meeting_decision="high priority")
    _decided(6, triager, added=["needs reproduction"], shown=["needs reproduction"])

    answers = {
        number: {l: a for l, a in answers.items() if a is not None}
        for number, (_feats, answers) in zip((1, 2, 3), decision_examples())
    }
    assert answers == {
        1: {"module: dynamo": True, "module: inductor": False, "module: dynamic shapes": False, "triage review": False},
        2: {"oncall: export": True},
        3: {"module: pt2-dispatcher": True},
    }
    assert len(decision_examples()) == 3
    feats, _answers = decision_examples()[0]
    assert {"t:kiwi", "b:heron"} <= feats  # the issue's own words, read as for any training record


def test_it_learns_from_triagers_decisions_on_issues_not_yet_triaged(tmp_path, triager):
    for r in HISTORY_RECORDS:
        make_issue(number=r["number"], title=r["title"], body=r["body"], labels=r["labels"])
    # Flagged for the meeting, so not `triaged` and no training record of their own: only the decisions teach "kiwi".
    for number in range(500, 512):
        _decided(
            number,
            triager,
            added=["module: dynamic shapes", "triage review"],
            shown=["module: dynamo", "module: dynamic shapes", "triage review"],
        )
    kiwi = read(IssueText(1, "kiwi heron again", "the kiwi heron misbehaves")).features()

    out = StringIO()
    call_command("train_label_model", from_db=True, stdout=out)
    trained = TrainedModel.objects.get()
    assert f"Training on {trained.trained_on} triaged issues of history" in out.getvalue()
    assert "and 12 triagers' decisions" in out.getvalue()
    learned = LabelModel.from_json(trained.data)
    without = train(training_examples(HISTORY_RECORDS))
    dynamic, dynamo = (learned.predict(kiwi)[l][0] for l in ("module: dynamic shapes", "module: dynamo"))
    assert dynamic > 0.5 > dynamo
    assert dynamic > without.predict(kiwi)["module: dynamic shapes"][0] + 0.2
