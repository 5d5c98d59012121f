"""The weekly meeting's agenda, grouped by the R11 reason that put each issue there (pure Python).

Crash, silent correctness, regression, performance, flaky test or other: the meeting takes like with like.
"""

from __future__ import annotations

import re

from rubric_app.rubric.rules.review import FLAKY, REGRESSION

AGENDA_GROUPS = [
    ("crash", ("segfault", "sigsegv", "illegal memory access", "device-side assert", "crash", "core dumped", "abort")),
    (
        "silent correctness",
        ("silent", "wrong result", "incorrect", "differs from eager", "mismatch", "accuracy", "nan"),
    ),
    ("regression", ("regression", "regressed", "worked in", "used to work")),
    ("performance", ("slow", "performance", "perf", "speedup", "latency", "throughput", "memory usage")),
]
AGENDA_ORDER = [name for name, _ in AGENDA_GROUPS] + ["flaky test", "other"]


def is_flaky_test(title: str) -> bool:
    """A flaky-test report: "flaky"/"intermittent" in the title, or CI's "DISABLED test_x" issue."""
    return bool(FLAKY.search(title)) or title.lstrip().startswith("DISABLED ")


def agenda_group(*, title: str, body: str, review_reasons: str) -> str:
    """Which R11 reason put the issue on the agenda (one of AGENDA_ORDER).

    review_reasons: the reason and evidence of the rubric's `triage review` suggestion, which says why; the
    title breaks ties. A flaky or disabled test is filed by what the issue itself says: a crash, else a
    regression only when its title or body says so ("regression", "used to work", ...), else a flaky test.
    R11's reason calls every flaky test "usually a regression", which is no evidence, and the mismatch or
    slowness a flaky test reports is its symptom, not a silent-correctness or performance bug.
    """
    flaky = is_flaky_test(title)
    for text in (f"{review_reasons} {title}".lower(), body[:4000].lower()):
        for group, words in AGENDA_GROUPS:
            if (not flaky or group == "crash") and _says(words, text):
                return group
    if flaky:
        return "regression" if REGRESSION.search(f"{title}\n{body[:4000]}") else "flaky test"
    return "other"


def _says(words: tuple[str, ...], text: str) -> bool:
    """Any of words at the start of a word of text ("crash" finds "crashes", "nan" no longer finds "maintenance")."""
    return any(re.search(rf"\b{re.escape(word)}", text) for word in words)
