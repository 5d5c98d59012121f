"""POST /github/webhook: verify, store, enqueue, answer 202 at once.

The signature is checked before anything else is read. A delivery id seen
before, or a body seen before under another id (the id header is not signed, so
a captured delivery can be resent under a new one), is acknowledged and not
applied again. Deliveries of any repository but GITHUB_REPO are stored with the
reason and never applied (an org-wide hook sends every repository's events).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from rubric_app import dispatch
from rubric_app.github.data import storable_json
from rubric_app.github.events import foreign_repository
from rubric_app.models import WebhookDelivery

log = logging.getLogger(__name__)

EVENTS = frozenset({"issues", "issue_comment", "label", "ping"})


def signature_ok(body: bytes, header: str, secrets: list[str]) -> bool:
    """True when header is `sha256=<hex>` of HMAC-SHA256(body) under one of the secrets."""
    if not header.startswith("sha256=") or not secrets:
        return False
    given = header.removeprefix("sha256=")
    # Check every secret (no early exit) so the timing does not tell which one matched.
    matches = [hmac.compare_digest(hmac.new(s.encode(), body, hashlib.sha256).hexdigest(), given) for s in secrets]
    return any(matches)


@csrf_exempt
@require_POST
def github_webhook(request: HttpRequest) -> HttpResponse:
    if not signature_ok(request.body, request.headers.get("X-Hub-Signature-256", ""), settings.GITHUB_WEBHOOK_SECRETS):
        return HttpResponse("Missing or bad X-Hub-Signature-256.", status=403, content_type="text/plain")
    event, delivery_id = request.headers.get("X-GitHub-Event", ""), request.headers.get("X-GitHub-Delivery", "")
    try:
        payload = json.loads(request.body)
    except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deep
        return HttpResponse(f"The body is not JSON: {exc}.", status=400, content_type="text/plain")
    if not delivery_id or not isinstance(payload, dict):
        return HttpResponse("Missing X-GitHub-Delivery or a JSON object body.", status=400, content_type="text/plain")
    if event not in EVENTS:
        return HttpResponse(f"Event {event!r} ignored.", status=202, content_type="text/plain")
    body_sha256 = hashlib.sha256(request.body).hexdigest()  # of the bytes as signed, before anything is replaced
    payload, replaced = storable_json(payload)
    ignored = foreign_repository(payload)
    try:
        with transaction.atomic():
            delivery = WebhookDelivery.objects.create(
                delivery_id=delivery_id[:100],
                body_sha256=body_sha256,
                event=event,
                payload=payload,
                replaced=replaced,
                ignored=ignored,
                processed_at=timezone.now() if ignored else None,
            )
            if not ignored:
                dispatch.start_delivery(delivery.pk)
    except IntegrityError:
        return _seen_before(delivery_id[:100], body_sha256)
    if ignored:
        return HttpResponse(f"Ignored: {ignored}.", status=202, content_type="text/plain")
    return HttpResponse("Accepted.", status=202, content_type="text/plain")


def _seen_before(delivery_id: str, body_sha256: str) -> HttpResponse:
    """The answer to a delivery whose id or body is already stored: never applied twice."""
    seen = (
        WebhookDelivery.objects.filter(delivery_id=delivery_id).first()
        or WebhookDelivery.objects.filter(body_sha256=body_sha256).first()
    )
    if seen is None or seen.processed_at is not None:
        if seen is not None and seen.delivery_id != delivery_id:
            log.warning(
                "webhook delivery %s repeats the body of delivery %s: not applied again", delivery_id, seen.delivery_id
            )
        return HttpResponse("Delivery already received.", status=200, content_type="text/plain")
    # Stored but never processed (say the broker was down when it came): GitHub's redelivery
    # queues it again rather than being dropped; the task's claim makes a double run a no-op.
    dispatch.start_delivery(seen.pk)
    return HttpResponse("Delivery queued again.", status=202, content_type="text/plain")
