"""A failure signature per issue: what crash-triage systems group reports by.

The exception class, its message with everything run-specific stripped (numbers, shapes, addresses,
paths, tensor reprs, symbolic sizes), and the innermost PT2 frame (file:function) of the traceback
found in the body or, failing that, in the comments. Two reports of one Inductor assertion reached
from different models get the same key; another exception or another innermost frame gets another.

Issue text is untrusted: the text is capped (text.py), scanned line by line, each line cut to
MAX_LINE before a regular expression sees it, and every pattern is bounded, so the cost is linear.
Pure Python, no Django.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from rubric_app.rubric.reading.text import sources_of
from rubric_app.rubric.reading.types import IssueText

MAX_LINE = 1_000
MAX_LINES = 20_000  # per source: a body is capped at 60,000 characters anyway
MAX_BLOCK_LINES = 600  # a traceback longer than this is read up to here
MAX_UNWRAP = 6  # "BackendCompilerFailed: ... raised: InductorError: LoweringException: AssertionError: ..."
MAX_MESSAGE = 200
FRAMES_KEPT = 3  # shown and indexed; the key uses the innermost one (two when the message says nothing)
# A normalized message shorter than this says nothing on its own ("", "n", "<shape>"): the key then
# takes the frame before the innermost too, and alone it is not specific enough to group issues.
SPECIFIC_MESSAGE = 12

# The packages whose frames say which part of PT2 failed (RUBRIC R1-R9): the compiler stack and the
# kernel languages it drives. torch.nn, torch/cuda and user code only say where the call came from.
PT2_PATHS = (
    "torch/_dynamo/",
    "torch/_inductor/",
    "torch/_functorch/",
    "torch/_subclasses/",
    "torch/fx/",
    "torch/_decomp/",
    "torch/_refs/",
    "torch/_prims/",
    "torch/_prims_common/",
    "torch/_higher_order_ops/",
    "torch/export/",
    "torch/_export/",
    "torch/utils/_sympy/",
    "torch/_library/",
    "torch/_guards.py",
    "torch/_meta_registrations.py",
    "triton/",
    "helion/",
)

_HEADER = re.compile(r"Traceback \(most recent call last\)")
_CHAINED = re.compile(r"The above exception was the direct cause|During handling of the above exception")
_FRAME = re.compile(r'( {0,40})File "([^"\n]{1,500})", line \d{1,9}, in ([^\s]{1,200})')
# An exception line: a dotted name whose last part is CapWords, then ": message" or nothing.
_EXCEPTION = re.compile(rf"((?:[A-Za-z_]\w{{0,80}}\.){{0,8}}[A-Z]\w{{0,80}})(?::(?: (.{{0,{MAX_LINE}}}))?)?$")
# A name that is an exception whatever its indentation or position (a bare error line, a wrapped one).
_EXCEPTION_NAME = re.compile(r"(?:Error|Exception|Failed|Failure|Unsupported|Exit|Interrupt|Violation)$")
_FENCE = re.compile(r" {0,8}(?:```|~~~)")
_SITE = re.compile(r"(?:site|dist)-packages/")
_SLASHES = re.compile(r"/{2,}")
_PACKAGE_ROOT = re.compile(r"(?<![^/])((?:torch|triton|helion)/)")  # at the start or after a "/"

# Message normalization, in order. Each pattern is bounded and has no nested quantifier.
_DTYPE = r"\b(?:b?float|u?int|complex)(?:8|16|32|64|128)\b|\bfloat8_e\d{1,2}m\d{1,2}\w{0,6}"
_NORMALIZE = [
    (re.compile(r"0x[0-9a-fA-F]{1,32}"), "<addr>"),
    # Windows or POSIX paths of two or more parts (a lone "/" or "a/b" ratio stays).
    (
        re.compile(
            r"(?:[A-Za-z]:)?(?:[\\/][\w.~+@-]{1,120}){2,40}[\\/]?|(?:[\w.~+@-]{1,120}[\\/]){2,40}[\w.~+@-]{0,120}"
        ),
        "<path>",
    ),
    (
        re.compile(
            r"\b(?:Fake)?Tensor\([^()\n]{0,400}(?:\([^()\n]{0,200}\)[^()\n]{0,400}){0,8}\)|\btensor\([^()\n]{0,400}(?:\)|$)"
        ),
        "<tensor>",
    ),
    (re.compile(r"torch\.Size\(\[[^\]\n]{0,400}\]\)"), "<shape>"),
    # Sizes, strides and index lists: brackets or parens holding only numbers, symbols and arithmetic.
    (re.compile(r"[\[(](?:\s{0,4}[\w*+/%-]{1,40}\s{0,4},){1,64}\s{0,4}[\w*+/%-]{0,40}\s{0,4}[\])]"), "<shape>"),
    (re.compile(rf"({_DTYPE})|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"), None),  # numbers -> "n", dtypes kept
    (re.compile(r"[\"`]"), "'"),
    (re.compile(r"\s+"), " "),
]


@dataclass(frozen=True)
class Signature:
    """One issue's failure: exception class, normalized message, innermost PT2 frames (innermost first).

    source: where the traceback was read ("body", "comment:<i>").
    """

    exception: str
    message: str
    frames: tuple[str, ...] = ()
    source: str = ""

    @property
    def key(self) -> str:
        """16 hex characters: equal for the same failure, whatever the run-specific details."""
        frames = self.frames[: 1 if len(self.message) >= SPECIFIC_MESSAGE else 2]
        text = "\n".join([self.exception, self.message, *frames])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def specific(self) -> bool:
        """Specific enough to group issues by: a PT2 frame, or a message that says something."""
        return bool(self.frames) or len(self.message) >= SPECIFIC_MESSAGE

    def describe(self) -> str:
        """One line for people:
        "AssertionError: expected a static pad ... in torch/_inductor/lowering.py:constant_pad_nd"."""
        where = f" in {self.frames[0]}" if self.frames else ""
        return f"{self.exception}: {self.message}{where}" if self.message else f"{self.exception}{where}"


def normalize_message(text: str) -> str:
    """The message without what changes from run to run: numbers (dtype names kept), shapes, addresses,
    paths, tensor reprs; quotes unified, whitespace collapsed, lower-case, at most MAX_MESSAGE characters."""
    text = text[:MAX_LINE]
    for pattern, replacement in _NORMALIZE:
        if replacement is None:
            text = pattern.sub(lambda m: m.group(1) or "n", text)
        else:
            text = pattern.sub(replacement, text)
    return text.strip().lower()[:MAX_MESSAGE]


def pt2_frame(path: str, function: str) -> str:
    """ "torch/_inductor/lowering.py:constant_pad_nd" for a frame in PT2's code, else "" (user code, torch.nn, ...)."""
    path = _SLASHES.sub("/", path.replace("\\", "/"))  # Windows paths, escaped ones too
    # The installed package's path, else the innermost torch/, triton/ or helion/ of a source checkout.
    site = _SITE.split(path)
    if len(site) > 1:
        path = site[-1]
    else:
        roots = list(_PACKAGE_ROOT.finditer(path))
        if not roots:
            return ""
        path = path[roots[-1].start(1) :]
    if not path.startswith(PT2_PATHS):
        return ""
    return f"{path}:{function}"


def signature_of(issue: IssueText) -> Signature | None:
    """The issue's failure signature, or None when it shows no exception.

    The body's first traceback wins; then the comments', in order; then a bare exception line
    (no frames) in the body or comments.
    """
    sources = sources_of(issue)[1:]
    for source in sources:
        found = _first_traceback(source.text)
        if found:
            return Signature(*found, source=source.name)
    for source in sources:
        found = _bare_exception(source.text)
        if found:
            return Signature(found[0], found[1], source=source.name)
    return None


def _lines(text: str) -> list[str]:
    return [line[:MAX_LINE] for line in text.split("\n", MAX_LINES)[:MAX_LINES]]


def _first_traceback(text: str) -> tuple[str, str, tuple[str, ...]] | None:
    """(exception, message, frames) of the first traceback chain in text that ends in an exception."""
    if 'File "' not in text:
        return None
    lines = _lines(text)
    i = 0
    while i < len(lines):
        if _HEADER.search(lines[i]) or _FRAME.match(lines[i]):
            chain, i = _chain(lines, i)
            if chain:
                return chain
        else:
            i += 1
    return None


def _chain(lines: list[str], start: int) -> tuple[tuple[str, str, tuple[str, ...]] | None, int]:
    """Read the traceback blocks linked by "The above exception..." from `start`; returns
    ((exception, message, frames) or None, the index after the chain).

    The exception is the last block's (unwrapped: a wrapper's message naming the real exception is
    read through); the frames are those of the first block whose exception is that same class (the
    root cause: "direct cause" chains print it first), else the last block's.
    """
    blocks: list[tuple[str, str, list[str]]] = []
    i = start
    while i < len(lines):
        block, i = _block(lines, i)
        if block:
            blocks.append(block)
        # Another block of the same chain follows only after a chaining sentence.
        j = i
        while j < len(lines) and j < i + 3 and not lines[j].strip():
            j += 1
        if j < len(lines) and _CHAINED.search(lines[j]):
            i = j + 1
            while i < len(lines) and not lines[i].strip():
                i += 1
            continue
        break
    if not blocks:
        return None, i
    exception, message = blocks[-1][0], blocks[-1][1]
    # A wrapper whose message starts with an earlier block's exception ("InternalTorchDynamoError:
    # GuardOnDataDependentSymNode: ...") carries that one, whatever its name ends with.
    inner = _EXCEPTION.match(message.strip())
    if inner and inner.group(1).rsplit(".", 1)[-1] in {b[0] for b in blocks[:-1]}:
        exception, message = inner.group(1).rsplit(".", 1)[-1], inner.group(2) or ""
    root = next((b for b in blocks if b[0] == exception), blocks[-1])
    frames = tuple(reversed(root[2]))[:FRAMES_KEPT]
    return (exception, normalize_message(message), frames), i


def _block(lines: list[str], start: int) -> tuple[tuple[str, str, list[str]] | None, int]:
    """One traceback from `start` (its header or first frame): (exception, raw message, PT2 frames
    outermost first) or None when it ends without an exception line; and the index after it.

    Frames after the exception line count too: Inductor's LoweringException prints the lowering's
    frame under its message. The block ends at a code fence, the next traceback, a chaining sentence
    or MAX_BLOCK_LINES.
    """
    frames: list[str] = []
    indent: int | None = None
    exception = message = None
    i = start + 1 if _HEADER.search(lines[start]) else start
    end = min(len(lines), start + MAX_BLOCK_LINES)
    while i < end:
        line = lines[i]
        if _FENCE.match(line) or _HEADER.search(line) or _CHAINED.search(line):
            break
        frame = _FRAME.match(line)
        if frame:
            indent = len(frame.group(1)) if indent is None else indent
            name = pt2_frame(frame.group(2), frame.group(3))
            if name:
                frames.append(name)
        elif exception is None and indent is not None:
            found = _exception_line(line, indent)
            if found:
                exception, message = _unwrap(found[0], found[1], lines, i)
        i += 1
    if exception is None:
        return None, i
    return (exception, message, frames), i


def _exception_line(line: str, frame_indent: int) -> tuple[str, str] | None:
    """(class, message) when `line` is a traceback's exception line: less indented than its frames
    (or named like an exception), a CapWords dotted name, then ": message" or nothing."""
    stripped = line.lstrip()
    if not stripped:
        return None
    match = _EXCEPTION.match(stripped)
    if not match:
        return None
    name = match.group(1).rsplit(".", 1)[-1]
    if len(line) - len(stripped) >= frame_indent and not _EXCEPTION_NAME.search(name):
        return None  # an indented code line such as "Foo:" under a frame
    return name, match.group(2) or ""


def _unwrap(name: str, message: str, lines: list[str], at: int) -> tuple[str, str]:
    """Read through wrappers to the exception they carry: "InductorError: LoweringException: AssertionError: x"
    is AssertionError "x"; "BackendCompilerFailed: backend='inductor' raised:" is the next line's."""
    for _ in range(MAX_UNWRAP):
        inner = _EXCEPTION.match(message.strip())
        if inner and _EXCEPTION_NAME.search(inner.group(1)):
            name, message = inner.group(1).rsplit(".", 1)[-1], inner.group(2) or ""
            continue
        if (not message.strip() or message.rstrip().endswith("raised:")) and at + 1 < len(lines):
            nxt = _EXCEPTION.match(lines[at + 1].strip())
            if nxt and _EXCEPTION_NAME.search(nxt.group(1)):
                at += 1
                name, message = nxt.group(1).rsplit(".", 1)[-1], nxt.group(2) or ""
                continue
        break
    return name, message


def _bare_exception(text: str) -> tuple[str, str] | None:
    """(class, normalized message) of the first line that is an exception on its own
    ("torch._dynamo.exc.Unsupported: ...")."""
    if ":" not in text and "Error" not in text:
        return None
    lines = _lines(text)
    for i, line in enumerate(lines):
        if len(line) - len(line.lstrip()) > 8:
            continue
        match = _EXCEPTION.match(line.strip())
        if match and _EXCEPTION_NAME.search(match.group(1)):
            name, message = _unwrap(match.group(1).rsplit(".", 1)[-1], match.group(2) or "", lines, i)
            return name, normalize_message(message)
    return None
