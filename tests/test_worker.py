"""The task wiring, once, through the real broker and a real worker process."""

import pytest

from rubric_app.models import Issue, WebhookDelivery
from rubric_app.tasks import process_webhook_task
from tests.factories import opened_issue_payload
from tests.helpers import wait_until

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_it_round_trips_a_task_through_the_broker_and_a_worker(celery_worker_process, fake_github_server):
    # A webhook delivery as the receiver stores it: the worker mirrors the issue and refreshes its suggestions.
    payload = opened_issue_payload(
        4242,
        repo=fake_github_server.repo,
        title="torch.compile fails with dynamic=True",
        body="torch.compile fails",
        author="reporter",
    )
    delivery = WebhookDelivery.objects.create(delivery_id="worker-round-trip", event="issues", payload=payload)

    process_webhook_task.delay(delivery.pk)

    issue = wait_until(lambda: Issue.objects.filter(number=4242, suggestions_updated_at__isnull=False).first(), 60)
    delivery.refresh_from_db()
    assert delivery.processed_at is not None and not delivery.error
    assert issue.suggestions.exists()
