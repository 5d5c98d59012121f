"""Run a snippet in a fresh interpreter with a generous time limit: a structural bound, not a timing.

Hostile issue text must cost linear time. The tests size their inputs so that the quadratic
code they guard against takes minutes to hours (measured before the fix), while the linear
code takes milliseconds; the limit sits in between, far from both, so a loaded machine does
not make them flaky. A subprocess, because a regex running in C cannot be interrupted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_bounded(code: str, timeout: float = 90, env: dict | None = None) -> str:
    """Run code (Django set up first) under `timeout` seconds; return its stdout. Fails the test past the limit."""
    prelude = (
        "import django, os\nos.environ.setdefault('DJANGO_SETTINGS_MODULE', 'triage_site.settings')\ndjango.setup()\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", prelude + textwrap.dedent(code)],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running after {timeout} s: not linear in its input") from None
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
