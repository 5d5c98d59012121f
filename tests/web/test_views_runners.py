"""The runners page (issue 49, and issue 53's operator view): who may read it and who may register, what each runner
and lane shows, constant queries, a secret shown once and never again, every step audited."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from rubric_app.models import BisectionRun, Runner, RunnerEvent, WorkerHeartbeat
from tests.factories import make_issue, make_user
from tests.helpers import only_this_tests_workers

HTMX = {"HX-Request": "true"}


@pytest.fixture
def operator(db):
    """Registers and revokes runners: a viewer who holds the one permission for it (no triage role gives it)."""
    user = make_user("otto-operator", "viewer")
    user.user_permissions.add(Permission.objects.get(codename="manage_runners"))
    return user


def _runner(name: str, device: str, *, ago: float = 1, **hardware) -> Runner:
    runner = Runner.objects.create(name=name, device=device, registered_by="otto-operator", salt=name)
    lanes = ["gpu", "gpu_auto", "gpu_recheck"] if device == "cuda" else ["cpu", "cpu_auto", "cpu_recheck"]
    WorkerHeartbeat.objects.create(
        name=name,
        runner=runner,
        queues=lanes,
        device=device,
        builds={"release": "2.13.0", "nightly": "2.14.0.dev20261201"},
        hardware={"cpu": "Xeon 8480", "isa": ["avx512f", "amx_tile"], **hardware},
        boot="b1",
        seen_at=timezone.now() - timedelta(seconds=ago),
        sent_at=timezone.now() - timedelta(seconds=ago),
    )
    return runner


def test_it_forbids_outsiders(client, outsider):
    client.force_login(outsider)
    assert client.get(reverse("rubric_app:runners")).status_code == 403


@pytest.mark.parametrize("persona", ["viewer", "triager"])
def test_it_lets_no_one_but_an_operator_register_or_revoke(client, request, persona):
    client.force_login(request.getfixturevalue(persona))
    runner = Runner.objects.create(name="gpu-1", device="cuda", registered_by="x")
    html = client.get(reverse("rubric_app:runners")).content.decode()
    assert "Register a runner" not in html and "Revoke" not in html
    assert client.post(reverse("rubric_app:runner_register"), {"name": "x", "device": "cpu"}).status_code == 403
    assert client.post(reverse("rubric_app:runner_revoke", args=[runner.pk])).status_code == 403
    assert client.post(reverse("rubric_app:runner_rotate", args=[runner.pk])).status_code == 403
    assert Runner.objects.count() == 1 and Runner.objects.get().revoked_at is None


def test_it_shows_each_runner_what_it_serves_runs_and_when_it_last_beat(
    client, viewer, settings, django_assert_num_queries
):
    settings.WORKER_HEARTBEAT_STALE_S, settings.AUTO_BISECT_PER_HOUR = 45, 20
    only_this_tests_workers()
    gpu = _runner("gpu-1", "cuda", gpu="NVIDIA H100 80GB HBM3")
    cpu = _runner("cpu-1", "cpu", ago=300)  # silent for five minutes
    issue = make_issue(5301, title="inductor crash")
    BisectionRun.objects.create(
        issue=issue, repro_code="x", status="running", current_mode="inductor", device="cuda", assigned_to=gpu
    )
    BisectionRun.objects.create(issue=issue, repro_code="x")  # a person's, waiting for a cpu runner
    BisectionRun.objects.create(issue=issue, repro_code="x", automatic=True, device="cuda")
    BisectionRun.objects.create(issue=issue, repro_code="x", automatic=True, status="waiting")  # over the budget
    client.force_login(viewer)
    # session, user, permissions (2), the runners with their beats, their runs with issues, the lanes' waiting runs,
    # the budget (waiting and spent), the runs waiting for it with their issues, the registrations
    with django_assert_num_queries(10):
        html = client.get(reverse("rubric_app:runners")).content.decode()
    row = html.split('id="runner-gpu-1"')[1].split("</tr>")[0]
    assert "GPU (cuda)" in row and "NVIDIA H100 80GB HBM3" in row and "Xeon 8480" in row and "amx_tile" in row
    assert "release" in row and "2.14.0.dev20261201" in row and "gpu, gpu_auto, gpu_recheck" in row
    assert "#5301" in row and "<code>inductor</code>" in row and "busy" in row
    silent = html.split('id="runner-cpu-1"')[1].split("</tr>")[0]
    assert "silent" in silent and "nothing" in silent
    lanes = html.split("Waiting runs")[1]
    assert "<td><code>cpu</code></td><td>1</td>" in lanes and "<td><code>gpu_auto</code></td><td>1</td>" in lanes
    assert "automatic, over the budget</td><td>1</td>" in lanes
    waiting = html.split('id="budget-waiting"')[1].split("</section>")[0]  # which runs wait for the budget, and why
    assert "#5301" in waiting and "1 of 20 sent in the last hour" in waiting
    # As many runners again: the same queries.
    for n in range(2, 6):
        _runner(f"cpu-{n}", "cpu")
    with django_assert_num_queries(10):
        client.get(reverse("rubric_app:runners"))
    with django_assert_num_queries(9):  # the htmx poll: the board only, no registrations
        fragment = client.get(reverse("rubric_app:runners"), headers=HTMX).content.decode()
    assert "<html" not in fragment and fragment.lstrip().startswith('<div id="runners-board"')
    assert cpu.name in fragment


def test_it_registers_a_runner_showing_its_secret_once_and_audits_it(client, operator):
    client.force_login(operator)
    response = client.post(reverse("rubric_app:runner_register"), {"name": "gpu-7", "device": "cuda"})
    runner = Runner.objects.get(name="gpu-7")
    html = response.content.decode()
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    assert f"RUNNER_SECRET={runner.secret()}" in html and "shown once" in html
    acl = html.split('<pre class="acl">')[1].split("</pre>")[0]
    assert acl.startswith("user runner-gpu-7 reset on #") and "~runner.gpu-7.*" in acl and "resetchannels" in acl
    assert hashlib.sha256(runner.secret().encode()).hexdigest() in acl and runner.secret() not in acl
    assert runner.secret() not in client.get(reverse("rubric_app:runners")).content.decode()  # never again
    event = RunnerEvent.objects.get()
    assert (event.runner, event.action, event.by) == (runner, "registered", "otto-operator")


def test_it_refuses_a_name_taken_or_unfit_for_a_queue(client, operator):
    client.force_login(operator)
    Runner.objects.create(name="gpu-1", device="cuda", registered_by="x", revoked_at=timezone.now())
    for name, why in (("gpu-1", "registered already"), ("GPU one*", "lowercase letters, digits and dashes")):
        response = client.post(reverse("rubric_app:runner_register"), {"name": name, "device": "cpu"})
        assert response.status_code == 400 and why in response.content.decode()
    assert Runner.objects.count() == 1


def test_it_revokes_a_runner_ending_its_runs_and_gives_a_new_secret_that_voids_the_old(client, operator):
    client.force_login(operator)
    runner = _runner("gpu-1", "cuda")
    old = runner.secret()
    response = client.post(reverse("rubric_app:runner_rotate", args=[runner.pk]))
    runner.refresh_from_db()
    assert runner.secret() != old and f"RUNNER_SECRET={runner.secret()}" in response.content.decode()
    issue = make_issue(5302)
    running = BisectionRun.objects.create(issue=issue, repro_code="x", status="running", assigned_to=runner)
    given = BisectionRun.objects.create(issue=issue, repro_code="x", assigned_to=runner, job_token="t")

    response = client.post(reverse("rubric_app:runner_revoke", args=[runner.pk]), {"note": "host stolen"})

    assert response.status_code == 302
    runner.refresh_from_db(), running.refresh_from_db(), given.refresh_from_db()
    assert runner.revoked_at and runner.revoked_by == "otto-operator"
    assert running.status == "failed" and "was revoked while running this bisection" in running.error
    assert (given.status, given.assigned_to, given.job_token) == ("queued", None, "")
    assert not WorkerHeartbeat.objects.filter(runner=runner).exists()
    assert list(runner.events.values_list("action", "by", "note")) == [
        ("revoked", "otto-operator", "host stolen"),
        ("rotated", "otto-operator", ""),
    ]
    assert "revoked" in client.get(reverse("rubric_app:runners")).content.decode()


def test_it_needs_a_post_to_change_anything(client, operator):
    client.force_login(operator)
    runner = Runner.objects.create(name="gpu-1", device="cuda", registered_by="x")
    assert client.get(reverse("rubric_app:runner_register")).status_code == 405
    assert client.get(reverse("rubric_app:runner_revoke", args=[runner.pk])).status_code == 405
