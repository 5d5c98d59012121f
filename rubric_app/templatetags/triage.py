"""Template helpers: sanitized Markdown, evidence highlighting, label colours, rubric warnings."""

from __future__ import annotations

import json
import re

from django import template
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from django.utils import timezone
from django.utils.timesince import timesince

from rubric_app.markdown import MarkdownBudget, render_markdown, summary as markdown_summary
from rubric_app.models import readable_text_color

register = template.Library()

_HEX = re.compile(r"^[0-9a-fA-F]{6}$")


@register.filter
def hexcolor(value: str) -> str:
    """A label colour fit for a style attribute: six hex digits, else GitHub's default grey."""
    return value if isinstance(value, str) and _HEX.match(value) else "ededed"


def _evidence(suggestions, source: str) -> list[str]:
    return [s.evidence for s in suggestions if s.evidence and s.evidence_source == source]


# Characters of issue text one page renders as Markdown, body and comments together (what the
# rubric reads, rubric.text.MAX_THREAD): a thread of a hundred 64 KB comments would otherwise
# cost seconds; past it, the text is shown as plain preformatted text (linear, nothing dropped).
MARKDOWN_PAGE_CHARS = 150_000
_BUDGET_KEY = "triage.markdown_budget"


@register.simple_tag(takes_context=True)
def markdown(context, text: str, suggestions=(), source: str = "", comment: int | None = None) -> SafeString:
    """Issue Markdown as sanitized HTML, with the evidence of suggestions from `source` marked.

    comment=N means source "comment:N". The repro code's evidence ("code") is marked in
    the body, where the code comes from. One page renders at most MARKDOWN_PAGE_CHARS
    characters as Markdown (and MarkdownBudget.work of inline parsing).
    """
    if comment is not None:
        source = f"comment:{comment}"
    evidence = _evidence(suggestions, source) if source else []
    if source == "body":
        evidence += _evidence(suggestions, "code")
    budget = context.render_context.get(_BUDGET_KEY)
    if budget is None:  # one budget for the whole page, spent by each text in turn
        budget = context.render_context[_BUDGET_KEY] = MarkdownBudget(chars=MARKDOWN_PAGE_CHARS)
    return render_markdown(text, evidence, budget)


@register.simple_tag
def highlight_plain(text: str, suggestions=(), source: str = "title") -> SafeString:
    """Plain text escaped, with evidence substrings wrapped in <mark> (the title is not Markdown)."""
    escaped = str(escape(text))
    for needle in sorted({escape(e) for e in _evidence(suggestions, source) if len(e) >= 3}, key=len, reverse=True):
        escaped = escaped.replace(needle, f'<mark class="evidence">{needle}</mark>')
    return mark_safe(escaped)  # noqa: S308 - built from escaped text and a fixed tag


@register.filter
def violations(issue) -> list[dict]:
    """The rubric checklist items the issue violates, plus G4 when a triaged PT2 issue has no module label.

    G4 says a PT2 issue *ends* with a module label: an untriaged one without is simply
    work to do, so only `triaged` without a `module:` label is a violation. It is checked
    from the labels too, so the warning shows before the engine has run.
    """
    items = [item for item in (issue.checklist or []) if isinstance(item, dict) and item.get("state") == "violated"]
    names = [label.name for label in issue.labels.all()]
    ended = "oncall: pt2" in names and "triaged" in names
    if ended and not any(n.startswith("module:") for n in names) and not any(
        item.get("rule_id") == "G4" for item in items
    ):
        items.append({"rule_id": "G4", "text": "A PT2 issue needs at least one module: label."})
    return items


@register.simple_tag
def chip(name: str, color: str = "", suggested: bool = False, title: str = "") -> SafeString:
    """A label chip in its GitHub colour (a dashed outline for a suggestion)."""
    if suggested:
        return format_html('<span class="chip suggested" title="{}">{}</span>', title, name)
    color = hexcolor(color)
    text = readable_text_color(color)
    return format_html('<span class="chip" style="background:#{};color:#{}" title="{}">{}</span>', color, text, title, name)


@register.filter
def percent(value: float) -> str:
    try:
        return f"{float(value) * 100:.0f}%"
    except (TypeError, ValueError):
        return ""


@register.filter
def source_label(source: str) -> str:
    """'comment:2' -> 'comment 3' (people count from one), 'bisection:7' -> 'bisection run 7'."""
    kind, _, rest = (source or "").partition(":")
    if kind == "comment" and rest.isdigit():
        return f"comment {int(rest) + 1}"
    if kind == "bisection":
        return f"bisection run {rest}"
    return kind or "—"


@register.filter
def json_list(value) -> str:
    """A list as JSON text, for a hidden input (autoescaping still applies)."""
    return json.dumps(list(value))


@register.filter
def md_cell(value) -> str:
    """Text fit for one Markdown table cell: no newlines, pipes escaped."""
    return " ".join(str(value).split()).replace("|", "\\|")


@register.filter
def summary(text: str) -> str:
    """The issue's first paragraph of prose, as plain text (auto-escaped by the template)."""
    return markdown_summary(text)


@register.filter
def age(value) -> str:
    """'3 weeks' rather than '3 weeks, 2 days': the queue only needs the order of magnitude."""
    return timesince(value, timezone.now(), depth=1) if value else ""


STATE_NAMES = {"satisfied": "satisfied", "violated": "violated", "needs_human": "needs a human",
               "not_applicable": "n/a"}


@register.filter
def state_name(state: str) -> str:
    return STATE_NAMES.get(state, state or "")


@register.filter
def reply_name(name: str) -> str:
    """A reply template's or close reason's name in words: "redirect_to_forum" -> "redirect to forum"."""
    return name.replace("_", " ")
