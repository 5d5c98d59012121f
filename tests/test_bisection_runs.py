"""The Django side: who may start a run, where it is queued, the claim, progress on the row, the verdict
feeding suggestions, stale and redelivered runs, the CLI, and the task once through a real worker."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.exceptions import PermissionDenied
from django.core.management import CommandError, call_command
from django.utils import timezone

from rubric_app.bisection.sandbox import UID_BASE
from rubric_app.models import BisectionRun
from rubric_app.runs import bisect_runs, bisecting
from tests.factories import make_issue, make_label
from tests.helpers import wait_until
from triage_site.celery import app

REPROS = Path(__file__).parent / "repros"
GRAPH_BREAK = (REPROS / "dynamo_graph_break.py").read_text()


def _queued(issue, user, device="cpu") -> BisectionRun:
    return BisectionRun.objects.create(
        issue=issue, requested_by=user, device=device, repro_code=GRAPH_BREAK, repro_style="module"
    )


@pytest.mark.parametrize("persona", ["viewer", "outsider"])
def test_it_refuses_to_start_a_run_without_the_permission(request, issue, persona):
    user = request.getfixturevalue(persona)
    with pytest.raises(PermissionDenied):
        bisect_runs.start_bisection(issue=issue, user=user, code=GRAPH_BREAK, device="cpu")
    assert not BisectionRun.objects.exists()


def test_it_rejects_an_unknown_device_or_empty_code(issue, triager):
    with pytest.raises(ValueError, match="unknown device"):
        bisect_runs.start_bisection(issue=issue, user=triager, code=GRAPH_BREAK, device="tpu")
    with pytest.raises(ValueError, match="empty"):
        bisect_runs.start_bisection(issue=issue, user=triager, code="  \n", device="cpu")
    assert not BisectionRun.objects.exists()


def test_it_queues_the_exact_code_on_the_gpu_queue_after_commit(issue, triager, django_capture_on_commit_callbacks):
    code = "import torch\n\ndef fn(x):\n    return x\n\ndef make_inputs():\n    return (torch.ones(1),)\n"
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        run = bisect_runs.start_bisection(issue=issue, user=triager, code=code, device="cuda")
    assert len(callbacks) == 1  # held until the row commits: a worker never looks for an uncommitted run
    run.refresh_from_db()
    assert (run.status, run.repro_code, run.repro_style, run.requested_by) == ("queued", code, "module", triager)
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue("gpu")
        while True:  # drop leftovers of an interrupted earlier session
            try:
                queue.get(block=False).ack()
            except queue.Empty:
                break
        callbacks[0]()
        message = queue.get(timeout=10)
        message.ack()
        queue.close()
    assert message.headers["task"] == "rubric_app.tasks.run_bisection_task"
    assert message.headers["argsrepr"] == f"({run.pk},)"


@pytest.mark.torch
def test_it_runs_a_bisection_and_its_verdict_feeds_the_suggestions(issue, triager, django_assert_max_num_queries):
    make_label("module: dynamo")
    run = _queued(issue, triager)
    # 10 of ours: stale sweep, claim, fetch, 6 progress saves (before/after eager and dynamo_eager,
    # the probe, the probed result), finish; then the suggestions refresh (9 today, engine's own, and
    # 7 for similar issues: the index's savepoint pair, lock, delete, insert and update, the vote's
    # lookup); the comparison across torch builds (the issue's finished runs, its comments for whose repro each run's
    # is, the finding stored: 3); and the savepoint pair that makes "finish", "compare" and "refresh" one transaction.
    # Three more since issues 36 to 38: the repository's latest release the engine compares a stated version with
    # (G12, the stored SkillFile), the labels of the issues sharing its failure signature (refreshed together), and
    # which trained model is promoted (one indexed query a refresh; the weights are reloaded only when it changed).
    # Two more since issue 44: the possible-duplicate mark's queue issues and their candidates (it writes only a
    # mark that changed).
    with django_assert_max_num_queries(36):
        bisecting.run_bisection(run.pk)
    run.refresh_from_db()
    assert run.status == "done" and run.finished_at and run.current_mode == ""
    assert [r["status"] for r in run.results] == ["passed", "raised"] + ["skipped"] * 4
    assert run.verdict_labels[0]["label"] == "module: dynamo" and run.verdict_labels[0]["rule_id"] == "R2.3"
    assert "Unsupported" in run.verdict_labels[0]["evidence"]
    assert run.torch_version.startswith("2.") and run.worker.endswith("(cpu)")
    assert run.sandbox_report["netns"] is True and run.sandbox_report["uid"] >= UID_BASE
    assert "===== dynamo_eager: raised" in run.log
    suggestion = issue.suggestions.get(label="module: dynamo", kind="add")
    assert (suggestion.source, suggestion.evidence_source) == ("bisection", f"bisection:{run.pk}")


@pytest.mark.torch
@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="on a GPU machine the cuda repro runs")
def test_it_says_a_cuda_repro_on_a_cpu_worker_needs_a_gpu_and_feeds_no_suggestion(issue, triager):
    run = BisectionRun.objects.create(
        issue=issue,
        requested_by=triager,
        device="cpu",
        repro_code=(REPROS / "needs_cuda.py").read_text(),
        repro_style="script",
    )
    bisecting.run_bisection(run.pk)
    run.refresh_from_db()
    assert run.status == "done" and run.verdict_labels == []
    assert run.verdict_summary.startswith("needs a GPU: re-run on cuda") and "Fix the repro" not in run.verdict_summary
    assert not issue.suggestions.filter(source="bisection").exists()


def test_it_runs_a_claimed_run_only_once(issue, triager):
    run = _queued(issue, triager)
    BisectionRun.objects.filter(pk=run.pk).update(status="done", verdict_summary="kept")
    assert bisecting.run_bisection(run.pk).verdict_summary == "kept"
    run.refresh_from_db()
    assert (run.status, run.verdict_summary) == ("done", "kept")


def test_it_fails_a_redelivered_run_whose_worker_died(issue, triager):
    run = _queued(issue, triager)
    BisectionRun.objects.filter(pk=run.pk).update(status="running", started_at=timezone.now(), task_id="first")
    bisecting.run_bisection(run.pk, task_id="second")  # the sweep's duplicate while it runs elsewhere: left alone
    run.refresh_from_db()
    assert run.status == "running"
    bisecting.run_bisection(run.pk, task_id="first")  # its own message again: the worker that took it died
    run.refresh_from_db()
    assert run.status == "failed" and "died" in run.error and run.finished_at


def test_it_fails_runs_left_running_past_the_longest_possible_run(issue, triager):
    stale, fresh = _queued(issue, triager), _queued(issue, triager)
    long_ago = timezone.now() - bisecting.longest_run() - timedelta(minutes=1)
    BisectionRun.objects.filter(pk=stale.pk).update(status="running", started_at=long_ago)
    BisectionRun.objects.filter(pk=fresh.pk).update(status="running", started_at=timezone.now())
    assert bisecting.fail_stale_runs() == 1
    assert BisectionRun.objects.get(pk=stale.pk).status == "failed"
    assert BisectionRun.objects.get(pk=fresh.pk).status == "running"


@pytest.mark.parametrize("device", ["cuda", "both"])
def test_it_fails_a_run_for_a_device_this_worker_does_not_serve(issue, triager, settings, device):
    settings.BISECTION_DEVICE = "cpu"
    run = bisecting.run_bisection(_queued(issue, triager, device=device).pk)
    assert run.status == "failed" and "serves cpu" in run.error
    assert run.results == []  # nothing ran


def test_it_sends_a_cpu_and_cuda_comparison_to_the_gpu_workers():
    # R2.4 needs both devices: the CPU bisection runs where cuda is there to re-run an Inductor failure.
    assert bisect_runs.queue_for("both") == bisect_runs.queue_for("cuda") == "gpu"
    assert bisect_runs.queue_for("cpu") == "cpu"
    assert "both" in bisecting.SERVES["cuda"] and "both" not in bisecting.SERVES["cpu"]


@pytest.mark.torch
def test_it_bisects_a_file_from_the_command_line():
    out = StringIO()
    call_command("bisect_repro", str(REPROS / "fake_shape_autograd.py"), "--device", "cpu", "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert [r["mode"] for r in report["results"]][:3] == ["eager", "dynamo_eager", "aot_eager"]
    assert [(x["label"], x["rule_id"]) for x in report["labels"]] == [("module: pt2-dispatcher", "R2.1")]
    text = StringIO()
    call_command("bisect_repro", str(REPROS / "broken_in_eager.py"), stdout=text)
    assert "not a compile bug" in text.getvalue() and "netns=True" in text.getvalue()
    with pytest.raises(CommandError, match="cannot read"):
        call_command("bisect_repro", str(REPROS / "missing.py"))


@pytest.mark.torch
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_writes_progress_to_the_row_through_a_real_worker(celery_worker_process, triager):
    issue = make_issue(4343)
    run = bisect_runs.start_bisection(issue=issue, user=triager, code=GRAPH_BREAK, device="cpu")
    seen = []

    def finished():
        row = BisectionRun.objects.values("status", "current_mode", "results").get(pk=run.pk)
        seen.append((row["status"], row["current_mode"], [r["mode"] for r in row["results"]]))
        return row["status"] in ("done", "failed")

    wait_until(finished, timeout=180, interval=0.05)
    run.refresh_from_db()
    assert run.status == "done", run.error
    # The worker says which mode it is running before that mode's result lands (a warm fork server
    # can finish eager between two polls, so no particular mode is asserted).
    assert any(status == "running" and mode and mode not in done for status, mode, done in seen), seen
    assert any(status == "running" and done for status, _, done in seen), seen  # results landed as it went
    assert run.verdict_labels[0]["label"] == "module: dynamo"


@pytest.mark.django_db(transaction=True)
def test_it_refuses_to_run_in_a_non_root_worker_and_shows_why_on_the_run_page(client, triager):
    # No isolation, no run: a worker process that is not root (a forked copy of this one, dropped to
    # uid 65534 with its own database connection) fails the run with the reason instead of degrading.
    issue = make_issue(4545)
    run = _queued(issue, triager)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            from django.db import connections

            from rubric_app.bisection import harness

            for conn in connections.all():
                conn.connection = None  # the parent's socket stays the parent's
            harness._server = None
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            bisecting.run_bisection(run.pk)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    run.refresh_from_db()
    assert run.status == "failed" and run.results == []
    assert "runs as uid 65534: refusing to run untrusted repro code without isolation" in run.error
    assert "refusing" in run.sandbox_report["refused"]
    client.force_login(triager)
    html = client.get(issue.get_absolute_url()).content.decode()
    assert "Sandbox: refused, the repro did not run" in html


def test_it_caps_the_results_it_stores(issue, triager):
    huge = [{"mode": m, "status": "raised", "message": "m" * 10**6, "traceback": "t" * 10**6} for m in "abcdef"]
    capped = bisecting.capped_results(huge)
    assert len(json.dumps(capped)) <= bisecting.MAX_RESULTS_BYTES
    assert [r["mode"] for r in capped] == list("abcdef") and capped[0]["message"].startswith("m")
    small = [{"mode": "eager", "status": "passed", "message": "ok"}]
    assert bisecting.capped_results(small) is small


def test_it_keeps_run_blobs_out_of_the_pages_that_do_not_show_them(client, issue, triager):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.urls import reverse

    run = _queued(issue, triager)
    BisectionRun.objects.filter(pk=run.pk).update(
        status="done",
        log="x" * 2_000_000,
        verdict_summary="done",
        results=[{"mode": "eager", "status": "passed", "phase": "", "exception": "", "message": "", "wall_s": 1.0}],
    )
    client.force_login(triager)
    pages = {
        "list": (reverse("rubric_app:bisections"), {}, ('."log"', '."results"', '."repro_code"', '."sandbox_report"')),
        "status": (reverse("rubric_app:bisection", args=[run.pk]), {"HX-Request": "true"}, ('."log"', '."repro_code"')),
        "issue": (issue.get_absolute_url(), {}, ('."log"',)),
    }
    for name, (url, headers, columns) in pages.items():
        with CaptureQueriesContext(connection) as queries:
            assert client.get(url, headers=headers).status_code in (200, 286), name
        runs_sql = [q["sql"] for q in queries.captured_queries if '"rubric_app_bisectionrun"' in q["sql"]]
        assert runs_sql, name
        for column in columns:
            assert not any(f'"rubric_app_bisectionrun"{column}' in sql for sql in runs_sql), (name, column)
