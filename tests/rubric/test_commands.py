"""suggest_labels and evaluate_suggestions: offline runs over JSON lines, and the scoring rules."""

from __future__ import annotations

import json
import re
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from rubric_app.rubric.offline.evaluation import (
    Counts,
    answer,
    g4_ceiling,
    issue_from_record,
    review_truth,
    score,
    truth,
    without_title_heading,
)
from rubric_app.rubric.offline.fitting import preselect_threshold, wilson_lower
from rubric_app.vocabulary import is_module

DEV = Path(__file__).resolve().parents[1] / "data" / "pt2_dev.jsonl"

ISSUES = [
    {
        "number": 1,
        "title": "[dynamo] graph break on zip",
        "body": "torch._dynamo.exc.Unsupported: zip",
        "comments": ["Same with backend='eager' fails too."],
        "labels": ["oncall: pt2"],
    },
    {
        "number": 2,
        "title": "torch.export.export fails on an unflattened module",
        "body": "ep = torch.export.export(m, args)",
        "comments": [],
        "labels": [],
    },
    {
        "number": 3,
        "title": "Compiled resnet segfaults",
        "body": "Segmentation fault (core dumped)",
        "comments": [],
        "labels": ["oncall: distributed"],
    },
]


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_it_writes_one_suggestion_line_per_issue(tmp_path):
    src, out = write_jsonl(tmp_path / "in.jsonl", ISSUES), tmp_path / "out.jsonl"
    call_command("suggest_labels", input=str(src), output=str(out), stdout=StringIO())
    lines = [json.loads(l) for l in out.read_text().splitlines()]
    assert [l["number"] for l in lines] == [1, 2, 3]
    first, export, skipped = lines
    assert "module: dynamo" in first["labels"] and "triaged" in first["labels"]
    # The backend result is the evidence shown (R2.3), however sure the learned labeler is of the label.
    dynamo = first["evidence"]["module: dynamo"]
    assert dynamo["rule_id"] == "R2.3" and dynamo["evidence"] in ISSUES[0]["comments"][0]
    assert export["labels"][0] == "oncall: export" and not any(is_module(l) for l in export["labels"])
    # G0: already distributed's. Nothing to add; the output still names the queue it belongs in.
    assert skipped["route"] == "skip" and skipped["labels"] == ["oncall: distributed"]
    assert first["labels"][-1] == "oncall: pt2"  # the file's labels say it is there already: named, not duplicated
    assert first["labels"].count("oncall: pt2") == 1


def test_it_reads_a_harvested_body_without_its_title_heading_and_cut_marks_as_github_serves_it():
    body = (
        "# [inductor] Wrong strides\n\nalice · description · 2025-01-02\nThe strides are wrong.\n\nbob · comment · "
        "2025-01-03\nInductor.\n```\nTraceback (most recent call last):\n⟨…truncated by harvester⟩"
    )
    issue = issue_from_record(
        {
            "number": 5,
            "title": "[inductor] Wrong strides",
            "body": body,
            "labels": [],
            "comments": [{"author": "carol", "body": "Same here ⟨…truncated by harvester⟩"}],
        }
    )
    assert issue.body.strip() == "The strides are wrong." and issue.author == "alice"
    # Nor the harvester's mark where it cut a text: no synced issue has one.
    assert [c.body.strip() for c in issue.comments] == [
        "Inductor.\n```\nTraceback (most recent call last):",
        "Same here",
    ]
    # Only the title's own heading goes: another heading, or a body that merely starts alike, stays.
    assert without_title_heading("# Steps\nrun it", "Wrong strides") == "# Steps\nrun it"
    assert without_title_heading("# Wrong strides here\nrun it", "Wrong strides") == "# Wrong strides here\nrun it"
    assert without_title_heading("plain body", "") == "plain body"


def test_it_names_the_cpu_lane_of_an_issue_already_in_it(tmp_path):
    row = {"number": 4, "title": "Compiled model slow", "body": "", "comments": [], "labels": ["oncall: cpu inductor"]}
    src, out = write_jsonl(tmp_path / "in.jsonl", [row]), tmp_path / "out.jsonl"
    call_command("suggest_labels", input=str(src), output=str(out), stdout=StringIO())
    line = json.loads(out.read_text())
    assert line["route"] == "cpu inductor" and "oncall: cpu inductor" in line["labels"]
    assert "oncall: pt2" not in line["labels"]  # R10: routed instead of oncall: pt2


def test_it_can_ignore_the_files_labels(tmp_path):
    src, out = write_jsonl(tmp_path / "in.jsonl", ISSUES[2:]), tmp_path / "out.jsonl"
    call_command("suggest_labels", input=str(src), output=str(out), ignore_labels=True, stdout=StringIO())
    line = json.loads(out.read_text())
    assert line["route"] == "pt2" and "triage review" in line["labels"] and "high priority" not in line["labels"]


def test_it_rejects_a_bad_line_and_keeps_the_old_output(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(ISSUES[0]) + "\n{not json\n")
    out = tmp_path / "out.jsonl"
    out.write_text("previous run\n")
    with pytest.raises(CommandError, match="line 2: not JSON"):
        call_command("suggest_labels", input=str(src), output=str(out), stdout=StringIO())
    assert out.read_text() == "previous run\n"
    src.write_text(json.dumps({"title": "no number"}) + "\n")
    with pytest.raises(CommandError, match="line 1: missing number"):
        call_command("suggest_labels", input=str(src), output=str(out), stdout=StringIO())
    with pytest.raises(CommandError, match="missing.jsonl"):
        call_command("suggest_labels", input=str(tmp_path / "missing.jsonl"), output=str(out), stdout=StringIO())


def test_it_splits_a_harvested_thread_into_comments():
    body = "# t\n\nalice · description · 2025-01-01\nIt fails.\n\nbob · comment · 2025-01-02\naot_eager also fails.\n"
    issue = issue_from_record({"number": 5, "title": "t", "body": body, "labels": ["oncall: pt2"]}, use_labels=False)
    assert "It fails." in issue.body and "aot_eager" not in issue.body
    assert [c.body.strip() for c in issue.comments] == ["aot_eager also fails."]
    assert issue.labels == ()


def test_it_treats_labels_hidden_by_truncation_as_unknown():
    # Only the first five labels in sorted order are shown: anything sorting after the fifth is unknown.
    record = {
        "labels": [
            "bot-triaged",
            "high priority",
            "module: correctness (silent)",
            "module: dynamo",
            "module: inductor",
        ],
        "labels_truncated": True,
    }
    assert truth(record, "module: dynamo") is True
    assert truth(record, "module: dynamic shapes") is False  # sorts before the fifth: known absent
    assert truth(record, "module: pt2-dispatcher") is None  # sorts after the fifth: unknown
    assert truth(record, "oncall: cpu inductor") is None
    assert review_truth(record) is True  # high priority went to the meeting (R11)
    full = {"labels": ["module: aotdispatch", "oncall: pt2"], "labels_truncated": False}
    assert truth(full, "module: pt2-dispatcher") is True  # the older name of the same label
    assert review_truth(full) is False


def test_it_reads_hidden_labels_as_absent_when_strict():
    record = {
        "labels": [
            "bot-triaged",
            "high priority",
            "module: correctness (silent)",
            "module: dynamo",
            "module: inductor",
        ],
        "labels_truncated": True,
    }
    assert truth(record, "module: pt2-dispatcher", strict=True) is False
    result = score([record], [["module: pt2-dispatcher"]], strict=True)
    assert result.per_label["module: pt2-dispatcher"].fp == 1
    assert score([record], [["module: pt2-dispatcher"]]).per_label["module: pt2-dispatcher"].fp == 0


def test_it_leaves_components_unknown_where_humans_gave_none_g4():
    # G4: every PT2 issue ends with a module: label, so one without any was left unlabelled, not
    # labelled "none of these": its components teach and calibrate nothing.
    bare = {"labels": ["oncall: pt2", "triaged"], "labels_truncated": False}
    assert answer(bare, "module: inductor") is None and answer(bare, "oncall: export") is False
    labelled = {"labels": ["module: dynamo", "oncall: pt2"], "labels_truncated": False}
    assert answer(labelled, "module: dynamo") is True and answer(labelled, "module: inductor") is False
    assert answer({"labels": ["high priority", "module: inductor"]}, "triage review") is True


def test_it_preselects_only_where_the_lower_bound_of_precision_holds():
    # 40 labels right 38 times above 0.8, then a run of wrong ones: the threshold stops before them.
    points = [(0.95, True)] * 38 + [(0.9, False)] * 2 + [(0.5, False)] * 20
    assert preselect_threshold(points, 0.85) == 0.9
    assert preselect_threshold(points, 0.99) == 1.01  # never reached: nothing pre-selected
    # Four labels right four times are too few to promise 0.90: the bound is well under the 100% seen.
    assert wilson_lower(4, 4) < 0.9 <= wilson_lower(200, 200)
    assert preselect_threshold([(0.99, True)] * 4, 0.9) == 1.01


def test_it_scores_unknown_labels_as_neither_hit_nor_miss():
    records = [
        {"labels": ["a", "b", "c", "d", "module: dynamo"], "labels_truncated": True},
        {"labels": ["module: inductor", "oncall: pt2"], "labels_truncated": False},
    ]
    result = score(records, [["module: pt2-dispatcher", "module: dynamo"], ["module: dynamo"]])
    dispatcher, dynamo = result.per_label["module: pt2-dispatcher"], result.per_label["module: dynamo"]
    assert (dispatcher.tp, dispatcher.fp, dispatcher.fn) == (0, 0, 0)
    assert (dynamo.tp, dynamo.fp, dynamo.fn) == (1, 1, 0)
    assert result.per_label["module: inductor"].fn == 1
    assert Counts(tp=1, fp=1, fn=0).f1 == pytest.approx(2 / 3)


def test_it_bounds_precision_by_what_g4_forces_on_issues_humans_left_without_a_component():
    records = [
        {"labels": ["oncall: pt2", "module: aotdispatch"]},  # the older name: scored as pt2-dispatcher
        {"labels": ["oncall: pt2", "triaged"]},  # no component: G4's fallback is a false positive
        {"labels": ["oncall: pt2", "oncall: export"]},  # handed off (G5): no module label owed
        {"labels": ["oncall: cpu inductor"]},  # PT2's CPU lane, routed instead of oncall: pt2 (R10)
    ]
    predictions = g4_ceiling(records)
    assert predictions == [["module: pt2-dispatcher"], ["module: compile ux"], [], []]
    ceiling = score(records, predictions).components
    assert (ceiling.tp, ceiling.fp, ceiling.fn) == (1, 1, 0)
    assert ceiling.precision == 0.5 and ceiling.recall == 1.0


def test_it_prints_the_figures_on_the_dev_set():
    out = StringIO()
    call_command("evaluate_suggestions", input=str(DEV), halves=True, stdout=out)
    text = out.getvalue()
    assert "286 issues" in text and "module: inductor" in text and "older half" in text
    figures = dict(
        re.findall(
            r"^(component micro|routing micro|review flag)\s+precision [\d.]+\s+recall [\d.]+\s+F1 ([\d.]+)", text, re.M
        )
    )
    assert set(figures) == {"component micro", "routing micro", "review flag"}
    # A floor well under the measured figures: catches a rule change that breaks the engine, not noise.
    assert float(figures["component micro"]) > 0.5
    # The dev set's G4 ceiling: 59 PT2 issues carry no component label, so even the humans' own
    # labels plus G4's fallback score precision 244 / 303.
    ceiling = re.search(
        r"^  G4 ceiling\s+precision ([\d.]+)\s+recall ([\d.]+).*\(tp (\d+), fp (\d+), fn (\d+)\)", text, re.M
    )
    assert ceiling.groups() == ("0.805", "1.000", "244", "59", "0")


def test_it_scores_the_held_out_half_apart(tmp_path):
    rows = [
        {**r, "number": n, "labels": ["oncall: pt2", "module: dynamo"]}
        for n, r in zip((40, 10, 30, 20), ISSUES[:2] * 2)
    ]
    out = StringIO()
    call_command(
        "evaluate_suggestions", input=str(write_jsonl(tmp_path / "in.jsonl", rows)), split=True, kfold=2, stdout=out
    )
    text = out.getvalue()
    # The older half (#10, #20) is the development half; the newer (#30, #40) the held-out one.
    assert "development half #10-#20: 2 issues" in text and "HELD-OUT half #30-#40: 2 issues" in text
    assert "model trained on the development half, HELD-OUT half" in text
    curve = re.findall(r"^  min confidence ([\d.]+)  precision", text, re.M)
    assert curve[0] == "0.00" and len(curve) > 3


def test_it_prints_a_learning_curve_on_the_training_pool(tmp_path):
    # Two kinds of issue the rules cannot tell apart, in words only a learned model can pick up.
    rows = [
        {
            "number": n,
            "title": f"{word} case {n}",
            "body": f"the {word} misbehaves",
            "comments": [],
            "labels": ["oncall: pt2", label],
        }
        for n in range(1, 61)
        for word, label in [
            ("walrus frobnicator" if n % 2 else "quokka zephyr", "module: dynamo" if n % 2 else "module: inductor")
        ]
    ]
    out = StringIO()
    call_command(
        "evaluate_suggestions", input=str(write_jsonl(tmp_path / "in.jsonl", rows)), learning_curve=True, stdout=out
    )
    curve = re.findall(
        r"^  trained on\s+(\d+)% of the other folds \(\s*(\d+) issues\): micro-F1 ([\d.]+)", out.getvalue(), re.M
    )
    assert [c[0] for c in curve] == ["25", "50", "75", "100"]
    sizes = [int(c[1]) for c in curve]
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0]
    assert float(curve[-1][2]) > 0.9  # separable kinds: the full training folds learn them


def test_it_rejects_a_threshold_outside_zero_to_one(tmp_path):
    with pytest.raises(CommandError, match="--min-confidence"):
        call_command(
            "evaluate_suggestions",
            input=str(write_jsonl(tmp_path / "in.jsonl", ISSUES)),
            min_confidence=1.5,
            stdout=StringIO(),
        )
