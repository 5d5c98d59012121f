"""Issue text to safe HTML: markdown-it-py (raw HTML off), Pygments for code, nh3 last.

Issue titles, bodies and comments are written by anyone on GitHub, so they are
untrusted. markdown-it renders raw HTML as text, but nh3 still runs last over
the whole output (including the <mark> we add for evidence) so that nothing a
bug in a step before it lets through can carry a script or an event handler.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable

import nh3
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from pygments import highlight as pygments_highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer, get_lexer_by_name
from pygments.util import ClassNotFound

ALLOWED_TAGS = {
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "ul", "ol", "li",
    "strong", "em", "del", "s", "code", "pre", "span", "a", "table", "thead", "tbody", "tr", "th", "td",
    "mark", "details", "summary",
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
}
URL_SCHEMES = {"http", "https", "mailto"}
LINK_REL = "noopener noreferrer nofollow"

_formatter = HtmlFormatter(nowrap=True)


def _highlight(code: str, lang: str, _attrs: str) -> str:
    """Pygments HTML for a fenced block; Python when the fence names no known language.

    Most PT2 repros are Python pasted without a language tag; tracebacks read fine as Python too.
    """
    try:
        lexer = get_lexer_by_name(lang) if lang else PythonLexer()
    except ClassNotFound:
        lexer = PythonLexer()
    return pygments_highlight(code, lexer, _formatter)


_md = MarkdownIt("commonmark", {"html": False, "linkify": False, "highlight": _highlight}).enable("table").enable(
    "strikethrough"
)

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
    needles = sorted({html.escape(e, quote=False).replace('"', "&quot;") for e in evidence if e and len(e.strip()) >= 3},
                     key=len, reverse=True)
    if not needles:
        return rendered
    pattern = re.compile("|".join(re.escape(n) for n in needles))
    parts = _TAG_SPLIT.split(rendered)
    for i in range(0, len(parts), 2):  # even indexes are text between tags
        parts[i] = pattern.sub(lambda m: f'<mark class="evidence">{m.group(0)}</mark>', parts[i])
    return "".join(parts)


def render_markdown(text: str, evidence: Iterable[str] = ()) -> SafeString:
    """Return sanitized HTML for untrusted GitHub Markdown, evidence strings highlighted.

    The result is safe to insert in a page: only nh3's output is ever marked safe.
    """
    rendered = _md.render(text or "")
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
