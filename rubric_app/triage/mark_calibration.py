"""The possible-duplicate mark calibrated on the repository's own duplicates, each week, behind the label model's gate.

The history sync records the repository's pairs (github/repository_pairs.py: closed as a duplicate, marked as one,
a member's "Duplicate of #N"). The weekly training (model_store.train_from_history) asks each pair's duplicate as it
arrived (its title and description, never the thread that names its original) against the issues filed before it,
through the same lookup and ranking as the mark (similar.rank, then duplicates.rank), and the same of the history's
other issues (which no one with standing called a duplicate: a mark on one counts wrong). The threshold is the lowest
score that keeps at least PRECISION_TARGET of the marks on the pairs right while marking at most MARK_BUDGET of the
other issues (offline/duplicates.calibrate, the rule the shipped MARK_AT was set by). Its figures, and those of the
threshold in use on the same issues, go on the candidate's TrainedModel row; it is used only once that row is
promoted by the gate (rubric/promotion.py) and judge() below finds it sound. With no history, too few pairs or none
promoted, the mark keeps the shipped calibration (duplicates.MARK_AT).
"""

from __future__ import annotations

from rubric_app.models import DuplicatePair, Issue
from rubric_app.rubric.likeness import duplicates
from rubric_app.rubric.likeness.neighbours import terms_of
from rubric_app.rubric.likeness.signature import signature_of
from rubric_app.rubric.offline.duplicate_recall import MARK_BUDGET, PRECISION_TARGET, calibrate
from rubric_app.rubric.reading.types import IssueText
from rubric_app.triage import similar
from rubric_app.triage.originals import ROW_FIELDS, mark_threshold, report_of

MIN_PAIRS = 10  # fewer repository pairs say nothing of a threshold's precision
MAX_OTHERS = 2_000  # the newest other issues of history asked (enough for a 1% rate within a few tenths)
BATCH = 200


def outcomes() -> tuple[list[tuple], list[tuple]]:
    """(the pairs' outcomes, the other issues'), each (the original's rank or None, whether the first is it, the top
    score, the first five numbers) as offline/duplicates.calibrate reads them."""
    named = dict(
        DuplicatePair.objects.filter(duplicate__is_pull_request=False)
        .order_by("duplicate_id", "-said_at")
        .values_list("duplicate_id", "original")
    )
    known = set(Issue.objects.filter(number__in=set(named.values())).values_list("number", flat=True))
    pairs = {pk: original for pk, original in named.items() if original in known}
    others = list(
        Issue.objects.filter(is_pull_request=False, named_original__isnull=True)
        .exclude(pk__in=named)
        .order_by("-number")
        .values_list("pk", flat=True)[:MAX_OTHERS]
    )
    asked = [*pairs, *others]
    found: dict[int, tuple] = {}
    for start in range(0, len(asked), BATCH):
        found.update(_ask(asked[start : start + BATCH], pairs))
    return [found[pk] for pk in pairs if pk in found], [found[pk] for pk in others if pk in found]


def _ask(ids: list[int], pairs: dict[int, int]) -> dict[int, tuple]:
    """Each issue asked as it arrived, against the issues filed before it: a few queries for the batch."""
    rows = Issue.objects.filter(pk__in=ids).only(*ROW_FIELDS).in_bulk()
    arrived = {pk: _arrival(row) for pk, row in rows.items()}
    loaded: dict[int, dict[str, float]] = {}
    near = similar.rank({pk: vector for pk, (vector, _r) in arrived.items()}, loaded=loaded)
    candidates = Issue.objects.filter(pk__in={pk for found in near.values() for pk, *_ in found}).only(*ROW_FIELDS)
    candidates = candidates.in_bulk()
    out = {}
    for pk, (_vector, report) in arrived.items():
        older = [
            candidates[o] for o, *_ in near.get(pk, ()) if o in candidates and candidates[o].number < report.number
        ]
        ranked = duplicates.rank(report, [report_of(row, loaded.get(row.pk, {}), {}) for row in older])
        numbers = [m.number for m in ranked]
        original = pairs.get(pk)
        rank = numbers.index(original) + 1 if original in numbers else None
        top = ranked[0].score if ranked else 0.0
        out[pk] = (rank, (rank == 1) if original is not None else None, top, numbers[:5])
    return out


def _arrival(row: Issue) -> tuple[dict[str, float], duplicates.Report]:
    text = IssueText(number=row.number, title=row.title, body=row.body)
    signature = signature_of(text)
    vector = terms_of(text, signature)
    key = signature.key if signature is not None and signature.specific else ""
    names = duplicates.names_of(text)
    return vector, duplicates.Report(row.number, vector, row.title, names, key)


def figures(positives: list[tuple], negatives: list[tuple], threshold: float) -> dict:
    """A threshold's figures on the repository's pairs and other issues: its marks, how many right, the rate."""
    marks = [bool(right) for _r, right, score, _t in positives if score >= threshold]
    other = sum(1 for *_, score, _t in negatives if score >= threshold)
    return {
        "threshold": round(threshold, 4),
        "pairs": len(positives),
        "others": len(negatives),
        "top1": sum(1 for rank, *_ in positives if rank == 1),
        "top5": sum(1 for rank, *_ in positives if rank is not None and rank <= 5),
        "pair_marks": len(marks),
        "right": sum(marks),
        "other_marks": other,
        "precision": round(sum(marks) / len(marks), 4) if marks else None,
        "rate": round(other / len(negatives), 4) if negatives else None,
    }


def judge(candidate: dict) -> tuple[bool, str]:
    """Whether a calibrated threshold may be used (once its row passes the label model's gate): enough pairs, and it
    keeps the mark right and rare on them."""
    if candidate["pairs"] < MIN_PAIRS:
        return False, f"only {candidate['pairs']} repository pairs: too few to calibrate on (need {MIN_PAIRS})"
    if candidate["pair_marks"] and (candidate["precision"] or 0) < PRECISION_TARGET:
        return False, f"no threshold keeps {PRECISION_TARGET:.0%} of its marks right on the repository's pairs"
    if (candidate["rate"] or 0) > MARK_BUDGET:
        return False, f"it marks {candidate['rate']:.1%} of the other issues (budget {MARK_BUDGET:.0%})"
    return True, "calibrated on the repository's pairs"


def calibrated() -> dict:
    """The mark's part of a candidate's row: {"candidate": figures, "in_use": figures (same issues), "threshold",
    "sound", "why"}; "promoted" is set by the training, with the row's gate."""
    positives, negatives = outcomes()
    in_use = mark_threshold()
    threshold = calibrate(positives, negatives) if positives and negatives else in_use
    candidate = figures(positives, negatives, threshold)
    sound, why = judge(candidate)
    return {
        "threshold": candidate["threshold"],
        "candidate": candidate,
        "in_use": figures(positives, negatives, in_use),
        "sound": sound,
        "why": why,
    }
