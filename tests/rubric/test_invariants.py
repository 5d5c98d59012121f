"""Properties of every Assessment, whatever the issue text (G4, G5, G7, R11), and hostile input."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rubric_app.rubric.engine.assess import evaluate, shipped_catalog
from rubric_app.rubric.engine.model import SHIPPED_MODEL_FILE, LabelModel, train
from rubric_app.rubric.engine.skill import Skill, parse_labels
from rubric_app.rubric.offline.evaluation import training_examples
from rubric_app.rubric.reading.catalog import is_forbidden
from rubric_app.rubric.reading.facts import _FOLD, locator, needles
from rubric_app.rubric.reading.types import BisectionEvidence, CommentText, IssueText, Neighbour
from rubric_app.rubric.rules import domain, general, skill_additions
from rubric_app.vocabulary import is_module, is_oncall

ROOT = Path(__file__).resolve().parents[2]

# Phrases the rules react to, so that generated issues exercise them and not only random noise.
PHRASES = [
    "torch.compile",
    "graph break",
    "torch._dynamo.exc.Unsupported: zip",
    "dynamic=False works",
    "dynamic=True",
    "SymInt",
    ".item()",
    "aot_eager fails",
    "aot_eager works",
    "backend='eager' fails",
    "InductorError",
    "[Inductor][CPU]",
    "MKLDNN",
    "segfault",
    "silently wrong results",
    "regression",
    "worked in 2.4",
    "@triton.jit",
    "@helion.kernel",
    "hl.tile",
    "torch.func.vmap",
    "make_fx",
    "FakeTensor",
    "functionalization",
    "DTensor",
    "FSDP",
    "DDP",
    "flex_attention",
    "torch.export.export",
    "use_deterministic_algorithms",
    "FX graph cache",
    "OOM",
    "slower than eager",
    "[Fuzzer]",
    "atol=1e-9",
    "argmax",
    "fp64_ref",
    "How do I",
    "?",
    "torchvision",
    "<script>alert(1)</script>",
    # The thread reader's phrases (rubric/reading/thread.py): negation, attribution, transfer, question, a CPU build.
    "so it's the decomposition, not codegen",
    "AOTAutograd is only the caller",
    "the fix belongs in pytorch/vision",
    "This is expected behavior.",
    "looks like an inductor bug",
    "PyTorch version: 2.5.1+cpu",
    # What PyTorch's triage skill added (R5.1, G9-G13): layers, downloads, edge cases, crashes, versions.
    "looks like a functionalization bug",
    'File "torch/_subclasses/fake_tensor.py", line 1, in dispatch',
    "torch.library.custom_op",
    "model.load_state_dict(torch.load('ckpt.pt'))",
    "https://drive.google.com/file/d/x",
    "on an H100",
    "I can't share the model",
    "torch.finfo(torch.float16).max",
    "returns NaN for very large inputs",
    "equal_nan=True",
    "Segmentation fault",
    "only on Windows",
    "Workaround: torch._dynamo.config.cache_size_limit = 64",
    "calling .contiguous() is a workaround",
    "PyTorch version: 2.13.0+cu128",
    "PyTorch version: 2.14.0.dev20261201",
    "pip install torch==2.13.1",
    "### 🚀 The feature, motivation and pitch",
    "\u202e\u0000\ufeff",
    "```python\nx = 1\n```",
]
LABELS = [
    "oncall: pt2",
    "oncall: cpu inductor",
    "oncall: export",
    "oncall: distributed",
    "triaged",
    "topic: fuzzer",
    "module: dynamo",
    "high priority",
    "module: aotdispatch",
    "bot-triage-blocked",
    "enhancement",
]
VERDICTS = [
    BisectionEvidence("module: dynamo", "R2.3", "fails while tracing", 1),
    BisectionEvidence("module: pt2-dispatcher", "R2.1", "fails on aot_eager", 2),
    BisectionEvidence("module: inductor", "R2.2", "fails on inductor only", 3),
    BisectionEvidence("oncall: cpu inductor", "R2.4", "fails only on cpu", 4),
    BisectionEvidence("triage review", "R11", "silently wrong", 5),
]

# Similar issues' labels (rubric/likeness/neighbours.py): forbidden, out-of-catalog and redirect labels among them.
NEIGHBOUR_LABELS = [
    "module: dynamo",
    "module: inductor",
    "module: dynamic shapes",
    "module: helion",
    "module: fsdp",
    "module: not in catalog",
    "oncall: export",
    "high priority",
    "triaged",
    "ciflow/trunk",
]
neighbours = st.lists(
    st.builds(
        Neighbour,
        number=st.integers(1, 10**6),
        labels=st.lists(st.sampled_from(NEIGHBOUR_LABELS), max_size=3).map(tuple),
        similarity=st.floats(0, 1),
        same_signature=st.booleans(),
    ),
    max_size=8,
).map(tuple)

text = st.lists(st.one_of(st.sampled_from(PHRASES), st.text(max_size=40)), max_size=12).map(" ".join)
issues = st.builds(
    IssueText,
    number=st.integers(1, 10**6),
    title=text,
    body=text,
    comments=st.lists(text.map(CommentText), max_size=3).map(tuple),
    labels=st.lists(st.sampled_from(LABELS), max_size=3, unique=True).map(tuple),
    bisection=st.lists(st.sampled_from(VERDICTS), max_size=2).map(tuple),
    neighbours=neighbours,
    release=st.sampled_from(["", "v2.13.0", "v2.12.1", "not a tag"]),
    labelled_by=st.sampled_from([(), (("high priority", "malfet"),), (("high priority", "pytorch-bot[bot]"),)]),
)


def _oncall_labels(labels) -> set[str]:
    return {l for l in labels if is_oncall(l)}


# A small learned labeler, so the invariants are checked with a model weighing in too.
MODEL = train(
    training_examples(
        [
            {
                "number": i,
                "title": f"{word} case {i}",
                "body": f"the {word} misbehaves under torch.compile",
                "comments": [],
                "labels": [label, "oncall: pt2"],
            }
            for i, (word, label) in enumerate(
                [
                    ("graph", "module: dynamo"),
                    ("kernel", "module: inductor"),
                    ("symbol", "module: dynamic shapes"),
                    ("fake", "module: pt2-dispatcher"),
                ]
                * 6
            )
        ]
    )
)


# The model shipped in the repo, calibrated: the one `make run` uses.
SHIPPED = LabelModel.load(SHIPPED_MODEL_FILE)
CURRENT_CATALOG = Skill(parse_labels((ROOT / "rubric_app" / "data" / "skill_labels.json").read_text())).names()


def test_it_ships_a_calibrated_model():
    assert SHIPPED is not None and SHIPPED.trained_on > 400
    assert {"first", "second", "preselect", "route", "review"} <= set(SHIPPED.thresholds)
    assert "module: inductor" in SHIPPED.calibration


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(issues, st.sampled_from(["rules", "small model", "shipped model"]))
def test_it_keeps_the_invariants_for_any_issue(issue, engine):
    model = {"small model": MODEL, "shipped model": SHIPPED}.get(engine)
    a = evaluate(issue, model=model) if model else evaluate(issue, use_model=False)
    labels = a.labels()
    catalog = shipped_catalog()
    assert a.route in ("pt2", "cpu inductor", "handoff", "skip", "transfer")
    # `a` accepts a subset of the suggestions; never G4's placeholder; nothing on a usage question (G1).
    assert set(a.preselected()) <= set(labels)
    assert not any(s.preselected and s.rule_id == "G4" for s in a.add)
    if any(c.rule_id == "G1" and "question" in c.text for c in a.checklist):
        assert not any(is_module(l) for l in a.preselected())
    # G4: what `a` applies never leaves a PT2 issue triaged without a module: label.
    if "triaged" in a.preselected():
        assert any(is_module(l) for l in [*a.preselected(), *issue.labels])
        assert "triage review" not in a.preselected()
    # G7 / R7.4: nothing forbidden, nothing outside the catalog.
    assert all(l in catalog and not is_forbidden(l) for l in labels), labels
    # R11: never high priority; triage review never with triaged.
    assert "high priority" not in labels
    assert not ("triage review" in labels and "triaged" in labels)
    if a.route in ("skip", "transfer"):
        # G0 / G2: another queue's or another repository's issue: nothing to add.
        assert labels == []
    elif a.route == "handoff":
        # G5: exactly one oncall label, no module labels, no triaged.
        assert len(_oncall_labels(labels)) == 1 and not any(is_module(l) for l in labels)
        assert "triaged" not in labels
    else:
        # G4: at least one module label, on the issue already or suggested.
        assert any(is_module(l) for l in [*labels, *issue.labels])
    for s in a.add:
        assert 0.0 <= s.confidence <= 1.0 and s.rule_id


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(issues)
def test_it_flags_release_triage_only_through_a_gate_and_keeps_the_skills_restrictions(issue):
    # The catalog of the skill as the repository has it now (it has `release triage`): G12 and G13 on any issue.
    a = evaluate(issue, catalog=CURRENT_CATALOG, model=SHIPPED)
    labels = a.labels()
    release = next((s for s in a.add if s.label == "release triage"), None)
    if release is not None:
        # G12: the latest release known, never for a feature or an enhancement, and the gate is the evidence.
        assert skill_additions.parse_release(issue.release) is not None and "enhancement" not in issue.labels
        assert release.rule_id in ("G12.1", "G12.2") and release.evidence
        if release.rule_id == "G12.1":
            assert release.evidence.endswith(f"the latest release is {issue.release}")
    # G13: never releng nor a distributed sub-queue; R5.1's layer only beside its umbrella.
    assert not any(skill_additions.never_applied(l) for l in labels)
    layers = {"module: aotdispatch", "module: functionalization", "module: fakeTensor", "module: custom-operators"}
    if layers & set(labels):
        assert "module: pt2-dispatcher" in labels or "module: pt2-dispatcher" in issue.labels
    # G9: a request for a reproduction is never marked triaged.
    if "needs reproduction" in labels:
        assert "triaged" not in labels


@settings(max_examples=200, deadline=None)
@given(issues)
def test_it_quotes_evidence_verbatim(issue):
    a = evaluate(issue)
    texts = {"title": issue.title, "body": issue.body}
    texts.update({f"comment:{i}": c.body for i, c in enumerate(issue.comments)})
    for item in [*a.add, *a.avoid]:
        if item.evidence_source in texts:
            assert item.evidence in texts[item.evidence_source]


def test_it_survives_hostile_text_quickly():
    huge = "a" * 5_000_000
    nasty = [
        IssueText(1, "<script>alert(1)</script>" * 1000, huge),
        IssueText(2, "x", "```" * 200_000),
        IssueText(3, "aot_eager " * 50_000, ("aot_eager " + "x" * 59) * 20_000),
        IssueText(4, "\u202e\u0000\ufeff" * 10_000, "backend='eager'" + " " * 1_000_000 + "fails"),
        IssueText(5, "t", "```python\n" + "(" * 100_000 + "\n```"),
        IssueText(6, "t", "b", comments=tuple(CommentText("graph break " * 10_000) for _ in range(5_000))),
    ]
    # Input caps and bounded patterns keep this linear; a catastrophic backtrack would hang here.
    for issue in nasty:
        a = evaluate(issue)
        assert a.route in ("pt2", "cpu inductor", "handoff", "skip")
        assert all(len(s.evidence) <= 1_000 for s in a.add)


PATTERN_TEXT = st.lists(
    st.one_of(
        st.sampled_from(PHRASES),
        st.sampled_from(["İ", "ı", "ſ", "K", "É", "ß", "\n", " ", "`", "."]),
        st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_ .()[]=+'\"\n", max_size=20),
    ),
    max_size=30,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(PATTERN_TEXT)
def test_it_locates_without_losing_a_match(text):
    # The literal needles and the locator (facts.py) only skip searches that could not match.
    folded = text.translate(_FOLD).lower()
    patterns = [
        (name, value)
        for module in (general, domain, skill_additions)
        for name, value in vars(module).items()
        if isinstance(value, re.Pattern)
    ] + [
        (row[0], item)
        for module in (general, domain, skill_additions)
        for value in vars(module).values()
        if isinstance(value, tuple)
        for row in value
        if isinstance(row, tuple)
        for item in row
        if isinstance(item, re.Pattern)
    ]
    assert len(patterns) > 50
    for name, pattern in patterns:
        if pattern.search(text):
            required, loose = needles(pattern), locator(pattern)
            assert required is None or any(n in folded for n in required), name
            assert loose is None or loose.search(folded), name


def test_it_says_the_same_in_every_process_whatever_its_hash_seed():
    # The web process and each worker are interpreters with their own string hash seed: an issue's suggestions,
    # confidences and evidence must not depend on it (a set's order once picked which word a feature cited).
    code = (
        "import json\n"
        "from rubric_app.rubric.engine.assess import evaluate\n"
        "from rubric_app.rubric.offline.evaluation import issue_from_record, output_line, read_jsonl\n"
        "records = list(read_jsonl(open('tests/data/pt2_dev.jsonl')))[:80]\n"
        "print(json.dumps([output_line(int(r['number']), evaluate(issue_from_record(r, use_labels=False)))"
        " for r in records], sort_keys=True))\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1 and '"evidence"' in outputs.pop()
