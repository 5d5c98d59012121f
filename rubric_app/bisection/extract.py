"""Find the repro in an issue's Markdown and tell its style (pure Python; parses, never runs, the code)."""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Collection, Iterator
from dataclasses import dataclass

# Issue text is untrusted and this runs on every issue page: the work is linear in the text and
# bounded. Each text is cut at MAX_TEXT characters (GitHub's own limit for a body or comment),
# at most MAX_TEXTS texts are read, a block over MAX_BLOCK characters is not a repro anyone
# pastes (it is skipped unparsed), and at most MAX_PARSED characters are parsed in all.
MAX_TEXT = 65_536
MAX_TEXTS = 200
MAX_BLOCK = 20_000
MAX_PARSED = 200_000

LANG = re.compile(r"[\w+-]{0,40}")
# `[ \t]*`, never `\s*`, after `^`: with re.M, `\s*` spans newlines and a run of blank lines costs quadratic time.
COMPILE_CALL = re.compile(
    r"torch\.compile\b|torch\._dynamo\.optimize\b|\.compile\(|torch\._inductor|aot_module|make_fx"
)
INPUT_HINT = re.compile(r"torch\.(randn|rand|randint|ones|zeros|tensor|arange|empty|full|linspace)\b")
NOT_CODE = re.compile(r"Traceback \(most recent call last\)|^[ \t]*File \"", re.M)
IMPORTS_TORCH = re.compile(r"^[ \t]*(import torch|from torch)", re.M)
IMPORTS_OTHERS = re.compile(r"^[ \t]*(import|from) (transformers|diffusers|timm|torchvision)", re.M)
# ast raises these besides SyntaxError on hostile code: RecursionError for deep nesting
# (12 KB of `-` in a row), MemoryError, ValueError for NUL bytes.
PARSE_ERRORS = (SyntaxError, ValueError, RecursionError, MemoryError)
CUDA_DEVICE = re.compile(r"cuda(:\d+)?")
CUDA_HINT = re.compile(r"""\.cuda\(|["']cuda(:\d+)?["']""")


@dataclass(frozen=True)
class Repro:
    """A candidate repro: the code, its style ("module" or "script"), where it came from (index into
    texts), and the block as posted when `code` is its conversion to the module convention."""

    code: str
    style: str
    source: int
    score: int
    original: str = ""


def parse(code: str) -> ast.Module | None:
    """The module's syntax tree, or None when code is not Python ast can parse (PARSE_ERRORS)."""
    try:
        return ast.parse(code)
    except PARSE_ERRORS:
        return None


def fenced_blocks(text: str) -> Iterator[tuple[str, str]]:
    """Yield (language, code) for each fenced block of Markdown text, in one pass over its lines.

    A line scanner rather than a regex: a regex looking ahead for each opening fence's close
    takes quadratic time on a text of unclosed fences. As in CommonMark, a fence opens with
    three or more backticks or tildes (indented up to three spaces), closes with a line of at
    least as many of the same character, and a fence never closed runs to the end of the text.
    """
    fence, lang, lines = "", "", []
    for line in text.splitlines():
        stripped = line[:3].lstrip(" ") + line[3:] if line.startswith(" ") else line
        if not fence:
            char = stripped[:1]
            if char in ("`", "~") and stripped.startswith(char * 3):
                width = len(stripped) - len(stripped.lstrip(char))
                info = stripped[width:].strip()
                if char == "`" and "`" in info:
                    continue  # an inline code span, not a fence (CommonMark)
                fence, lang, lines = stripped[:width], LANG.match(info)[0], []
            continue
        if stripped.startswith(fence) and not stripped.rstrip(" \t").lstrip(fence[0]):
            yield lang, "\n".join(lines)
            fence = ""
        else:
            lines.append(line)
    if fence:
        yield lang, "\n".join(lines)


def detect_style(code: str) -> str:
    """Return "module" when the code defines `fn` and `make_inputs`/`make_calls` at top level, else "script"."""
    tree = parse(code)
    if tree is None:
        return "script"
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return "module" if "fn" in names and names & {"make_inputs", "make_calls"} else "script"


def names_cuda(code: str) -> bool:
    """True when the code asks for a CUDA device: `device="cuda"`, "cuda:0", torch.device("cuda"), `.cuda()`.

    Read from the syntax tree, so a comment or a docstring mentioning CUDA does not count;
    code that does not parse falls back to a plain search.
    """
    try:
        tree = ast.parse(code)
    except PARSE_ERRORS:
        return bool(CUDA_HINT.search(code))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and CUDA_DEVICE.fullmatch(node.value):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "cuda":
            return True
    return False


def _score(code: str) -> int | None:
    """Higher is a better repro; None when the block is not runnable Python at all."""
    if NOT_CODE.search(code) or parse(code) is None:
        return None
    score = 0
    if IMPORTS_TORCH.search(code):
        score += 4
    if COMPILE_CALL.search(code):
        score += 4
    if INPUT_HINT.search(code):
        score += 2  # makes its own inputs: self-contained
    if IMPORTS_OTHERS.search(code):
        score -= 1  # needs a package the sandbox may lack
    if len(code.splitlines()) < 3:
        score -= 2
    return score


def extract_repro(texts: list[str], sources: Collection[int] | None = None) -> Repro | None:
    """Return the best fenced Python block from texts (the body first, then comments), or None.

    Ties go to the earliest text: the body's repro is usually the reference one.
    A block must import torch to be considered. Linear and bounded (see MAX_TEXT).
    sources: the indexes of the texts whose repro may be chosen (None: any): whose repro counts is the caller's
    to say (the reporter's or a maintainer's, rubric_app/runs/repro_sources.py); another commenter's is only offered.
    """
    best: Repro | None = None
    for repro in repros_by_text(texts, convert=False):
        if (sources is None or repro.source in sources) and (best is None or repro.score > best.score):
            best = repro
    return _converted(best) if best is not None else None


def repros_by_text(texts: list[str], *, convert: bool = True) -> list[Repro]:
    """The best block of each text that has a repro (score 4 or more), in the texts' order; converted to the module
    convention where it can be (convert=True). The same bounds as extract_repro."""
    found: list[Repro] = []
    budget = MAX_PARSED
    for index, text in enumerate(texts[:MAX_TEXTS]):
        best: Repro | None = None
        for lang, block in fenced_blocks((text or "")[:MAX_TEXT]):
            if lang.lower() not in ("", "python", "py", "python3", "pycon") or len(block) > min(MAX_BLOCK, budget):
                continue
            budget -= len(block)
            code = block.strip("\n") + "\n"
            score = _score(code)
            if score is None or score < 4:
                continue
            if best is None or score > best.score:
                best = Repro(code=code, style=detect_style(code), source=index, score=score)
        if best is not None:
            found.append(_converted(best) if convert else best)
    return found


# What makes a script its own oracle: it checks something itself, or looks at what the conversion would lose
# (gradients, the state of its inputs). Such a script runs as written in every mode (child.Recorder).
OWN_CHECK = re.compile(
    r"\.backward\(|\.grad\b|autograd\.grad\(|assert_close|assert_allclose|allclose\(|\bsys\.exit\(|\bexit\("
    r"|\.\w{1,40}_\(|\bcopy_\("
)


def has_own_check(code: str) -> bool:
    """True when the script asserts, raises or exits itself, runs backward, reads `.grad`, or calls an in-place op:
    its own check (or the gradients and mutations it looks at) decides, so it runs as written, not converted."""
    tree = parse(code)
    if tree is None:
        return False
    if any(isinstance(node, (ast.Assert, ast.Raise)) for node in ast.walk(tree)):
        return True
    return bool(OWN_CHECK.search(code))


def undefined_names(code: str) -> set[str]:
    """Names the code reads but never binds anywhere (nor are builtins): a snippet, not a program. Kept as posted,
    so the NameError the run meets points at the line the reporter wrote."""
    import builtins

    tree = parse(code)
    if tree is None:
        return set()
    bound = set(dir(builtins)) | {"__name__", "__file__"}
    read = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)  # its parameters are ast.arg nodes, bound below
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
    return read - bound


def _converted(repro: Repro) -> Repro:
    """The repro in the module convention when it is a script to_module_style can convert and that has no check of
    its own (has_own_check), else as posted."""
    if repro.style == "script" and not has_own_check(repro.code) and not undefined_names(repro.code):
        converted = to_module_style(repro.code)
        if converted is not None:
            return Repro(code=converted, style="module", source=repro.source, score=repro.score, original=repro.code)
    return repro


def _tuple(items: list[str]) -> str:
    return "(" + items[0] + ",)" if len(items) == 1 else "(" + ", ".join(items) + ")"


def _is_compile(node: ast.AST) -> bool:
    """torch.compile / torch.compile(...) as a callee or decorator."""
    if isinstance(node, ast.Call):
        node = node.func
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "compile"
        and isinstance(node.value, ast.Name)
        and node.value.id == "torch"
    )


def _assigned(stmt: ast.stmt) -> set[str]:
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _literal_kwargs(call: ast.Call) -> dict | None:
    try:
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None
    kwargs.pop("backend", None)  # each mode sets its own
    return kwargs


def to_module_style(code: str) -> str | None:
    """Rewrite a simple script into the module convention (fn, make_calls, COMPILE_KWARGS), or return None.

    "Simple": one torch.compile site (`opt = torch.compile(f, ...)`, `@torch.compile` on a def, or
    `torch.compile(f)(args)`), literal compile kwargs, and compiled calls with positional arguments
    the script computes before them. Statements that use a compiled result (prints, asserts,
    comparisons) are dropped: the harness compares with eager itself, with a float64 reference.
    Code too deeply nested for ast to unparse is left as posted (None).
    """
    try:
        return _to_module_style(code)
    except (RecursionError, MemoryError):
        return None


def _to_module_style(code: str) -> str | None:
    tree = parse(code)
    if tree is None:
        return None
    body: list[ast.stmt] = []
    for stmt in tree.body:  # a __main__ guard's body counts as top level
        test = getattr(stmt, "test", None)
        if isinstance(stmt, ast.If) and "__name__" in _names(test) and not stmt.orelse:
            body.extend(stmt.body)
        else:
            body.append(stmt)
    sites = [
        n for n in ast.walk(ast.Module(body=body, type_ignores=[])) if isinstance(n, ast.Attribute) and _is_compile(n)
    ]
    if len(sites) != 1:
        return None
    target = kwargs = stripped = None
    callees: set[str] = set()
    kept: list[ast.stmt] = []
    calls: list[ast.Call] = []
    dropped: set[str] = set()
    for stmt in body:
        if target is None and isinstance(stmt, ast.FunctionDef) and any(map(_is_compile, stmt.decorator_list)):
            decorator = next(d for d in stmt.decorator_list if _is_compile(d))
            kwargs = _literal_kwargs(decorator) if isinstance(decorator, ast.Call) else {}
            stmt.decorator_list.remove(decorator)
            stripped, target, callees = stmt, stmt.name, {stmt.name}
            kept.append(stmt)
            continue
        if (
            target is None
            and isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and _is_compile(stmt.value)
            and isinstance(stmt.value, ast.Call)
            and len(stmt.value.args) == 1
            and isinstance(stmt.value.args[0], ast.Name)
        ):
            target, kwargs = stmt.value.args[0].id, _literal_kwargs(stmt.value)
            callees = {stmt.targets[0].id}
            continue
        found = [
            n
            for n in ast.walk(stmt)
            if isinstance(n, ast.Call)
            and (
                (isinstance(n.func, ast.Name) and n.func.id in callees)
                or (_is_compile(n.func) and isinstance(n.func, ast.Call))
            )
        ]
        if found:
            for call in found:
                if isinstance(call.func, ast.Call):  # torch.compile(f, ...)(args)
                    inner = call.func
                    if len(inner.args) != 1 or not isinstance(inner.args[0], ast.Name):
                        return None
                    target, kwargs = inner.args[0].id, _literal_kwargs(inner)
                calls.append(call)
            dropped |= _assigned(stmt)
        elif _names(stmt) & (dropped | (callees - {target})):
            dropped |= _assigned(stmt)
        else:
            kept.append(stmt)
    if target is None or kwargs is None or not calls:
        return None
    for call in calls:
        if call.keywords or any(isinstance(a, ast.Starred) for a in call.args) or _names(call) & dropped - callees:
            return None
    if target in dropped or any(
        target in _assigned(s) for s in kept if not isinstance(s, (ast.FunctionDef, ast.ClassDef, ast.Assign))
    ):
        return None
    args = ", ".join(_tuple([ast.unparse(a) for a in call.args]) for call in calls)
    kept_code, previous = "", None
    for stmt in kept:
        if stmt is stripped:
            text = ast.unparse(stmt)  # the source still has the torch.compile decorator
        else:  # the posted text, comments inside statements included
            text = textwrap.dedent(ast.get_source_segment(code, stmt, padded=True) or ast.unparse(stmt))
        blocks = (ast.FunctionDef, ast.ClassDef)
        spacing = "\n\n\n" if isinstance(stmt, blocks) or isinstance(previous, blocks) else "\n"
        kept_code += (spacing if kept_code else "") + text
        previous = stmt
    return (
        "# Converted from the posted script to the harness convention (fn + make_calls);\n"
        "# prints and checks on the compiled result were dropped: the harness compares with eager.\n"
        f"{kept_code}\n\n\nfn = {target}\nCOMPILE_KWARGS = {kwargs!r}\n\n\n"
        f"def make_calls():\n    return [{args}]\n"
    )
