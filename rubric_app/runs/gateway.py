"""The gateway: the only part of a privileged process that reads what runners send.

It runs as a thread of the coordinator (the `default` worker, triage_site/celery.py). It reads every registered,
unrevoked runner's reports queue on the runners' broker (broker.reports_queue), and for each message does exactly one
of two things: forwards a report or a heartbeat, authenticated, to the coordinator's tasks (dispatch.forward), or
refuses it and logs why. Authentic means: no larger than jobs.MAX_MESSAGE_BYTES, JSON, an Envelope naming the runner
whose queue it came from (which the broker, not the message, says), signed with that runner's secret within
jobs.MAX_AGE_S. Nothing in a message is executed or looked up by a name it gives: a Celery task message, whatever it
names (a sync, Celery's built-ins, a canvas), is refused like any other unsigned message. What a runner sends reaches
no other queue, so a stolen runner can lie about the jobs it was given, and do nothing else.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone
from kombu import Connection, Consumer, Queue

from rubric_app import dispatch
from rubric_app.models import Runner
from rubric_app.runs import broker, jobs

log = logging.getLogger(__name__)

# How often the gateway re-reads which runners are registered (a new runner's queue is read within this).
REFRESH_S = 5.0
TASKS = {jobs.REPORT: dispatch.RECORD_REPORT, jobs.HEARTBEAT: dispatch.RECORD_HEARTBEAT}


@dataclass(frozen=True)
class Registered:
    pk: int
    name: str
    secret: str


def registered(name: str | None = None) -> dict[str, Registered]:
    """{name: identity} of the runners whose reports count (or of the one named), in one query."""
    runners = Runner.objects.active()
    if name is not None:
        runners = runners.filter(name=name)
    return {runner.name: Registered(runner.pk, runner.name, runner.secret()) for runner in runners}


def admit(runner: Registered, raw: bytes | str, content_type: str | None) -> jobs.Envelope:
    """The envelope of one message from runner `runner`'s queue, if it is authentic; Malformed says why not."""
    if len(raw) > jobs.MAX_MESSAGE_BYTES:
        raise jobs.Malformed(f"{len(raw)} bytes, more than a runner may send ({jobs.MAX_MESSAGE_BYTES})")
    if content_type != "application/json":
        raise jobs.Malformed(f"content type {content_type!r}, not JSON")
    try:
        message = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise jobs.Malformed(f"not JSON: {exc}") from None
    return jobs.Envelope.opened(message, runner=runner.name, secret=runner.secret)


def handle(runner: Registered, raw: bytes | str, content_type: str | None) -> bool:
    """Forward one message of `runner`'s queue to the coordinator if it is authentic; returns whether it was."""
    try:
        try:
            envelope = admit(runner, raw, content_type)
        except jobs.Forged:
            # Its secret may have changed since the registry was read (a new secret, a registration made again): read
            # again before refusing, so that a runner restarted with its new secret is heard at once.
            current = registered(name=runner.name).get(runner.name)
            if current is None or current == runner:
                raise
            runner = current
            envelope = admit(runner, raw, content_type)
    except jobs.Malformed as exc:
        log.warning("gateway refused a message from runner %s's queue: %s", runner.name, exc)
        # By name: the row of that name now (the one whose queue this is), whatever the registry read before.
        Runner.objects.filter(name=runner.name).update(
            refused_at=timezone.now(), refused=f"refused by the gateway: {exc}"[:300]
        )
        return False
    body = envelope.body
    if envelope.kind == jobs.HEARTBEAT:
        body = {"beat": body, "sent_at": envelope.sent_at}
    dispatch.forward(TASKS[envelope.kind], runner.pk, body)
    return True


class Gateway:
    """Reads the registered runners' reports queues until stopped; survives the broker and the database going away
    (it reconnects and carries on)."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve, name="runner-gateway", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def serve(self) -> None:
        while not self._stop.is_set():
            try:
                self._serve_once()
            except Exception:  # noqa: BLE001 - the gateway must outlive a broker or database hiccup
                log.warning("runner gateway: reconnecting after an error", exc_info=True)
                self._stop.wait(2.0)
            finally:
                connection.close()

    def _serve_once(self) -> None:
        with Connection(settings.RUNNER_BROKER_URL, transport_options=broker.coordinator_transport_options()) as conn:
            conn.ensure_connection(max_retries=3)
            channel = conn.channel()
            runners: dict[str, Registered] = {}
            consumers: list[Consumer] = []
            try:
                while not self._stop.is_set():
                    now_registered = _read_registry()
                    if now_registered != runners:
                        for consumer in consumers:
                            consumer.cancel()
                        runners = now_registered
                        consumers = [self._consumer(channel, runner) for runner in runners.values()]
                    self._drain(conn, consumers, until=time.monotonic() + REFRESH_S)
            finally:
                for consumer in consumers:
                    consumer.cancel()

    def _consumer(self, channel, runner: Registered) -> Consumer:
        def receive(message) -> None:
            # Refused or forwarded, the message is done (a refused one is never read again, a forwarded one is the
            # coordinator's task now); one that could not be forwarded raises, unacknowledged, and comes back.
            try:
                handle(runner, message.body, message.content_type)
            finally:
                connection.close()
            message.ack()

        consumer = Consumer(
            channel, queues=[Queue(broker.reports_queue(runner.name))], on_message=receive, prefetch_count=10
        )
        consumer.consume()
        return consumer

    def _drain(self, conn, consumers: list[Consumer], *, until: float) -> None:
        while not self._stop.is_set() and time.monotonic() < until:
            if not consumers:
                self._stop.wait(0.5)
                continue
            try:
                conn.drain_events(timeout=0.5)
            except TimeoutError:
                pass


def _read_registry() -> dict[str, Registered]:
    try:
        close_old_connections()
        return registered()
    finally:
        connection.close()


_gateway: Gateway | None = None


def start() -> None:
    """Start this process's gateway (once): the coordinator's worker calls it when it is ready."""
    global _gateway
    if _gateway is None:
        _gateway = Gateway()
        _gateway.start()


def stop() -> None:
    global _gateway
    if _gateway is not None:
        _gateway.stop()
        _gateway = None
