"""Find the repro in an issue's Markdown and tell its style (pure Python; parses, never runs, the code)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w+-]*)[^\n]*\n(?P<code>.*?)^(?P=fence)[ \t]*$", re.M | re.S)
COMPILE_CALL = re.compile(r"torch\.compile\b|torch\._dynamo\.optimize\b|\.compile\(|torch\._inductor|aot_module|make_fx")
INPUT_HINT = re.compile(r"torch\.(randn|rand|randint|ones|zeros|tensor|arange|empty|full|linspace)\b")
NOT_CODE = re.compile(r"Traceback \(most recent call last\)|^\s*File \"", re.M)


@dataclass(frozen=True)
class Repro:
    """A candidate repro: the code, its style ("module" or "script") and where it came from (index into texts)."""

    code: str
    style: str
    source: int
    score: int


def detect_style(code: str) -> str:
    """Return "module" when the code defines `fn` and `make_inputs`/`make_calls` at top level, else "script"."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return "script"
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return "module" if "fn" in names and names & {"make_inputs", "make_calls"} else "script"


def _score(code: str) -> int | None:
    """Higher is a better repro; None when the block is not runnable Python at all."""
    if NOT_CODE.search(code):
        return None
    try:
        ast.parse(code)
    except SyntaxError:
        return None
    score = 0
    if re.search(r"^\s*(import torch|from torch)", code, re.M):
        score += 4
    if COMPILE_CALL.search(code):
        score += 4
    if INPUT_HINT.search(code):
        score += 2  # makes its own inputs: self-contained
    if re.search(r"^\s*(import|from) (transformers|diffusers|timm|torchvision)", code, re.M):
        score -= 1  # needs a package the sandbox may lack
    if len(code.splitlines()) < 3:
        score -= 2
    return score


def extract_repro(texts: list[str]) -> Repro | None:
    """Return the best fenced Python block from texts (the body first, then comments), or None.

    Ties go to the earliest text: the body's repro is usually the reference one.
    A block must import torch to be considered.
    """
    best: Repro | None = None
    for index, text in enumerate(texts):
        for match in FENCE.finditer(text or ""):
            if match["lang"].lower() not in ("", "python", "py", "python3", "pycon"):
                continue
            code = match["code"].strip("\n") + "\n"
            score = _score(code)
            if score is None or score < 4:
                continue
            if best is None or score > best.score:
                best = Repro(code=code, style=detect_style(code), source=index, score=score)
    return best
