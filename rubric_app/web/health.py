"""The health check for the proxy and the orchestrator: is each part this dashboard needs up?

The database (one query), the broker (a connection, two seconds at most), a live worker on each queue in
HEALTH_QUEUES (the heartbeat table: no broker round trip), and, where a GitHub token is configured, a sync that
finished within HEALTH_SYNC_STALE_MINUTES; and the issues the last syncs left out, with why (a page, a sync, a
backfill goes on without them: mirror.store_issues), which put nothing down. Cheap (three queries) and free of secrets:
it names parts, counts
workers and gives times, never a URL, a token or an error's text that might hold one. Anonymous callers get only
up or down (how many workers serve which queue, and when the last sync ran, tell an outsider when to strike):
the parts are for signed-in staff and for a probe that sends `Authorization: Bearer <HEALTH_TOKEN>`.
"""

from __future__ import annotations

import hmac
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone
from kombu import Connection

from rubric_app.models import SyncState, WorkerHeartbeat


def check(now=None) -> tuple[bool, dict]:
    """(all up, the report): {"status": "ok" | "down", "down": [parts], "database", "broker", "workers": {queue:
    live count}, "last_sync": ISO time or None, "skipped": {sync: [{"number", "reason"}]}}."""
    now = now or timezone.now()
    down: list[str] = []
    report: dict = {"database": "ok", "broker": "ok", "workers": {}, "last_sync": None, "skipped": {}}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        live = WorkerHeartbeat.objects.queues(now)
        syncs = list(SyncState.objects.values_list("key", "last_finished_at", "last_error", "skipped"))
    except DatabaseError:
        report["database"] = "down"
        down.append("database")
        live, syncs = {}, []
    last_sync = max((at for _key, at, error, _skipped in syncs if at and not error), default=None)
    report["skipped"] = {key: skipped for key, _at, _error, skipped in syncs if skipped}
    if not broker_reachable():
        report["broker"] = "down"
        down.append("broker")
    report["workers"] = {queue: len(names) for queue, names in live.items()}
    down += [f"workers: {queue}" for queue in settings.HEALTH_QUEUES if "database" not in down and not live.get(queue)]
    report["last_sync"] = last_sync.isoformat() if last_sync else None
    if settings.GITHUB_TOKEN and "database" not in down:
        stale = timedelta(minutes=settings.HEALTH_SYNC_STALE_MINUTES)
        if last_sync is None or now - last_sync > stale:
            down.append("sync")
    report["status"] = "down" if down else "ok"
    report["down"] = down
    return not down, report


def broker_reachable() -> bool:
    """Whether the Celery broker accepts a connection within two seconds."""
    try:
        with Connection(
            settings.CELERY_BROKER_URL,
            connect_timeout=2,
            transport_options=getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}),
        ) as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return True
    except Exception:  # noqa: BLE001 - any failure to connect is "down"; its text may hold the broker's URL
        return False


def may_see_details(request) -> bool:
    """Whether the caller gets the report's parts (else only its status): signed-in staff, the HEALTH_TOKEN bearer."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if settings.HEALTH_TOKEN and scheme.lower() == "bearer":
        return hmac.compare_digest(token.strip().encode(), settings.HEALTH_TOKEN.encode())
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated and user.is_staff)
