"""Writes as the triager through a real Celery worker: a worker started with sign-in configured
(GITHUB_WRITE_AS=user) takes the decision from the real broker, reads the triager's encrypted token
from the test database, refreshes it once, and the fake GitHub records the triager as the label's actor.

The worker consumes a queue of its own, so the suite's shared worker (site token, no sign-in) never
takes these messages; its log is checked for the tokens.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from rubric_app.github import credentials
from rubric_app.models import TriageDecision
from rubric_app.tasks import apply_decision_task
from tests.factories import make_issue, make_label
from tests.github.conftest import QUEUE
from tests.helpers import wait_until_finished


def test_it_writes_as_the_triager_through_the_worker(transactional_db, signed_in_worker, triager, fake_github):
    fake_github.add_issue(1001, labels=["oncall: pt2"])
    issue = make_issue(1001, labels=("oncall: pt2",))
    make_label("module: inductor", github=fake_github)
    access, refresh = fake_github.issue_user_token("tina-triager", expires_in=60)  # refreshed before use
    credentials.save_user_token(
        triager,
        access_token=access,
        refresh_token=refresh,
        expires_at=timezone.now() + timedelta(seconds=60),
        scopes="read:org,public_repo",
    )
    decision = TriageDecision.objects.create(
        issue=issue, user=triager, labels_seen=["oncall: pt2"], labels_added=["module: inductor"]
    )

    apply_decision_task.apply_async((decision.pk,), queue=QUEUE)
    decision = wait_until_finished(decision, timeout=60)

    assert decision.status == TriageDecision.Status.APPLIED, decision.result_message
    assert fake_github.label_events == [
        {"issue": 1001, "event": "labeled", "label": "module: inductor", "actor": "tina-triager"}
    ]
    assert len(fake_github.requests_to("/login/oauth/access_token", "POST")) == 1
    fresh = credentials.token_for(triager)
    log = signed_in_worker.read_text()
    assert "apply_decision_task" in log  # the worker did log this task, at DEBUG
    assert not {access, refresh, fresh} & set(log.split()) and access not in log and fresh not in log
