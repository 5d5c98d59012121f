"""Issue text to safe HTML: markdown-it-py, Pygments for code, nh3 last.

Issue titles, bodies and comments are written by anyone on GitHub, so they are
untrusted. markdown-it renders raw HTML as text, all but the bare <details> and
<summary> tags that GitHub's own automation folds its long parts in (the Repro
Agent's script); nh3 still runs last over the whole output (including the <mark>
we add for evidence) so that nothing a bug in a step before it lets through can
carry a script or an event handler.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass

import nh3
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from pygments import highlight as pygments_highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer, get_lexer_by_name
from pygments.util import ClassNotFound

ALLOWED_TAGS = {
    "p",
    "br",
    "hr",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "blockquote",
    "ul",
    "ol",
    "li",
    "strong",
    "em",
    "del",
    "s",
    "code",
    "pre",
    "span",
    "a",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "mark",
    "details",
    "summary",
}
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "span": {"class"},
    "code": {"class"},
    "pre": {"class"},
    "mark": {"class"},
    "th": {"align"},
    "td": {"align"},
    "ol": {"start"},
    "details": {"open"},
}
URL_SCHEMES = {"http", "https", "mailto"}
LINK_REL = "noopener noreferrer nofollow"

_formatter = HtmlFormatter(nowrap=True)

# Issue text is untrusted and rendered on every issue page, so the work is linear and bounded.
# markdown-it's inline parser takes time proportional to a paragraph's length times its
# delimiters (each unmatched `[` or `(` scans to the paragraph's end, at several microseconds a
# character; `*_`, backticks and `<` are alike: 64 KB of `[` took seconds). So a paragraph (or
# table cell, heading) is shown as plain text when it is over MAX_INLINE characters, or its
# length times its delimiters is over INLINE_WORK, or over what is left of the page's
# MarkdownBudget.work; a code block over MAX_HIGHLIGHT characters, or over what is left of
# MarkdownBudget.highlight, is not highlighted (Pygments is linear but slow: 20,000 characters of
# real code take 0.2-0.7 s, of `@` or `a.` about 2x that); past
# MarkdownBudget.chars (at most MAX_MARKDOWN, GitHub's own limit for a body or comment) the
# text is shown as plain, preformatted text. Nothing is dropped.
MAX_INLINE = 5_000
INLINE_WORK = 50_000
_DELIMITERS = "[]()*_`<~!&\\"
MAX_HIGHLIGHT = 20_000
# The languages PT2 issues paste whose lexers stayed linear on hostile text (runs of `@`, `'`, `$(`,
# `0x`, ...); a fence naming any other of Pygments' ~600 lexers is shown as plain code. Left out
# for being quadratic there: console, yaml and ini (20,000 characters: 21-25 s), c, cpp and cuda.
HIGHLIGHTED = frozenset({"python", "pycon", "pytb", "py3tb", "bash", "text", "diff", "json", "toml"})
MAX_MARKDOWN = 65_536


@dataclass
class MarkdownBudget:
    """What one page may still spend on Markdown: characters rendered, inline work (sum of
    paragraph length x delimiters; 2M is about half a second here) and characters of code
    highlighted. Spent as used."""

    chars: int = MAX_MARKDOWN
    work: int = 2_000_000
    highlight: int = 60_000


# The budget of the render in progress, for the highlight callback (markdown-it passes it no env).
_budget: ContextVar[MarkdownBudget | None] = ContextVar("markdown_budget", default=None)


def _highlight(code: str, lang: str, _attrs: str) -> str:
    """Pygments HTML for a fenced block; Python when the fence names no known language.

    Most PT2 repros are Python pasted without a language tag; tracebacks read fine as Python too.
    "" (markdown-it escapes the code itself) past MAX_HIGHLIGHT characters or the page's budget.
    """
    budget = _budget.get()
    if len(code) > min(MAX_HIGHLIGHT, budget.highlight if budget else MAX_HIGHLIGHT):
        return ""
    try:
        lexer = get_lexer_by_name(lang) if lang else PythonLexer()
    except ClassNotFound:
        lexer = PythonLexer()
    if not set(lexer.aliases) & HIGHLIGHTED:
        return ""  # a lexer nobody checked on hostile text: plain code
    if budget:
        budget.highlight -= len(code)
    return pygments_highlight(code, lexer, _formatter)


def _plain_costly_inline(state) -> None:
    """Core rule run before "inline": an inline run too costly to parse becomes escaped text.

    The cost is counted in one pass of str.count per delimiter (C speed), before any parsing.
    """
    budget: MarkdownBudget = state.env["budget"]
    for token in state.tokens:
        if token.type != "inline":
            continue
        content = token.content
        work = len(content) * sum(map(content.count, _DELIMITERS)) if len(content) <= MAX_INLINE else INLINE_WORK + 1
        if work > min(INLINE_WORK, budget.work):
            token.type = "text"  # the renderer escapes a "text" token's content; "inline" never parses it
        else:
            budget.work -= work


def _parser(raw_html: bool) -> MarkdownIt:
    md = (
        MarkdownIt("commonmark", {"html": raw_html, "linkify": False, "highlight": _highlight})
        .enable("table")
        .enable("strikethrough")
    )
    md.core.ruler.before("inline", "plain_costly_inline", _plain_costly_inline)
    return md


# The raw HTML kept as HTML: the bare tags that fold a part away, as GitHub shows them (a Repro Agent comment's
# "<details><summary>Repro script</summary>"). Any attribute but `open` makes it text.
FOLD_TAG = re.compile(r"<(/?)(details|summary)(\s+open)?\s*>", re.IGNORECASE)

# Raw HTML off: what a block holding any other HTML is rendered with, as it always was (its tags shown as text).
_plain_md = _parser(raw_html=False)


def _raw_html(renderer, tokens, idx, options, env) -> str:
    """A raw HTML token: its folding tags (FOLD_TAG) as tags, the rest as escaped text. A block holding any other
    tag is rendered as Markdown with raw HTML off instead, as before (its tags shown, its Markdown rendered)."""
    token = tokens[idx]
    text = FOLD_TAG.sub("", token.content)
    if token.type == "html_block" and "<" in text:
        return _plain_md.render(token.content, env)
    pieces, last = [], 0
    for match in FOLD_TAG.finditer(token.content):
        closing, name, is_open = match.group(1), match.group(2).lower(), match.group(3)
        pieces += [
            html.escape(token.content[last : match.start()], quote=False),
            f"<{closing}{name}{' open' if is_open and not closing and name == 'details' else ''}>",
        ]
        last = match.end()
    return "".join(pieces) + html.escape(token.content[last:], quote=False)


_md = _parser(raw_html=True)
_md.add_render_rule("html_block", _raw_html)
_md.add_render_rule("html_inline", _raw_html)

_TAG_SPLIT = re.compile(r"(<[^>]*>)")


def sanitize(fragment: str) -> str:
    """Return fragment with only ALLOWED_TAGS/ATTRIBUTES kept and links limited to URL_SCHEMES."""
    return nh3.clean(
        fragment,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel=LINK_REL,
        strip_comments=True,
    )


def _mark_evidence(rendered: str, evidence: Iterable[str]) -> str:
    """Wrap each evidence string where it appears in the text (never inside a tag) in <mark>.

    Evidence that markdown split across formatting is left unmarked: the panel beside
    the text still quotes it, so a miss costs a highlight, not information.
    """
    # Escaped as markdown-it escapes text (&, <, >, and " but not ').
    needles = sorted(
        {html.escape(e, quote=False).replace('"', "&quot;") for e in evidence if e and len(e.strip()) >= 3},
        key=len,
        reverse=True,
    )
    if not needles:
        return rendered
    pattern = re.compile("|".join(re.escape(n) for n in needles))
    parts = _TAG_SPLIT.split(rendered)
    for i in range(0, len(parts), 2):  # even indexes are text between tags
        parts[i] = pattern.sub(lambda m: f'<mark class="evidence">{m.group(0)}</mark>', parts[i])
    return "".join(parts)


def render_markdown(text: str, evidence: Iterable[str] = (), budget: MarkdownBudget | None = None) -> SafeString:
    """Return sanitized HTML for untrusted GitHub Markdown, evidence strings highlighted.

    The result is safe to insert in a page: only nh3's output is ever marked safe.
    Linear in the text and bounded by budget (a page passes one budget for all its texts; it
    is spent): past budget.chars the text is escaped preformatted text, not Markdown.
    """
    text, budget = text or "", budget or MarkdownBudget()
    limit = max(0, min(budget.chars, MAX_MARKDOWN))
    budget.chars -= min(len(text), limit)
    token = _budget.set(budget)
    try:
        rendered = _md.render(text[:limit], {"budget": budget}) if limit else ""
    finally:
        _budget.reset(token)
    if len(text) > limit:
        rendered += (
            f"<p><em>Shown as plain text past {limit:,} characters.</em></p>"
            f"<pre>{html.escape(text[limit:], quote=False)}</pre>"
        )
    return mark_safe(sanitize(_mark_evidence(rendered, evidence)))  # noqa: S308 - nh3 output


_FENCE = re.compile(r"^(```|~~~)")


def summary(text: str, limit: int = 280) -> str:
    """The first prose of an issue as plain text: headings, code blocks, tables and quotes skipped.

    GitHub's issue template starts with a heading ("### 🐛 Describe the bug"); a summary
    that repeats it says nothing.
    """
    prose, in_code = [], False
    for line in (text or "").splitlines():
        stripped = line.strip()
        if _FENCE.match(stripped):
            in_code = not in_code
            continue
        if in_code or not stripped or stripped.startswith(("#", "|", ">", "<!--")):
            if prose and not in_code and not stripped:
                break  # the end of the first paragraph
            continue
        prose.append(stripped)
    joined = " ".join(prose)
    return joined if len(joined) <= limit else joined[: limit - 1].rsplit(" ", 1)[0] + "…"


def pygments_css() -> str:
    """The stylesheet for the highlighted code (written once into static/)."""
    return _formatter.get_style_defs(".md pre")
