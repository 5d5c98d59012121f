"""Offline runs of the engine over JSON-lines issues, and its score against the labels humans applied.

Input lines: {"number", "title", "body", "comments": [str], "labels": [str], "labels_truncated": bool}.
`labels_truncated: true` means only the first five labels, in sorted order, are shown: a label that
sorts after the fifth is unknown and counts as neither a hit nor a miss.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rubric_app.rubric.engine.assess import Reading, evaluate, read
from rubric_app.rubric.engine.model import MODEL_LABELS, LabelModel
from rubric_app.rubric.reading.text import split_thread_authored
from rubric_app.rubric.reading.types import Assessment, BisectionEvidence, CommentText, IssueText
from rubric_app.vocabulary import (
    AOTDISPATCH,
    COMPILE_TIME,
    COMPILE_UX,
    CORRECTNESS_SILENT,
    CPU_INDUCTOR_ONCALL,
    CUDA_GRAPHS,
    DDP,
    DECOMPOSITIONS,
    DETERMINISM,
    DISTRIBUTED_ONCALL,
    DTENSOR,
    DYNAMIC_SHAPES,
    DYNAMO,
    EDGE_CASES,
    EXPORT_ONCALL,
    FLEX_ATTENTION,
    FSDP,
    FUNCTORCH,
    FUZZER_TOPIC,
    FX,
    HELION,
    HIGH_PRIORITY,
    INDUCTOR,
    MEMORY_USAGE,
    MODULE_CPU_INDUCTOR,
    MODULE_CRASH,
    MODULE_REGRESSION,
    NEEDS_REPRODUCTION,
    NUMERICAL_STABILITY,
    PERFORMANCE,
    PT2_ACCURACY,
    PT2_DISPATCHER,
    PT2_ONCALL,
    TRIAGE_REVIEW,
    TRIAGED,
    Route,
    is_module,
    is_oncall,
)

# The component labels scored by micro-F1: every `module:` label RUBRIC.md governs (R1-R9, R7.3).
# Other `module:` labels triagers use (e.g. `module: correctness (silent)`, `module: higher order
# operators`) are outside the rubric, so the engine neither predicts nor is scored on them.
COMPONENTS = (
    DYNAMO,
    INDUCTOR,
    DYNAMIC_SHAPES,
    PT2_DISPATCHER,
    DECOMPOSITIONS,
    FX,
    FUNCTORCH,
    HELION,
    CUDA_GRAPHS,
    FLEX_ATTENTION,
    DTENSOR,
    FSDP,
    DDP,
    DETERMINISM,
    COMPILE_TIME,
    NUMERICAL_STABILITY,
    MEMORY_USAGE,
    PERFORMANCE,
    COMPILE_UX,
)
# Older names triagers applied for the same thing: `module: aotdispatch` is the AOTAutograd label the
# catalog folds into pt2-dispatcher; `module: cpu inductor` was the CPU Inductor lane before the oncall.
ALIASES = {AOTDISPATCH: PT2_DISPATCHER, MODULE_CPU_INDUCTOR: CPU_INDUCTOR_ONCALL}
# Review flag: R11 sends what used to get `high priority` straight away through `triage review`.
REVIEW_TRUTH = (TRIAGE_REVIEW, HIGH_PRIORITY)


# Reference points scored on the same data: what a keyword labeler does, one regex per label.
KEYWORD_BASELINE = {
    DYNAMO: re.compile(r"dynamo|graph break", re.I),
    INDUCTOR: re.compile(r"inductor|triton", re.I),
    DYNAMIC_SHAPES: re.compile(r"dynamic|symint", re.I),
    PT2_DISPATCHER: re.compile(r"aot_?autograd|functionaliz|fake ?tensor", re.I),
}


def keyword_baseline(issue: IssueText) -> list[str]:
    """The labels whose keyword appears in the title or body."""
    text = issue.title + "\n" + issue.body
    return [label for label, pattern in KEYWORD_BASELINE.items() if pattern.search(text)]


class InputError(ValueError):
    """A line of the input file is not a usable issue; the message names the line."""


def read_jsonl(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Yield each record; raise InputError naming the first bad line (nothing is silently skipped)."""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"line {n}: not JSON ({exc.msg})") from None
        if (
            not isinstance(record, dict)
            or not isinstance(record.get("title", ""), str)
            or not isinstance(record.get("body", ""), str)
        ):
            raise InputError(f"line {n}: expected an object with string title and body")
        if not isinstance(record.get("comments", []), list) or not isinstance(record.get("labels", []), list):
            raise InputError(f"line {n}: comments and labels must be lists")
        if "number" not in record:
            raise InputError(f"line {n}: missing number")
        yield record


def issue_from_record(record: dict[str, Any], use_labels: bool = True) -> IssueText:
    """The engine's input for one record; a harvested thread's inline comments become comments.

    use_labels=False hides the record's labels: they are the answers when scoring.
    """
    title = record.get("title") or ""
    body = without_title_heading(record.get("body") or "", title).replace(HARVEST_CUT, "")
    description, reporter, thread_comments = split_thread_authored(body)
    comments = [
        (str(c.get("author", "")), str(c.get("body", "")).replace(HARVEST_CUT, ""))
        if isinstance(c, dict)
        else ("", str(c).replace(HARVEST_CUT, ""))
        for c in record.get("comments", [])
    ]
    return IssueText(
        number=int(record["number"]),
        title=title,
        body=description,
        comments=tuple(CommentText(body=body, author=author) for author, body in [*thread_comments, *comments]),
        labels=tuple(str(l) for l in record.get("labels", [])) if use_labels else (),
        author=str(record.get("author") or reporter),
        # A cached bisection verdict (evaluate_suggestions --bisections): evidence, not an answer.
        bisection=tuple(
            BisectionEvidence(label=str(b["label"]), rule_id=str(b["rule_id"]), evidence=str(b["evidence"]))
            for b in record.get("bisection", [])
        ),
    )


# Where the harvester cut a long text: its words ("truncated", "harvester") were features learned from 402 of the
# 717 files' issues that no synced issue carries.
HARVEST_CUT = "⟨…truncated by harvester⟩"


def without_title_heading(body: str, title: str) -> str:
    """The body without the "# <title>" line a harvested thread starts with. GitHub's own body has no such
    line, so the engine must not learn from it: read twice, the title's words counted as body words too,
    for a model (and rules reading the text) that then meets bodies without them once synced."""
    heading = f"# {title}"
    if title and body.startswith(heading) and body[len(heading) : len(heading) + 1] in ("", "\n"):
        return body[len(heading) :].lstrip("\n")
    return body


def output_line(number: int, assessment: Assessment) -> dict[str, Any]:
    """The suggest_labels output for one issue."""
    return {
        "number": number,
        "route": assessment.route,
        "labels": assessment.verdict(),
        "avoid": [{"label": a.label, "rule_id": a.rule_id, "reason": a.reason} for a in assessment.avoid],
        "preselected": preselected_verdict(assessment),
        "confidence": assessment.confidence(),
        "evidence": {
            s.label: {
                "rule_id": s.rule_id,
                "confidence": s.confidence,
                "evidence": s.evidence,
                "evidence_source": s.evidence_source,
                "reason": s.reason,
                "preselected": s.preselected,
            }
            for s in assessment.add
        },
        "checklist": [{"rule_id": c.rule_id, "state": c.state, "text": c.text} for c in assessment.checklist],
    }


def preselected_verdict(assessment: Assessment) -> list[str]:
    """The subset of verdict() that "accept" applies: the pre-selected labels, plus the queue's own
    oncall: label when the issue is already there (G0, the CPU lane)."""
    ticked = set(assessment.preselected())
    labels = assessment.labels()
    return [l for l in assessment.verdict() if l in ticked or (l == assessment.queue and l not in labels)]


def truth(record: dict[str, Any], label: str, strict: bool = False) -> bool | None:
    """Did the humans apply `label`? None when truncation hides the answer.

    Truncation-aware (the default): a truncated record shows its first five labels in sorted order,
    so a label sorting after the fifth could be there unseen: neither a hit nor a miss. strict=True
    reads the shown labels as the whole truth (a hidden label counts as absent): a floor for precision.
    """
    shown = {ALIASES.get(l, l) for l in record.get("labels", [])}
    if label in shown:
        return True
    if strict or not record.get("labels_truncated"):
        return False
    names = sorted(record.get("labels", []))
    hidden_after = names[-1] if names else ""
    aliases = [a for a, target in ALIASES.items() if target == label]
    # Every name that would count for `label` must sort at or before the last shown label to be known absent.
    return False if all(name <= hidden_after for name in [label, *aliases]) else None


def review_truth(record: dict[str, Any], strict: bool = False) -> bool | None:
    answers = [truth(record, label, strict) for label in REVIEW_TRUTH]
    if any(answers):
        return True
    return None if None in answers else False


@dataclass
class Counts:
    tp: int = 0
    fp: int = 0
    fn: int = 0

    def add(self, predicted: bool, actual: bool | None) -> None:
        if actual is None:
            return
        self.tp += predicted and actual
        self.fp += predicted and not actual
        self.fn += actual and not predicted

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


@dataclass
class Score:
    per_label: dict[str, Counts] = field(default_factory=dict)
    components: Counts = field(default_factory=Counts)
    routing: Counts = field(default_factory=Counts)
    review: Counts = field(default_factory=Counts)
    issues: int = 0


def route_labels(records: list[dict[str, Any]]) -> list[str]:
    """The redirect labels scored as routing: every non-pt2 `oncall:` label in the data, plus the ones the
    engine emits."""
    seen = {ALIASES.get(l, l) for r in records for l in r.get("labels", [])}
    return sorted(
        {l for l in seen if is_oncall(l) and l != PT2_ONCALL} | {CPU_INDUCTOR_ONCALL, EXPORT_ONCALL, DISTRIBUTED_ONCALL}
    )


def score(records: list[dict[str, Any]], predictions: list[list[str]], strict: bool = False) -> Score:
    """Per-label counts, component micro-F1, routing micro-F1 over the redirect labels, review flag."""
    result = Score(issues=len(records))
    routes = route_labels(records)
    for record, predicted in zip(records, predictions):
        predicted_set = set(predicted)
        for label in (*COMPONENTS, *routes):
            actual = truth(record, label, strict)
            counts = result.per_label.setdefault(label, Counts())
            counts.add(label in predicted_set, actual)
            (result.components if label in COMPONENTS else result.routing).add(label in predicted_set, actual)
        result.review.add(TRIAGE_REVIEW in predicted_set, review_truth(record, strict))
    return result


def predict(
    records: list[dict[str, Any]], model: LabelModel | None = None, use_model: bool = True, min_confidence: float = 0.0
) -> list[list[str]]:
    """The engine's labels for each record, with the record's own labels hidden.

    model: the learned labeler to use (default: the shipped one); use_model=False: rules alone;
    min_confidence: the engine's threshold for component labels.
    """
    return [
        evaluate(
            issue_from_record(r, use_labels=False), model=model, use_model=use_model, min_confidence=min_confidence
        ).verdict()
        for r in records
    ]


def split_by_number(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(development half, held-out half): the older half by issue number, then the newer half.

    Rules are designed on the development half only; the held-out half stands in for issues the
    engine has never seen, so its figures are the honest ones.
    """
    ordered = sorted(records, key=lambda r: int(r["number"]))
    return ordered[: len(ordered) // 2], ordered[len(ordered) // 2 :]


HELD_OUT_EVERY = 5


def is_held_out(record: dict[str, Any]) -> bool:
    """The untouched slice: one issue in HELD_OUT_EVERY, by a hash of its number (fixed once, never
    tuned): its figures are reported, its individual errors are never read, nothing trains on it."""
    return int(hashlib.sha256(str(int(record["number"])).encode()).hexdigest(), 16) % HELD_OUT_EVERY == 0


def split_held_out(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(training pool, held-out slice) by is_held_out."""
    return [r for r in records if not is_held_out(r)], [r for r in records if is_held_out(r)]


def g4_ceiling(records: list[dict[str, Any]]) -> list[list[str]]:
    """The best any engine that keeps G4 can score: the humans' own component labels, and G4's
    fallback on a PT2 issue where they applied none.

    Handoffs (G5) and the CPU Inductor lane (R2.4, R10: routed instead of oncall: pt2) are spared the
    fallback, so this is the most generous reading. Its precision is a ceiling for precision: every
    issue humans left without a component costs any G4-keeping engine one false positive.
    """
    predictions = []
    for record in records:
        shown = {ALIASES.get(l, l) for l in record.get("labels", [])}
        components = [l for l in COMPONENTS if l in shown]
        routed = any(is_oncall(l) and l != PT2_ONCALL for l in shown)
        predictions.append(components or ([] if routed else [COMPILE_UX]))
    return predictions


# Component-label thresholds the precision/recall curve is reported at.
CURVE = (0.0, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


def without_fallback(labels: list[str]) -> list[str]:
    """The labels minus a lone `module: compile ux`, which is what G4's fallback produces."""
    modules = [l for l in labels if is_module(l)]
    return [l for l in labels if l != COMPILE_UX] if modules == [COMPILE_UX] else labels


def precision_recall_curve(
    records: list[dict[str, Any]],
    thresholds: Iterable[float] = CURVE,
    model: LabelModel | None = None,
    use_model: bool = False,
) -> list[tuple[float, Counts, Counts]]:
    """(threshold, component micro counts, the same without G4's fallback) at each min_confidence.

    Rules alone unless a model is given. The fallback replaces every label the threshold drops, so
    only the second figure shows what the threshold itself trades.
    """
    curve = []
    for t in thresholds:
        predicted = predict(records, model=model, use_model=use_model, min_confidence=t)
        curve.append(
            (
                t,
                score(records, predicted).components,
                score(records, [without_fallback(p) for p in predicted]).components,
            )
        )
    return curve


def has_component(record: dict[str, Any]) -> bool:
    """Humans applied at least one component label (G4 wants one on every PT2 issue)."""
    return any(truth(record, label, strict=True) for label in COMPONENTS)


def answer(record: dict[str, Any], label: str) -> bool | None:
    """What the humans' labels say about `label` as a training or calibration target; None when unknown.

    Unknown: hidden by truncation (truth), and any component on an issue humans gave none. G4 says
    every PT2 issue ends with a `module:` label, so such an issue was not labelled "none of these":
    it was left unlabelled. Counting its silence as five negatives taught the model that a clear
    Inductor report is a coin toss, and calibrated every confidence low (the trust figures score
    components on issues with a human component, for the same reason).
    """
    if label == TRIAGE_REVIEW:
        return review_truth(record)
    if label in COMPONENTS and not has_component(record):
        return None
    return truth(record, label)


def training_examples(
    records: list[dict[str, Any]], readings: list[Reading] | None = None
) -> list[tuple[set[str], dict[str, bool | None]]]:
    """(features, answers) per record for model.train; answers are None where unknown (answer())."""
    readings = readings or [read(issue_from_record(r, use_labels=False)) for r in records]
    return [
        (set(reading.features()), {label: answer(record, label) for label in MODEL_LABELS})
        for record, reading in zip(records, readings)
    ]


# What humans' labels say an issue is, for R11's recall by kind: a silently wrong result, a regression, a crash.
R11_KINDS = {
    "silent wrong result": (CORRECTNESS_SILENT, PT2_ACCURACY, "pt2: numerics-discrepancy"),
    "regression": (MODULE_REGRESSION,),
    "crash": (MODULE_CRASH,),
}
# Labels outside the scored components that `a` may pre-select (components.GATES, G9.1), scored against the humans'.
OTHER_PRESELECTED = (MODULE_CRASH, EDGE_CASES, FUZZER_TOPIC, NEEDS_REPRODUCTION)


@dataclass
class Binding:
    """What `a` does on a slice (the binding of issue 43): how often it marks `triaged`, flags the meeting, routes,
    holds for a human; R11's recall by what the humans' labels say the issue is; the pre-selected labels outside
    the scored components against the humans' labels."""

    issues: int = 0
    triaged: int = 0  # `triaged` pre-selected
    flagged: int = 0  # `triage review` pre-selected (R11 binds)
    routed: int = 0  # a route pre-selected: a hand-off, the CPU lane, a transfer, G9's request for a reproduction
    held: int = 0  # `triaged` waits for a human (G6's checklist item needs one)
    r11: dict[str, list[int]] = field(default_factory=dict)  # kind -> [issues, R11 binds, flag offered or bound]
    other: dict[str, Counts] = field(default_factory=dict)  # label -> pre-selected against the humans' labels


def binding(records: list[dict[str, Any]], assessments: list[Assessment]) -> Binding:
    """The Binding figures of a slice (truncation-aware, as truth())."""
    out = Binding(issues=len(records))
    for record, a in zip(records, assessments):
        ticked, offered = set(a.preselected()), set(a.labels())
        out.triaged += TRIAGED in ticked
        out.flagged += TRIAGE_REVIEW in ticked
        routed = a.route == Route.TRANSFER or NEEDS_REPRODUCTION in ticked
        out.routed += routed or any(is_oncall(l) and l != PT2_ONCALL for l in ticked)
        out.held += any(c.rule_id == "G6" and c.state == "needs_human" for c in a.checklist)
        labels = set(record.get("labels", []))
        for kind, names in R11_KINDS.items():
            row = out.r11.setdefault(kind, [0, 0, 0])
            if labels & set(names):
                row[0] += 1
                row[1] += TRIAGE_REVIEW in ticked
                row[2] += TRIAGE_REVIEW in offered
        for label in OTHER_PRESELECTED:
            out.other.setdefault(label, Counts()).add(label in ticked, truth(record, label))
    return out
