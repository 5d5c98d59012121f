"""Work is started one way (issue 42): dispatch.py is the only module that sends a message to a worker (a Celery task,
or a runner's signed report), each task is named there once, and what it sends waits for the caller's transaction to
commit. The dashboard's workers know no runner's task, and a runner's worker knows nothing else (issue 49)."""

from __future__ import annotations

import ast

from rubric_app import dispatch
from tests.test_architecture import ROOT, project_modules
from triage_site.celery import app

SENDING = {"delay", "apply_async", "send_task", "delay_on_commit", "apply_async_on_commit", "signature", "publish"}


def _sends(path) -> list[str]:
    """Each call of a Celery sending method in the module at `path`, as "line: name"."""
    return [
        f"{node.lineno}: .{node.func.attr}(...)"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SENDING
    ]


def test_it_sends_celery_messages_from_dispatch_alone():
    senders = {
        name: found
        for name, path in project_modules().items()
        if name != "rubric_app.dispatch" and (found := _sends(path))
    }
    assert senders == {}, senders


def test_it_finds_a_send_outside_dispatch_when_there_is_one(tmp_path):
    # The positive control: the ways work used to be started (issue 42's review counted six call sites).
    module = tmp_path / "old.py"
    module.write_text(
        "run_bisection_task.apply_async_on_commit((1,), queue='cpu')\n"
        "current_app.send_task('rubric_app.tasks.run_bisection_task', args=(1,))\n"
        "apply_decision_task.delay(2)\n"
    )
    assert _sends(module) == ["1: .apply_async_on_commit(...)", "2: .send_task(...)", "3: .delay(...)"]


def test_it_names_each_task_it_starts_as_the_workers_register_it():
    app.loader.import_default_modules()
    started = {
        dispatch.APPLY_DECISION,
        dispatch.PROCESS_WEBHOOK,
        dispatch.ASSIGN_RUNS,
        dispatch.PROVISION_RUNNER,
        dispatch.RECORD_REPORT,
        dispatch.RECORD_HEARTBEAT,
    }
    assert started <= set(app.tasks), started - set(app.tasks)
    # Spelled once: tasks.py takes each of these names from dispatch.py, never as a string of its own.
    tasks_source = (ROOT / "rubric_app" / "tasks.py").read_text()
    assert not [name for name in started if f'"{name}"' in tasks_source]


def test_it_runs_jobs_on_the_runner_app_alone():
    from triage_site import runner

    app.loader.import_default_modules()
    assert dispatch.RUN_JOB not in app.tasks  # a process holding the database never knows how to run one
    assert runner.run_job_task.name == dispatch.RUN_JOB and dispatch.RUN_JOB in runner.app.tasks
    assert not set(runner.app.tasks) & {dispatch.RECORD_REPORT, dispatch.ASSIGN_RUNS, dispatch.APPLY_DECISION}
    assert runner.app.conf.worker_enable_remote_control is False


def test_it_sends_a_decision_only_once_the_transaction_commits(issue, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        dispatch.start_decision(1, countdown=10)
        dispatch.start_delivery(2)
    assert len(callbacks) == 2  # nothing on the broker until the rows a worker will read are there
