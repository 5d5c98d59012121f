"""Rows for tests: labels, issues and users in the roles of the dashboard (tests/conftest.py's personas use them)."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone

from rubric_app.bisection import builds
from rubric_app.models import BisectionRun, Issue, Label, Suggestion
from rubric_app.roles import ensure_roles
from tests.torch_builds import SIN_REPRO


def make_user(username: str, role: str | None):
    user = get_user_model().objects.create_user(username=username, password="password")
    if role:
        user.groups.add(ensure_roles()[role])
    return user


def make_label(name: str, color: str = "ededed", allowed: bool = True, github=None) -> Label:
    """A label of the mirror's catalog; with `github` (the fake GitHub), of the repository's too: a decision asks GitHub
    for each label it adds before writing (applying._missing_labels)."""
    if github is not None:
        github.add_label(name, color)
    return Label.objects.get_or_create(name=name, defaults={"color": color, "allowed_for_triage": allowed})[0]


def make_issue(
    number: int = 1001, title: str = "torch.compile fails", body: str = "", labels=("oncall: pt2",), **fields
) -> Issue:
    issue = Issue.objects.create(
        number=number,
        title=title,
        body=body,
        html_url=f"https://github.com/pytorch/pytorch/issues/{number}",
        updated_at=fields.pop("updated_at", timezone.now()),
        **fields,
    )
    issue.labels.set([make_label(name) for name in labels])
    return issue


def opened_issue_payload(number: int, *, repo: str, title: str, body: str, author: str) -> dict:
    """An `issues` webhook's payload as GitHub sends it when an oncall: pt2 issue is opened."""
    return {
        "action": "opened",
        "repository": {"full_name": repo},
        "issue": {
            "number": number,
            "title": title,
            "body": body,
            "state": "open",
            "user": {"login": author},
            "labels": [{"name": "oncall: pt2", "color": "ededed"}],
            "html_url": f"https://github.com/pytorch/pytorch/issues/{number}",
            "created_at": "2026-12-01T10:00:00Z",
            "updated_at": "2026-12-01T10:00:00Z",
            "comments": 0,
        },
    }


# The project's torch, and per-mode results of a finished run on it: every mode passing, and Inductor raising.
RELEASE = "2.13.0+cpu"
PASSED = [
    {"mode": m, "status": "passed", "phase": "", "exception": "", "message": "", "wall_s": 0.1, "probes": {}}
    for m in ("eager", "dynamo_eager", "aot_eager", "aot_eager_decomp_partition", "inductor")
]
INDUCTOR_RAISED = PASSED[:-1] + [
    {
        "mode": "inductor",
        "status": "raised",
        "phase": "backend_compile",
        "exception": "torch._dynamo.exc.BackendCompilerFailed",
        "message": "lowering failed",
        "wall_s": 0.3,
        "probes": {},
    }
]


def make_finished_run(
    issue, *, code: str = SIN_REPRO, build="", version=RELEASE, results=PASSED, ago=60, **fields
) -> BisectionRun:
    """A bisection run that finished `ago` minutes ago on `build` (torch `version`) with these per-mode results."""
    finished = timezone.now() - timedelta(minutes=ago)
    return BisectionRun.objects.create(
        issue=issue,
        status=BisectionRun.Status.DONE,
        repro_code=code,
        repro_hash=builds.repro_hash(code),
        build=build,
        torch_version=version,
        results=results,
        outcome=builds.outcome(results),
        verdict_summary=f"First failure: {builds.first_failure(results)}"
        if builds.first_failure(results)
        else "No failure",
        created_at=finished - timedelta(seconds=30),
        started_at=finished - timedelta(seconds=20),
        finished_at=finished,
        **fields,
    )


def make_suggestion(issue: Issue, label: str, rule_id: str = "R1.2", **fields) -> Suggestion:
    """A stored suggestion of `label` for `issue` under `rule_id`, with the model's defaults (an `add` from a rule,
    pre-selected) unless `fields` say otherwise (kind="avoid", confidence=0.4, preselected=False, evidence=...)."""
    return Suggestion.objects.create(issue=issue, label=label, rule_id=rule_id, **fields)


SLEEPS = """import time
import torch

def fn(x):
    time.sleep({seconds})
    return x + {n}

def make_inputs():
    return (torch.ones(2),)
"""


EAGER_SLEEPS = """import time
import torch

def fn(x):
    if not torch.compiler.is_compiling():
        time.sleep({seconds})
    return x + 1

def make_inputs():
    return (torch.ones(2),)
"""


def eager_sleeping_repro(seconds: float) -> str:
    """A module-style repro that sleeps `seconds` in plain eager only: a long first mode, and a run that ends soon
    after (its compiled modes do not sleep)."""
    return EAGER_SLEEPS.format(seconds=seconds)


def sleeping_repro(seconds: float, n: int = 1) -> str:
    """A module-style repro whose every mode sleeps `seconds` (n makes each repro a different one): a runner is
    surely mid-run while it sleeps."""
    return SLEEPS.format(seconds=seconds, n=n)
