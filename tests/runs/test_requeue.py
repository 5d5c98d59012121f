"""Work whose task message never reached a worker is sent again by the periodic sweep, at the first sweep once it
has waited RESEND_AFTER_S (issue 49: not after a fixed 15 minutes)."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from rubric_app.models import BisectionRun, Issue, TriageDecision, WebhookDelivery
from rubric_app.tasks import requeue_stuck_task
from tests.factories import make_issue, make_label
from tests.helpers import wait_until


def long_ago():
    """Older than RESEND_AFTER_S (a minute by default), younger than QUEUE_WAIT_TIMEOUT_MINUTES: read when the test
    runs (a time taken when the module was imported is half an hour old by the end of a slow suite)."""
    return timezone.now() - timedelta(seconds=settings.RESEND_AFTER_S + 30)


def test_it_finds_only_old_unstarted_work(issue):
    old = TriageDecision.objects.create(issue=issue, labels_added=["triaged"], created_at=long_ago())
    TriageDecision.objects.create(issue=issue, labels_added=["triaged"])  # just queued: leave it
    TriageDecision.objects.create(issue=issue, status="applied", created_at=long_ago())
    run = BisectionRun.objects.create(issue=issue, repro_code="x", created_at=long_ago())
    BisectionRun.objects.create(issue=issue, repro_code="x", status="running", created_at=long_ago())
    delivery = WebhookDelivery.objects.create(delivery_id="a", event="issues", received_at=long_ago())
    WebhookDelivery.objects.create(delivery_id="b", event="issues", received_at=long_ago(), processed_at=timezone.now())

    before = timezone.now() - timedelta(seconds=settings.RESEND_AFTER_S)
    assert list(TriageDecision.objects.due(before)) == [old]
    assert list(BisectionRun.objects.stuck(before)) == [run]
    assert list(WebhookDelivery.objects.stuck(before)) == [delivery]


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_sends_a_lost_decision_and_delivery_again_through_the_worker(fake_github, triager, celery_worker_process):
    make_label("module: dynamo", github=fake_github)
    make_label("triaged", github=fake_github)
    issue = make_issue(3101, labels=("oncall: pt2",))
    fake_github.add_issue(3101, labels=["oncall: pt2"])
    # As if the broker had been down when these were enqueued: rows exist, no message does.
    decision = TriageDecision.objects.create(
        issue=issue,
        user=triager,
        labels_seen=["oncall: pt2"],
        labels_added=["module: dynamo", "triaged"],
        created_at=long_ago(),
    )
    payload = {
        "action": "edited",
        "issue": fake_github.issue_json(fake_github.add_issue(3102, labels=["oncall: pt2"])),
        "repository": {"full_name": fake_github.repo},
    }
    delivery = WebhookDelivery.objects.create(
        delivery_id="lost", event="issues", payload=payload, received_at=long_ago()
    )

    requeue_stuck_task()

    def done():
        decision.refresh_from_db()
        delivery.refresh_from_db()
        # The delivery's suggestions refresh runs after processed_at commits: wait for it too, or the
        # test database's TRUNCATE at teardown can deadlock with it.
        refreshed = Issue.objects.filter(number=3102, suggestions_updated_at__isnull=False).exists()
        return decision.is_finished and delivery.processed_at and refreshed

    wait_until(done, timeout=60)
    assert decision.status == TriageDecision.Status.APPLIED, decision.result_message
    assert fake_github.labels_of(3101) == ["module: dynamo", "oncall: pt2", "triaged"]
    assert issue.label_names() == ["module: dynamo", "oncall: pt2", "triaged"]
