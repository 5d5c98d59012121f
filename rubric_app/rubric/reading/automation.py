"""What PyTorch's own automation already said about an issue (pure Python, next to the thread reader).

- The PT2 Repro Agent's comment ("🤖 PT2 Repro Agent"): the nightly it ran, the GPU, the outcome (reproduced,
  could not reproduce, a predefined mitigation hides it), how many runs, what failed (a crash, a silent
  mismatch), a CompilerBisector result (backend, subsystem, detail) with its `TORCH_BISECT_*` replay line, and
  the repro script it used (written to return a bool from `test_fn()`, its backend from TORCH_COMPILE_BACKEND).
- Its label `repro:agent:h100:<outcome>` (GitHub's copies are cut at 40 characters: matched by prefix), and
  `repro:agent:h100:incorrect`, the readers' verdict that the agent got it wrong.
- Other agents' "My agent was unable to reproduce this on <sha>", `BisectionResult(backend=..., subsystem=...)`
  strings, tlparse / TORCH_TRACE links.
- PyTorch's LLM triage bot: `bot-triaged`, the labels it added (from the label events, when the caller has
  them), and `bot-mislabeled`, the triagers' verdict that it got the issue wrong.

Every fact cites the comment it came from, the words that say it and who posted it. Anyone can open a comment with
the agent's mark: a fact is the automation's (`known`) only when its poster may speak for that part of it
(rubric_app/vocabulary.py, settings.AUTOMATION_ACCOUNTS; another agent's result or a bisector's also from a
maintainer). Anyone else's is read the same way but kept as a claim: shown as "claimed by @login, not a known
automation account", never a rule's evidence, a lane or a script offered to run. Issue text is untrusted: each
comment is capped, read line by line with bounded patterns, so the cost is linear. A format we do not know is "a
Repro Agent comment we could not read", never a fact we made up.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from rubric_app.rubric.reading.text import Source
from rubric_app.vocabulary import (
    AGENT,
    AGENT_INCORRECT,
    BOT_MISLABELED,
    BOT_TRIAGED,
    DEFAULT,
    REPRO_AGENT,
    AutomationAccounts,
    is_bot,
    is_maintainer,
)

AGENT_MARK = re.compile(r"^\W{0,12}(?:🤖\s{0,3})?\**\s{0,3}PT2 Repro Agent\b")
AGENT_LABEL = "repro:agent:h100:"
# The agent's label outcomes, by prefix (copies cut at 40 characters keep these prefixes).
LABEL_OUTCOMES = (
    ("repro_success:reproduce", "reproduced"),
    ("repro_success:mitigat", "mitigated"),
    ("repro_fail:not_reproduc", "not reproduced"),
    ("repro_fail:predefined_m", "mitigated"),
)
MAX_TEXT = 20_000  # of one comment: the agent's are a few KB; a longer one is read up to here
MAX_LINE = 1_000

_NIGHTLY = re.compile(r"nightly[^`(\n]{0,40}[(`]{1,2}`?(\d\.\d{1,2}\.\d{1,2}(?:\.dev\d{8})?(?:\+[\w.]{1,20})?)`?")
_GPU = re.compile(r"\bon (?:an? )?(?:NVIDIA )?((?:H|A|B|L)\d{2,3}\w{0,8})\b")
_RUNS = re.compile(r"\b(?:in|all) (\d{1,2})(?:/(\d{1,2}))? runs? (passed|failed|reproduced)?", re.I)
_RUNS_OF = re.compile(r"\b(\d{1,2})/(\d{1,2}) runs\b")
_NOT_REPRODUCED = re.compile(r"\b(?:could not|couldn't|could n't|unable to|did not|failed to) reproduce", re.I)
_MITIGATION = re.compile(r"\bPREDEFINED_MITIGATION\b|\bmitigation\b", re.I)
_REPRODUCED = re.compile(
    r"\bResult: (?:REPRODUCED|REPRODUCE)\b|\bconfirmed (?:that )?it reproduces\b"
    r"|\breproduced (?:it|the issue|in \d|\(\d)"
    r"|\bAll \d{1,2} runs failed",
    re.I,
)
_CONFIG = re.compile(r"\b(TORCHINDUCTOR_[A-Z0-9_]{2,60}=\w{1,20}|torch\._inductor\.config\.[\w.]{2,80}\s?=\s?\w{1,20})")
_MISMATCH = re.compile(
    r"\b(?:mismatch|max_abs_diff|numerical|differ(?:s|ent)? from eager|assert_close|NaN|silently|divergence)\b", re.I
)
_CRASH = re.compile(
    r"\b(?:segmentation fault|SIGSEGV|core dumped|illegal memory access|device-side assert|CUDA error"
    r"|crash(?:ed|es)?)\b",
    re.I,
)
_BISECT_LINE = re.compile(r"(?:TORCH_BISECT_[A-Z_]{3,20}=[\w.\-]{1,60}\s?){1,6}")
_BISECT_FIELD = re.compile(r"TORCH_BISECT_(BACKEND|SUBSYSTEM)=([\w.\-]{1,60})")
_BISECTION_RESULT = re.compile(
    r"BisectionResult\(\s{0,3}backend=['\"]([\w.]{1,40})['\"](?:,\s{0,3}subsystem=['\"]([\w.]{1,60})['\"])?"
    r"(?:,\s{0,3}bisect_number=(\d{1,9}))?(?:,\s{0,3}debug_info=['\"]([^'\"\n]{0,200})['\"])?"
)
_BISECTOR_PROSE = re.compile(
    r"CompilerBisector[^\n]{0,80}?\bbackend[`*:= '\"]{1,6}([\w.]{2,40})[`*'\"]?"
    r"(?:[^\n]{0,40}?\bsubsystem[`*:= '\"]{1,6}([\w.]{2,60})[`*'\"]?)?",
    re.I,
)
# The agent's own layout: "- **Backend**: `inductor`" lines after "compiler bisector", or "narrowed the bug to the
# **aot_eager** backend".
_BISECTOR_FIELD = re.compile(r"^\W{0,6}\*{0,2}(Backend|Subsystem|Detail)\*{0,2}:?\*{0,2}:?\s{0,3}`?([^`\n]{1,200})`?")
_BISECTOR_NARROWED = re.compile(r"narrowed the bug to the \*{0,2}`?([\w.]{2,60})`?\*{0,2} backend", re.I)
_UNABLE = re.compile(r"\bunable to reproduce this on `?([0-9a-f]{7,40})`?", re.I)
_TRACE = re.compile(r"https?://[^\s)>\]]{1,300}(?:tlparse|TORCH_TRACE|/trace)[^\s)>\]]{0,200}|TORCH_TRACE=\S{1,200}")
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})\s{0,2}([\w+-]{0,20})\s*$")

# The switch evaluate_suggestions --without-automation turns off, to measure what these facts add.
READ_AUTOMATION = True


@dataclass(frozen=True)
class BisectorResult:
    """torch's CompilerBisector's answer: the first backend that fails, and within it the subsystem."""

    backend: str
    subsystem: str
    detail: str
    replay: str  # the TORCH_BISECT_* line that replays it ("" when not given)
    source: str  # "comment:3"
    evidence: str
    author: str = ""  # who posted it
    known: bool = False  # posted by an account that may speak for the automation (or a maintainer): evidence


@dataclass(frozen=True)
class AgentReport:
    """One PT2 Repro Agent comment. outcome: reproduced | not reproduced | mitigated | unreadable."""

    source: str
    outcome: str
    nightly: str = ""
    gpu: str = ""
    runs: str = ""  # "3/3"
    failure: str = ""  # "crash" | "silent mismatch" | ""
    mitigation: str = ""  # the config that hides it, when the outcome is mitigated
    bisector: BisectorResult | None = None
    script: str = ""
    script_needs_cuda: bool = False
    evidence: str = ""
    author: str = ""  # who posted it
    known: bool = False  # posted by the Repro Agent's account; otherwise someone's claim to be the agent


@dataclass(frozen=True)
class NotReproduced:
    """Another agent's "unable to reproduce this on <sha>", with who said it."""

    sha: str
    source: str
    author: str = ""
    known: bool = False  # posted by an agent account or a maintainer; otherwise a claim


@dataclass(frozen=True)
class Automation:
    """Everything the automation said about one issue."""

    agent: tuple[AgentReport, ...] = ()  # every comment opening with the agent's mark, the claims included
    agent_label: str = ""  # reproduced | not reproduced | mitigated (from repro:agent:h100:<outcome>), or ""
    agent_marked_incorrect: bool = False
    bisections: tuple[BisectorResult, ...] = ()
    not_reproduced: tuple[NotReproduced, ...] = ()  # other agents' "unable to reproduce", the claims included
    traces: tuple[str, ...] = ()
    bot_triaged: bool = False
    bot_mislabeled: bool = False
    bot_labels: tuple[str, ...] = ()  # what the bot added (label events); () when unknown

    @property
    def latest_agent(self) -> AgentReport | None:
        """The Repro Agent's latest comment, from its own account (a claim never is)."""
        return next((report for report in reversed(self.agent) if report.known), None)

    @property
    def known_bisections(self) -> tuple[BisectorResult, ...]:
        """The bisector results the rules may cite: the Repro Agent's, then the other agents' or maintainers'."""
        results = [r.bisector for r in self.agent if r.known and r.bisector is not None]
        return tuple(results + [r for r in self.bisections if r.known])

    @property
    def any(self) -> bool:
        return bool(self.agent or self.agent_label or self.bisections or self.not_reproduced or self.bot_triaged)


def read_automation(
    sources: list[Source],
    labels: Iterable[str],
    label_events: Iterable[tuple[str, str, str]] = (),
    accounts: AutomationAccounts = DEFAULT,
) -> Automation:
    """The automation's facts in an issue's sources (title, body, comments: text.sources_of) and labels.

    label_events: (label, actor login, "labeled" | "unlabeled") in time order, when the caller has them: the
    labels the bot (vocabulary.is_bot: a GitHub App, or one of the accounts' bots) added and did not remove.
    accounts: who may speak for the automation; each fact records its poster and whether they may (`known`).
    """
    names = [str(n) for n in labels]
    agent, bisections, unable, traces = [], [], [], []
    for source in sources:
        text = source.text[:MAX_TEXT]
        # Another agent's result or a bisector's output: the agent accounts', or a maintainer's own run.
        vouched = accounts.may_speak_as(AGENT, source.author) or is_maintainer(source.association)
        if source.name.startswith("comment:") and _is_agent_comment(text):
            report = _agent_report(text, source.name)
            known = accounts.may_speak_as(REPRO_AGENT, source.author)
            bisector = report.bisector and replace(report.bisector, author=source.author, known=known)
            agent.append(replace(report, author=source.author, known=known, bisector=bisector))
        for match in _BISECTION_RESULT.finditer(text):
            bisections.append(
                BisectorResult(
                    match.group(1),
                    match.group(2) or "",
                    match.group(4) or "",
                    "",
                    source.name,
                    match.group(0),
                    source.author,
                    vouched,
                )
            )
        unable += [NotReproduced(m.group(1), source.name, source.author, vouched) for m in _UNABLE.finditer(text)]
        traces += [m.group(0) for m in _TRACE.finditer(text)]
    return Automation(
        agent=tuple(agent),
        agent_label=_label_outcome(names),
        agent_marked_incorrect=AGENT_INCORRECT in names,
        bisections=tuple(bisections),
        not_reproduced=tuple(unable),
        traces=tuple(dict.fromkeys(traces))[:10],
        bot_triaged=BOT_TRIAGED in names,
        bot_mislabeled=BOT_MISLABELED in names,
        bot_labels=_bot_added(label_events, accounts),
    )


def _is_agent_comment(text: str) -> bool:
    """The agent's comments open with its mark; a person quoting "Repro Agent" in a sentence is not one."""
    for line in text.splitlines()[:3]:
        if line.strip():
            return not line.lstrip().startswith(">") and bool(AGENT_MARK.search(line[:200]))  # a quote is not it
    return False


def _agent_report(text: str, source: str) -> AgentReport:
    prose, script = _split_script(text)
    nightly, gpu = _NIGHTLY.search(prose), _GPU.search(prose)
    outcome, evidence = "", ""
    for pattern, name in ((_MITIGATION, "mitigated"), (_NOT_REPRODUCED, "not reproduced"), (_REPRODUCED, "reproduced")):
        match = pattern.search(prose)
        if match:
            outcome, evidence = name, _line_of(prose, match.start())
            break
    if not outcome:
        # Our mark but not the format we know: say so rather than guess (its script is still its script).
        return AgentReport(
            source, "unreadable", script=script, script_needs_cuda=_needs_cuda(script), evidence=_line_of(prose, 0)
        )
    runs = _RUNS_OF.search(prose)
    all_runs = _RUNS.search(prose)
    count = (
        f"{runs.group(1)}/{runs.group(2)}" if runs else f"{all_runs.group(1)}/{all_runs.group(1)}" if all_runs else ""
    )
    failure = ""
    if outcome != "not reproduced":
        failure = "crash" if _CRASH.search(prose) else "silent mismatch" if _MISMATCH.search(prose) else ""
    config = _CONFIG.search(prose) if outcome == "mitigated" else None
    return AgentReport(
        source=source,
        outcome=outcome,
        nightly=nightly.group(1) if nightly else "",
        gpu=gpu.group(1) if gpu else "",
        runs=count,
        failure=failure,
        mitigation=config.group(1) if config else "",
        bisector=_bisector(prose, source),
        script=script,
        script_needs_cuda=_needs_cuda(script),
        evidence=evidence,
    )


def _needs_cuda(script: str) -> bool:
    return bool(re.search(r"""["']cuda(?::\d)?["']|\.cuda\(\)""", script))


def _bisector(prose: str, source: str) -> BisectorResult | None:
    replay = _BISECT_LINE.search(prose)
    fields = dict(_BISECT_FIELD.findall(replay.group(0))) if replay else {}
    listed, evidence = _listed_bisector(prose)
    said = _BISECTOR_PROSE.search(prose) or _BISECTION_RESULT.search(prose) or _BISECTOR_NARROWED.search(prose)
    backend = fields.get("BACKEND") or listed.get("backend") or (said.group(1) if said else "")
    if not backend:
        return None
    subsystem = fields.get("SUBSYSTEM") or listed.get("subsystem", "")
    if not subsystem and said is not None and said.re is not _BISECTOR_NARROWED and said.group(2):
        subsystem = said.group(2)
    evidence = evidence or (said.group(0) if said else replay.group(0))
    return BisectorResult(
        backend, subsystem, listed.get("detail", ""), replay.group(0).strip() if replay else "", source, evidence
    )


def _listed_bisector(prose: str) -> tuple[dict[str, str], str]:
    """The "- **Backend**: `x`" lines that follow a mention of the compiler bisector, and their text."""
    at = prose.lower().find("bisector")
    if at == -1:
        return {}, ""
    found, lines = {}, []
    for line in prose[at:].splitlines()[1:8]:
        match = _BISECTOR_FIELD.match(line[:MAX_LINE])
        if match:
            found[match.group(1).lower()] = match.group(2).strip()
            lines.append(line.strip())
    return found, " ".join(lines)[:300]


def _split_script(text: str) -> tuple[str, str]:
    """(the comment without its code blocks, the repro script among them: the block that defines test_fn or
    reads TORCH_COMPILE_BACKEND, else "")."""
    prose, blocks, block, fence = [], [], [], ""
    for line in text.splitlines():
        line = line[:MAX_LINE]
        opened = _FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence) and not opened.group(2):
                blocks.append("\n".join(block))
                block, fence = [], ""
            else:
                block.append(line)
        elif opened:
            fence = opened.group(1)
        else:
            prose.append(line)
    script = next((b for b in blocks if "def test_fn" in b or "TORCH_COMPILE_BACKEND" in b), "")
    return "\n".join(prose), script


def _line_of(text: str, at: int) -> str:
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return text[start : end if end != -1 else len(text)].strip()[:300]


def _label_outcome(names: list[str]) -> str:
    for name in names:
        if name.startswith(AGENT_LABEL) and name != AGENT_INCORRECT:
            tail = name[len(AGENT_LABEL) :]
            # A copy cut short still names its outcome once it is past "repro_success:"/"repro_fail:" and a few more.
            cut = len(tail) >= 18
            return next(
                (o for prefix, o in LABEL_OUTCOMES if tail.startswith(prefix) or (cut and prefix.startswith(tail))), ""
            )
    return ""


def _bot_added(events: Iterable[tuple[str, str, str]], accounts: AutomationAccounts) -> tuple[str, ...]:
    added: dict[str, None] = {}
    for label, actor, action in events:
        if not is_bot(actor, accounts):
            continue
        if action == "labeled":
            added[label] = None
        elif action == "unlabeled":
            added.pop(label, None)
    return tuple(added)
