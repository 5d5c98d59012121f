"""Weighing the evidence before `a` pre-selects anything: R11 binds, a verdict is weighed, not obeyed (pure Python).

engine.decide() hands every finding here once they are all in (the rules', the bisections', the learned
labeler's, the neighbours'), and preselection.preselect and checklist.route_and_status read back what to tick and
what to ask:

- R11 binds (binding_review). A crash the rubric names (segfault, SIGSEGV, illegal memory access, device-side
  assert, core dumped), a silently wrong result, a regression or a flaky test that a rule finds in the text, or
  that a verdict shows (a crash or a divergence on a backend, a regression across builds), pre-selects `triage
  review`, so `a` never marks such an issue `triaged`. The learned review score may add a flag (offered, not
  ticked); it never removes one of these.
- R11's evidence is the issue's text, never a file name (text_evidence): `segfault.py` in a traceback names the
  reporter's script, not a crash. Another mention in the text is cited instead; with none, the flag goes. A
  learned flag cites no file name either.
- A verdict is weighed, not obeyed (weigh_verdicts). One run on one worker is evidence beside the thread: a verdict
  that contradicts the thread (the backend it blames passes there; a maintainer's diagnosis, the reporter's
  backend results or a quoted CompilerBisector name another component) or that rests on what the harness cannot
  run (a feature AOTAutograd does not support, such as double backward; a missing module; a timeout; the
  worker's memory budget) is scored like a rule's finding instead of decisively, and the checklist says what the
  thread says and what the run saw. Where it contradicts the thread, its component is not pre-selected.
- Issues sharing a failure signature take their components from the same evidence (shared_findings): what
  settles a component on one (a backend result, a diagnosis, a verdict) is evidence on the others, unless an
  issue settles its own, where the checklist says where they disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from rubric_app.rubric.engine import scoring
from rubric_app.rubric.reading.facts import Facts, Finding
from rubric_app.rubric.reading.thread import ladder
from rubric_app.rubric.reading.types import ChecklistItem
from rubric_app.rubric.rules.agents import BISECTED, automation_of
from rubric_app.rubric.rules.general import SILENT_WRONG, backend_reports
from rubric_app.rubric.rules.review import (
    CRASH,
    CRASH_TITLE,
    ECOSYSTEM,
    FLAKY,
    FUZZER,
    HARD_CRASH,
    PERF_REGRESSION,
    REGRESSION,
)
from rubric_app.vocabulary import CORE_COMPONENTS, FUZZER_TOPIC, TRIAGE_REVIEW, Kind

I = re.I

# A weighed verdict counts as a rule's finding that shows a component (components.SHOWN): with a model, its label is
# scored on the labeler's probability, as any finding that is no backend result.
WEIGHED = 0.6

# R11's reasons that leave no judgement (review.r11_review's words), and what the evidence must name: a
# loose "crashes" in a title is often an exception, so only R11's own crashes bind.
BINDING = (("a crash", HARD_CRASH), ("silently wrong results", None), ("a regression", None), ("a flaky test", None))


def binds(x: Finding) -> bool:
    """A `triage review` flag the rubric leaves no judgement on: a verdict's (a crash, a divergence, a regression
    across builds), or R11's crash, silently wrong result, regression or flaky test read in the text."""
    if x.kind != Kind.FLAG or x.label != TRIAGE_REVIEW or x.origin != "rule":
        return False
    if x.source.startswith("bisection"):
        return True
    return x.rule_id == "R11" and any(
        x.reason.startswith(why) and (named is None or named.search(x.evidence)) for why, named in BINDING
    )


def binding_review(findings: list[Finding]) -> Finding | None:
    """The flag R11 binds (binds), or None: pre-selected whatever the learned review curve says."""
    return next((x for x in findings if binds(x)), None)


def r11_item(review: Finding | None) -> ChecklistItem:
    """The checklist's R11 line: satisfied where R11 binds, a question where only judgement flags it (a learned
    score, an important user, a loose "crashes"), not applicable without a flag."""
    text = "Crash, silent wrong result, regression or important user: flag triage review."
    if review is None:
        return ChecklistItem("R11", text, "not_applicable")
    if binds(review):
        return ChecklistItem("R11", text, "satisfied", review.evidence)
    return ChecklistItem("R11", r11_question(review), "needs_human", review.evidence)


# What says a slowdown is a regression (R11's perf clause): the word, or slower than an earlier version.
_REGRESSED = re.compile(r"regress|slower (?:than|compared|vs)|used to|before", re.I)


def r11_question(review: Finding) -> str:
    """What R11 asks the triager where only judgement raises the flag (offered, not ticked): the meeting's question,
    and the two answers (the flag, or `triaged`)."""
    if review.origin == "model":
        return (
            "The learned score suggests triage review (issues like this went to the meeting), but the text names no "
            "crash, silent wrong result, regression or flaky test: flag it if you see one, else mark it triaged "
            "(offered, not ticked)."
        )
    why = review.reason.split(":")[0]
    if why.startswith("a performance regression") and not _REGRESSED.search(review.evidence):
        # "2x slower" says how slow, not that it was faster before: no regression is asserted, only asked (R11).
        return (
            f"A slowdown (“{review.evidence}”), nothing said to have regressed: did it run faster on an earlier "
            "build? R11: the meeting takes an important model that regressed by more than 10%. Flag triage review "
            "if it did, or mark it triaged (offered, not ticked)."
        )
    if why.startswith("a performance regression"):
        asks = "the meeting takes an important model that regressed by more than 10%"
    elif why.startswith("an important"):
        asks = "the meeting takes an important model, user or ecosystem"
    else:
        asks = "the meeting decides"
    return f"{why.capitalize()}? R11: {asks}. Flag triage review, or mark it triaged (offered, not ticked)."


# --- R11's evidence is the issue's text -----------------------------------------------------------------

_PATHISH = re.compile(r"[\w.~+@\-/\\:]")
# A file name ends in an extension; a path starts at a root or a home, names a scheme (a URL) or has two
# separators. One slash between words is prose: "Clarification/regression", "CPU/GPU", "and/or".
_FILE_TAIL = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,9}$|^~?[/\\]|://|[/\\][^/\\]*[/\\]")
SPAN = 80  # characters either side of a mention cited instead of a file name's


def in_file_name(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] is part of a file name or a path ("segfault.py", "tests/crash/run.sh", a URL)."""
    left, right = start, end
    while left > max(0, start - 200) and _PATHISH.match(text[left - 1]):
        left -= 1
    while right < min(len(text), end + 200) and _PATHISH.match(text[right]):
        right += 1
    token = text[left:right].rstrip(".:")  # a sentence's full stop is no extension
    return token != text[start:end] and bool(_FILE_TAIL.search(token))


def _text_of(facts: Facts, source: str) -> str | None:
    return next((s.text for s in facts.sources if s.name == source), None)


def _mentions(pattern: re.Pattern[str], text: str):
    """pattern's matches in text that are not part of a file name, first first."""
    return (m for m in pattern.finditer(text) if m.group(0) and not in_file_name(text, m.start(), m.end()))


def _line_span(text: str, start: int, end: int) -> str:
    """The mention with its line around it (at most SPAN characters either side): a citation that points at this
    mention, not at the file name that says the same word."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    begin, stop = max(line_start, start - SPAN), min(line_end, end + SPAN)
    if begin > line_start:  # whole words only
        begin = text.find(" ", begin, start) + 1 or start
    if stop < line_end:
        stop = text.rfind(" ", end, stop) if text.rfind(" ", end, stop) > 0 else end
    return text[begin:stop].strip()


# What a slowdown regresses, just before R11's "regression": a performance regression, not "worked in version X".
_MEASURED = re.compile(
    r"(?:compil\w{0,6}[- ]?time|perf\w{0,9}|throughput|speed|latency|memory|runtime|time|fps|qps|slowdown)\W{0,3}$", I
)


# R11's reasons as review.r11_review words them, with what it reads each in and its weight there.
R11_READS = (
    (CRASH_TITLE, "a crash", "title", 0.8),
    (SILENT_WRONG, "silently wrong results", "title", 0.8),
    (REGRESSION, "a regression", "title", 0.8),
    (FLAKY, "a flaky test, usually a regression", "title", 0.8),
    (PERF_REGRESSION, "a performance regression", "title", 0.8),
    (ECOSYSTEM, "an important model or ecosystem user", "title", 0.8),
    (CRASH, "a crash", "body", 0.6),
    (SILENT_WRONG, "silently wrong results", "body", 0.6),
)


def text_evidence(facts: Facts, x: Finding) -> Finding | None:
    """x, citing the issue's text rather than a file name where x is a `triage review` flag: R11's reads its
    reasons again past the file names (None: only file names said it); the learned one cites nothing then."""
    if x.kind != Kind.FLAG or x.label != TRIAGE_REVIEW or not x.evidence:
        return x
    text = _text_of(facts, x.source)
    if text is None:
        return x
    first = text.find(x.evidence)
    named = first >= 0 and in_file_name(text, first, first + len(x.evidence))
    if x.origin == "model":  # the learned flag's top feature: no file name as its evidence
        return replace(x, evidence="", source="") if named or _FILE_TAIL.search(x.evidence) else x
    if x.origin != "rule" or x.rule_id != "R11":
        return x
    if (
        not named
        and x.reason.startswith("a regression")
        and first >= 0
        and _MEASURED.search(text[max(0, first - 40) : first])
    ):
        # "compile time regression", "throughput regression": R11's performance clause, a judgement (important
        # model? more than 10%?), not a "worked in version X"
        return replace(x, reason="a performance regression: the weekly meeting decides priority")
    if not named:
        return x
    for pattern, why, source, weight in R11_READS:
        where = _text_of(facts, source) or ""
        mention = next(_mentions(pattern, where), None)
        if mention is not None:
            return replace(
                x,
                weight=weight,
                evidence=_line_span(where, mention.start(), mention.end()),
                source=source,
                reason=f"{why}: the weekly meeting decides priority",
            )
    return None


# More ways of saying that a compiled result is wrong than rules.SILENT_WRONG reads ("the output is wrong", "the
# second-order gradient of F.silu is wrong", "output does not match eager", a repro's `allclose(...)  # False`, a
# mutation lost, wrong sums, NaN where a number should be, "different from eager", a lost sign or precision, a
# changed output shape): R11's silently wrong result all the same (docs/engine.md, "R11 binds", for what each
# phrasing found on the training pool and what the held-out slice then scored).
WRONG_SAID = re.compile(
    r"\b(?:outputs?|results?|values?|gradients?|grads?|derivatives?|answers?)\b(?:[^.\n]|\.(?=\S)){0,40}?"
    r" (?:is|are|was|were|looks?|comes? out|becomes?) (?:wrong|incorrect)\b"
    r"|\b(?:outputs?|results?) (?:wrong|incorrect)\b"
    r"|\b(?:does not|doesn't|do not|don't|no longer) match(?:es)? (?:the )?eager\b"
    r"|\ballclose\([^\n]{0,200}\)\)?[ \t]{0,40}#[ \t]{0,3}False\b"
    # a mutation lost under compile: "x.add_ on a view of an input is lost", "the in-place update is dropped"
    r"|(?:\bmutations?|\bin-?place (?:ops?|updates?|writes?|changes?)|\.[a-z]\w{0,29}_(?!\w))(?:[^.\n]){0,60}?"
    r"\b(?:is|are|gets?|got|was|were) (?:silently )?(?:lost|dropped|discarded|not (?:applied|reflected|propagated))\b"
    # wrong numbers under another name: "gives wrong sums", "incorrect indices", "corrupted masks"
    r"|\b(?:wrong|incorrect|corrupt(?:ed|s)?) (?:sums?|totals?|counts?|indices|index|shapes?|signs?|logits"
    r"|predictions?|norms?|means?|masks?|accumulations?|strides?)\b"
    # NaN or Inf where a number should be: "gives NaN logits", "the loss becomes nan"
    r"|\b(?:gives?|gave|produces?|produced|yields?|becomes?|became|turns? into|results? in|returns?|returned"
    r"|outputs?) (?:all |only )?`?(?:NaNs?|infs?)`?(?![\w(])"
    r"|\bNaN (?:logits|outputs?|values|loss|gradients?|results?|predictions?)\b"
    # different from eager: "different results than eager", "differs when compared to eager mode"
    r"|\b(?:different|differing|inconsistent) (?:(?!(?:errors?|exceptions?|messages?|warnings?|tracebacks?)\b)\w+ )"
    r"{0,2}?(?:from|than|to|with|compared (?:to|with)|vs\.?) (?:the |what )?eager\b"
    r"|\bdifferent (?:outputs?|results?|values?|behaviou?r) (?:\S+ ){0,6}?between (?:the )?eager\b"
    # a sign or a precision lost, an output changed: "loses the signbit", "changes the output shape"
    r"|\blos(?:es|e|ing|t) (?:the |its )?(?:sign ?bit|sign|accuracy|precision)\b"
    r"|\bchang(?:es|ed|ing) (?:the )?(?:output|result)(?:s|'s)? (?:shape|values?|dtype|sign)\b"
    # "returns a different value", "triggers an inconsistency", "mis-indexes", "a stale value", "out-of-bounds reads"
    r"|\breturns? (?:a )?different (?:values?|results?|outputs?|tensors?)\b"
    r"|\b(?:triggers?|causes?|shows?) (?:an? )?inconsisten(?:cy|t (?:results?|outputs?))\b"
    r"|\bmis-?(?:index(?:es|ed)?|handles|computes|rounds)\b|\bstale (?:values?|results?|outputs?)\b"
    r"|\bout[- ]of[- ]bounds? (?:reads?|writes?|accesses)\b",
    I,
)


def silent_wrong(facts: Facts, findings: list[Finding]) -> list[Finding]:
    """R11's flag for a silently wrong result said in words rules.SILENT_WRONG does not read (WRONG_SAID), in the
    title, then the body, where R11 found nothing (a fuzzer's report goes through R12 instead)."""
    if any(binds(x) for x in findings):  # a judgement's flag (an important user) may still hide a wrong result
        return []
    if FUZZER_TOPIC in facts.labels or facts.has(FUZZER, "title"):
        return []
    for source, weight in (("title", 0.8), ("body", 0.6)):
        text = _text_of(facts, source) or ""
        mention = next(_mentions(WRONG_SAID, text), None)
        if mention is not None:
            return [
                Finding(
                    "R11",
                    Kind.FLAG,
                    TRIAGE_REVIEW,
                    weight,
                    mention.group(0),
                    source,
                    "silently wrong results: the weekly meeting decides priority",
                )
            ]
    return []


# --- what the thread settles --------------------------------------------------------------------------


@dataclass(frozen=True)
class Said:
    """A component the thread settles: a maintainer's diagnosis, a backend result, a quoted CompilerBisector."""

    label: str
    evidence: str
    source: str
    who: str


def who(facts: Facts, source: str) -> str:
    """Who said what is in `source`: "the reporter", "<login> (comment 2)", "comment 2"."""
    if source in ("title", "body"):
        return "the reporter"
    kind, _, rest = source.partition(":")
    if kind != "comment" or not rest.isdigit():
        return source
    index = int(rest)
    comments = facts.issue.comments
    author = comments[index].author if index < len(comments) else ""
    if author and author == facts.issue.author:
        return f"the reporter (comment {index + 1})"
    return f"{author} (comment {index + 1})" if author else f"comment {index + 1}"


def _run_of(x: Finding) -> str:
    return x.source.partition(":")[2] if x.source.startswith("bisection") else ""


def from_thread(x: Finding) -> bool:
    """A finding read in this issue's own text (not a run's, not another issue's, not the labeler's)."""
    return x.origin == "rule" and not x.source.startswith(("bisection", "run", "issue:"))


def settles(x: Finding) -> bool:
    """A component this issue's own evidence settles: a backend result in the thread (R1.1, R2), a diagnosis by
    someone other than the reporter (scoring.concluded), or a verdict (scoring.decisive)."""
    return (
        x.kind == Kind.ADD and x.label in CORE_COMPONENTS and not x.source.startswith("issue:") and scoring.settles(x)
    )


def quoted_bisector(facts: Facts) -> tuple[str, str, Finding] | None:
    """(label, rule id, where) of the CompilerBisector result the thread quotes last, or None: the agent's or
    another's, as agents.r2_bisector reads it."""
    auto = automation_of(facts)
    results = [r.bisector for r in auto.agent if r.bisector is not None] + list(auto.bisections)
    if not results:
        return None
    result = results[-1]
    rule_id, label = BISECTED.get("eager" if result.backend == "dynamo" else result.backend, ("R2", ""))
    if not label:
        return None
    where = result.backend + (f" / {result.subsystem}" if result.subsystem else "")
    return (
        label,
        rule_id,
        Finding(rule_id, Kind.CHECK, label, evidence=result.evidence, source=result.source, reason=where),
    )


def thread_says(facts: Facts, findings: list[Finding]) -> list[Said]:
    """The components the thread settles, in the thread's order: diagnoses and backend results, then the quoted
    CompilerBisector."""
    said = [
        Said(x.label, x.evidence, x.source, who(facts, x.source)) for x in findings if from_thread(x) and settles(x)
    ]
    quoted = quoted_bisector(facts)
    if quoted is not None:
        label, _rule, x = quoted
        said.append(Said(label, x.evidence, x.source, f"torch's CompilerBisector, quoted by {who(facts, x.source)}"))
    return said


# --- verdicts weighed ---------------------------------------------------------------------------------

_VERDICT_MODE = re.compile(r"^fails (?:while tracing )?on (?:backend=)?(\w{1,40})")
# What the harness or AOTAutograd cannot run, read off a verdict's evidence (bisection.verdict._evidence: the
# first failing mode's exception and first line, or its status): the run failed on the harness, not on the bug.
LIMITS = (
    (
        re.compile(
            r"does not (?:currently )?support double backward|double backward (?:is )?not (?:yet )?supported", I
        ),
        "AOTAutograd does not support double backward",
    ),
    (
        re.compile(
            r"aot_?autograd does not (?:currently )?support|not (?:currently )?supported (?:by|in) aot_?autograd", I
        ),
        "a feature AOTAutograd does not support",
    ),
    (
        re.compile(
            r"\bModuleNotFoundError\b|\bNo module named\b|\bImportError\b|Cannot find a working triton installation"
            r"|\bis not installed\b",
            I,
        ),
        "a module missing on the worker",
    ),
    (re.compile(r": timeout\b|\bTimeoutError\b|\btimed out\b|\bCPU limit of \d", I), "a timeout on the worker"),
    (re.compile(r": oom\b|\bOutOfMemoryError\b|\bmemory budget of \d", I), "the worker's memory budget"),
)


def limitation(evidence: str) -> str:
    """What the harness could not run, when a verdict's evidence shows it; "" otherwise."""
    return next((why for pattern, why in LIMITS if pattern.search(evidence[:2000])), "")


def failing_mode(evidence: str) -> str:
    """The backend a verdict's evidence says failed first ("aot_eager"), in the thread's names; "" when unsaid."""
    match = _VERDICT_MODE.match(evidence)
    return match.group(1) if match else ""


def contradiction(facts: Facts, x: Finding, said: list[Said]) -> str:
    """How the thread contradicts verdict x, in words ("" where it does not): the backend x blames passes there,
    or the thread settles another component and never x's."""
    if x.label not in CORE_COMPONENTS:
        return ""
    mode = failing_mode(x.evidence)
    reported = ladder(backend_reports(facts)).get(mode) if mode else None
    if reported is not None and not reported.failed:
        return f'{who(facts, reported.source)} says {mode} passes ("{reported.evidence}"); this run saw {mode} fail'
    if said and not any(s.label == x.label for s in said):
        s = said[-1]
        return f'{s.who} says {s.label} ("{s.evidence}"); this run saw {x.label}'
    return ""


def weigh_verdicts(facts: Facts, findings: list[Finding]) -> list[Finding]:
    """findings with each verdict that contradicts the thread or rests on a harness limit weighed (scored as a
    rule's finding, source "run:<id>"), a checklist question per weighed run, and a hold on a contradicted
    component."""
    verdicts = [x for x in findings if x.kind == Kind.ADD and x.origin == "rule" and x.source.startswith("bisection")]
    if not verdicts:
        return findings
    said = thread_says(facts, findings)
    weighed: dict[str, tuple[str, bool]] = {}  # a run's source -> (why, contradicted)
    for x in verdicts:
        if x.source in weighed:
            continue
        limit = limitation(x.evidence)
        against = contradiction(facts, x, said)
        if limit or against:
            why = (
                f"it failed on {limit}, not on the bug reported" + (f"; {against}" if against else "")
                if limit
                else against
            )
            weighed[x.source] = (why, bool(against))
    if not weighed:
        return findings
    out: list[Finding] = []
    for x in findings:
        if x.source not in weighed or x.kind not in (Kind.ADD, Kind.ROUTE):
            out.append(x)
            continue
        run = _run_of(x)
        why, against = weighed[x.source]
        if x.origin == "rule":
            x = replace(x, weight=WEIGHED, reason=f"bisection verdict, weighed: {why}")
        out.append(replace(x, source=f"run:{run}" if run else "run"))
        if x.kind == Kind.ADD and x.origin == "rule":  # the verdict itself, not the labeler's finding citing it
            named = f"Bisection run {run}" if run else "The bisection"
            out.append(
                Finding(
                    x.rule_id,
                    Kind.CHECK,
                    evidence=x.evidence,
                    source=f"run:{run}" if run else "run",
                    state="needs_human",
                    reason=f"{named} points at {x.label}, but {why}: weighed as evidence beside the thread, not "
                    "pre-selected. Rerun with the thread's setup (device, dtype, torch version), or decide from the "
                    "thread.",
                )
            )
            if against:
                out.append(Finding(x.rule_id, Kind.HOLD, x.label, reason=f"held back: {why}"))
    return out


# --- issues sharing a failure -------------------------------------------------------------------------


def shared_findings(facts: Facts, findings: list[Finding]) -> list[Finding]:
    """What the issues sharing this one's failure signature settle (IssueText.shared), as ADD findings citing
    them, where this issue settles no component of its own; where it does and they name another, a checklist
    question instead."""
    shared = facts.issue.shared
    if not shared:
        return []
    own = {x.label for x in findings if settles(x)}
    if own:
        return [
            Finding(
                s.rule_id,
                Kind.CHECK,
                evidence=s.evidence,
                source=f"issue:{s.number}",
                state="needs_human",
                reason=f"#{s.number} has the same failure signature and its evidence says {s.label}; this issue's "
                f"says {', '.join(sorted(own))}: decide them together (the group page shows each one's evidence).",
            )
            for s in shared
            if s.label not in own
        ]
    return [
        Finding(
            s.rule_id,
            Kind.ADD,
            s.label,
            s.weight,
            s.evidence,
            f"issue:{s.number}",
            f"#{s.number} has the same failure signature: {s.reason}",
        )
        for s in shared
    ]


def cited(x: Finding) -> Finding:
    """x, where the learned labeler cites a verdict's words (its top feature is the verdict's finding), under the
    run's name rather than as the bisection's: the labeler's probability is no verdict, and only a verdict is
    decisive (scoring.decisive)."""
    if x.origin == "model" and x.source.startswith("bisection"):
        run = _run_of(x)
        return replace(x, source=f"run:{run}" if run else "run")
    return x


def weigh(facts: Facts, findings: list[Finding]) -> list[Finding]:
    """Every finding weighed (the module's docstring): R11's evidence, the verdicts, the issues sharing the
    failure. engine.decide() calls it once every finding is in."""
    out = [y for y in (text_evidence(facts, cited(x)) for x in findings) if y is not None]
    out += silent_wrong(facts, out)
    out = weigh_verdicts(facts, out)
    return out + shared_findings(facts, out)
