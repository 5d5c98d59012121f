"""A run from the Django side: who may start one, where its job is queued, the runner's reports recorded on the row
(the claim, progress, the verdict feeding suggestions), stale runs, the CLI, and a run once through real workers.
What the coordinator refuses (forged, stale, duplicate reports) and the runner without secrets:
tests/runs/test_runner.py."""

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

from rubric_app import dispatch
from rubric_app.bisection.sandbox import UID_BASE
from rubric_app.models import BisectionRun, Runner, WorkerHeartbeat
from rubric_app.runs import assignment, bisect_runs, broker, coordinator, runner
from tests.factories import make_issue, make_label
from tests.helpers import bisect_here, wait_until

REPROS = Path(__file__).parent.parent / "repros"
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


def test_it_queues_the_exact_code_and_gives_it_to_a_gpu_runner_after_commit(
    issue, triager, django_capture_on_commit_callbacks
):
    code = "import torch\n\ndef fn(x):\n    return x\n\ndef make_inputs():\n    return (torch.ones(1),)\n"
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        run = bisect_runs.start_bisection(issue=issue, user=triager, code=code, device="cuda")
    assert len(callbacks) == 1  # the coordinator is asked to give it to a runner once the row commits
    run.refresh_from_db()
    assert (run.status, run.repro_code, run.repro_style, run.requested_by) == ("queued", code, "module", triager)
    gpu = Runner.objects.create(name="gpu-1", device="cuda", registered_by="tests")
    WorkerHeartbeat.objects.create(name="gpu-1", runner=gpu, queues=["gpu", "gpu_auto"], device="cuda", boot="b")
    with django_capture_on_commit_callbacks(execute=False) as sent:
        assert assignment.assign() == 1
    run.refresh_from_db()
    with dispatch._runners_broker().connection_for_read() as conn:
        queue = conn.SimpleQueue(broker.jobs_queue("gpu-1"))
        while True:  # drop leftovers of an interrupted earlier session
            try:
                queue.get(block=False).ack()
            except queue.Empty:
                break
        sent[0]()
        message = queue.get(timeout=10)
        message.ack()
        queue.close()
    assert message.headers["task"] == dispatch.RUN_JOB and message.headers["expires"]
    # The job is self-contained: a runner looks nothing up (it holds no database).
    [job] = message.decode()[0]
    assert (job["run_id"], job["repro"], job["device"], job["style"]) == (run.pk, code, "cuda", "module")
    assert job["token"] == run.job_token and len(run.job_token) >= 32 and job["may_make_way"] is False
    assert run.assigned_to == gpu


@pytest.mark.torch
def test_it_runs_a_bisection_and_its_verdict_feeds_the_suggestions(issue, triager, django_assert_max_num_queries):
    make_label("module: dynamo")
    run = _queued(issue, triager)
    # Each report is a message the coordinator records (in this process here, as its worker does), inside a savepoint
    # pair (the transaction that makes a result and what follows it one): the job's token (1); the start (the token,
    # the claim: 2 + 2); 6 progress reports before/after eager and dynamo_eager, the probe and its result (the token,
    # the claiming attempt's results, the update: 6 x 5); the result (the token, the row, the update, the run with its
    # issue: 4 + 2); then, in that transaction, the comparison across torch builds (the issue's finished runs, its
    # comments, the finding: 3) and the suggestions refresh (the engine's 9, similar issues' 7, the latest release G12
    # compares with, the labels of the issues sharing its failure signature, the promoted model: 19); the
    # possible-duplicate mark (issue 44: the issue's row and the lookup of its candidates with the vector just
    # indexed: 2, none found here); the run read back (1); and before any of it, the run given to a registered runner
    # (issue 49: the runner got or created, the run bound to it and read back: 5); the mark's threshold in use (issue
    # 52: the latest promoted model's calibration, 1).
    with django_assert_max_num_queries(73):
        bisect_here(run)
    run.refresh_from_db()
    assert run.status == "done" and run.finished_at and run.current_mode == ""
    assert [r["status"] for r in run.results] == ["passed", "raised"] + ["skipped"] * 4
    assert run.verdict_labels[0]["label"] == "module: dynamo" and run.verdict_labels[0]["rule_id"] == "R2.3"
    assert "Unsupported" in run.verdict_labels[0]["evidence"]
    assert run.torch_version.startswith("2.") and run.worker == "here (cpu)"
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
    run = bisect_here(run)
    assert run.status == "done" and run.verdict_labels == []
    assert run.verdict_summary.startswith("needs a GPU: re-run on cuda") and "Fix the repro" not in run.verdict_summary
    assert not issue.suggestions.filter(source="bisection").exists()


def test_it_fails_runs_left_running_past_the_longest_possible_run(issue, triager):
    stale, fresh = _queued(issue, triager), _queued(issue, triager)
    long_ago = timezone.now() - coordinator.longest_run() - timedelta(minutes=1)
    BisectionRun.objects.filter(pk=stale.pk).update(status="running", started_at=long_ago)
    BisectionRun.objects.filter(pk=fresh.pk).update(status="running", started_at=timezone.now())
    assert coordinator.fail_stale_runs() == 1
    assert BisectionRun.objects.get(pk=stale.pk).status == "failed"
    assert BisectionRun.objects.get(pk=fresh.pk).status == "running"


@pytest.mark.parametrize("device", ["cuda", "both"])
def test_it_fails_a_run_for_a_device_this_worker_does_not_serve(issue, triager, settings, device):
    settings.BISECTION_DEVICE = "cpu"
    run = bisect_here(_queued(issue, triager, device=device))
    assert run.status == "failed" and "serves cpu" in run.error
    assert run.results == []  # nothing ran


def test_it_sends_a_cpu_and_cuda_comparison_to_the_gpu_workers():
    # R2.4 needs both devices: the CPU bisection runs where cuda is there to re-run an Inductor failure.
    assert bisect_runs.queue_for("both") == bisect_runs.queue_for("cuda") == "gpu"
    assert bisect_runs.queue_for("cpu") == "cpu"
    assert "both" in runner.SERVES["cuda"] and "both" not in runner.SERVES["cpu"]


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
def test_it_writes_progress_to_the_row_through_a_real_runner(celery_worker_process, triager):
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
    # The runner says which mode it is running before that mode's result lands (a warm fork server
    # can finish eager between two polls, so no particular mode is asserted).
    assert any(status == "running" and mode and mode not in done for status, mode, done in seen), seen
    assert any(status == "running" and done for status, _, done in seen), seen  # results landed as it went
    assert run.verdict_labels[0]["label"] == "module: dynamo"


@pytest.mark.django_db(transaction=True)
def test_it_refuses_to_run_in_a_non_root_runner_and_shows_why_on_the_run_page(client, triager):
    # No isolation, no run: a runner process that is not root (a forked copy of this one, dropped to
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
            bisect_here(run)
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
    capped = coordinator.capped_results(huge)
    assert len(json.dumps(capped)) <= coordinator.MAX_RESULTS_BYTES
    assert [r["mode"] for r in capped] == list("abcdef") and capped[0]["message"].startswith("m")
    small = [{"mode": "eager", "status": "passed", "message": "ok"}]
    assert coordinator.capped_results(small) is small


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
