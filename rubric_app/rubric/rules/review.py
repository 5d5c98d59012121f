"""RUBRIC.md as code, part 3: what goes to the weekly meeting (R11's `triage review` flag) and a fuzzer's
checklist before it is triaged normally (R12). Each rule registers itself with @rule, after R6-R10
(engine/assess.py runs the rules' modules in the rubric's order).
"""

from __future__ import annotations

import re

from rubric_app.rubric.reading.facts import Facts, Finding, rule
from rubric_app.rubric.rules.general import SILENT_WRONG
from rubric_app.vocabulary import FUZZER_TOPIC, LOW_PRIORITY, TRIAGE_REVIEW, Kind

I = re.I


# --- R11. High priority goes through the meeting ------------------------------------------------------

CRASH = re.compile(
    r"segmentation fault|\bseg ?fault\w{0,3}|\bSIG(?:SEGV|FPE|ABRT|BUS|ILL)\b|illegal memory access"
    r"|device-side assert\w{0,3}|core dumped|hard crash",
    I,
)
# A hard crash, as R11 and G11 name it: the process dies (a signal, corrupted memory, an illegal access on the GPU).
# CRASH is what the learned labeler's R11 feature was trained on; the rest is read after it (learned=False).
HARD_CRASH = re.compile(
    CRASH.pattern + r"|\bhard crash\w{0,3}|\bbus error\b|Fatal Python error|\bheap corruption\b|\bdouble free\b"
    r"|floating point exception",
    I,
)
# In a title "crashes" is the report's subject; in a body it is often a loose word for "raises".
CRASH_TITLE = re.compile(CRASH.pattern + r"|\bcrash(?:es|ed|ing)?\b", I)
# A performance regression counts only as PERF_REGRESSION (more than 10% on an important model).
REGRESSION = re.compile(
    r"(?<!perf )(?<!performance )\bregress\w{0,4}|used to work|no longer works?"
    r"|worked (?:fine |well )?(?:in|with|on|before) (?:v|version |torch |pytorch )?\d|after upgrad\w{1,4}"
    r"|broken (?:in|since|after) (?:v|version |torch |pytorch )?\d",
    I,
)
# More ways of saying it worked before (issue 43), read after the learned labeler as HARD_CRASH is: "Since 2.13, ...",
# "works in 2.4", "broke in the latest nightly".
REGRESSION_SAID = re.compile(
    REGRESSION.pattern
    + r"|(?:works|working|passe[sd]) (?:fine |well )?(?:in|with|on|before|under) (?:v|version |torch |pytorch )?\d"
    r"|\bsince (?:v|version |torch |pytorch )?\d\.\d{1,2}\b"
    r"|\bbroke(?:n)? (?:in|since|after|with|by) (?:the )?(?:latest |recent |last )?(?:nightly|nightlies|release|update"
    r"|upgrade|commit)\b",
    I,
)
FLAKY = re.compile(r"\bflaky\b|\bintermittent(?:ly)?\b|\bnon-?deterministic(?:ally)? fail\w{0,3}", I)
ECOSYSTEM = re.compile(
    r"hugging ?face|\btransformers\b|\bdiffusers\b|\bvLLM\b|\btorchtitan\b|\bHF\b"
    r"|\b(?:llama|mistral|gpt-?\d|stable diffusion|timm|torchbench)\w{0,10}",
    I,
)
PERF_REGRESSION = re.compile(
    r"(?:[1-9]\d(?:\.\d)?\s?%|\d(?:\.\d)?\s?x) (?:slower|perf\w{0,9} regression|regression|slow ?down)", I
)
# Slower than an older release (issue 43, read after the learned labeler): "slower than 2.5", "compared to torch 2.4".
PERF_REGRESSION_SAID = re.compile(
    PERF_REGRESSION.pattern
    + r"|\bslower (?:than|compared (?:to|with)|vs\.?) (?:in |on |with )?(?:v|version |torch |pytorch )?\d\.\d{1,2}\b",
    I,
)


@rule("R11")
def r11_review(f: Facts) -> list[Finding]:
    """Crash, silently wrong results, regression, flaky test, important model or user: FLAG triage review.

    A fuzzer report goes through R12's checklist instead: its divergences are not user-facing yet. What the learned
    labeler was trained on (CRASH, REGRESSION, PERF_REGRESSION) first; where that binds on nothing, the wider
    readings (HARD_CRASH, REGRESSION_SAID, PERF_REGRESSION_SAID) as a finding it never learned from.
    """
    if _is_fuzzer(f):
        return []
    found = _r11(
        f,
        (
            (CRASH, "a crash"),  # a hard crash named in the title binds (weighing.binds), before a loose "crashes"
            (CRASH_TITLE, "a crash"),
            (SILENT_WRONG, "silently wrong results"),
            (REGRESSION, "a regression"),
            (FLAKY, "a flaky test, usually a regression"),
            (PERF_REGRESSION, "a performance regression"),
            (ECOSYSTEM, "an important model or ecosystem user"),
        ),
        ((CRASH, "a crash"), (SILENT_WRONG, "silently wrong results")),
    )
    if found and (
        found.reason.startswith(("silently wrong", "a regression", "a flaky")) or CRASH.search(found.evidence)
    ):
        return [found]
    wider = _r11(
        f,
        (
            (HARD_CRASH, "a crash"),
            (REGRESSION_SAID, "a regression"),
            (PERF_REGRESSION_SAID, "a performance regression"),
        ),
        ((HARD_CRASH, "a crash"),),
        learned=False,
    )
    if wider and found and wider.reason.startswith("a performance"):
        wider = None  # a judgement already raised: nothing to add
    return [x for x in (found, wider) if x]


def _r11(f: Facts, title: tuple, body: tuple, learned: bool = True) -> Finding | None:
    """R11's flag from the first of `title`'s patterns the title matches, else of `body`'s the description does."""
    for patterns, where, weight in ((title, "title", 0.8), (body, "text", 0.6)):
        for pattern, why in patterns:
            hit = f.find(pattern, where)
            if hit and (where == "title" or hit[1] == "body"):
                reason = f"{why}: the weekly meeting decides priority"
                return Finding("R11", Kind.FLAG, TRIAGE_REVIEW, weight, hit[0], hit[1], reason, learned=learned)
    return None


# --- R12. Fuzzer issues ----------------------------------------------------------------------------------

FUZZER = re.compile(r"\[fuzzer\]|\bfuzz(?:er|ing|ed)\b", I)


def _is_fuzzer(f: Facts) -> bool:
    return FUZZER_TOPIC in f.labels or f.has(FUZZER, "title")


@rule("R12.1")
def r12_1_default_tolerances(f: Facts) -> list[Finding]:
    """rtol/atol are at their defaults in the repro's comparison."""
    if not _is_fuzzer(f):
        return []
    for call in ("allclose", "assert_close", "isclose", "same"):
        if {"rtol", "atol", "tol"} & f.code.call_kwargs.get(call, set()):
            return [
                Finding(
                    "R12.1",
                    Kind.CHECK,
                    evidence=f.code.calls.get(call, call),
                    source="code",
                    state="violated",
                    reason="the repro sets its own tolerances: re-check with the defaults",
                )
            ]
    return [
        Finding(
            "R12.1",
            Kind.CHECK,
            state="satisfied" if f.code.parsed else "needs_human",
            reason="rtol/atol at their defaults",
        )
    ]


INDEX_COMPARE = ("argmax", "argmin", "max", "min", "topk", "sort", "argsort")


@rule("R12.2")
def r12_2_no_index_compare(f: Facts) -> list[Finding]:
    """The repro does not compare indices of max/min (ties make them differ legitimately)."""
    if not _is_fuzzer(f):
        return []
    for name in INDEX_COMPARE:
        if name in f.code.calls and (
            name.startswith("arg") or name in ("topk", "sort") or "indices" in f.code.calls[name]
        ):
            return [
                Finding(
                    "R12.2",
                    Kind.CHECK,
                    evidence=f.code.calls[name],
                    source="code",
                    state="violated",
                    reason="compares indices of max/min, which ties make differ legitimately",
                )
            ]
    if f.has(re.compile(r"\bindices\b[^\n]{0,40}?(?:differ|mismatch)|(?:argmax|argmin)\b", I)):
        hit = f.find(re.compile(r"\bindices\b[^\n]{0,40}?(?:differ|mismatch)|(?:argmax|argmin)\b", I))
        return [
            Finding(
                "R12.2",
                Kind.CHECK,
                evidence=hit[0],
                source=hit[1],
                state="violated",
                reason="compares indices of max/min, which ties make differ legitimately",
            )
        ]
    return [
        Finding(
            "R12.2", Kind.CHECK, state="satisfied" if f.code.parsed else "needs_human", reason="no index comparison"
        )
    ]


@rule("R12.3")
def r12_3_fp64_reference(f: Facts) -> list[Finding]:
    """The comparison uses torch._dynamo.utils.same with an fp64 reference."""
    if not _is_fuzzer(f):
        return []
    if "fp64_ref" in f.code.call_kwargs.get("same", set()):
        return [
            Finding(
                "R12.3",
                Kind.CHECK,
                evidence=f.code.calls["same"],
                source="code",
                state="satisfied",
                reason="compares with same(..., fp64_ref=...)",
            )
        ]
    hit = f.find(re.compile(r"fp64_ref", I))
    if hit:
        return [
            Finding(
                "R12.3", Kind.CHECK, evidence=hit[0], source=hit[1], state="satisfied", reason="uses an fp64 reference"
            )
        ]
    return [
        Finding(
            "R12.3",
            Kind.CHECK,
            state="violated",
            reason="no fp64 reference: re-check with torch._dynamo.utils.same(..., fp64_ref=...)",
        )
    ]


@rule("R12.4")
def r12_4_normal_triage(f: Facts) -> list[Finding]:
    """Criteria met and the bug looks common: triage normally."""
    if not _is_fuzzer(f):
        return []
    return [
        Finding(
            "R12.4", Kind.CHECK, state="needs_human", reason="criteria met and common or easy? then triage normally"
        )
    ]


RARE_SETUP = re.compile(
    r"torch\._(?:dynamo|inductor)\.config\.\w{1,60}\s{0,2}=|emulate_precision_casts|capture_scalar_outputs|\bstride=\(|\bas_strided\b|\bINT_MIN\b|\binf\b|\bnan\b",
    I,
)


@rule("R12.5")
def r12_5_low_priority(f: Facts) -> list[Finding]:
    """A fuzzer bug that is complex and rare (non-default configs, exotic strides/values, a failed check):
    low priority."""
    if not _is_fuzzer(f):
        return []
    rare = f.find(RARE_SETUP)
    failed = [x for x in r12_1_default_tolerances(f) + r12_2_no_index_compare(f) if x.state == "violated"]
    if failed:
        return [
            Finding(
                "R12.5",
                Kind.FLAG,
                LOW_PRIORITY,
                0.6,
                failed[0].evidence,
                failed[0].source,
                "the fuzzer criteria fail: rare or noise",
            )
        ]
    if rare:
        return [
            Finding(
                "R12.5",
                Kind.FLAG,
                LOW_PRIORITY,
                0.5,
                rare[0],
                rare[1],
                "needs an unusual setup to reproduce: complex and rare",
            )
        ]
    return []
