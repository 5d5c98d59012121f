"""Torch builds: which interpreters a worker hosts, how their versions order, and what two builds' runs of one
repro say together (pure Python: no Django, no torch).

A worker hosts one build per interpreter named in TORCH_BUILDS ("release=/opt/torch-2.13/bin/python,
nightly=/opt/torch-nightly/bin/python"); without it, the worker's own interpreter is the one build, "default".
Each build's fork server is that interpreter, so a repro runs on exactly the torch installed there.

compare() reads the same repro's runs on several versions:
- it passed on an older version and reproduces on a newer one: a regression (R11: the meeting sees it, with
  `module: regression`);
- it reproduced on an older version (or the reporter's, read from their collect_env or version line) and passes
  on a newer one: it may be fixed, and the reporter is asked to confirm, never closed silently;
- it fails on both, or passes on both: neither.
"""

from __future__ import annotations

import functools
import hashlib
import re
import subprocess
import sys
from dataclasses import dataclass

DEFAULT = "default"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,39}$")
# Statuses that mean the repro showed a failure; timeouts and resource limits tell nothing about a fix.
REPRODUCED = ("raised", "diverged", "crashed", "oom")
_VERSION = re.compile(r"(\d{1,2})\.(\d{1,3})(?:\.(\d{1,3}))?(?:\.?(a|b|rc|dev)(\d{0,10}))?")


def parse(spec: str, default_python: str = sys.executable) -> dict[str, str]:
    """TORCH_BUILDS as {name: interpreter}, in the order given (the first is a run's build when it names none).

    Raises ValueError saying what is wrong: a name that is not lowercase letters, digits, '.', '_' or '-', a
    path that is not absolute, a name given twice.
    """
    if not spec.strip():
        return {DEFAULT: default_python}
    builds: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, sep, python = (s.strip() for s in part.partition("="))
        if not sep or not _NAME.match(name):
            raise ValueError(f"TORCH_BUILDS: {part!r} is not name=/path/to/python (name: a-z, 0-9, '.', '_', '-')")
        if not python.startswith("/"):
            raise ValueError(f"TORCH_BUILDS: the interpreter of {name!r} must be an absolute path, not {python!r}")
        if name in builds:
            raise ValueError(f"TORCH_BUILDS names {name!r} twice")
        builds[name] = python
    return builds


def repro_hash(code: str) -> str:
    """The repro's identity: its code without trailing spaces or blank edges (an edit elsewhere changes nothing)."""
    normalized = "\n".join(line.rstrip() for line in code.strip().splitlines())
    return hashlib.sha256(normalized.encode()).hexdigest()


def installed_version(python: str) -> str:
    """The torch version pip installed for `python` ("" with no torch there): read from its metadata in a
    subprocess (a tenth of a second; importing torch would take seconds), so a worker's heartbeat can say it."""
    probe = "import importlib.metadata as m\ntry: print(m.version('torch'))\nexcept m.PackageNotFoundError: print('')"
    try:
        done = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True, timeout=30, env={})
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip()[:100] if done.returncode == 0 else ""


MAX_PACKAGES = 2000


@functools.cache
def installed_packages(python: str) -> tuple[str, ...]:
    """The distributions installed for `python` (normalized names: lower case, "-" and "." as "_"), sorted; () when it
    cannot tell. A runner's heartbeat and each RESULT carry them, so a verdict can say a repro's import is one this
    runner lacks. Read in a subprocess from the metadata (no import of torch); cached per interpreter."""
    probe = "import importlib.metadata as m\nfor d in m.distributions(): print(d.metadata['Name'] or '')"
    try:
        done = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True, timeout=60, env={})
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if done.returncode != 0:
        return ()
    names = {re.sub(r"[-.]+", "_", line.strip().lower())[:100] for line in done.stdout.splitlines() if line.strip()}
    return tuple(sorted(names))[:MAX_PACKAGES]


def version_key(version: str) -> tuple:
    """An order for torch versions: 2.12.1 < 2.13.0.dev20261101 < 2.13.0rc1 < 2.13.0 < 2.13.1; the local part
    (+cpu, +cu128) does not count. A string that is no version sorts first."""
    found = _VERSION.search(version.split("+")[0])
    if not found:
        return (-1,)
    major, minor, micro, pre, number = found.groups()
    stage = {"dev": 0, "a": 1, "b": 2, "rc": 3}.get(pre or "", 4)
    return (int(major), int(minor), int(micro or 0), stage, int(number or 0))


def newer(a: str, b: str) -> bool:
    """Whether version a is newer than version b."""
    return version_key(a) > version_key(b)


def newest(hosted: dict[str, str]) -> tuple[str, str] | None:
    """(name, version) of the newest build in {name: version}, or None when there is none."""
    if not hosted:
        return None
    return max(hosted.items(), key=lambda item: version_key(item[1]))


def outcome(results: list[dict]) -> str:
    """One run's outcome: "reproduced" (a mode raised, diverged, crashed or ran out of memory), "passed" (every
    mode passed), or "inconclusive" (a timeout or a resource limit, or nothing ran)."""
    statuses = [r.get("status", "") for r in results]
    if any(s in REPRODUCED for s in statuses):
        return "reproduced"
    if statuses and all(s in ("passed", "skipped") for s in statuses):
        return "passed"
    return "inconclusive"


def first_failure(results: list[dict]) -> str:
    """The first mode that did not pass, and how ("inductor raised"), or ""."""
    for r in results:
        if r.get("status") not in ("passed", "skipped"):
            return f"{r.get('mode', '?')} {r.get('status', '?')}"
    return ""


@dataclass(frozen=True)
class BuildRun:
    """One finished run of the repro: its id, build name, torch version and per-mode results."""

    run_id: int
    build: str
    version: str
    results: list

    @property
    def outcome(self) -> str:
        return outcome(self.results)

    def describe(self) -> str:
        where = f"{self.version} ({self.build})" if self.build and self.build != DEFAULT else self.version
        failed = first_failure(self.results)
        return f"{'fails' if self.outcome == 'reproduced' else 'passes'} on {where}" + (
            f": {failed}" if failed and self.outcome == "reproduced" else ""
        )


@dataclass(frozen=True)
class Comparison:
    """What the runs say together. kind: "regression", "may_be_fixed", "fails_on_both", "passes_on_both"."""

    kind: str
    summary: str
    older: int | None  # run ids (the reporter's version, which no run of ours stands for: None)
    newer: int | None
    older_version: str = ""
    newer_version: str = ""
    # Why a repro passing on the newer build is not evidence that the issue may be fixed (bisection/evidence.py).
    held_back: str = ""

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "summary": self.summary,
            "older": self.older,
            "newer": self.newer,
            "older_version": self.older_version,
            "newer_version": self.newer_version,
            "held_back": self.held_back,
        }


def compare(runs: list[BuildRun], reported: str = "") -> Comparison | None:
    """Compare one repro's runs across versions (the latest run per version counts; pass them newest first).

    reported: the torch version the reporter ran ("" when they gave none): where they saw the bug, it counts as
    a run that reproduced on that version. None when there is nothing to compare (one version, no reporter's).
    """
    latest: dict[str, BuildRun] = {}
    for run in runs:
        if run.version and run.outcome != "inconclusive":
            latest.setdefault(run.version, run)
    ordered = sorted(latest.values(), key=lambda r: version_key(r.version))
    if not ordered:
        return None
    newest = ordered[-1]

    def said(kind: str, older: BuildRun | None) -> Comparison:
        before = older.describe() if older else f"reported on {reported}"
        return Comparison(
            kind,
            f"{before}; {newest.describe()}",
            older.run_id if older else None,
            newest.run_id,
            older.version if older else reported,
            newest.version,
        )

    earlier = ordered[:-1]
    if newest.outcome == "reproduced":
        passed = [r for r in earlier if r.outcome == "passed"]
        return said("regression", passed[-1]) if passed else said("fails_on_both", earlier[0]) if earlier else None
    failed = [r for r in earlier if r.outcome == "reproduced"]
    if failed:
        return said("may_be_fixed", failed[-1])
    if reported and newer(newest.version, reported):
        return said("may_be_fixed", None)
    return said("passes_on_both", earlier[0]) if earlier else None


# collect_env's "PyTorch version:" line; else a `torch==` pin or a "torch version: 2.5.1" line. Never a version in
# prose ("it worked in torch 2.3.1"): that may be where it passed, not where the reporter saw it fail.
_COLLECT_ENV = re.compile(r"(?:^|\n)\s*PyTorch version\s*:\s*(\d+\.\d+(?:\.\d+)?(?:\.dev\d{8}|rc\d+|a\d+)?)")
_VERSION_LINE = re.compile(
    r"\btorch\s*==\s*(\d+\.\d+(?:\.\d+)?(?:\.dev\d{8}|rc\d+|a\d+)?)"
    r"|\b(?:py)?torch(?:\.__version__|\s+version)\s*[:=]?\s*['\"]?v?(\d+\.\d+\.\d+(?:\.dev\d{8}|rc\d+|a\d+)?)",
    re.IGNORECASE,
)


def reported_version(text: str) -> str:
    """The torch version the reporter says they ran (collect_env first, then a version line), or ""."""
    text = text[:100_000]
    collect = _COLLECT_ENV.search(text)
    if collect:
        return collect.group(1)
    found = _VERSION_LINE.search(text)
    return next((g for g in found.groups() if g), "") if found else ""
