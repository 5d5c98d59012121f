"""Similar issues on the mirror: each issue's failure signature and term vector, stored, and looked up.

index() recomputes both for a batch of issues where their suggestions are refreshed (sync, webhook,
decision, bisection): a few queries per batch, none per issue. neighbours() ranks an issue's most
similar issues, open and closed, in the queue or not: same failure signature first, then the cosine
of the term vectors (rubric/likeness/neighbours.py). The vectors live in IssueTerm, an inverted index on both
databases: a lookup reads, for each of the issue's terms, the CHAMPIONS issues where that term
weighs most (one index range each), keeps the CANDIDATES best by that partial sum, then scores
those exactly. signature_groups() is the queue's "N open issues share this failure".

The same SQL on both databases, a few statements whatever the number of issues looked up; the
arithmetic is similarity.MemoryIndex's.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.db import connection, transaction
from django.db.models import Count, Max, Prefetch, QuerySet

from rubric_app.models import BisectionRun, Issue, IssueTerm, TriageDecision
from rubric_app.rubric.likeness import duplicates
from rubric_app.rubric.likeness.neighbours import shared_words, terms_of
from rubric_app.rubric.likeness.signature import Signature, signature_of
from rubric_app.rubric.reading.types import IssueText, Neighbour
from rubric_app.triage import originals
from rubric_app.vocabulary import is_module

CHAMPIONS = 200  # per term: the issues where it weighs most (measured: bench/bench_similar.py)
CANDIDATES = 30  # scored exactly
SHOWN = 8  # on the issue page
MIN_SHOWN = 0.05  # a cosine below this is no likeness worth a triager's look
# The suggestion vote, for a whole batch at once: the heaviest terms of each issue, the heads of their
# lists among labelled issues only, and a few candidates scored exactly (similarity.VOTERS of them vote).
VOTE_TERMS = 12
VOTE_CHAMPIONS = 50
VOTE_CANDIDATES = 10
GROUP_MEMBERS_SHOWN = 8
SIGNATURE_FIELDS = ["signature", "signature_text", "signature_parts"]
# What index() reads off an issue's text besides its vector: the signature, and the original and fix its thread names.
INDEX_FIELDS = [*SIGNATURE_FIELDS, "named_original", "named_original_by", "named_fix", "fixed_in"]


def signature_fields(signature: Signature | None) -> dict:
    """What an Issue stores of its signature: the key only when specific enough to group by."""
    if signature is None:
        return {"signature": "", "signature_text": "", "signature_parts": {}}
    return {
        "signature": signature.key if signature.specific else "",
        "signature_text": signature.describe()[:400],
        "signature_parts": {
            "exception": signature.exception,
            "message": signature.message,
            "frames": list(signature.frames),
            "source": signature.source,
            "key": signature.key,
        },
    }


def index(issues: list[Issue], texts: list[IssueText]) -> None:
    """Recompute and store the signatures, term vectors and named originals and fixes of these issues (texts: their
    IssueText).

    Four queries for the batch (lock, delete, insert, update), under the issues' row locks (as the
    suggestions are replaced), so two refreshes of one issue never leave both vectors behind. Leaves
    each vector on its issue (`similarity_vector`) for neighbours_for_votes.
    """
    rows = []
    for issue, text in zip(issues, texts):
        signature = signature_of(text)
        for name, value in signature_fields(signature).items():
            setattr(issue, name, value)
        # Only standing names an original or a fix: a member's sentence, or any once GitHub closed it as a duplicate.
        standing = {"closed_as_duplicate": issue.state == Issue.State.CLOSED and issue.state_reason == "duplicate"}
        named = duplicates.original_named(text, **standing)
        issue.named_original, issue.named_original_by = (named.number, named.by) if named else (None, "")
        issue.named_fix, issue.fixed_in = duplicates.named_fix(text, **standing), duplicates.fixed_in(text, **standing)
        issue.similarity_vector = terms_of(text, signature)
        labelled = any(is_module(name) for name in text.labels)  # it may vote (neighbours_for_votes)
        rows += [(issue.pk, term, weight, labelled) for term, weight in issue.similarity_vector.items()]
    ids = [issue.pk for issue in issues]
    with transaction.atomic():
        list(Issue.objects.select_for_update().filter(pk__in=ids).order_by("pk").values_list("pk", flat=True))
        IssueTerm.objects.filter(issue_id__in=ids).delete()
        _insert_terms(rows)
        Issue.objects.bulk_update(issues, INDEX_FIELDS, batch_size=500)


def _insert_terms(rows: list[tuple[int, str, float, bool]]) -> None:
    """Insert (issue id, term, weight, labelled) rows in one statement, not bulk_create's one per 249 rows
    on SQLite: PostgreSQL takes them as four arrays, SQLite (in-process) as one executemany."""
    if not rows:
        return
    sql = f"INSERT INTO {IssueTerm._meta.db_table} (issue_id, term, weight, labelled) "
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                sql + "SELECT * FROM unnest(%s::bigint[], %s::varchar[], %s::float8[], %s::boolean[])",
                [list(column) for column in zip(*rows)],
            )
        else:
            cursor.executemany(sql + "VALUES (%s, %s, %s, %s)", rows)


def reindex(issues: QuerySet[Issue], batch: int = 500) -> int:
    """index() these issues, `batch` at a time, suggestions left as they are; returns how many.

    For a first index of the mirror (manage.py index_similar): the sync indexes what it changes.
    """
    ids = list(issues.order_by("pk").values_list("pk", flat=True))
    for start in range(0, len(ids), batch):
        rows = list(
            Issue.objects.filter(pk__in=ids[start : start + batch])
            .order_by("pk")
            .prefetch_related(
                "labels",
                "comments",
                Prefetch("bisection_runs", queryset=BisectionRun.objects.none(), to_attr="finished_runs"),
            )
        )
        index(rows, [issue.as_issue_text() for issue in rows])
    return len(ids)


def vector_of(issue: Issue) -> dict[str, float]:
    """The issue's stored vector (the one index() just computed, when it is at hand)."""
    vector = getattr(issue, "similarity_vector", None)
    if vector is None:
        vector = dict(IssueTerm.objects.filter(issue_id=issue.pk).values_list("term", "weight"))
    return vector


def _candidates(
    queries: dict[int, list[tuple[str, float]]], per_term: int, limit: int, labelled: bool, queued: bool = False
) -> dict[int, list[int]]:
    """{issue id: the `limit` other issues with the highest partial dot product} for each query ([(term, weight)]).

    Partial: over the head of each term's list only, the `per_term` issues where the term weighs most
    (ties in index order: by issue id); of labelled issues only when `labelled`; of the open queue's only when
    `queued` (the heads are the whole index's, the queue's issues kept among them). One statement, the same
    on both databases, for any number of queries: each term's floor is the entry `per_term` places down
    its index range, then one range scan per term from the top to that floor.
    (Faster than a LIMIT per term through UNION ALL, LATERAL or a correlated IN, measured on both.)
    """
    table = IssueTerm._meta.db_table
    only = " AND t.labelled" if labelled else ""
    queue = (
        f" JOIN {Issue._meta.db_table} i ON i.id = scores.dst AND i.in_queue AND i.state = '{Issue.State.OPEN}'"
        if queued
        else ""
    )
    rows = [(pk, term, weight) for pk, query in queries.items() for term, weight in query]
    values = ", ".join(["(%s, %s, %s)"] * len(rows))
    last = f"FROM {table} t WHERE t.term = q.term{only} ORDER BY t.weight DESC, t.issue_id LIMIT 1 OFFSET %s"
    sql = (
        f"WITH q(src, term, w) AS (VALUES {values}), "
        f"floors AS MATERIALIZED (SELECT q.src, q.term, q.w, COALESCE((SELECT t.weight {last}), -1.0) AS weight, "
        f"COALESCE((SELECT t.issue_id {last}), {2**62}) AS issue_id FROM q), "
        f"scores AS (SELECT f.src, t.issue_id AS dst, SUM(f.w * t.weight) AS s FROM floors f "
        f"JOIN {table} t ON t.term = f.term{only} AND t.weight >= f.weight "
        "AND (t.weight > f.weight OR t.issue_id <= f.issue_id) "
        f"WHERE t.issue_id <> f.src GROUP BY f.src, t.issue_id), "
        "ranked AS (SELECT src, dst, ROW_NUMBER() OVER (PARTITION BY src ORDER BY s DESC, dst) AS n "
        f"FROM scores{queue}) "
        f"SELECT src, dst FROM ranked WHERE n <= %s ORDER BY src, n"
    )
    found: dict[int, list[int]] = defaultdict(list)
    with connection.cursor() as cursor:
        cursor.execute(sql, [value for row in rows for value in row] + [per_term - 1, per_term - 1, limit])
        for src, dst in cursor.fetchall():
            found[src].append(dst)
    return found


def stored_vectors(ids: set[int]) -> dict[int, dict[str, float]]:
    """The stored vectors of these issues: one query on the (issue, term) index, whatever the database's
    planner thinks."""
    found: dict[int, dict[str, float]] = defaultdict(dict)
    for issue_id, term, weight in IssueTerm.objects.filter(issue_id__in=ids).values_list("issue_id", "term", "weight"):
        found[issue_id][term] = weight
    return found


def rank(
    vectors: dict[int, dict[str, float]],
    *,
    per_term: int = CHAMPIONS,
    candidates: int = CANDIDATES,
    labelled: bool = False,
    query_terms: int | None = None,
    loaded: dict[int, dict[str, float]] | None = None,
    queued: bool = False,
) -> dict[int, list[tuple[int, float, list[str], set[str]]]]:
    """{issue id: [(other id, cosine, shared words, shared terms)] best first} for each stored vector in `vectors`.

    Candidates come from the heads of the lists of each vector's heaviest `query_terms` terms (all by
    default), by their partial sums (_candidates); the best `candidates` are then scored exactly over all
    the terms both issues have, from their stored vectors. labelled: only issues carrying a module: label
    (the suggestion vote); queued: only open queue issues (the reports a new closed original may be the original
    of); loaded: filled with the candidates' stored vectors, for a caller that scores them again.
    Two statements for the whole batch, whatever its size.
    """
    queries = {
        pk: sorted(v.items(), key=lambda item: (-item[1], item[0]))[:query_terms] for pk, v in vectors.items() if v
    }
    if not queries:
        return {}
    chosen = _candidates(queries, per_term, candidates, labelled, queued)
    stored = stored_vectors({other for others in chosen.values() for other in others})
    if loaded is not None:
        loaded.update(stored)
    out = {}
    for pk, others in chosen.items():
        vector, scored = vectors[pk], []
        for other in others:
            shared = vector.keys() & stored[other].keys()
            score = sum(vector[t] * stored[other][t] for t in shared)
            scored.append((other, round(score, 4), shared_words(vector, stored[other]), shared))
        out[pk] = sorted(scored, key=lambda item: (-item[1], item[0]))
    return out


@dataclass
class Similar:
    """One neighbour as the issue page shows it: the issue (labels prefetched), its cosine and why it is listed (the
    ranking's reasons, the mark's own: triage/duplicates.ranked); own_duplicate: it duplicates this issue (its thread
    or a decision says so): never offered as the original."""

    issue: Issue
    similarity: float
    same_signature: bool
    words: list[str] = field(default_factory=list)
    own_duplicate: bool = False
    reasons: list[str] = field(default_factory=list)

    @property
    def reason(self) -> str:
        if self.own_duplicate:
            return "its own duplicate: says it duplicates this issue"
        if self.reasons:
            return "; ".join(self.reasons[:3])
        if self.same_signature:
            return "same signature"
        return f"similar text ({', '.join(self.words)})" if self.words else "similar text"


def neighbours(issue: Issue, limit: int = SHOWN) -> list[Similar]:
    """The issue's most similar issues (open and closed, in the queue or history), in the possible-duplicate mark's
    order and with its reasons (one ranking, triage/originals.ranked: same failure signature first, then the score
    as an original, the closed or earlier one first among those about as likely); its own duplicates last, marked so,
    never offered. A few queries, whatever the size of the mirror."""
    loaded: dict[int, dict[str, float]] = {}
    vector = vector_of(issue)
    twin = f"sig:{issue.signature}" if issue.signature else ""  # two vectors share it: the same signature
    found = {
        pk: (twin in terms, score, words)
        for pk, score, words, terms in rank({issue.pk: vector}, loaded=loaded).get(issue.pk, ())
        if score >= MIN_SHOWN
    }
    if not found:
        return []
    rows = (
        Issue.objects.filter(pk__in=list(found))
        .only(*originals.ROW_FIELDS, "closed_at", "in_queue", "is_pull_request", "html_url")
        .prefetch_related("labels")
        .in_bulk()
    )
    by_number = {row.number: row for row in rows.values()}
    order = originals.ranked(issue, list(rows.values()), {**loaded, issue.pk: vector})
    shown, seen = [], set()
    for match in order:
        row = by_number.get(match.via if match.number not in by_number else match.number)
        if row is None or row.pk in seen:
            continue
        seen.add(row.pk)
        same, score, words = found[row.pk]
        shown.append(Similar(row, score, same, words, reasons=match.reasons))
    own = own_duplicates(issue, [row for pk, row in rows.items() if pk not in seen])
    shown += [
        Similar(row, found[pk][1], found[pk][0], found[pk][2], own_duplicate=row.number in own)
        for pk, row in sorted(rows.items(), key=lambda item: -found[item[0]][1])
        if pk not in seen
    ]
    return shown[:limit]


def own_duplicates(issue: Issue, rows: list[Issue]) -> set[int]:
    """The numbers of the rows (named_original loaded) that are this issue's own duplicates: their thread names it as
    their original, or a dashboard decision closed them as its duplicates. Never offered as its original (one query)."""
    decided = TriageDecision.objects.filter(
        issue__number__in=[row.number for row in rows], duplicate_of=issue.number, status=TriageDecision.Status.APPLIED
    )
    return {row.number for row in rows if row.named_original == issue.number} | set(
        decided.values_list("issue__number", flat=True)
    )


def neighbours_for_votes(issues: list[Issue]) -> dict[int, tuple[Neighbour, ...]]:
    """{issue id: its most similar triaged issues (carrying a module: label) as the engine's evidence} for
    the open queue issues among `issues` (the vote helps triage them; others get none).

    Three queries for the whole batch: the candidates among labelled issues and their scores (rank),
    then the module labels and numbers of them all.
    """
    found = rank(
        {issue.pk: vector_of(issue) for issue in issues if issue.in_queue and issue.state == Issue.State.OPEN},
        per_term=VOTE_CHAMPIONS,
        candidates=VOTE_CANDIDATES,
        labelled=True,
        query_terms=VOTE_TERMS,
    )
    ids = {pk for near in found.values() for pk, *_ in near}
    if not ids:
        return {}
    labels: dict[int, list[str]] = defaultdict(list)
    numbers: dict[int, int] = {}
    for pk, number, name in Issue.labels.through.objects.filter(
        issue_id__in=ids, label__name__startswith="module:"
    ).values_list("issue_id", "issue__number", "label__name"):
        labels[pk].append(name)
        numbers[pk] = number
    signature = {issue.pk: f"sig:{issue.signature}" if issue.signature else "" for issue in issues}
    return {
        pk: tuple(
            Neighbour(numbers[other], tuple(sorted(labels[other])), score, signature[pk] in terms)
            for other, score, _, terms in near
            if other in numbers
        )
        for pk, near in found.items()
    }


@dataclass
class Group:
    """Open issues sharing one failure signature: the key, its one-line description and the members' numbers."""

    signature: str
    text: str
    size: int
    numbers: list[int]


def signature_groups(rows: QuerySet[Issue], limit: int = 10) -> list[Group]:
    """The signatures two or more of `rows` share (largest group first), each with up to
    GROUP_MEMBERS_SHOWN of its numbers. Two queries, whatever the number of rows."""
    counted = list(
        rows.order_by()
        .exclude(signature="")
        .values("signature")
        .annotate(size=Count("pk", distinct=True), text=Max("signature_text"))
        .filter(size__gte=2)
        .order_by("-size", "signature")[:limit]
    )
    if not counted:
        return []
    members: dict[str, list[int]] = defaultdict(list)
    for key, number in (
        rows.order_by()
        .filter(signature__in=[g["signature"] for g in counted])
        .values_list("signature", "number")
        .distinct()
        .order_by("signature", "-number")
    ):
        members[key].append(number)
    return [Group(g["signature"], g["text"], g["size"], members[g["signature"]][:GROUP_MEMBERS_SHOWN]) for g in counted]
