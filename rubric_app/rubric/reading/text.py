"""What the rules read: the issue's text, capped, split into sources, plus facts read off its repro code.

Issue text is untrusted: every field is capped before any regular expression
sees it, and the patterns in rules/general.py use bounded repetitions only, so a huge
or hostile body costs linear time.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from rubric_app.rubric.reading.types import IssueText

MAX_TITLE = 500
MAX_BODY = 60_000
MAX_COMMENT = 20_000
MAX_COMMENTS = 100
# All the text the rules read, body and comments together: bounds the cost of a huge thread.
MAX_THREAD = 150_000
MAX_CODE_BLOCK = 20_000
MAX_CODE_BLOCKS = 8

# A harvested thread (the offline eval files) flattens comments into the body
# under "author · comment · date" lines.
_THREAD_MARK = re.compile(r"^([^\s·]{1,60}) · (description|comment) · (\d{4}-\d{2}-\d{2})[^\n]{0,40}$", re.M)


@dataclass(frozen=True)
class Source:
    """One searchable piece of the issue. name is the evidence_source: title, body, comment:<i>.

    author: who wrote it (the reporter for the title and body), association: GitHub's author_association of a
    comment's author ("" when unknown): what decides whether a fact read from it speaks for the automation
    (automation.py) or is only someone's claim."""

    name: str
    text: str
    author: str = ""
    association: str = ""


@dataclass
class CodeFacts:
    """What the repro code does, read with `ast` (regex fallback when the snippet does not parse).

    compile_kwargs: keyword arguments of torch.compile calls, as source text.
    calls: attribute or function names called, mapped to the exact source of the first call.
    """

    compile_kwargs: dict[str, str] = field(default_factory=dict)
    calls: dict[str, str] = field(default_factory=dict)
    call_kwargs: dict[str, set[str]] = field(default_factory=dict)
    imports: set[str] = field(default_factory=set)
    decorators: dict[str, str] = field(default_factory=dict)
    parsed: bool = False


def split_thread(body: str) -> tuple[str, tuple[str, ...]]:
    """Split a harvested thread into (description, comments); a plain body comes back unchanged."""
    description, _reporter, comments = split_thread_authored(body)
    return description, tuple(text for _author, text in comments)


def split_thread_authored(body: str) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """(description, reporter, ((author, comment), ...)) of a harvested thread; "" where unknown."""
    marks = list(_THREAD_MARK.finditer(body))
    if not marks:
        return body, "", ()
    description: list[str] = [body[: marks[0].start()]]
    reporter = ""
    comments: list[tuple[str, str]] = []
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(body)
        chunk = body[mark.end() : end]
        if mark.group(2) == "description":
            description.append(chunk)
            reporter = reporter or mark.group(1)
        else:
            comments.append((mark.group(1), chunk))
    return "".join(description), reporter, tuple(comments)


def sources_of(issue: IssueText) -> list[Source]:
    """The title, body and comments, each capped and without its environment report, in the order evidence
    is looked for."""
    return read_sources(issue)[0]


def read_sources(issue: IssueText) -> tuple[list[Source], list[Source]]:
    """(sources_of(issue), the environment reports cut out of them, each under the name of its source)."""
    body, report = split_environment((issue.body or "")[:MAX_BODY])
    sources, environment = (
        [Source("title", (issue.title or "")[:MAX_TITLE], issue.author), Source("body", body, issue.author)],
        [Source("body", report, issue.author)],
    )
    budget = MAX_THREAD - len(body)
    for i, comment in enumerate(issue.comments[:MAX_COMMENTS]):
        if budget <= 0:
            break
        text, report = split_environment((comment.body or "")[: min(MAX_COMMENT, budget)])
        budget -= len(text)
        sources.append(Source(f"comment:{i}", text, comment.author, comment.association))
        environment.append(Source(f"comment:{i}", report, comment.author, comment.association))
    return sources, [s for s in environment if s.text]


# collect_env's report (the bug template asks for it under "### Versions"): what was installed on the
# reporter's machine, not what fails. Read as evidence, its "CUDA", "triton==3.1.0", "[pip3] helion", CPU
# flags and ROCm lines outvoted the report itself, and every synced issue has one, while the triaged issues
# the labeler learned from (excerpts) almost never do. Only its machine-written lines go: what a reporter
# writes under that heading ("failing since 6/22", "both fail on CPU and CUDA") is kept.
ENVIRONMENT_LINE = re.compile(
    r"[ \t]{0,8}(?:\[pip3?\] |\[conda\] |Collecting environment information"
    r"|(?:PyTorch|Clang|GCC|CMake|Libc|Python|CUDA runtime"
    r"|cuDNN|Nvidia driver|HIP runtime|MIOpen runtime) version:|(?:CUDA|ROCM|XPU) used to build PyTorch:"
    r"|Is (?:debug build|CUDA available|XNNPACK available|XPU available):|OS:|Python platform:"
    r"|CUDA_MODULE_LOADING set to:|GPU models and configuration:|GPU \d{1,2}: |Caching allocator config:|CPU:[ \t]*$"
    r"|Versions of relevant libraries:|/\S{0,200}/libcudnn|#{1,6}[ \t]{0,4}(?:Versions?|Environment)[ \t]*$"
    # lscpu, which collect_env runs: "Architecture:        x86_64", "Flags: ...", "Vulnerability Spectre v1: ..."
    r"|(?:Architecture|CPU op-mode\(s\)|Address sizes|Byte Order|CPU\(s\)|On-line CPU\(s\) list|Off-line CPU\(s\) list"
    r"|Vendor ID|Model name|CPU family|Model|Thread\(s\) per core|Core\(s\) per socket"
    r"|Socket\(s\)|Stepping|BogoMIPS|Flags"
    r"|Virtualization(?: type)?|Hypervisor vendor|L[123][di]? cache"
    r"|NUMA node\d{0,3}(?: CPU)?\(s\)|Vulnerability [\w ]{1,40}"
    r"|CPU (?:max|min) MHz|CPU\(s\) scaling MHz|Frequency boost|Caches \(sum of all\)):)"
)


def split_environment(text: str) -> tuple[str, str]:
    """(text without collect_env's lines, those lines), line by line: linear in the text."""
    kept: list[str] = []
    report: list[str] = []
    for line in text.split("\n"):
        (report if ENVIRONMENT_LINE.match(line) else kept).append(line)
    return "\n".join(kept), "\n".join(report)


def code_blocks(sources: list[Source]) -> list[str]:
    """Fenced code blocks of the body and comments, at most MAX_CODE_BLOCKS."""
    blocks: list[str] = []
    for source in sources[1:]:
        # str.split instead of a regex: linear however many unclosed fences a body has.
        for chunk in source.text.split("```")[1::2]:
            _tag, _nl, code = chunk.partition("\n")
            blocks.append(code[:MAX_CODE_BLOCK])
            if len(blocks) >= MAX_CODE_BLOCKS:
                return blocks
    return blocks


def _dotted(node: ast.AST) -> str:
    """`torch.compile` for an Attribute chain, `compile` for a Name, "" otherwise."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif parts:
        parts.append("")
    return ".".join(reversed(parts))


# The calls the rules ask about (R12's comparisons, index-returning ops, torch.compile's options).
CALLS_OF_INTEREST = frozenset(
    {
        "compile",
        "allclose",
        "assert_close",
        "isclose",
        "same",
        "argmax",
        "argmin",
        "max",
        "min",
        "topk",
        "sort",
        "argsort",
        "item",
        "nonzero",
        "detach_",
        "requires_grad_",
        "vmap",
        "grad",
        "vjp",
        "jvp",
        "make_fx",
    }
)


def _segments(block: str) -> Callable[[ast.AST], str]:
    """A cheap ast.get_source_segment for one block: splits the lines once, not per node."""
    lines = block.splitlines(keepends=True)

    def segment(node: ast.AST) -> str:
        start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if start is None or end is None or end > len(lines):
            return ""
        if start == end:
            return lines[start - 1].encode()[node.col_offset : node.end_col_offset].decode(errors="ignore")
        first = lines[start - 1].encode()[node.col_offset :].decode(errors="ignore")
        last = lines[end - 1].encode()[: node.end_col_offset].decode(errors="ignore")
        return first + "".join(lines[start : end - 1]) + last

    return segment


def read_code(blocks: list[str]) -> CodeFacts:
    """Parse each block with ast; blocks that do not parse (tracebacks, fragments) are skipped."""
    facts = CodeFacts()
    for block in blocks:
        try:
            tree = ast.parse(block)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        facts.parsed = True
        segment = _segments(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = _dotted(node.func)
                short = name.rsplit(".", 1)[-1]
                if short not in CALLS_OF_INTEREST:
                    continue
                text = segment(node) or short
                facts.calls.setdefault(short, text[:300])
                facts.calls.setdefault(name, text[:300])
                facts.call_kwargs.setdefault(short, set()).update(k.arg for k in node.keywords if k.arg)
                if short == "compile" and name in ("torch.compile", "compile", ".compile"):
                    for kw in node.keywords:
                        if kw.arg:
                            facts.compile_kwargs.setdefault(kw.arg, segment(kw) or kw.arg)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                module = getattr(node, "module", None) or ""
                facts.imports.update(filter(None, [module.split(".")[0]]))
                facts.imports.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for deco in node.decorator_list:
                    target = deco.func if isinstance(deco, ast.Call) else deco
                    dotted = _dotted(target)
                    if dotted:
                        facts.decorators.setdefault(dotted, ast.get_source_segment(block, deco) or dotted)
    return facts
