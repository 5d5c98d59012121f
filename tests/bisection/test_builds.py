"""rubric_app/bisection/builds.py: TORCH_BUILDS, torch version order, and what one repro's runs on several builds
say together (issue #29: "passes on 2.12.1, fails on 2.13.0" is a regression, R11; reproduced before and passing
now may be fixed). Pure Python: no database, no torch."""

from __future__ import annotations

import sys

import pytest

from rubric_app.bisection import builds
from rubric_app.bisection.builds import BuildRun, compare
from tests.torch_builds import NEWER_VERSION

PASSED = [{"mode": m, "status": "passed"} for m in ("eager", "aot_eager", "inductor")]
INDUCTOR_RAISED = [
    {"mode": "eager", "status": "passed"},
    {"mode": "aot_eager", "status": "passed"},
    {"mode": "inductor", "status": "raised"},
]
TIMED_OUT = [{"mode": "eager", "status": "passed"}, {"mode": "inductor", "status": "timeout"}]


def test_it_reads_torch_builds():
    assert builds.parse("") == {"default": sys.executable}
    assert builds.parse(" release=/opt/a/bin/python , nightly=/opt/b/bin/python ") == {
        "release": "/opt/a/bin/python",
        "nightly": "/opt/b/bin/python",
    }
    assert list(builds.parse("nightly=/b,release=/a")) == ["nightly", "release"]  # the first is a run's default


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("release", "is not name=/path/to/python"),
        ("Release=/a", "is not name=/path/to/python"),
        ("release=bin/python", "must be an absolute path"),
        ("a=/x,a=/y", "names 'a' twice"),
    ],
)
def test_it_refuses_a_malformed_torch_builds(spec, says):
    with pytest.raises(ValueError, match=says):
        builds.parse(spec)


def test_it_orders_torch_versions():
    versions = ["2.13.1", "2.13.0", "2.13.0rc1", "2.13.0.dev20261101+cpu", "2.12.1+cu128", "junk", "2.14.0a0+git12ab"]
    assert sorted(versions, key=builds.version_key) == [
        "junk",
        "2.12.1+cu128",
        "2.13.0.dev20261101+cpu",
        "2.13.0rc1",
        "2.13.0",
        "2.13.1",
        "2.14.0a0+git12ab",
    ]
    assert builds.newer("2.13.0.dev20261202", "2.13.0.dev20261201")
    assert not builds.newer("2.13.0+cpu", "2.13.0")  # the local part is the same build


def test_it_reads_the_installed_version_without_importing_torch():
    assert builds.installed_version(sys.executable).startswith("2.13.0")
    assert builds.installed_version("/nonexistent/python") == ""


def test_it_tells_a_runs_outcome():
    assert builds.outcome(PASSED) == "passed"
    assert builds.outcome(INDUCTOR_RAISED) == "reproduced"
    assert builds.outcome(TIMED_OUT) == "inconclusive"
    assert builds.outcome([]) == "inconclusive"
    assert builds.outcome([{"mode": "eager", "status": "raised"}, {"mode": "inductor", "status": "skipped"}]) == (
        "reproduced"
    )


def test_it_calls_passes_on_older_fails_on_newer_a_regression():
    runs = [BuildRun(2, "nightly", "2.13.0", INDUCTOR_RAISED), BuildRun(1, "release", "2.12.1", PASSED)]
    found = compare(runs)
    assert found.kind == "regression"
    assert (found.older, found.newer) == (1, 2)
    assert found.summary == "passes on 2.12.1 (release); fails on 2.13.0 (nightly): inductor raised"


def test_it_does_not_call_fails_on_both_a_regression():
    runs = [BuildRun(2, "nightly", "2.13.0", INDUCTOR_RAISED), BuildRun(1, "release", "2.12.1", INDUCTOR_RAISED)]
    assert compare(runs).kind == "fails_on_both"


def test_it_calls_reproduced_before_and_passing_now_may_be_fixed():
    runs = [BuildRun(2, "nightly", NEWER_VERSION, PASSED), BuildRun(1, "release", "2.13.0+cpu", INDUCTOR_RAISED)]
    found = compare(runs)
    assert found.kind == "may_be_fixed"
    assert found.newer_version == NEWER_VERSION
    assert found.summary.startswith("fails on 2.13.0+cpu (release): inductor raised; passes on 2.14.0")


def test_it_counts_the_reporters_version_as_where_it_reproduced():
    passed_here = [BuildRun(1, "default", "2.13.0+cpu", PASSED)]
    found = compare(passed_here, reported="2.5.1")
    assert found.kind == "may_be_fixed"
    assert found.summary == "reported on 2.5.1; passes on 2.13.0+cpu"
    assert found.older is None
    assert compare(passed_here, reported="2.13.0") is None  # the same version: nothing learned
    assert compare(passed_here) is None
    assert compare([BuildRun(1, "default", "2.13.0+cpu", INDUCTOR_RAISED)], reported="2.5.1") is None


def test_it_reads_the_latest_run_per_version_and_ignores_inconclusive_ones():
    runs = [
        BuildRun(4, "nightly", "2.14.0", TIMED_OUT),  # tells nothing
        BuildRun(3, "release", "2.13.0", PASSED),  # the latest on 2.13.0
        BuildRun(2, "release", "2.13.0", INDUCTOR_RAISED),
        BuildRun(1, "old", "2.12.0", PASSED),
    ]
    assert compare(runs).kind == "passes_on_both"


@pytest.mark.parametrize(
    ("text", "version"),
    [
        (
            "## Versions\nCollecting environment information...\nPyTorch version: 2.5.1+cu124\nIs debug build: False",
            "2.5.1",
        ),
        ("PyTorch version: 2.6.0.dev20241112+cu124", "2.6.0.dev20241112"),
        ("pip install torch==2.4.0", "2.4.0"),
        ("It worked in torch 2.3.1 but not any more", ""),  # where it passed, maybe: no reporter's version
        ("torch version: 2.7.0", "2.7.0"),
        ("I am on PyTorch version 2.8.0 with CUDA 12.8", "2.8.0"),
        (">>> torch.__version__\n'2.9.1+cu128'", "2.9.1"),
        ("Python 3.11, numpy 2.5.1", ""),
        ("", ""),
    ],
)
def test_it_reads_the_reporters_version(text, version):
    assert builds.reported_version(text) == version


def test_it_reads_collect_env_before_a_version_mentioned_in_prose():
    text = "torch version 2.3.1 in the notebook.\n\nPyTorch version: 2.5.0\n"
    assert builds.reported_version(text) == "2.5.0"


def test_it_hashes_a_repro_by_its_code_only():
    assert builds.repro_hash("import torch\nx = 1  \n\n") == builds.repro_hash("\nimport torch\nx = 1")
    assert builds.repro_hash("x = 1") != builds.repro_hash("x = 2")


def test_it_measures_may_be_fixed_on_cached_pool_runs(tmp_path, capsys):
    import json

    from django.core.management import call_command

    records = [
        {"number": 1, "state": "closed", "labels": [], "body": "PyTorch version: 2.5.0\n"},  # passes here: may be fixed
        {"number": 2, "state": "open", "labels": [], "body": "no version given"},
        {"number": 3, "state": "open", "labels": [], "body": "PyTorch version: 2.5.0\n"},  # still fails here
    ]
    mode = {"phase": "", "exception": "", "message": "", "wall_s": 0.1, "probes": {}}
    passed = [{**mode, "mode": "eager", "status": "passed"}, {**mode, "mode": "inductor", "status": "passed"}]
    raised = [passed[0], {**mode, "mode": "inductor", "status": "raised", "phase": "backend_compile"}]
    runs = [{"number": n, "torch": "2.13.0+cpu", "results": r} for n, r in ((1, passed), (2, passed), (3, raised))]
    (tmp_path / "pool.jsonl").write_text("\n".join(map(json.dumps, records)))
    (tmp_path / "runs.jsonl").write_text("\n".join(map(json.dumps, runs)))
    call_command("evaluate_verdicts", cache=str(tmp_path / "runs.jsonl"), input=[str(tmp_path / "pool.jsonl")])
    assert capsys.readouterr().out.splitlines()[-1] == (
        "may be fixed: the reporter's version is readable on 2 of 3; 1 pass here on a newer build than theirs, 1 of "
        "them closed since (1.00; of every issue run: 1 of 3, 0.33; of every run that passes here, whatever the "
        "reporter's version: 1 of 2, 0.50)"
    )
