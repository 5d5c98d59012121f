"""The queue table's cache, and the version that keeps it right.

Rendering the queue's table (#queue-table: 50 rows of labels, suggestions, verdicts and warnings,
with the count and the pager) is most of what a queue page costs, and triagers ask for the same few
views over and over. Each web process keeps the rendered fragment in its own memory cache
(settings.CACHES) under the token of QueueVersion's one row, which database triggers change with
every committed write to what the table shows or filters on:

- the issues: every column but the sync's bookkeeping (IGNORED_COLUMNS);
- their labels (the M2M rows) and the labels themselves (names, colours);
- the suggestions, the assignments and the assignees' usernames;
- the bisection runs, but not their progress (IGNORED_COLUMNS);
- the comments (the search reads them);
- the decisions' status (a decision on its way marks its row; the bot's and may-be-fixed lanes read them).

It never serves an old table: the token is read on every request, and a fragment is kept only if
the token was still the same once it was rendered (a write committed meanwhile leaves it unkept).
Any number of processes (gunicorn's workers) each keep their own, and the embedded default
(SQLite, no Redis) works the same way. What differs per request stays out of it: the key holds the
user, whether they may apply (the "take it" and "Accept…" forms) and the full URL, and the CSRF
token and the ages ("3 weeks") are filled in on each request.

PostgreSQL: deferred constraint triggers, so the token changes once per transaction, at its
commit (the row lock is held for an instant, not for the whole transaction, e.g. a sync page that
fetches comments). SQLite: row triggers (it has one writer at a time anyway). A table remake
(SQLite) or DROP COLUMN ... CASCADE (PostgreSQL) drops triggers, and a new issue column must be
watched too: after every migrate, ensure_triggers() re-creates whatever differs from what this
module asks for (each trigger is named by a hash of its definition) and changes the token.

Inside a transaction (the tests' TestCase, a view under ATOMIC_REQUESTS) the table is always
rendered: on PostgreSQL the transaction's own writes change the token only when it commits.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import uuid
from collections.abc import Callable
from datetime import datetime

from django.contrib.auth import get_user_model
from django.core.cache import caches
from django.db import connections
from django.http import HttpRequest
from django.middleware.csrf import get_token
from django.utils import timezone
from django.utils.html import conditional_escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince

from rubric_app.models import (
    Assignment,
    BisectionRun,
    Comment,
    Issue,
    Label,
    QueueVersion,
    Suggestion,
    TriageDecision,
)

CACHE_ALIAS = "default"
CACHE_SECONDS = 600  # only to free memory: an entry is never stale, its key holds the token
FUNCTION = "rubric_app_queue_changed"
PREFIX = "queue_v_"  # every trigger this module installs, and nothing else, is named so

# UPDATEs of these columns leave the queue table as it was: not watched.
IGNORED_COLUMNS = {
    Issue: {"last_synced_at", "comments_synced_at"},  # written for every unchanged issue a sync reads
    BisectionRun: {"results", "current_mode", "log"},  # a run's progress: the table shows finished verdicts
}
# Of the users, the table shows only the assignee's name (last_login changes at every sign-in).
USER_COLUMNS = ["username"]
# Of the decisions, what a row and a lane read: whether one is on its way (a row `j` passes over) or done (the bot's
# lane, the may-be-fixed lane's reply); a worker's heartbeats while it applies one change nothing there.
DECISION_COLUMNS = ["status"]

# Per process and never sent: rendered issue text can never contain it (hex: escaping leaves it as is).
_MARK = secrets.token_hex(8)
MARKERS = {"csrf_token": f"{_MARK}csrf{_MARK}", "age_marker": _MARK}
_PIECE = re.compile(f"{_MARK}(csrf|age=[0-9T:.+-]+){_MARK}")
_RENDERING = [threading.Lock() for _ in range(32)]  # by key; two tables sharing one only take turns


def age(value) -> str:
    """'3 weeks' rather than '3 weeks, 2 days': the queue only needs the order of magnitude. Also the
    templates' `age` filter (templatetags/triage.py), so a cached table and a fresh one say the same."""
    return timesince(value, timezone.now(), depth=1) if value else ""


def age_marker(moment: datetime) -> str:
    """What the queue template writes for an age when it renders for the cache (see templatetags.triage)."""
    return f"{_MARK}age={moment.isoformat()}{_MARK}"


def table(request: HttpRequest, render: Callable[..., str]) -> SafeString:
    """The queue's table fragment for this request: kept from an earlier request when nothing it shows
    has changed since, else render(**MARKERS) (the fragment with markers for what differs per request)."""
    if connections[QueueVersion.objects.db].in_atomic_block:
        return _fill(_pieces(render(**MARKERS)), request)
    token = current_token()
    if token is None:  # no row (a flushed database): make one, keep nothing this time
        QueueVersion.objects.bulk_create([QueueVersion(pk=1, token=uuid.uuid4().hex)], ignore_conflicts=True)
        return _fill(_pieces(render(**MARKERS)), request)
    cache = caches[CACHE_ALIAS]
    key = cache_key(token, request)
    pieces = cache.get(key)
    if pieces is None:
        # One render per table at a time in this process: after a write, the threads that all missed
        # (runserver's, gunicorn's with --threads) wait for the first one's instead of each rendering it.
        with _RENDERING[hash(key) % len(_RENDERING)]:
            pieces = cache.get(key)
            if pieces is None:
                pieces = _pieces(render(**MARKERS))
                if current_token() == token:  # nothing committed while it rendered: it is the table of `token`
                    cache.set(key, pieces, CACHE_SECONDS)
    return _fill(pieces, request)


def current_token() -> str | None:
    # A bare SELECT: this runs on every queue request, and the ORM would cost more than the query.
    with connections[QueueVersion.objects.db].cursor() as cursor:
        cursor.execute(f"SELECT token FROM {QueueVersion._meta.db_table} WHERE id = 1")
        row = cursor.fetchone()
    return row[0] if row else None


def cache_key(token: str, request: HttpRequest) -> str:
    """Where the table of `token` for this request's user, permissions and URL is kept."""
    user = request.user
    path = hashlib.sha256(request.get_full_path().encode()).hexdigest()[:32]
    return f"queue-table:{token}:{user.pk}:{int(user.has_perm('rubric_app.apply_labels'))}:{path}"


def _pieces(html: str) -> list:
    """The fragment split at its markers: text, then alternately a marker ("csrf", or the datetime of
    an age) and text."""
    pieces: list = _PIECE.split(html)
    for i in range(1, len(pieces), 2):
        if pieces[i] != "csrf":
            pieces[i] = datetime.fromisoformat(pieces[i].removeprefix("age="))
    return pieces


def _fill(pieces: list, request: HttpRequest) -> SafeString:
    csrf = get_token(request)
    return mark_safe(
        "".join(  # noqa: S308 - rendered by the template, plus escaped ages and the CSRF token
            piece if i % 2 == 0 else csrf if piece == "csrf" else str(conditional_escape(age(piece)))
            for i, piece in enumerate(pieces)
        )
    )


# --- the triggers ------------------------------------------------------------------------------


def _watched(connection) -> list[tuple[str, list[str] | None]]:
    """(table, the columns whose UPDATE changes the token, or None for any UPDATE), from the database's
    own columns: a column added later is watched unless it is named in IGNORED_COLUMNS."""
    with connection.cursor() as cursor:

        def columns_but(model) -> list[str]:
            names = [c.name for c in connection.introspection.get_table_description(cursor, model._meta.db_table)]
            ignored = {model._meta.get_field(name).column for name in IGNORED_COLUMNS[model]}
            return sorted(name for name in names if name not in ignored)

        return [
            (Issue._meta.db_table, columns_but(Issue)),
            (Issue.labels.through._meta.db_table, None),
            (Label._meta.db_table, None),
            (Suggestion._meta.db_table, None),
            (Assignment._meta.db_table, None),
            (Comment._meta.db_table, None),
            (BisectionRun._meta.db_table, columns_but(BisectionRun)),
            (TriageDecision._meta.db_table, DECISION_COLUMNS),
            (get_user_model()._meta.db_table, USER_COLUMNS),
        ]


def _postgres_triggers(watched) -> dict[str, tuple[str, str]]:
    """{name: (table, CREATE statement)}; each fires at commit, row by row, and the function changes the
    token once per transaction."""
    triggers = {}
    for table_name, columns in watched:
        update = f"UPDATE OF {', '.join(columns)}" if columns else "UPDATE"
        body = (
            f"AFTER INSERT OR DELETE OR {update} ON {table_name} DEFERRABLE INITIALLY DEFERRED "
            f"FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()"
        )
        name = _name(table_name, body)
        triggers[name] = (table_name, f"CREATE CONSTRAINT TRIGGER {name} {body}")
    return triggers


def _sqlite_triggers(watched) -> dict[str, tuple[str, str]]:
    """{name: (table, CREATE statement)}: one trigger per table and event, each changing the token.

    A plain UPDATE and a guarded INSERT, no INSERT OR REPLACE: in a trigger SQLite applies the outer
    statement's conflict policy (bulk_create's INSERT OR IGNORE) to the trigger's own statements.
    """
    version = QueueVersion._meta.db_table
    change = (
        f"UPDATE {version} SET token = lower(hex(randomblob(16))); "
        f"INSERT INTO {version} (id, token) SELECT 1, lower(hex(randomblob(16))) "
        f"WHERE NOT EXISTS (SELECT 1 FROM {version});"
    )
    triggers = {}
    for table_name, columns in watched:
        update = f"UPDATE OF {', '.join(columns)}" if columns else "UPDATE"
        for event in ("INSERT", "DELETE", update):
            body = f"AFTER {event} ON {table_name} FOR EACH ROW BEGIN {change} END"
            name = _name(table_name, body)
            triggers[name] = (table_name, f"CREATE TRIGGER {name} {body}")
    return triggers


def _postgres_function() -> str:
    version = QueueVersion._meta.db_table
    return f"""CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          -- Once per transaction: the new token commits with all the transaction changed.
          IF current_setting('rubric_app.queue_changed', true) IS DISTINCT FROM 'yes' THEN
            PERFORM set_config('rubric_app.queue_changed', 'yes', true);
            INSERT INTO {version} (id, token) VALUES (1, gen_random_uuid()::text)
              ON CONFLICT (id) DO UPDATE SET token = EXCLUDED.token;
          END IF;
          RETURN NULL;
        END $$"""


def _name(table_name: str, body: str) -> str:
    digest = hashlib.sha256(body.encode()).hexdigest()[:10]
    return f"{PREFIX}{table_name.removeprefix('rubric_app_')[:30]}_{digest}"


def ensure_triggers(using: str = "default", **kwargs) -> bool:
    """Make the database's queue triggers exactly the ones this module asks for; True if it changed any
    (then the token changes too: the cache may have missed writes meanwhile).

    Connected to post_migrate; a no-op before QueueVersion's table exists.
    """
    connection = connections[using]
    if connection.vendor not in ("postgresql", "sqlite"):
        return False
    with connection.cursor() as cursor:
        if QueueVersion._meta.db_table not in connection.introspection.table_names(cursor):
            return False
        watched = _watched(connection)
        if connection.vendor == "postgresql":
            wanted = _postgres_triggers(watched)
            cursor.execute("SELECT t.tgname, c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid")
        else:
            wanted = _sqlite_triggers(watched)
            cursor.execute("SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger'")
        present = {name: table_name for name, table_name in cursor.fetchall() if name.startswith(PREFIX)}
        if set(present) == set(wanted):
            return False
        if connection.vendor == "postgresql":
            cursor.execute(_postgres_function())
        for name, table_name in present.items():
            if name not in wanted:
                cursor.execute(
                    f"DROP TRIGGER {name} ON {table_name}"
                    if connection.vendor == "postgresql"
                    else f"DROP TRIGGER {name}"
                )
        for name, (_, create) in wanted.items():
            if name not in present:
                cursor.execute(create)
    QueueVersion.objects.using(using).update_or_create(pk=1, defaults={"token": uuid.uuid4().hex})
    return True
