"""Calibration of the labels outside the core components (R7): a curve of their own once a label has
enough findings, symptoms apart from visibility labels, and what that means for pre-selection."""

from __future__ import annotations

from rubric_app.rubric.engine.assess import decide, evaluate, read, shipped_model
from rubric_app.rubric.engine.model import LabelModel, interpolate, isotonic
from rubric_app.rubric.engine.scoring import model_findings
from rubric_app.rubric.offline.evaluation import issue_from_record
from rubric_app.rubric.offline.fitting import COMPANY_MIN, OWN_CURVE_MIN, _rule_calibration, company_calibration
from rubric_app.rubric.reading.types import CommentText, IssueText


def record(number: int, title: str, body: str, labels: list[str]) -> dict:
    return {"number": number, "title": title, "body": body, "comments": [], "labels": labels}


# Triagers' history, R7 by R7: a DTensor report always got `module: dtensor` (R7.1); FSDP reports are too
# few to say; a slow compile in the title never got `module: compile-time`, a slow kernel got
# `module: performance` (R7.2).
DTENSOR = [
    record(
        i,
        f"[DTensor] redistribute under torch.compile fails in case {i}",
        "torch.compile(model) on DTensor inputs fails in inductor",
        ["module: dtensor", "module: inductor", "oncall: pt2"],
    )
    for i in range(1, OWN_CURVE_MIN + 2)
]
FSDP = [
    record(
        100 + i,
        f"FSDP2 fully_shard + torch.compile fails in case {i}",
        "fully_shard(model); torch.compile(model) fails in inductor",
        ["module: inductor", "oncall: pt2"],
    )
    for i in range(1, OWN_CURVE_MIN - 1)
]
SLOW = [
    record(
        200 + i,
        f"Compile time of model {i} went from 40s to 6 minutes",
        "torch.compile(model) with inductor",
        ["module: inductor", "oncall: pt2"],
    )
    for i in range(1, OWN_CURVE_MIN + 2)
]
SLOWER = [
    record(
        300 + i,
        f"[inductor] fused softmax {i} is 3x slower than eager",
        "torch.compile(model) with inductor",
        ["module: inductor", "module: performance", "oncall: pt2"],
    )
    for i in range(1, 3)
]


def curves(records):
    return _rule_calibration(records, [read(issue_from_record(r, use_labels=False)) for r in records])


def test_it_gives_a_label_with_enough_findings_a_curve_of_its_own_r7():
    fitted = curves(DTENSOR + FSDP + SLOW + SLOWER)
    assert interpolate(fitted["extra:module: dtensor"], 0.9) > 0.8
    assert "extra:module: fsdp" not in fitted  # too few findings: its group's curve speaks for it
    assert "extra" in fitted
    # Symptoms (R7.2) are calibrated apart: their history does not drag the visibility labels down...
    assert "symptom" in fitted and interpolate(fitted["extra"], 0.9) > interpolate(fitted["symptom"], 0.9)
    # ...and a label's own curve is smoothed towards its group's rate, not to 0: a handful of misses proves no 0.
    assert 0.0 < interpolate(fitted["symptom:module: compile-time"], 0.9) < 0.5


def test_it_smooths_a_curve_towards_the_prior_it_is_given():
    assert isotonic([(0.9, False)] * 4)[1] == [0.0]
    assert isotonic([(0.9, False)] * 4, prior=0.5)[1] == [0.1]


def model(calibration: dict) -> LabelModel:
    return LabelModel(
        calibration=calibration,
        thresholds={
            "first": 0.2,
            "second": 0.3,
            "extra": 0.5,
            "symptom": 0.5,
            "visibility": 0.5,
            "route": 0.5,
            "review": 0.5,
            "preselect": 0.7,
            "preselect_route": 1.01,
            "preselect_review": 1.01,
        },
    )


FSDP_ISSUE = IssueText(
    1,
    "FSDP2 fully_shard + torch.compile: backward fails",
    "fully_shard(model); torch.compile(model) fails in inductor",
    labels=("oncall: pt2",),
)
SURE = [[0.0, 1.0], [0.95, 0.95]]
LOW = [[0.0, 1.0], [0.05, 0.05]]


def test_it_preselects_a_label_outside_the_core_only_on_its_own_curve_r7_1():
    # The group's curve is sure, but it was fitted on other labels: `module: fsdp` is offered, not ticked.
    a = evaluate(FSDP_ISSUE, model=model({"extra": SURE}))
    fsdp = next(s for s in a.add if s.label == "module: fsdp")
    assert fsdp.confidence >= 0.9 and not fsdp.preselected
    # Its own curve, once it has one, is what scores it: sure where its group is not.
    own = evaluate(FSDP_ISSUE, model=model({"extra": LOW, "extra:module: fsdp": SURE}))
    assert "module: fsdp" in own.preselected()
    rules_alone = evaluate(FSDP_ISSUE, use_model=False)  # no calibration at all: the rules' own bar
    assert "module: fsdp" in rules_alone.labels()


def test_it_still_offers_what_a_rule_finds_outright_when_history_calibrates_it_low_r7_2():
    slow = IssueText(
        2,
        "Compile time of a 48-layer transformer went from 40s to 6 minutes",
        "torch.compile(model) with inductor",
        labels=("oncall: pt2",),
    )
    a = evaluate(slow, model=model({"symptom": SURE, "symptom:module: compile-time": LOW}))
    s = next(s for s in a.add if s.label == "module: compile-time")
    assert s.confidence < 0.1 and not s.preselected  # offered with its honest confidence, left for the triager
    assert s.rule_id == "R7.2" and s.evidence in slow.title


def test_it_tells_the_triager_why_a_sure_label_is_not_ticked():
    a = evaluate(FSDP_ISSUE, model=model({"extra": SURE}))
    fsdp = next(s for s in a.add if s.label == "module: fsdp")
    assert "too few past triage decisions" in fsdp.reason
    # A default-backend guess for wrong results: R2 wants the bisection first, however sure the calibration.
    wrong = IssueText(
        3,
        "Compiled model returns wrong values",
        "No error, the values differ from eager. torch.compile(model)",
        labels=("oncall: pt2",),
    )
    guess = next(s for s in evaluate(wrong, model=model({"core": SURE})).add if s.label == "module: inductor")
    assert guess.confidence >= 0.9 and not guess.preselected and "bisected" in guess.reason


# R1: `module: dynamo` next to the right component. Triagers' history says a core component suggested next to
# another one is right far less often than its own probability says; its company curve rescores it there.
DTENSOR_BREAK = IssueText(
    4,
    "[DTensor] graph break under torch.compile on redistribute",
    "torch._dynamo.exc.Unsupported: graph break on DTensor.redistribute\ntorch.compile(model) with DTensor inputs",
    labels=("oncall: pt2",),
)
ALONE_SURE = {"core": SURE, "extra": SURE, "extra:module: dtensor": SURE}


def test_it_scores_a_core_component_next_to_a_domain_label_on_its_company_curve_r1():
    alone = {s.label: s for s in evaluate(DTENSOR_BREAK, model=model(ALONE_SURE)).add}
    assert alone["module: dynamo"].confidence >= 0.9 and alone["module: dynamo"].company == "company:domain"
    crowded = {s.label: s for s in evaluate(DTENSOR_BREAK, model=model({**ALONE_SURE, "company:domain": LOW})).add}
    dynamo = crowded["module: dynamo"]
    assert dynamo.confidence < 0.1 and not dynamo.preselected and "next to another component" in dynamo.reason
    assert (
        crowded["module: dtensor"].preselected and crowded["module: dtensor"].confidence >= 0.9
    )  # the label it stood next to is untouched


def test_it_leaves_out_a_second_label_its_company_curve_calls_unlikely_and_asks_instead_r1():
    learned = model({**ALONE_SURE, "company:domain": LOW})
    learned.thresholds["company"] = 0.5
    a = evaluate(DTENSOR_BREAK, model=learned)
    assert "module: dynamo" not in a.labels() and "module: dtensor" in a.preselected()
    asked = [c for c in a.checklist if c.text.startswith("module: dynamo")]
    assert len(asked) == 1 and "left out next to another component" in asked[0].text and asked[0].state == "needs_human"
    # A component standing alone has no company: the same curve never touches it.
    lone = IssueText(
        5,
        "graph break under torch.compile on a generator",
        "torch._dynamo.exc.Unsupported: graph break on a generator",
        labels=("oncall: pt2",),
    )
    assert "module: dynamo" in evaluate(lone, model=learned).preselected()


def test_it_fits_company_curves_on_how_often_second_labels_were_right():
    issues = [
        record(
            400 + i,
            f"[DTensor] graph break under torch.compile, case {i}",
            "torch._dynamo.exc.Unsupported: graph break on DTensor.redistribute",
            ["module: dtensor", "oncall: pt2"],
        )
        for i in range(COMPANY_MIN)
    ]
    judged = [evaluate(issue_from_record(r, use_labels=False), model=model(ALONE_SURE)) for r in issues]
    fitted = company_calibration(issues, judged)
    # One curve for the kind of company, one for the label in it (no core label stood next to another core one).
    assert set(fitted) == {"company:domain", "company:domain:module: dynamo"}
    assert (
        interpolate(fitted["company:domain:module: dynamo"], 0.95) < 0.1
    )  # dynamo was never right beside dtensor here
    assert company_calibration(issues[:-1], judged[:-1]) == {}  # too few labels: no curve
    # The label's own curve wins over its company's where the engine scores it.
    learned = model({**ALONE_SURE, "company:domain": SURE, "company:domain:module: dynamo": LOW})
    dynamo = next(s for s in evaluate(DTENSOR_BREAK, model=learned).add if s.label == "module: dynamo")
    assert dynamo.confidence < 0.1


def test_it_lets_the_default_backend_guess_yield_to_a_component_the_text_shows_r2():
    # Wrong results and a `[functionalization]` tag: the guess (Inductor, the default backend) is for when the
    # text shows no component; here R5 shows one, so it ranks first whatever ties the calibration makes.
    tagged = IssueText(
        6,
        "[functionalization] In-place mutation through an unfold view silently zeroes the base under torch.compile",
        "No error: the values differ from eager.\ntorch.compile(f)(x)",
        labels=("oncall: pt2",),
    )
    a = evaluate(tagged, model=model({"core": SURE}))
    assert "module: pt2-dispatcher" in a.labels() and "module: inductor" not in a.labels()
    # Without other evidence the guess stands, offered and held back for the bisection.
    untagged = IssueText(
        7,
        "In-place mutation through an unfold view silently zeroes the base under torch.compile",
        "No error: the values differ from eager.\ntorch.compile(f)(x)",
        labels=("oncall: pt2",),
    )
    guess = next(s for s in evaluate(untagged, model=model({"core": SURE})).add if s.label == "module: inductor")
    assert not guess.preselected and "bisected" in guess.reason


def test_it_scores_a_label_the_thread_settles_two_ways_by_the_surer_of_them_r2():
    # The maintainer reports the backend results (R2.1: aot_eager fails) and concludes where the bug is (R2): each
    # finding has its own curve. Here history trusts the conclusion and not the backend reading; the weaker one
    # must not pull the label down, whichever the engine cites.
    issue = IssueText(
        8,
        "torch.compile silently returns wrong values for add_ on a view then torch.where",
        "No error. torch.compile(f)(x)",
        (
            CommentText(
                "Backends: `backend='eager'` correct, `aot_eager` wrong, inductor wrong. So it's in AOTAutograd: "
                "the mutation through the view is not propagated to the base.",
                author="maintainer",
            ),
        ),
        labels=("oncall: pt2",),
        author="reporter",
    )
    trusted = next(
        s
        for s in evaluate(issue, model=model({"core": SURE, "decisive": LOW})).add
        if s.label == "module: pt2-dispatcher"
    )
    assert trusted.confidence >= 0.9 and trusted.preselected
    # Alone, the backend reading scores on its own curve.
    alone = IssueText(
        9,
        issue.title,
        issue.body,
        (CommentText("`aot_eager` wrong, inductor wrong.", author="maintainer"),),
        labels=("oncall: pt2",),
        author="reporter",
    )
    assert "module: pt2-dispatcher" not in evaluate(alone, model=model({"core": SURE, "decisive": LOW})).preselected()
    assert "module: pt2-dispatcher" in evaluate(alone, model=model({"core": LOW, "decisive": SURE})).preselected()


def test_it_shows_the_backend_result_as_the_evidence_where_the_learned_labeler_is_surer_r2():
    issue = IssueText(
        1,
        "Graph break on zip in a compiled loop",
        "torch._dynamo.exc.Unsupported: call_function zip",
        comments=(CommentText(body="Same with backend='eager' fails too.", author="rev"),),
    )
    reading = read(issue)
    model = shipped_model()
    predictions = dict(model.predict(reading.features()))
    predictions["module: dynamo"] = (0.999, ["rl:add:module: dynamo"])  # as sure as the labeler gets
    learned = next(
        x
        for x in model_findings(model, reading.features(), predictions, reading.findings)
        if x.label == "module: dynamo"
    )
    result = next(x for x in reading.findings if x.rule_id == "R2.3")
    assert learned.weight > result.weight  # the learned finding weighs more...
    dynamo = next(s for s in decide(reading, model=model, predictions=predictions).add if s.label == "module: dynamo")
    # ...yet the triager is shown the backend result, at the better of the two confidences (G8: the root cause).
    assert (dynamo.rule_id, dynamo.source, dynamo.evidence) == ("R2.3", "rule", result.evidence)
    assert dynamo.confidence >= learned.weight and dynamo.preselected


def test_it_leaves_a_learned_cpu_route_to_r2_4s_question_when_cuda_was_never_tried():
    repro = "```python\nimport torch\nx = torch.rand(2, 4, 8)\nprint(torch.compile(fn)(x))\n```"
    model = shipped_model()

    def assess(title: str):
        reading = read(IssueText(1, title, repro))
        predictions = dict(model.predict(reading.features()))
        predictions["oncall: cpu inductor"] = (0.999, ["rl:add:module: inductor"])  # the labeler is sure it is CPU's
        return decide(reading, model=model, predictions=predictions)

    untried = assess("[inductor] masked_fill gives wrong results")
    assert untried.route == "pt2" and "oncall: cpu inductor" not in untried.labels()
    assert any(c.rule_id == "R2.4" and c.state == "needs_human" for c in untried.checklist)  # asked instead
    tagged = assess("[inductor][CPU] masked_fill gives wrong results")  # R10: the reporter says it is the CPU backend
    assert tagged.route == "cpu inductor" and "oncall: cpu inductor" in tagged.labels()
