"""The task wiring, once, through the real broker and a real worker process."""

import pytest

from rubric_app.tasks import refresh_suggestions_task
from tests.conftest import make_issue, wait_until

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_it_round_trips_a_task_through_the_broker_and_a_worker(celery_worker_process):
    issue = make_issue(4242, body="torch.compile fails")
    assert issue.suggestions_updated_at is None

    refresh_suggestions_task.delay(issue.pk)

    def refreshed():
        issue.refresh_from_db()
        return issue.suggestions_updated_at

    wait_until(refreshed, timeout=60)
    assert issue.suggestions.exists()
