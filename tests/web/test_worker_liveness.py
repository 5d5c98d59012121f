"""Which queues have a live worker (cpu, gpu, github), from the workers' heartbeats, on the issue page.

With no GPU worker a cuda or "both" bisection is refused with the reason; queued runs and pending
decisions say when no worker of their queue is online (and that they end after QUEUE_WAIT_TIMEOUT_MINUTES).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from rubric_app.models import BisectionRun, TriageDecision, WorkerHeartbeat
from tests.factories import make_issue
from tests.helpers import only_this_tests_workers

HTMX = {"HX-Request": "true"}
CODE = "import torch\n\ndef fn(x):\n    return x.sin()\n\ndef make_inputs():\n    return (torch.ones(2),)\n"


@pytest.fixture
def issue_with_own_workers(db):
    only_this_tests_workers()
    return make_issue(2101)


def _beat(name: str, queues: list[str], device: str = "cpu", ago: float = 0) -> None:
    WorkerHeartbeat.objects.create(
        name=name, queues=queues, device=device, seen_at=timezone.now() - timedelta(seconds=ago)
    )


def _text(response) -> str:
    """The answer's HTML with runs of whitespace as one space (template line breaks are not content)."""
    return " ".join(response.content.decode().split())


def _worker_line(html: str) -> str:
    return html.split('id="worker-status"')[1].split("</p>")[0]


def test_it_shows_which_queues_have_a_live_worker(client, viewer, issue_with_own_workers, settings):
    settings.WORKER_HEARTBEAT_STALE_S = 45
    _beat("cpu@box", ["cpu", "default"])
    _beat("github@box", ["github"])
    _beat("gpu@old", ["gpu"], device="cuda", ago=120)  # killed two minutes ago: stale
    client.force_login(viewer)

    line = _worker_line(client.get(reverse("rubric_app:issue", args=[2101])).content.decode())

    assert 'data-queue="cpu" data-live="1"' in line and "cpu: 1 online" in line
    assert 'data-queue="github" data-live="1"' in line
    assert 'data-queue="gpu" data-live="0"' in line and "gpu: none online" in line


def test_it_does_not_count_a_gpu_queue_worker_that_serves_cpu(issue_with_own_workers):
    _beat("gpu@misconfigured", ["gpu"], device="cpu")  # would fail every GPU run it took
    _beat("gpu@real", ["gpu"], device="cuda")
    assert WorkerHeartbeat.objects.queues() == {"cpu": [], "gpu": ["gpu@real"], "github": []}


@pytest.mark.parametrize("device", ["cuda", "both"])
def test_it_refuses_a_gpu_bisection_while_no_gpu_worker_is_online(client, triager, issue_with_own_workers, device):
    _beat("cpu@box", ["cpu"])
    client.force_login(triager)

    page = client.get(reverse("rubric_app:issue", args=[2101])).content.decode()
    response = client.post(reverse("rubric_app:bisect", args=[2101]), {"code": CODE, "device": device}, headers=HTMX)

    assert "no gpu worker online" in page and "data-no-gpu" in page  # the choice says so before it is made
    html = response.content.decode()
    assert response["HX-Retarget"] == "#bisect-form" and "No registered GPU runner is online" in html
    assert not BisectionRun.objects.exists()  # refused, not queued to wait for nothing
    plain = client.post(reverse("rubric_app:bisect", args=[2101]), {"code": CODE, "device": device})
    assert plain.status_code == 400 and "No registered GPU runner is online" in plain.content.decode()  # without JS


def test_it_queues_a_gpu_bisection_when_a_gpu_worker_is_online(client, triager, issue_with_own_workers):
    _beat("gpu@box", ["gpu"], device="cuda")
    client.force_login(triager)

    html = _text(client.post(reverse("rubric_app:bisect", args=[2101]), {"code": CODE, "device": "both"}, headers=HTMX))

    run = BisectionRun.objects.get()
    assert (run.status, run.device) == ("queued", "both")
    assert 'data-waiting-for="gpu"' in html and "Waiting for a gpu worker (1 online" in html


def test_it_says_a_queued_run_has_no_worker_to_take_it(
    client, viewer, issue_with_own_workers, settings, django_assert_num_queries
):
    settings.QUEUE_WAIT_TIMEOUT_MINUTES = 30
    run = BisectionRun.objects.create(issue=issue_with_own_workers, repro_code=CODE)
    client.force_login(viewer)
    # session, user, permissions (2), the run with its issue and requester, the workers' heartbeats
    with django_assert_num_queries(6):
        html = _text(client.get(reverse("rubric_app:bisection", args=[run.pk]), headers=HTMX))
    assert 'hx-trigger="every 1s"' in html
    assert "<strong>No cpu worker is online</strong>: this run waits for one, and ends failed after 30 min" in html


def test_it_says_a_pending_decision_has_no_github_worker_to_take_it(client, viewer, issue_with_own_workers, settings):
    settings.QUEUE_WAIT_TIMEOUT_MINUTES = 30
    decision = TriageDecision.objects.create(issue=issue_with_own_workers, labels_added=["triaged"])
    client.force_login(viewer)

    html = _text(client.get(reverse("rubric_app:decision", args=[decision.pk]), headers=HTMX))
    assert "<strong>No github worker is online</strong>: this decision waits for one" in html
    assert "ends failed (nothing written) after 30 min" in html

    _beat("github@box", ["github"])
    html = _text(client.get(reverse("rubric_app:decision", args=[decision.pk]), headers=HTMX))
    assert "Queued for the github worker." in html and "No github worker" not in html


def test_it_keeps_one_row_per_worker_refreshed_by_each_beat(issue_with_own_workers):
    from rubric_app.runs import workers

    workers.beat("github@box", ["github"])
    first = WorkerHeartbeat.objects.get().seen_at
    workers.beat("github@box", ["github", "default"])
    row = WorkerHeartbeat.objects.get()
    assert (row.queues, row.runner) == (["default", "github"], None) and row.seen_at >= first
