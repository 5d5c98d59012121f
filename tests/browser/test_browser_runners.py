"""The runners page in Chromium at 1280x800 (issue 53): two runners of different devices, one silent, what each
serves and runs, the lanes' waits, and the automatic runs waiting for the budget with why."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from rubric_app.models import BisectionRun, Runner, WorkerHeartbeat
from tests.browser.conftest import screenshot
from tests.factories import make_issue

pytestmark = [pytest.mark.browser]


def _beating(name: str, device: str, silent_s: float, hardware: dict, builds: dict) -> Runner:
    runner = Runner.objects.create(name=name, device=device, registered_by="otto-operator", salt=name)
    seen = timezone.now() - timedelta(seconds=silent_s)
    prefix = "gpu" if device == "cuda" else "cpu"
    WorkerHeartbeat.objects.create(
        name=name,
        runner=runner,
        queues=[prefix, f"{prefix}_auto"],
        device=device,
        builds=builds,
        hardware=hardware,
        boot="b1",
        seen_at=seen,
        sent_at=seen,
    )
    return runner


def test_it_shows_a_gpu_runner_at_work_and_a_silent_cpu_runner_at_1280(transactional_db, make_page, viewer, settings):
    settings.WORKER_HEARTBEAT_STALE_S, settings.AUTO_BISECT_PER_HOUR = 45, 1
    WorkerHeartbeat.objects.all().delete()  # no worker runs in this test: only its two runners beat
    gpu = _beating(
        "gpu-h100",
        "cuda",
        2,
        {"cpu": "AMD EPYC 9454", "isa": ["avx512f"], "gpu": "NVIDIA H100 80GB HBM3"},
        {"nightly": "2.14.0.dev20261201"},
    )
    _beating("cpu-arm", "cpu", 600, {"cpu": "Neoverse-V2", "isa": ["sve2", "bf16"]}, {"release": "2.13.0"})
    issue = make_issue(5401, title="inductor crash on a conv")
    BisectionRun.objects.create(
        issue=issue, repro_code="x", status="running", current_mode="inductor", device="cuda", assigned_to=gpu
    )
    BisectionRun.objects.create(issue=issue, repro_code="y", automatic=True)  # spends the hour's one place
    waiting = make_issue(5402, title="a newcomer's first report")
    BisectionRun.objects.create(
        issue=waiting, repro_code="z", automatic=True, status="waiting", caused_by="@new (sync)"
    )
    page = make_page(viewer.username)
    page.set_viewport_size({"width": 1280, "height": 800})

    page.goto("/runners")

    busy, silent = page.locator("#runner-gpu-h100"), page.locator("#runner-cpu-arm")
    assert "busy" in busy.inner_text().lower() and "NVIDIA H100 80GB HBM3" in busy.inner_text()
    assert "#5401" in busy.inner_text() and "2.14.0.dev20261201" in busy.inner_text()
    assert silent.locator(".badge.bad").inner_text().lower() == "silent" and "Neoverse-V2" in silent.inner_text()
    assert "sve2" in silent.inner_text() and "GPU (cuda)" not in silent.inner_text()
    budget = page.locator("#budget-waiting")
    assert "the hourly budget is spent: 1 of 1" in budget.inner_text() and "#5402" in budget.inner_text()
    assert page.locator("#runners-board").is_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280, f"the page is {width} px wide at 1280"
    screenshot(page, "runners-1280")
