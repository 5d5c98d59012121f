"""The thread reader: who concluded what, read off the issue's comments as facts with evidence spans.

Keywords say where a failure surfaced; the thread says why (G8). A rule that matches "codegen" in
"it's the decomposition, not codegen" reads the word and misses its scope. This module reads scope:

- negated: a component the text rules out ("not codegen", "this isn't a dynamo bug", "Inductor is fine");
- attributed: a component named only as where the error surfaces ("AOTAutograd is only the caller");
- concluded: the latest diagnosis in the thread, preferring a comment by someone other than the
  reporter (the harvested threads carry no author association, so "not the reporter" stands in for
  "a maintainer or collaborator");
- transfer: the fix belongs in another repository (G2);
- question: a usage question, or a reply that says it is expected behaviour (G1);
- backend results: what each backend of the bisection ladder did ("`aot_eager` produces correct results",
  "eager and aot_eager backends do not have this issue"), clause by clause (backend_results, ladder).

Pure Python; each fact keeps the exact text that produced it. rules/general.py turns the facts into
findings (G1, G2, R2, R2.1-R2.5, R5, G8).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rubric_app.rubric.reading.text import Source
from rubric_app.vocabulary import DECOMPOSITIONS, DYNAMIC_SHAPES, DYNAMO, INDUCTOR, PT2_DISPATCHER

I = re.I

# How the thread names each core component (and the parts of it people blame).
COMPONENT_NAMES = (
    (
        INDUCTOR,
        r"(?:torch)?inductor(?:'s)?|codegen|code ?gen(?:eration)?|the triton kernels?"
        # Inductor's templates (flex attention's, a Helion or Triton template's epilogue): its code generation
        r"|(?:flex[ _]?attention|triton|epilogue|external) templates?",
    ),
    (DYNAMO, r"(?:torch)?dynamo(?:'s)?"),
    (
        PT2_DISPATCHER,
        r"aot[_ ]?autograd(?:'s)?|aot[_ ]?dispatch(?:er)?|functionali[sz]ation|fake ?tensors?|fake_tensor",
    ),
    (DYNAMIC_SHAPES, r"dynamic shapes?|symbolic shapes?|unbacked sym\w{1,6}"),
    (DECOMPOSITIONS, r"(?:the |a )?decompositions?|decomps?"),
)
_NAMES = "|".join(names for _label, names in COMPONENT_NAMES)
_NAME_OF = tuple((label, re.compile(rf"\b(?:{names})\b", I)) for label, names in COMPONENT_NAMES)
_ANY_NAME = re.compile(rf"\b(?:{_NAMES})", I)
# The same names for folded lowercase text, without \b: Python's re then scans for the first letters in C
# (the engine's hot path); a hit is only where to look, the real patterns decide.
_NAME_LOCATOR = re.compile(_NAMES.lower().replace("\\b", ""))
_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})

# "not codegen", "isn't an inductor bug", "nothing to do with dynamo", "rules out AOTAutograd",
# "inductor is fine / not at fault". "not only inductor" and "not just dynamo" are not negations.
NEGATED = re.compile(
    rf"\b(?:not|isn't|is not|wasn't|was not|rather than|instead of)(?! only| just| sure| yet)"
    rf" (?:a |an |the |in |in the |on the |from )?(?P<a>{_NAMES})(?:[ -](?:bug|issue|problem|related|specific|side))?\b"
    rf"|\b(?:nothing to do with|unrelated to|rules? out|ruled out|can rule out|not caused by"
    rf"|not due to) (?:the )?(?P<b>{_NAMES})\b"
    rf"|\b(?P<c>{_NAMES}) (?:is|looks|seems) (?:fine|ok|okay|innocent|correct"
    rf"|not (?:at fault|to blame|the (?:culprit|cause|problem|issue)|involved))\b",
    I,
)

# "AOTAutograd is only the caller", "dynamo is just where it surfaces", "the error is only raised in inductor".
ATTRIBUTED = re.compile(
    rf"\b(?P<a>{_NAMES})(?: frames?| code)? (?:is|are) (?:only|just|merely|simply) (?:the )?"
    rf"(?:caller|messenger|symptom|victim|where (?:it|this|the (?:error|failure|exception|assert\w{{0,4}}))"
    rf" (?:surfaces|shows up|appears|is raised|gets raised|is thrown|fails|is reported)"
    rf"|surfacing (?:it|the error)|reporting (?:it|the error)|in the (?:stack ?trace|traceback))\b"
    rf"|\b(?:only|just|merely) (?:surfaces|shows up|appears|is raised|gets raised|is thrown)"
    rf" (?:in|inside|from|during|through) (?:the )?(?P<b>{_NAMES})\b"
    rf"|\b(?:is|are|gets) (?:only|just|merely) (?:raised|thrown|reported|surfaced|caught|hit)"
    rf" (?:in|inside|from|by) (?:the )?(?P<c>{_NAMES})\b",
    I,
)

# The latest conclusion of the thread: where the bug is ("looks like an AOTAutograd problem",
# "root caused to inductor", "the fix is in dynamo").
CONCLUDED = re.compile(
    rf"\b(?:this is|it's|it is|looks like|seems like|seems to be|appears to be|must be|is probably|is likely|so it's"
    rf"|so the bug is in) "
    rf"(?:a |an |the |in )?(?:general |real |genuine )?"
    rf"(?P<a>{_NAMES})(?: side)?(?: (?:bug|issue|problem|regression))?\b(?! is fine)"
    rf"|\b(?:root[- ]?caused? (?:it |this )?(?:to|is)|the (?:bug|issue|problem|root cause) is in|a bug in"
    rf"|the fix (?:is|belongs|should go) in) (?:the )?(?P<b>{_NAMES})\b"
    rf"|\b(?P<c>{_NAMES}) (?:doesn't|does not|fails to|can't|cannot) (?:preserve|handle|support|respect|properly)\b"
    # a diagnosis said in three words, as its own sentence: "Flex attention template bug."
    rf"|(?:^|(?<=[.!?] )|(?<=\n))(?P<d>{_NAMES})(?: side)? (?:bug|issue|problem)(?=[.!]|\s*$)",
    I,
)

# G2: the fix belongs in another repository. pytorch/pytorch itself is not a transfer.
_REPO = (
    r"pytorch/(?!pytorch\b)[\w.-]{2,30}|torchvision|torchaudio|torchtext|executorch|torchrec|torchtune|torchao"
    r"|torch[_-]?xla|torch[_-]?tensorrt|(?:the )?(?:vision|audio|executorch|xla|ao|torchrec) repo(?:sitory)?"
)
TRANSFER = re.compile(
    rf"\b(?:the fix belongs in|belongs in|belongs to"
    rf"|should be (?:filed|opened|reported|moved|transferred|fixed) (?:in|to|on|against|upstream in)"
    rf"|(?:please )?(?:file|open|report|move|transfer) (?:it|this|this issue|an issue|a bug)"
    rf" (?:in|to|on|against|over to)"
    rf"|(?:is|this is) (?:a |an )?(?:bug|issue|problem) (?:in|with|for)|needs to be fixed in"
    rf"|(?:transferring|moving) (?:this |it )?to) "
    rf"(?:the )?(?P<repo>{_REPO})",
    I,
)

# G1: a usage question, or a reply that says the behaviour is expected.
QUESTION_TEXT = re.compile(
    r"^\s{0,5}(?:how (?:do|can|should) (?:i|we|one)\b|is (?:it|there) (?:possible|a way)\b"
    r"|what is the (?:right|recommended|correct|best) way\b"
    r"|is this (?:expected|intended|the expected behaviou?r)\b)",
    I | re.M,
)
NOT_A_BUG = re.compile(
    r"\b(?:this is|that's|that is|it's|it is) (?:the )?(?:expected|intended|by design|working as intended|not a bug)\b"
    r"|\bworks as (?:intended|expected|designed)\b|\bnot a bug\b"
    r"|\b(?:please )?(?:ask|post)(?: this| your question)?"
    r" (?:on|in|at) (?:the )?(?:forum|discuss\.pytorch\.org|forums)",
    I,
)


@dataclass(frozen=True)
class ThreadFact:
    """One thing the thread says. kind: negated | attributed | concluded | transfer | question.

    label: the component (or, for a transfer, the repository); evidence: the exact text; source:
    title, body or comment:<i>; by_reporter: the reporter wrote it (False when authors are unknown).
    """

    kind: str
    label: str
    evidence: str
    source: str
    by_reporter: bool = False


def _component(name: str) -> str | None:
    return next((label for label, pattern in _NAME_OF if pattern.search(name)), None)


def _named(match: re.Match[str]) -> str:
    return next(v for k, v in match.groupdict().items() if v and k != "repo")


# Conclusions are prose: code blocks and the tail of a long description (logs, environment) are skipped,
# which also keeps the reader cheap on the engine's hot path.
MAX_PROSE = 6_000
MAX_CODE_BLOCKS = 8
_REPO_NEEDLES = (
    "pytorch/",
    "torchvision",
    "torchaudio",
    "torchtext",
    "executorch",
    "torchrec",
    "torchtune",
    "torchao",
    "xla",
    "tensorrt",
    " repo",
)
_NOT_A_BUG_NEEDLES = ("expected", "intended", "by design", "not a bug", "forum", "discuss.pytorch")


WINDOW = 120


def _windows(text: str) -> list[str]:
    """The stretches of text around each component name (merged where they overlap), starting and
    ending at whitespace so no word is cut in two."""
    spans: list[list[int]] = []
    # Folded as facts.py does, so positions in the lowered text are positions in the text.
    for match in _NAME_LOCATOR.finditer(text.translate(_FOLD).lower()):
        start, end = max(0, match.start() - WINDOW), min(len(text), match.end() + WINDOW)
        if spans and start <= spans[-1][1]:
            spans[-1][1] = end
        else:
            spans.append([start, end])
    out = []
    for start, end in spans:
        if start > 0:
            space = text.find(" ", start)
            start = space + 1 if 0 <= space < end else start
        if end < len(text):
            space = text.rfind(" ", start, end)
            end = space if space > start else end
        out.append(text[start:end])
    return out


def prose(text: str) -> str:
    """The text outside fenced code blocks, capped at MAX_PROSE characters. The pieces around a block are
    joined by a line break: no pattern reads across it (its evidence would be no text of the issue)."""
    return "\n".join(text.split("```")[0::2])[:MAX_PROSE]


def read_thread(sources: list[Source], authors: dict[str, str] | None = None, reporter: str = "") -> list[ThreadFact]:
    """Facts of the body and comments, in thread order (the title is left to the rules).

    authors: source name -> author login (absent or empty when unknown); reporter: the issue's author.
    Evidence is an exact substring of its source's text.
    """
    authors = authors or {}
    facts: list[ThreadFact] = []
    for source in sources[1:]:
        text = prose(source.text)
        lowered = text.lower()
        by_reporter = source.name == "body" or bool(reporter and authors.get(source.name) == reporter)
        for window in _windows(text):  # every pattern needs a component name: read only around one
            for pattern, kind in ((NEGATED, "negated"), (ATTRIBUTED, "attributed"), (CONCLUDED, "concluded")):
                for match in pattern.finditer(window):
                    label = _component(_named(match))
                    if label:
                        facts.append(ThreadFact(kind, label, match.group(0), source.name, by_reporter))
        if any(n in lowered for n in _REPO_NEEDLES):
            for match in TRANSFER.finditer(text):
                facts.append(ThreadFact("transfer", match.group("repo"), match.group(0), source.name, by_reporter))
        if source.name == "body":
            match = QUESTION_TEXT.search(text[:600])
        else:
            match = None if by_reporter or not any(n in lowered for n in _NOT_A_BUG_NEEDLES) else NOT_A_BUG.search(text)
        if match:
            facts.append(ThreadFact("question", "", match.group(0), source.name, by_reporter))
    return facts


def conclusion(facts: list[ThreadFact]) -> ThreadFact | None:
    """The thread's last diagnosis naming a component, preferring comments by others than the reporter;
    None when a later comment rules that component out."""
    concluded = [x for x in facts if x.kind == "concluded"]
    others = [x for x in concluded if not x.by_reporter and x.source != "body"]
    last = (others or concluded or [None])[-1]
    if last is None:
        return None
    ruled_out = {x.label for x in ruled_out_after(facts, last)}
    return None if last.label in ruled_out else last


def ruled_out_after(facts: list[ThreadFact], after: ThreadFact | None = None) -> list[ThreadFact]:
    """Negations and attributions, those after `after` only when it is given."""
    start = facts.index(after) if after is not None else -1
    out = []
    for i, x in enumerate(facts):
        # A fact of the same clause as the conclusion ("X, not Y") counts too.
        if x.kind in ("negated", "attributed") and (i > start or (after and x.source == after.source)):
            out.append(x)
    return out


# --- Backend results: what each backend of the bisection ladder did, as the thread reports it (R2) ------

# The ladder's backends as people write them: quoted, backticked, `backend=...`. A bare "eager" is eager
# mode (the reference every report compares against), not the eager backend: only a quoted or explicit
# one is.
_BACKEND_NAMES = (  # (regex group, backend, how it is written)
    ("decomp", "aot_eager_decomp_partition", r"aot_eager_decomp_partition"),
    ("aot_eager", "aot_eager", r"aot_eager(?!_\w)"),
    (
        "eager",
        "eager",
        r"backend\s{0,3}=\s{0,3}['\"`]?eager\b['\"`]?|['\"`]eager['\"`]|\beager(?= backends?\b)|(?<=backend )eager\b"
        r"|\beager(?=/aot_eager)",
    ),
    ("inductor", "inductor", r"['\"`]?\binductor\b['\"`]?"),
)
_BACKEND = re.compile("|".join(f"(?P<{group}>{written})" for group, _backend, written in _BACKEND_NAMES), I)
_GROUP_BACKEND = {group: backend for group, backend, _written in _BACKEND_NAMES}
# Only text naming aot_eager or an explicit eager backend holds a ladder result (Inductor alone is every report).
_LADDER_LOCATOR = re.compile(r"aot_eager|['\"`]eager['\"`]|backend\s{0,3}=\s{0,3}eager|eager backend|backend eager", I)
# A title tag naming a backend ("[aot_eager] retain_grad is ignored") says where the reporter saw it fail.
_BACKEND_TAG = re.compile(r"\[(aot_eager(?:_decomp_partition)?)\]", I)

# Clauses: a contrast word, a comma, a colon, a parenthesis or a dash starts another half of the comparison.
_SENTENCE = re.compile(r"[^\n.!?;]+(?:\.(?=\w)[^\n.!?;]*)*")  # "torch.compile" and "x.grad" stay in their sentence
_CLAUSE_BREAK = re.compile(
    r",|:|\(|\)|\s[-\u2013\u2014]+\s|\b(?:but|while|whereas|however|although|though|except|yet|unlike)\b", I
)
# A clause of backend names alone ("aot_eager, aot_eager_decomp_partition and inductor all fail") lends them
# to the verdict that follows.
_LIST_ONLY = re.compile(r"^[\s'\"`/&*\[\]:]*(?:(?:and|or|both|the|with|on|for|backends?|also)\b[\s'\"`/&*\[\]:]*)*$", I)
_REFERENCE = re.compile(
    r"\b(?:match(?:es|ing)?|from|than|versus|vs\.?|against|compared (?:to|with)|relative to|to)"
    r"\s+(?:the\s+|that of (?:the\s+)?)?['\"`]?$",
    I,
)
# Outcomes. A negated pass is a failure ("doesn't work"), a negated failure a pass ("no error", "does not
# have this issue"); "not only X fails" negates nothing.
_NEG_PASS = re.compile(
    r"(?:\bnot|n't|\bnever|\bno longer|\bcannot)(?! only| just)"
    r" (?:\w+ ){0,2}?(?:work|pass|succeed|match|agree|run|compile|correct|fine|ok)\w*",
    I,
)
_NEG_FAIL = re.compile(
    r"(?:\bnot|n't|\bnever|\bno|\bwithout)(?! only| just) (?:\w+ ){0,2}?(?:fail|error|raise|crash|ha(?:ve|s)|show"
    r"|reproduce|differ|diverge|hit|trigger|issue|problem|bug|mismatch|difference|discrepanc)\w*",
    I,
)
_PASSED = re.compile(
    r"\b(?:works?|worked|working|pass(?:es|ed)?|succeed(?:s|ed)?|successfully|fine|ok|okay|match(?:es)?|agree|correct(?:ly)?"
    r"|same (?:results?|outputs?|values?) as eager|as expected)\b",
    I,
)
_FAILED = re.compile(
    r"\b(?:fail\w*|errors?|raise[sd]?|crash\w*|wrong|incorrect\w*|diverge\w*|differ(?:s|ed|ent)?|mismatch\w*|break\w*|broken|cause[sd]?"
    r"|reproduces?|reproducible|segfault\w*|perturbs?"
    r"|(?:has|have|shows?|hits?|triggers?) (?:this|the same|that|the) (?:issue|problem|bug|error)"
    r"|(?:failure|error|issue|bug|problem) (?:occurs|happens|appears|persists|remains))\b",
    I,
)


@dataclass(frozen=True)
class BackendResult:
    """One backend's outcome as the thread reports it: backend is eager (the eager backend), aot_eager,
    aot_eager_decomp_partition or inductor; evidence is the exact text of the clause(s) that say it."""

    backend: str
    failed: bool
    evidence: str
    source: str


def _outcome(clause: str) -> bool | None:
    """True: the clause says it fails; False: it passes; None: it says neither, or both."""
    if _NEG_PASS.search(clause):
        return True
    if _NEG_FAIL.search(clause):
        return False
    passed, failed = bool(_PASSED.search(clause)), bool(_FAILED.search(clause))
    return failed if passed != failed else None


def _clauses(sentence: str, offset: int) -> list[tuple[int, int]]:
    """(start, end) of each clause of a sentence, as positions in the source text."""
    spans, start = [], 0
    for cut in _CLAUSE_BREAK.finditer(sentence):
        spans.append((offset + start, offset + cut.start()))
        start = cut.end()
    spans.append((offset + start, offset + len(sentence)))
    return spans


def backend_results(sources: list[Source]) -> list[BackendResult]:
    """Each backend's reported outcome, in thread order (title, body, comments). Code blocks are read only for
    their `#` comments: a repro's `# aot_eager: works`, or `torch.compile(f, backend="aot_eager")(x)  # OK`."""
    out: list[BackendResult] = []
    for source in sources:
        text = source.text if source.name == "title" else prose(source.text)
        if source.name == "title":
            out += [
                BackendResult(m.group(1).lower(), True, m.group(0), source.name) for m in _BACKEND_TAG.finditer(text)
            ]
        if _LADDER_LOCATOR.search(text):
            out += [
                BackendResult(name, failed, evidence, source.name)
                for sentence in _SENTENCE.finditer(text)
                if _LADDER_LOCATOR.search(sentence.group(0))
                for name, failed, evidence in _sentence_results(text, sentence.start(), sentence.end())
            ]
        if source.name != "title" and "```" in source.text:
            out += [
                BackendResult(name, failed, evidence, source.name)
                for name, failed, evidence in _code_comment_results(source.text)
            ]
    return out


def _sentence_results(text: str, begin: int, finish: int) -> list[tuple[str, bool, str]]:
    """(backend, failed, evidence) for each outcome one sentence (text[begin:finish]) reports."""
    out: list[tuple[str, bool, str]] = []
    listed: list[str] = []
    listed_from = None
    for start, end in _clauses(text[begin:finish], begin):
        clause = text[start:end]
        # "differs from the eager backend", "does not match `aot_eager`": the reference compared against
        # is no outcome of its own.
        names = [
            _GROUP_BACKEND[m.lastgroup]
            for m in _BACKEND.finditer(clause)
            if not _REFERENCE.search(clause, max(0, m.start() - 40), m.start())
        ]
        rest = _BACKEND.sub(" ", clause)
        if names and _LIST_ONLY.match(rest):
            listed += names
            listed_from = start if listed_from is None else listed_from
            continue
        failed = _outcome(rest)
        if failed is not None and (listed or names):
            evidence = text[start if listed_from is None else listed_from : end].strip()
            out += [(name, failed, evidence) for name in dict.fromkeys(listed + names)]
        listed, listed_from = [], None
    return out


# A line of a fenced code block and its `#` comment (not a `#` inside a string: no quote after it on the line).
_CODE_COMMENT = re.compile(r"^([^\n#]{0,200}?)#\s?([^\n'\"]{2,200})$", re.M)


def _code_comment_results(text: str) -> list[tuple[str, bool, str]]:
    """Outcomes a repro's comments report: the comment's own words, or the line's backend when the comment
    only says how it went (`torch.compile(f, backend="aot_eager")(x)  # OK`)."""
    out: list[tuple[str, bool, str]] = []
    for code in text.split("```")[1::2][:MAX_CODE_BLOCKS]:
        for line in _CODE_COMMENT.finditer(code[:MAX_PROSE]):
            said = _sentence_results(code, line.start(2), line.end(2))
            if not said and _LADDER_LOCATOR.search(line.group(1)):
                failed = _outcome(line.group(2))
                names = [_GROUP_BACKEND[m.lastgroup] for m in _BACKEND.finditer(line.group(1))]
                said = (
                    [(name, failed, line.group(0).strip()) for name in dict.fromkeys(names)]
                    if failed is not None
                    else []
                )
            out += said
    return out


def ladder(results: list[BackendResult]) -> dict[str, BackendResult]:
    """The latest reported outcome per backend (a later comment corrects an earlier one)."""
    latest: dict[str, BackendResult] = {}
    for x in results:
        latest[x.backend] = x
    return latest
