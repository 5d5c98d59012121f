"""Learned labelers in the database: trained from the history, promoted behind the gate, and the one in use.

Models live in TrainedModel rows, not in the source tree: a model trained by one host (a worker, an operator's shell)
is the one every web and worker process uses, and a deploy does not overwrite it. in_use() costs one indexed query
(the promoted row's id) each time suggestions are refreshed, and reloads the weights only when that id changed: a
promotion is noticed at the next refresh, in every process, without a restart. Without a promoted row the engine
keeps its file (rubric_app/data/: a locally trained label_model.json, else the shipped label_model_pt2.json).

train_from_history() is train_label_model --from-db and the weekly task: it learns from the triaged history
(whole label lists) and the triagers' decisions, near-duplicates counted once, holds out a recent slice spread over
authors and kinds of report and a fixed reference slice (its bound on the first row that set one), and
lets rubric/offline/promotion.py judge the candidate against the model in use on both; --force promotes whatever
the gate said.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db.models import Q
from django.utils import timezone

from rubric_app.models import Issue, Label, TrainedModel, TriageDecision
from rubric_app.rubric.engine.assess import shipped_model
from rubric_app.rubric.engine.model import MODEL_FILE, MODEL_LABELS, LabelModel
from rubric_app.rubric.offline import promotion
from rubric_app.rubric.offline.evaluation import ALIASES, COMPONENTS, training_examples
from rubric_app.rubric.offline.fitting import fit_model
from rubric_app.triage import mark_calibration
from rubric_app.vocabulary import PT2_ONCALL, TRIAGED

# The model in use, as this process last loaded it: ((row id, created_at), model).
_loaded: tuple[tuple | None, LabelModel | None] = (None, None)
_lock = threading.Lock()


def in_use_version() -> int | None:
    """The id of the promoted model in use, or None when the engine uses its file (one query)."""
    return TrainedModel.objects.in_use_pk()


def in_use() -> LabelModel | None:
    """The promoted model (reloaded only when a newer one was promoted), or None: the engine's file then."""
    global _loaded
    # The id and its creation: a row id alone could come back after a rollback (SQLite reuses them).
    version = TrainedModel.objects.in_use_order().values_list("pk", "created_at").first()
    if version is None:
        return None
    with _lock:
        if _loaded[0] != version:
            data = TrainedModel.objects.values_list("data", flat=True).get(pk=version[0])
            _loaded = (version, LabelModel.from_json(data))
        return _loaded[1]


def in_use_for_gate() -> tuple[LabelModel | None, promotion.Learned, str]:
    """(the model in use, what it learned from, its name) as the gate judges a candidate against it."""
    row = TrainedModel.objects.in_use_order().first()
    if row is not None:
        return (
            LabelModel.from_json(row.data),
            promotion.Learned(numbers=frozenset(row.learned_numbers)),
            f"model {row.pk}",
        )
    if MODEL_FILE.exists():  # trained outside the database (train_label_model --input): its pool is unknown
        return LabelModel.load(MODEL_FILE), promotion.Learned(), f"the local file {MODEL_FILE.name}"
    return shipped_model(), promotion.Learned(shipped=True), "the shipped model"


class TooLittleHistory(Exception):
    """Too few triaged issues in history to train a candidate and hold enough out to judge it."""


# A candidate learns from at least this many issues (as from the files: train_label_model --input).
MIN_TRAINING = 20


def history_records() -> list[dict]:
    """The triaged history as training records, oldest first: every issue (open or closed, in the queue or not) that
    a person triaged: `triaged`, a `module:` label, or a hand-off or route (an `oncall:` label other than
    oncall: pt2). Their whole label lists are the answers (labels_truncated: False)."""
    routes = Label.objects.filter(name__startswith="oncall:").exclude(name=PT2_ONCALL).values("name")
    triaged = Q(labels__name=TRIAGED) | Q(labels__name__startswith="module:") | Q(labels__name__in=routes)
    issues = Issue.objects.filter(is_pull_request=False).filter(pk__in=Issue.objects.filter(triaged).values("pk"))
    return [issue_record(issue) for issue in issues.prefetch_related("labels", "comments").order_by("number")]


def issue_record(issue: Issue) -> dict:
    """One synced issue as a training record (its current labels are the answers)."""
    return {
        "number": issue.number,
        "title": issue.title,
        "body": issue.body,
        "author": issue.author,
        "comments": [{"body": c.body, "author": c.author} for c in issue.comments.all()],
        "labels": issue.label_names(),
        "labels_truncated": False,
    }


def decision_examples(exclude: frozenset[int] = frozenset()) -> list:
    """Triagers' applied decisions as extra training examples, on top of the issues' labels (decided_examples)."""
    return [(feats, answers) for _number, feats, answers in decided_examples(exclude)]


def decided_examples(exclude: frozenset[int] = frozenset()) -> list[tuple[int, set[str], dict[str, bool | None]]]:
    """(issue number, features, answers) of each issue triagers' applied decisions speak for, but the issues whose
    numbers are in `exclude` (the held-out ones: a decision on one would teach its answer).

    A learned label the triager added is a positive; one they removed, or one the page showed them that they
    left unticked (shown, neither added nor already on the issue), is an explicit negative. "Shown" is what
    the decision recorded (suggestions_shown), not what the engine suggests now: suggestions are recomputed
    once a decision's labels land, so today's would misread what the triager saw. An issue's newest decision
    speaks for a label first; meeting decisions settle the review, not the labels, and are left out (as on
    the rubric health page). Labels no decision speaks to stay unknown (None) for that example.
    """
    decided = (
        TriageDecision.objects.filter(status=TriageDecision.Status.APPLIED, meeting_decision="")
        .exclude(issue__number__in=exclude)
        .order_by("-created_at", "-pk")
        .values_list("issue_id", "labels_seen", "labels_added", "labels_removed", "suggestions_shown")
    )
    by_issue: dict[int, dict[str, bool]] = {}
    for issue_id, seen, added, removed, shown in decided.iterator(chunk_size=2000):
        seen, added, removed = set(seen or []), set(added or []), set(removed or [])
        unticked = {item.get("label", "") for item in shown or []} - added - seen
        # As for the training files (evaluation.answer): an issue left without a component (a hand-off, a
        # question closed) was not labelled "none of these", so its components stay unknown.
        with_component = any(ALIASES.get(l, l) in COMPONENTS for l in (seen - removed) | added)
        answers = by_issue.setdefault(issue_id, {})
        for labels, answer in ((added, True), (removed, False), (unticked, False)):
            for label in (ALIASES.get(l, l) for l in labels):
                if label in MODEL_LABELS and (answer or with_component or label not in COMPONENTS):
                    answers.setdefault(label, answer)
    by_issue = {issue_id: answers for issue_id, answers in by_issue.items() if answers}
    examples = []
    for issue in Issue.objects.filter(pk__in=by_issue).prefetch_related("labels", "comments").order_by("pk"):
        ((feats, _answers),) = training_examples([issue_record(issue)])
        examples.append((issue.number, feats, {label: by_issue[issue.pk].get(label) for label in MODEL_LABELS}))
    return examples


def train_from_history(
    *, force: bool = False, trained_by: str = "", out: Callable[[str], None] = print, folds: int = 5
) -> tuple[TrainedModel, promotion.Verdict]:
    """Train a candidate on the triaged history but its newest issues, judge it against the model in use on those,
    store it and promote it when the gate says so (or `force`); returns (its row, the gate's verdict).

    Raises TooLittleHistory when the history cannot give MIN_TRAINING issues to learn from and
    promotion.MIN_HELD_OUT to judge by.
    """
    records = history_records()
    if len(records) < MIN_TRAINING + promotion.MIN_HELD_OUT:
        raise TooLittleHistory(
            f"only {len(records)} triaged issues in history: too few to learn from and to judge by "
            f"(need {MIN_TRAINING + promotion.MIN_HELD_OUT}); run manage.py sync_history"
        )
    until = reference_until(records)
    slices = promotion.cut(records, until)
    pool, held = slices.pool, slices.recent
    if len(pool) < MIN_TRAINING:
        raise TooLittleHistory(
            f"only {len(pool)} triaged issues left to learn from once {slices.held_out} are held out to judge by and "
            f"{slices.collapsed} counted with their near-duplicates (need {MIN_TRAINING}); run manage.py sync_history"
        )
    decided = decided_examples(exclude=slices.judged)
    out(
        f"Training on {len(pool)} triaged issues of history (#{pool[0]['number']} to #{pool[-1]['number']}) and "
        f"{len(decided)} triagers' decisions; judged on {len(held)} recent issues (#{held[0]['number']} on, spread "
        f"over authors and kinds of report) and the {len(slices.reference)} of the reference slice (up to #{until}); "
        f"{slices.collapsed} issues counted once with their near-duplicates."
    )
    mark = mark_calibration.calibrated()
    fitted = fit_model(pool, folds=folds, decisions=[(feats, answers) for _n, feats, answers in decided])
    candidate = LabelModel.from_json(fitted.to_json())  # judged as every process will load it
    model, learned, name = in_use_for_gate()
    verdict = promotion.judge(slices, candidate, model, learned)
    promote = verdict.promote or force
    reason = verdict.reason if verdict.promote or not force else f"promoted by --force; the gate said: {verdict.reason}"
    # The mark's threshold goes through the same gate: used only once this row is promoted (and sound on its own).
    mark["promoted"] = promote and mark["sound"]
    row = TrainedModel.objects.create(
        source="history",
        trained_on=len(pool),
        decisions=len(decided),
        trained_until=pool[-1]["number"],
        held_out=len(held),
        compared=verdict.compared,
        compared_with=name,
        figures={
            "candidate": verdict.candidate,
            "in_use": verdict.in_use,
            "shuffled": verdict.shuffled,
            "reference": {**verdict.reference, "size": verdict.reference_size, "compared": verdict.reference_compared},
            "collapsed": verdict.collapsed,
            "mark": mark,
        },
        reference_until=until,
        status=TrainedModel.Status.PROMOTED if promote else TrainedModel.Status.REFUSED,
        reason=reason,
        forced=promote and not verdict.promote,
        trained_by=trained_by,
        promoted_at=timezone.now() if promote else None,
        data=candidate.to_json(),
        learned_numbers=sorted({r["number"] for r in pool} | {number for number, _f, _a in decided}),
    )
    out(f"Candidate: model {row.pk}; in use: {name}.")
    for line in verdict.table():
        out(line)
    out(f"{'Promoted' if promote else 'Not promoted'}: {reason}.")
    out(mark_summary(mark))
    return row, verdict


def mark_summary(mark: dict) -> str:
    """The mark's calibration in one line: its figures beside the threshold in use's, and what became of it."""
    new, old = mark["candidate"], mark["in_use"]

    def said(f: dict) -> str:
        precision = "—" if f["precision"] is None else f"{f['precision']:.2f}"
        rate = "—" if f["rate"] is None else f"{f['rate']:.1%}"
        return (
            f"at {f['threshold']:.4f}: {f['pair_marks']} marks, {f['right']} right (precision {precision}), "
            f"{f['other_marks']} of {f['others']} other issues ({rate})"
        )

    fate = "used from now on" if mark["promoted"] else f"not used ({mark['why'] if not mark['sound'] else 'the gate'})"
    return (
        f"Possible-duplicate mark on {new['pairs']} repository pairs (top-1 {new['top1']}, top-5 {new['top5']}): "
        f"calibrated {said(new)}; in use {said(old)}; {fate}."
    )


def reference_until(records: list[dict]) -> int:
    """The bound of the gate's reference slice (promotion.cut): the one the first training from the history fixed,
    or the newest triaged issue now, which this training fixes. No issue filed later is ever in the slice."""
    fixed = TrainedModel.objects.exclude(reference_until=None).order_by("pk").values_list("reference_until", flat=True)
    return fixed.first() or max(int(r["number"]) for r in records)


def fallback_name() -> str:
    """What the engine uses while no model is promoted (no query)."""
    if MODEL_FILE.exists():
        return f"the locally trained file rubric_app/data/{MODEL_FILE.name}"
    return "the shipped model (rubric_app/data/label_model_pt2.json, from 586 harvested issues)"


def figure_rows(row: TrainedModel, slice_: str = "recent") -> list[tuple[str, float | None, float | None, bool]]:
    """(figure's name, the candidate's, the model in use's then, gated) for each figure the gate showed on the recent
    slice, or on the reference slice (slice_="reference")."""
    figures = row.figures if slice_ == "recent" else row.figures.get("reference", {})
    candidate, in_use = figures.get("candidate", {}), figures.get("in_use", {})
    return [
        (promotion.NAMES[key], candidate.get(key), in_use.get(key), key in promotion.GATED)
        for key in promotion.SHOWN
        if key in candidate or key in in_use
    ]
