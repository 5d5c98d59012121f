"""Queue search: full-text with stemming and synonyms, ranked; issue numbers found in any lane.

Runs on the suite's PostgreSQL (tsvector) and, through test_it_passes_these_tests_on_sqlite,
again on SQLite (FTS5), the embedded default: the same assertions on both databases.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from rubric_app import search, search_index
from rubric_app.github.sync import sync_queue
from rubric_app.models import Comment, Issue
from tests.factories import make_issue, make_label
from tests.helpers import passes_on_sqlite

URL = reverse("rubric_app:queue")

pytestmark = pytest.mark.django_db


def _found(text: str, qs=None) -> list[int]:
    return list((qs if qs is not None else Issue.objects.all()).search(text).values_list("number", flat=True))


def _comment(issue: Issue, github_id: int, body: str) -> Comment:
    return Comment.objects.create(issue=issue, github_id=github_id, body=body, author="someone")


# --- the query language, pure ------------------------------------------------------------------


def test_it_reads_words_phrases_exclusions_and_or():
    clauses = search.parse('graph  "Dynamic Shapes" -flaky inductor or triton')
    assert [(c.phrases, c.negated) for c in clauses] == [
        (("graph",), False),
        (("dynamic shapes",), False),
        (("flaky",), True),
        (("inductor", "triton"), False),
    ]


def test_it_expands_the_synonym_table():
    (clause,) = search.parse("Segfault")
    assert {"segfault", "segmentation fault", "sigsegv"} <= set(clause.phrases)
    assert "cuda out of memory" in search.parse("OOM")[0].phrases


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("#170029", 170029),
        (" 170029 ", 170029),
        ("https://github.com/pytorch/pytorch/issues/170029", 170029),
        ("github.com/pytorch/pytorch/pull/170029#issuecomment-1", 170029),
        ("#17 segfault", None),
        ("v2.5", None),
    ],
)
def test_it_recognises_issue_references(text, number):
    assert search.issue_number(text) == number


def test_it_quotes_every_word_for_fts5():
    match = search.fts5_match(search.parse('a" NEAR(b c) * -d:e'))
    assert match == '("a") AND ("near b") AND ("c") NOT ("d e")'  # punctuation joins words, as FTS5 tokenizes
    assert search.fts5_match(search.parse("a OR")) == '("a")'  # an OR joining nothing is dropped


# --- full-text search on the database ----------------------------------------------------------


def test_it_finds_segmentation_fault_when_searching_segfault():
    make_issue(1, title="Segmentation fault (core dumped) in inductor codegen")
    make_issue(2, title="Wrong result", body="the process dies with SIGSEGV")
    make_issue(3, title="Graph break on a dict", body="no crash here, fault tolerance of the trainer")
    assert sorted(_found("segfault")) == [1, 2]
    assert sorted(_found("SIGSEGV")) == [1, 2]


def test_it_finds_out_of_memory_reports_when_searching_oom():
    make_issue(1, title="torch.OutOfMemoryError: CUDA out of memory with mode=max-autotune")
    make_issue(2, title="Memory usage grows with each recompile")
    assert _found("OOM") == [1]


def test_it_stems_english_words():
    make_issue(1, title="Too many recompilations with dynamic=True")
    make_issue(2, title="Model recompiled on every call", body="guards failed")
    make_issue(3, title="Compiler crash", body="compile fails")
    assert sorted(_found("recompiles")) == [1, 2]
    assert sorted(_found("recompiling")) == [1, 2]


def test_it_ranks_a_title_match_above_a_body_match_above_a_comment_match():
    now = timezone.now()
    body = make_issue(1, title="Inductor fails on CPU", body="looks like a graph break in the loop", updated_at=now)
    title = make_issue(2, title="Graph break on a generator expression", updated_at=now - timedelta(days=3))
    commented = make_issue(3, title="Slow compile", updated_at=now - timedelta(days=1))
    _comment(commented, 901, "I see a graph break here too")
    make_issue(4, title="Unrelated")
    assert _found("graph break") == [title.number, body.number, commented.number]


def test_it_searches_comments_and_follows_edits_and_deletions():
    issue = make_issue(1, title="Compile error", body="see below")
    assert _found("cudagraphs") == []
    comment = _comment(issue, 902, "Fails only with cudagraphs enabled")
    assert _found("cudagraphs") == [1]
    Comment.objects.filter(pk=comment.pk).update(body="Fails only with triton")
    assert _found("cudagraphs") == [] and _found("triton") == [1]
    comment.delete()
    assert _found("triton") == []
    Issue.objects.filter(pk=issue.pk).update(title="Compile error in FlexAttention")
    assert _found("flexattention") == [1]


def test_it_keeps_the_index_current_through_the_sync(fake_github):
    fake_github.add_issue(
        7001,
        title="Crash in aot_autograd",
        labels=["oncall: pt2"],
        comments=["the backward graph hits a segmentation fault"],
    )
    sync_queue(full=True)
    assert _found("segfault") == [7001]
    fake_github.update_issue(7001, title="Crash in the partitioner")
    fake_github.add_comment(7001, "min-cut partitioner picks a bad recompute set")
    sync_queue()
    assert _found("partitioner") == [7001] and _found("recomputed") == [7001]
    assert _found("aot_autograd") == []


def test_it_excludes_and_alternates():
    make_issue(1, title="NaN in the backward with inductor")
    make_issue(2, title="NaN with aot_eager, flaky")
    make_issue(3, title="Wrong strides with triton")
    assert _found("nan -flaky") == [1]
    assert sorted(_found("flaky or triton")) == [2, 3]
    assert _found('"backward with inductor"') == [1]
    assert _found("-nan") == []  # nothing required: no issue, not every issue


def test_it_matches_a_number_in_the_text_and_ranks_the_issue_itself_first():
    make_issue(5, title="Regression since the fix for 170029")
    make_issue(170029, title="Original bug", updated_at=timezone.now() - timedelta(days=30))
    assert _found("#170029") == [170029, 5]
    assert _found("https://github.com/pytorch/pytorch/issues/170029") == [170029, 5]


def test_it_matches_issue_numbers_only_for_a_search_by_number():
    make_issue(500, title="Graph break in a loop")
    make_issue(1, title="Compiled server returns error 500")
    assert _found("error 500") == [1]
    assert _found("500") == [500, 1]


HOSTILE = [
    '"',
    '"unclosed phrase',
    "*",
    "segfault*",
    "NEAR",
    "NEAR(a b)",
    "a NEAR/2 b",
    "-",
    "--",
    "- -x",
    "a -",
    "OR",
    "AND",
    "NOT",
    "a AND NOT b",
    "(",
    ")",
    "((a)",
    "title:segfault",
    "{title body}: x",
    "^start",
    "a:*",
    "!!a",
    "a & | b",
    "'; DROP TABLE rubric_app_issue; --",
    "\\",
    "%_%",
    "é ü 文字",
    "x" * 200,
    "a " * 100,
    "#",
    "#-1",
    "#99999999999999999999",
    "<->",
    "a <2> b",
    "''",
    '""""',
]


@pytest.mark.parametrize("text", HOSTILE)
def test_it_never_errors_on_hostile_query_text(text):
    make_issue(1, title="Segmentation fault in NEAR and OR")
    assert isinstance(_found(text), list)


def test_it_answers_every_hostile_query_on_the_queue_page(client, viewer):
    make_issue(1, title="Segmentation fault")
    client.force_login(viewer)
    for text in HOSTILE + ["\x00"]:
        for headers in ({}, {"HX-Request": "true"}):
            assert client.get(URL, {"q": text}, headers=headers).status_code == 200, text


# --- the queue page --------------------------------------------------------------------------


def test_it_ranks_the_queue_by_relevance(client, viewer):
    now = timezone.now()
    make_issue(1, title="Inductor crash", body="a graph break first", updated_at=now)
    make_issue(2, title="Graph break in torch.cond", updated_at=now - timedelta(days=5))
    client.force_login(viewer)
    html = client.get(URL, {"q": "graph breaks"}).content.decode()
    assert html.index("Graph break in torch.cond") < html.index("Inductor crash")
    assert "best match first" in html


@pytest.mark.parametrize("text", ["#170029", "170029", "https://github.com/pytorch/pytorch/issues/170029"])
def test_it_finds_an_issue_by_number_in_another_lane(client, viewer, text):
    make_issue(170029, title="CPU inductor vectorization bug", labels=("oncall: cpu inductor",))
    client.force_login(viewer)
    response = client.get(URL, {"lane": "pt2", "q": text})
    html = response.content.decode()
    assert 'id="search-reference"' in html and "CPU inductor vectorization bug" in html
    assert 'href="/issues/170029"' in html
    assert "?lane=cpu&amp;q=170029" in html and ">oncall: cpu inductor</a>" in html


def test_it_finds_a_closed_issue_that_left_the_queue(client, viewer):
    make_issue(170030, title="Fixed long ago", labels=("oncall: pt2", "triaged"), state="closed", in_queue=False)
    client.force_login(viewer)
    html = client.get(URL, {"q": "#170030"}, headers={"HX-Request": "true"}).content.decode()
    assert "Fixed long ago" in html and "in no lane: closed" in html
    assert "<html" not in html


def test_it_says_when_the_mirror_lacks_the_number(client, viewer):
    client.force_login(viewer)
    html = client.get(URL, {"q": "#424242"}).content.decode()
    assert "#424242 is not in the mirror" in html
    assert 'href="https://github.com/pytorch/pytorch/issues/424242"' in html


def test_it_offers_all_lanes_when_the_lane_has_no_match(client, viewer):
    make_issue(1, title="Vectorization segfault", labels=("oncall: cpu inductor",))
    client.force_login(viewer)
    html = client.get(URL, {"lane": "pt2", "q": "segfault"}).content.decode()
    assert "Nothing in this lane." in html and "?lane=all&amp;q=segfault" in html
    assert "Vectorization segfault" in client.get(URL, {"lane": "all", "q": "segfault"}).content.decode()


def _bulk(count: int, start: int) -> None:
    """count pt2 queue issues, every other one a segmentation fault, in a few queries."""
    pt2 = make_label("oncall: pt2")
    issues = Issue.objects.bulk_create(
        Issue(number=start + i, title=f"graph break number {i}", body="segmentation fault" if i % 2 else "")
        for i in range(count)
    )
    Issue.labels.through.objects.bulk_create([Issue.labels.through(issue=i, label=pt2) for i in issues])


@pytest.mark.parametrize("htmx", [False, True])
def test_it_makes_the_same_number_of_queries_for_a_search_of_10_and_1000_issues(
    client, viewer, django_assert_num_queries, htmx
):
    headers = {"HX-Request": "true"} if htmx else {}
    client.force_login(viewer)
    _bulk(10, 10_000)
    # session, user, the user's permissions (2), count, page of issues (the match, its rank and the
    # latest verdict in SQL), labels prefetch, suggestions prefetch, failures shared (none here)
    with django_assert_num_queries(9):
        assert "5 issues" in client.get(URL, {"q": "segfault"}, headers=headers).content.decode()
    _bulk(990, 20_000)
    with django_assert_num_queries(9):
        assert "500 issues" in client.get(URL, {"q": "segfault"}, headers=headers).content.decode()
    # an issue number adds the referenced issue and its labels
    with django_assert_num_queries(11):
        assert 'id="search-reference"' in client.get(URL, {"q": "#20001"}, headers=headers).content.decode()


# --- SQLite: the embedded default --------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_it_restores_the_fts5_triggers_after_a_table_remake():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only: PostgreSQL alters tables in place")
    make_issue(1, title="Segmentation fault before the remake")
    with connection.schema_editor() as editor:  # what an AddField with a default does on SQLite
        editor._remake_table(Issue)
    make_issue(2, title="Segmentation fault after the remake")
    assert search_index.ensure_sqlite_triggers() is True
    assert sorted(_found("segfault")) == [1, 2]
    make_issue(3, title="Segmentation fault later")
    assert sorted(_found("segfault")) == [1, 2, 3]
    assert search_index.ensure_sqlite_triggers() is False


def test_it_passes_these_tests_on_sqlite(tmp_path):
    """The embedded default's FTS5 path: this file again, in a child pytest on a SQLite database."""
    passes_on_sqlite(__file__, tmp_path)
