"""The queue table's cache (rubric_app/web/queue_cache.py): never an old table, never another user's parts.

Each test first checks that the page it looks at came from the cache (a hit makes one query beyond the
request's own), then changes what a row shows the way the dashboard does, and expects the change on the
very next request. Transactional: the cache is used only outside a transaction, where writes commit (and,
on PostgreSQL, change the token when they do). Runs on the suite's PostgreSQL and, through
test_it_passes_these_tests_on_sqlite, on SQLite.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import caches
from django.db import connection
from django.middleware.csrf import _unmask_cipher_token
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from rubric_app.github.applying import apply_decision
from rubric_app.github.events import process_webhook
from rubric_app.github.sync import sync_queue
from rubric_app.models import (
    Assignment,
    BisectionRun,
    Comment,
    Issue,
    Label,
    Suggestion,
    TriageDecision,
    WebhookDelivery,
)
from rubric_app.triage import suggestions
from rubric_app.web import queue_cache
from tests.factories import make_issue, make_label, make_user
from tests.helpers import passes_on_sqlite

pytestmark = pytest.mark.django_db(transaction=True)
URL = reverse("rubric_app:queue")
# A hit: session, user, the user's permissions (own and groups'), the token. Nothing of the table.
HIT_QUERIES = 5


def _get(client, params=None, headers=None) -> tuple[str, int]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(URL, params or {}, headers=headers or {})
    assert response.status_code == 200
    return response.content.decode(), len(queries)


def _cached(client, params=None, headers=None) -> str:
    """The page, having checked that this request was answered from the cache."""
    _get(client, params, headers)
    html, queries = _get(client, params, headers)
    assert queries == HIT_QUERIES, "not a cache hit: the test would prove nothing"
    return html


def _row(html: str, number: int) -> str:
    match = re.search(rf'<tr class="issue-row" data-issue-row="{number}".*?</tr>', html, re.S)
    return match.group(0) if match else ""


def _label_chips(html: str, number: int) -> list[str]:
    return re.findall(r'<span class="chip" style="background:#(\w+);[^"]*" title="">([^<]*)</span>', _row(html, number))


def _suggested(html: str, number: int) -> list[str]:
    return re.findall(r'<span class="chip suggested[^"]*" title="[^"]*">([^<]*)</span>', _row(html, number))


@pytest.fixture
def on_github(fake_github, settings):
    """#1001 on the fake GitHub and synced, with the catalog's labels."""
    settings.GITHUB_WRITE_INTERVAL = 0.01
    for name in ("oncall: pt2", "module: dynamo", "triaged"):
        fake_github.add_label(name)
        make_label(name)
    fake_github.add_issue(1001, title="graph break in the loop", labels=["oncall: pt2"])
    sync_queue(full=True)
    return Issue.objects.get(number=1001)


def test_it_answers_a_repeated_request_from_the_cache_with_the_same_page(client, triager):
    make_issue(1, title="first issue")
    client.force_login(triager)
    first, misses = _get(client)
    again, hits = _get(client)
    assert hits == HIT_QUERIES < misses and _without_tokens(again) == _without_tokens(first)


def test_it_makes_the_same_queries_whatever_the_queue_size(client, triager, django_assert_num_queries):
    pt2 = make_label("oncall: pt2")
    client.force_login(triager)
    for total in (10, 2000):
        start = Issue.objects.count()
        Issue.objects.bulk_create(Issue(number=10_000 + i, title=f"bulk {i}") for i in range(start, total))
        Issue.labels.through.objects.bulk_create(
            Issue.labels.through(issue_id=pk, label=pt2)
            for pk in Issue.objects.filter(number__gte=10_000 + start).values_list("pk", flat=True)
        )
        # Rendered: session, user, the user's permissions (own and groups'), the token, the count, the page
        # of issues (latest verdict as a subquery), labels, suggestions, the failures shared by several issues,
        # the token again (unchanged throughout?).
        with django_assert_num_queries(11):
            assert client.get(URL).status_code == 200
        # From the cache: session, user, permissions (2), the token.
        with django_assert_num_queries(HIT_QUERIES):
            assert f"{total} issues" in client.get(URL).content.decode()


def test_it_shows_a_label_applied_through_a_decision_on_the_next_request(client, triager, on_github):
    client.force_login(triager)
    assert [name for _, name in _label_chips(_cached(client), 1001)] == ["oncall: pt2"]
    # As request_decision records it (pending); the worker's step, run here: write to GitHub, then the mirror.
    decision = TriageDecision.objects.create(
        issue=on_github, user=triager, labels_seen=["oncall: pt2"], labels_added=["module: dynamo"]
    )
    assert apply_decision(decision.pk).status == "applied"
    html, _ = _get(client)
    assert [name for _, name in _label_chips(html, 1001)] == ["module: dynamo", "oncall: pt2"]


def test_it_marks_a_row_whose_decision_is_on_its_way_on_the_next_request(client, triager, on_github):
    """The row `j` passes over (data-waiting): a decision made, or taken back, shows on the next request."""
    client.force_login(triager)
    assert 'data-waiting=""' in _row(_cached(client), 1001)
    decision = TriageDecision.objects.create(
        issue=on_github, user=triager, labels_seen=["oncall: pt2"], labels_added=["module: dynamo"]
    )
    assert 'data-waiting="decision"' in _row(_get(client)[0], 1001)
    TriageDecision.objects.filter(pk=decision.pk).update(status=TriageDecision.Status.UNDONE)
    assert 'data-waiting=""' in _row(_get(client)[0], 1001)


def test_it_shows_refreshed_suggestions_on_the_next_request(client, triager, on_github):
    Suggestion.objects.all().delete()  # as before the rubric first ran on it
    client.force_login(triager)
    assert _suggested(_cached(client), 1001) == []
    suggestions.refresh_issue(on_github)
    html, _ = _get(client)
    assert "module: dynamo" in _suggested(html, 1001)


def test_it_shows_who_took_an_issue_on_the_next_request(client, triager, issue):
    client.force_login(triager)
    assert "data-take" in _row(_cached(client), issue.number)
    response = client.post(reverse("rubric_app:issue_assign", args=[issue.number]), {"next": URL})
    assert response.status_code == 302
    row = _row(_get(client)[0], issue.number)
    assert "taken by tina-triager" in row and "data-take" not in row
    triager.username = "tina-renamed"
    triager.save()
    assert "taken by tina-renamed" in _row(_get(client)[0], issue.number)


def test_it_shows_a_bisection_verdict_when_the_run_finishes_not_while_it_runs(client, triager, issue):
    run = BisectionRun.objects.create(issue=issue, repro_code="import torch", status="running")
    client.force_login(triager)
    _cached(client)
    token = queue_cache.current_token()
    run.current_mode, run.results = "aot_eager", [{"mode": "eager", "status": "pass"}]
    run.save(update_fields=["current_mode", "results"])  # progress: the table shows none of it
    assert queue_cache.current_token() == token and _get(client)[1] == HIT_QUERIES
    # The coordinator records a runner's result as one UPDATE (runs/coordinator.py).
    BisectionRun.objects.filter(pk=run.pk).update(
        status="done", verdict_summary="fails only on inductor (R2.2)", finished_at=timezone.now()
    )
    assert "fails only on inductor (R2.2)" in _row(_get(client)[0], issue.number)


def test_it_shows_what_a_sync_brought_on_the_next_request(client, triager, on_github, fake_github):
    client.force_login(triager)
    assert "graph break in the loop" in _row(_cached(client), 1001)
    fake_github.update_issue(1001, title="graph break in the loop, retitled")
    sync_queue(full=True)
    assert "graph break in the loop, retitled" in _row(_get(client)[0], 1001)


def test_it_shows_a_label_colour_a_webhook_changed_on_the_next_request(client, triager, on_github, settings):
    client.force_login(triager)
    assert _label_chips(_cached(client), 1001) == [("ededed", "oncall: pt2")]
    payload = {
        "action": "edited",
        "label": {"name": "oncall: pt2", "color": "e99695"},
        "repository": {"full_name": settings.GITHUB_REPO, "pushed_at": "2026-11-01T10:00:00Z"},
    }
    delivery = WebhookDelivery.objects.create(delivery_id="colour-1", event="label", payload=payload)
    process_webhook(delivery.pk)
    assert Label.objects.get(name="oncall: pt2").color == "e99695"
    assert _label_chips(_get(client)[0], 1001) == [("e99695", "oncall: pt2")]


def test_it_finds_an_issue_by_a_comment_added_since(client, triager, issue):
    client.force_login(triager)
    assert "data-issue-row" not in _cached(client, {"q": "segfault"})
    Comment.objects.create(issue=issue, github_id=77, body="It dies with Segmentation fault (core dumped).")
    assert f'data-issue-row="{issue.number}"' in _get(client, {"q": "segfault"})[0]


def test_it_fills_in_the_ages_as_time_passes(client, triager, monkeypatch):
    make_issue(1, created_at=timezone.now() - timedelta(days=2, hours=23))
    client.force_login(triager)
    assert ">2\xa0days</td>" in _row(_cached(client), 1)
    later = timezone.now() + timedelta(days=5)
    monkeypatch.setattr(timezone, "now", lambda: later)
    html, queries = _get(client)
    assert queries == HIT_QUERIES and ">1\xa0week</td>" in _row(html, 1)


def test_it_never_shows_one_users_forms_to_another(triager, viewer, issue):
    other = make_user("theo-triager", "triager")
    Assignment.objects.create(issue=issue, user=triager)
    tina, theo, vera = Client(), Client(), Client()
    for client, user in ((tina, triager), (theo, other), (vera, viewer)):
        client.force_login(user)
    assert "data-take" not in _row(_cached(tina), issue.number)  # it is hers already
    assert "data-take" in _row(_cached(theo), issue.number)
    row = _row(_cached(vera), issue.number)
    assert "<form" not in row and "taken by tina-triager" in row  # a viewer may not apply or take


def test_it_gives_each_session_its_own_csrf_token(triager, issue):
    first, second = Client(enforce_csrf_checks=True), Client(enforce_csrf_checks=True)
    for client in (first, second):
        client.force_login(triager)
    _cached(first)
    html = _cached(second)  # the table first's requests rendered
    tokens = set(re.findall(r'name="csrfmiddlewaretoken" value="([^"]+)"', _row(html, issue.number)))
    assert len(tokens) == 1
    token = tokens.pop()
    assert _unmask_cipher_token(token) == second.cookies["csrftoken"].value != first.cookies["csrftoken"].value
    response = second.post(
        reverse("rubric_app:issue_assign", args=[issue.number]), {"next": URL, "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302


def test_it_serves_the_htmx_fragment_from_the_same_cache(client, triager, issue):
    client.force_login(triager)
    page = _cached(client, {"lane": "all"})
    fragment, queries = _get(client, {"lane": "all"}, headers={"HX-Request": "true"})
    assert queries == HIT_QUERIES and fragment.lstrip().startswith('<div id="queue-table" ') and "<html" not in fragment
    assert _without_tokens(_row(fragment, issue.number)) == _without_tokens(_row(page, issue.number))


def test_it_keeps_nothing_rendered_while_a_write_committed(triager, issue):
    request = RequestFactory().get(URL)
    request.user = triager
    before = queue_cache.current_token()
    assert before is not None  # the issue's insert made the row

    def render_while_someone_writes(**markers) -> str:
        Label.objects.filter(name="oncall: pt2").update(color="000000")
        return "rendered while a write committed"

    assert queue_cache.table(request, render_while_someone_writes) == "rendered while a write committed"
    # Not kept under the token it started from: it may have read some rows before the write and some after.
    assert caches[queue_cache.CACHE_ALIAS].get(queue_cache.cache_key(before, request)) is None
    assert queue_cache.table(request, lambda **markers: "rendered again") == "rendered again"
    assert queue_cache.table(request, lambda **markers: "not rendered: kept") == "rendered again"


# What the table never shows: the sync's bookkeeping, a run's progress, and all of a user but the name.
NOT_SHOWN = {
    "issue": {"last_synced_at", "comments_synced_at"},
    "bisection run": {"results", "current_mode", "log"},
    "user": {
        "password",
        "last_login",
        "is_superuser",
        "first_name",
        "last_name",
        "email",
        "is_staff",
        "is_active",
        "date_joined",
    },
}


@pytest.mark.parametrize("name", list(NOT_SHOWN))
def test_it_changes_the_token_for_each_column_the_table_may_show_and_only_those(name, issue, triager):
    model, row = {
        "issue": (Issue, issue),
        "bisection run": (BisectionRun, BisectionRun.objects.create(issue=issue, repro_code="x")),
        "user": (get_user_model(), triager),
    }[name]
    ignored = NOT_SHOWN[name]
    for field in sorted(f.name for f in model._meta.concrete_fields if not f.primary_key):
        token = queue_cache.current_token()
        model.objects.filter(pk=row.pk).update(**{field: _another_value(model._meta.get_field(field), row)})
        assert (queue_cache.current_token() != token) == (field not in ignored), field


def _another_value(field, row):
    """A value of field's type that differs from row's."""
    kind = field.get_internal_type()
    if field.is_relation:
        return row.pk if field.related_model is type(row) else getattr(row, field.attname)
    current = getattr(row, field.attname)
    return {
        "BooleanField": not current,
        "DateTimeField": timezone.now() - timedelta(days=3),
        "JSONField": [{"changed": 1}],
        "PositiveIntegerField": 987654,
        "BigIntegerField": 987654,
        "FloatField": 0.25,
    }.get(kind, "changed")


def test_it_puts_back_a_trigger_a_migration_dropped():
    token = queue_cache.current_token()
    name = next(n for n in _trigger_names() if n.startswith(queue_cache.PREFIX + "label_"))
    with connection.cursor() as cursor:
        cursor.execute(
            f"DROP TRIGGER {name} ON rubric_app_label" if connection.vendor == "postgresql" else f"DROP TRIGGER {name}"
        )
    assert queue_cache.ensure_triggers() is True
    assert name in _trigger_names() and queue_cache.current_token() != token
    assert queue_cache.ensure_triggers() is False


def _trigger_names() -> set[str]:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT tgname FROM pg_trigger")
        else:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        return {row[0] for row in cursor.fetchall()}


def _without_tokens(html: str) -> str:
    """html with every CSRF token (64 letters and digits, masked differently each time) blanked."""
    return re.sub(r"\b[A-Za-z0-9]{64}\b", "(token)", html)


def test_it_passes_these_tests_on_sqlite(tmp_path):
    """The embedded default's triggers: this file again, in a child pytest on a SQLite database."""
    passes_on_sqlite(__file__, tmp_path)
