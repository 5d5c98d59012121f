"""Similar issues on the mirror: each issue's failure signature and term vector, stored, and looked up.

index() recomputes both for a batch of issues where their suggestions are refreshed (sync, webhook,
decision, bisection): a few queries per batch, none per issue. neighbours() ranks an issue's most
similar issues, open and closed, in the queue or not: same failure signature first, then the cosine
of the term vectors (rubric/similarity.py). The vectors live in IssueTerm, an inverted index on both
databases: a lookup reads, for each of the issue's terms, the CHAMPIONS issues where that term
weighs most (one index range each), keeps the CANDIDATES best by that partial sum, then scores
those exactly. signature_groups() is the queue's "N open issues share this failure".

The heads of the lists are read in one statement for any number of terms (LATERAL on PostgreSQL, a
correlated IN on SQLite); the rest is SQL both run. The arithmetic is similarity.MemoryIndex's.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.db import connection, transaction
from django.db.models import Count, Max, Prefetch, QuerySet

from rubric_app import rubric
from rubric_app.models import BisectionRun, Issue, IssueTerm
from rubric_app.rubric.signature import Signature, signature_of
from rubric_app.rubric.similarity import shared_words, terms_of

CHAMPIONS = 300  # per term: the issues where it weighs most (measured: bench/bench_similar.py)
CANDIDATES = 60  # scored exactly
SHOWN = 8  # on the issue page
MIN_SHOWN = 0.05  # a cosine below this is no likeness worth a triager's look
# The suggestion vote, for a whole batch at once: the heaviest terms of each issue, the heads of their
# lists among labelled issues only, and a few candidates scored exactly (similarity.VOTERS of them vote).
VOTE_TERMS = 16
VOTE_CHAMPIONS = 100
VOTE_CANDIDATES = 10
GROUP_MEMBERS_SHOWN = 8
SIGNATURE_FIELDS = ["signature", "signature_text", "signature_parts"]


def signature_fields(signature: Signature | None) -> dict:
    """What an Issue stores of its signature: the key only when specific enough to group by."""
    if signature is None:
        return {"signature": "", "signature_text": "", "signature_parts": {}}
    return {
        "signature": signature.key if signature.specific else "",
        "signature_text": signature.describe()[:400],
        "signature_parts": {"exception": signature.exception, "message": signature.message,
                            "frames": list(signature.frames), "source": signature.source, "key": signature.key},
    }


def index(issues: list[Issue], texts: list[rubric.IssueText]) -> None:
    """Recompute and store the signatures and term vectors of these issues (texts: their IssueText).

    Four queries for the batch (lock, delete, insert, update), under the issues' row locks (as the suggestions are replaced), so two
    refreshes of one issue never leave both vectors behind. Leaves each vector on its issue
    (`similarity_vector`) for neighbours_for_votes.
    """
    rows = []
    for issue, text in zip(issues, texts):
        signature = signature_of(text)
        for name, value in signature_fields(signature).items():
            setattr(issue, name, value)
        issue.similarity_vector = terms_of(text, signature)
        labelled = any(name.startswith("module:") for name in text.labels)  # it may vote (neighbours_for_votes)
        rows += [(issue.pk, term, weight, labelled) for term, weight in issue.similarity_vector.items()]
    ids = [issue.pk for issue in issues]
    with transaction.atomic():
        list(Issue.objects.select_for_update().filter(pk__in=ids).order_by("pk").values_list("pk", flat=True))
        IssueTerm.objects.filter(issue_id__in=ids).delete()
        # One executemany, not bulk_create: on SQLite that splits 50 terms an issue into an INSERT per 249 rows.
        with connection.cursor() as cursor:
            if rows:
                cursor.executemany(f"INSERT INTO {IssueTerm._meta.db_table} (issue_id, term, weight, labelled) "
                                   "VALUES (%s, %s, %s, %s)", rows)
        Issue.objects.bulk_update(issues, SIGNATURE_FIELDS, batch_size=500)


def reindex(issues: QuerySet[Issue], batch: int = 500) -> int:
    """index() these issues, `batch` at a time, suggestions left as they are; returns how many.

    For a first index of the mirror (manage.py index_similar): the sync indexes what it changes.
    """
    ids = list(issues.order_by("pk").values_list("pk", flat=True))
    for start in range(0, len(ids), batch):
        rows = list(Issue.objects.filter(pk__in=ids[start:start + batch]).order_by("pk").prefetch_related(
            "labels", "comments", Prefetch("bisection_runs", queryset=BisectionRun.objects.none(), to_attr="finished_runs")))
        index(rows, [issue.as_issue_text() for issue in rows])
    return len(ids)


def vector_of(issue: Issue) -> dict[str, float]:
    """The issue's stored vector (the one index() just computed, when it is at hand)."""
    vector = getattr(issue, "similarity_vector", None)
    if vector is None:
        vector = dict(IssueTerm.objects.filter(issue_id=issue.pk).values_list("term", "weight"))
    return vector


def _champions(terms: list[str], per_term: int, labelled: bool) -> dict[str, list[tuple[int, float]]]:
    """{term: [(issue id, weight)]}: the `per_term` issues where each term weighs most (the head of its
    index range), of labelled issues only when `labelled`. One statement for any number of terms."""
    table = IssueTerm._meta.db_table
    only = " AND t.labelled" if labelled else ""
    if connection.vendor == "postgresql":
        sql = (f"SELECT q.term, c.issue_id, c.weight FROM unnest(%s::varchar[]) AS q(term) CROSS JOIN LATERAL "
               f"(SELECT t.issue_id, t.weight FROM {table} t WHERE t.term = q.term{only} ORDER BY t.weight DESC LIMIT %s) c")
        params = [terms, per_term]
    else:  # SQLite has no LATERAL: a correlated IN picks each term's head by its rowid
        values = ", ".join(["(%s)"] * len(terms))
        sql = (f"WITH q(term) AS (VALUES {values}) SELECT h.term, h.issue_id, h.weight FROM q JOIN {table} h ON h.id IN "
               f"(SELECT t.id FROM {table} t WHERE t.term = q.term{only} ORDER BY t.weight DESC LIMIT %s)")
        params = [*terms, per_term]
    heads: dict[str, list[tuple[int, float]]] = defaultdict(list)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for term, issue_id, weight in cursor.fetchall():
            heads[term].append((issue_id, weight))
    return heads


def _shared(pairs: list[tuple[int, int]]) -> dict[tuple[int, int], dict[str, float]]:
    """{(issue id, other id): {shared term: product of their weights}} from the stored vectors: one statement."""
    table = IssueTerm._meta.db_table
    values = ", ".join(["(%s, %s)"] * len(pairs))
    found: dict[tuple[int, int], dict[str, float]] = defaultdict(dict)
    with connection.cursor() as cursor:
        cursor.execute(f"WITH pair(a, b) AS (VALUES {values}) SELECT pair.a, pair.b, q.term, q.weight * t.weight FROM pair "
                       f"JOIN {table} q ON q.issue_id = pair.a JOIN {table} t ON t.issue_id = pair.b AND t.term = q.term",
                       [n for pair in pairs for n in pair])
        for a, b, term, product in cursor.fetchall():
            found[(a, b)][term] = product
    return found


def rank(vectors: dict[int, dict[str, float]], *, per_term: int = CHAMPIONS, candidates: int = CANDIDATES,
         labelled: bool = False, query_terms: int | None = None) -> dict[int, list[tuple[int, float, list[str]]]]:
    """{issue id: [(other id, cosine, shared words)] best first} for each stored vector in `vectors`.

    Candidates come from the heads of the lists of each vector's heaviest `query_terms` terms (all by
    default), by their partial sums; the best `candidates` are then scored exactly over all the terms
    both issues have. labelled: only issues carrying a module: label (the suggestion vote). Two
    statements for the whole batch, whatever its size.
    """
    queries = {pk: sorted(v.items(), key=lambda item: (-item[1], item[0]))[:query_terms] for pk, v in vectors.items() if v}
    terms = sorted({term for query in queries.values() for term, _ in query})
    if not terms:
        return {}
    heads = _champions(terms, per_term, labelled)
    chosen: dict[int, list[int]] = {}
    for pk, query in queries.items():
        partial: dict[int, float] = defaultdict(float)
        for term, weight in query:
            for other, w in heads.get(term, ()):
                if other != pk:
                    partial[other] += weight * w
        chosen[pk] = sorted(partial, key=lambda other: (-partial[other], other))[:candidates]
    pairs = [(pk, other) for pk, others in chosen.items() for other in others]
    shared = _shared(pairs) if pairs else {}
    out = {}
    for pk, others in chosen.items():
        scored = [(other, round(sum(shared[(pk, other)].values()), 4), shared_words(vectors[pk], shared[(pk, other)]))
                  for other in others if (pk, other) in shared]
        out[pk] = sorted(scored, key=lambda item: (-item[1], item[0]))
    return out


@dataclass
class Similar:
    """One neighbour as the issue page shows it: the issue (labels prefetched), its cosine and why it is listed."""

    issue: Issue
    similarity: float
    same_signature: bool
    words: list[str] = field(default_factory=list)

    @property
    def reason(self) -> str:
        if self.same_signature:
            return "same signature"
        return f"similar text ({', '.join(self.words)})" if self.words else "similar text"


def neighbours(issue: Issue, limit: int = SHOWN) -> list[Similar]:
    """The issue's most similar issues (open and closed, in the queue or not): same failure signature
    first, then by cosine. Five queries, whatever the size of the mirror."""
    found = rank({issue.pk: vector_of(issue)}).get(issue.pk)
    if not found:
        return []
    rows = Issue.objects.filter(pk__in=[pk for pk, _, _ in found]).only(
        "number", "title", "state", "in_queue", "is_pull_request", "signature", "html_url").prefetch_related("labels").in_bulk()
    out = [Similar(rows[pk], score, bool(issue.signature) and rows[pk].signature == issue.signature, words)
           for pk, score, words in found if pk in rows and score >= MIN_SHOWN]
    out.sort(key=lambda s: (not s.same_signature, -s.similarity, s.issue.number))
    return out[:limit]


def neighbours_for_votes(issues: list[Issue]) -> dict[int, tuple[rubric.Neighbour, ...]]:
    """{issue id: its most similar triaged issues as the engine's evidence} for the open queue issues among
    `issues` (the vote helps triage them; others get none).

    Four queries for the whole batch: the candidates among labelled issues and their scores (rank), the
    neighbours' labels, their numbers and signatures.
    """
    found = rank({issue.pk: vector_of(issue) for issue in issues if issue.in_queue and issue.state == Issue.State.OPEN},
                 per_term=VOTE_CHAMPIONS, candidates=VOTE_CANDIDATES, labelled=True, query_terms=VOTE_TERMS)
    ids = {pk for near in found.values() for pk, _, _ in near}
    if not ids:
        return {}
    labels: dict[int, list[str]] = defaultdict(list)
    through = Issue.labels.through
    for pk, name in through.objects.filter(issue_id__in=ids, label__name__startswith="module:").values_list(
            "issue_id", "label__name"):
        labels[pk].append(name)
    others = {pk: (number, key) for pk, number, key in Issue.objects.filter(pk__in=ids).values_list("pk", "number", "signature")}
    signature = {issue.pk: issue.signature for issue in issues}
    return {
        pk: tuple(rubric.Neighbour(others[other][0], tuple(sorted(labels[other])), score,
                                   bool(signature[pk]) and others[other][1] == signature[pk])
                  for other, score, _ in near if labels.get(other))
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
    counted = list(rows.order_by().exclude(signature="").values("signature").annotate(
        size=Count("pk", distinct=True), text=Max("signature_text")).filter(size__gte=2).order_by("-size", "signature")[:limit])
    if not counted:
        return []
    members: dict[str, list[int]] = defaultdict(list)
    for key, number in rows.order_by().filter(signature__in=[g["signature"] for g in counted]).values_list(
            "signature", "number").distinct().order_by("signature", "-number"):
        members[key].append(number)
    return [Group(g["signature"], g["text"], g["size"], members[g["signature"]][:GROUP_MEMBERS_SHOWN]) for g in counted]

