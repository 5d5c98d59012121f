"""Template helpers: sanitized Markdown, evidence highlighting, label colours, rubric warnings."""

from __future__ import annotations

import functools
import json
import re
from html import escape as escape_html

from django import template
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from rubric_app.rubric.reading.flow import G4_VIOLATION, breaks_g4
from rubric_app.runs import hardware
from rubric_app.triage import accepting
from rubric_app.vocabulary import MAY_BE_FIXED, REGRESSION, Route
from rubric_app.web.labels import LABEL_DATALIST_ID, LabelPicker, catalog_descriptions, module_label_names
from rubric_app.web.markdown import MarkdownBudget, render_markdown
from rubric_app.web.markdown import summary as markdown_summary
from rubric_app.web.queue_cache import age, age_marker

register = template.Library()

_HEX = re.compile(r"^[0-9a-fA-F]{6}$")


def readable_text_color(background: str) -> str:
    """Black or white, whichever reads better on a label's hex colour (as GitHub does)."""
    try:
        r, g, b = (int(background[i : i + 2], 16) for i in (0, 2, 4))
    except ValueError:
        return "000000"
    return "000000" if (r * 299 + g * 587 + b * 114) / 1000 > 140 else "ffffff"


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
    if breaks_g4(label.name for label in issue.labels.all()) and not any(i.get("rule_id") == "G4" for i in items):
        items.append({"rule_id": "G4", "text": G4_VIOLATION})
    return items


@register.simple_tag
def chip(name: str, color: str = "", suggested: bool = False, title: str = "") -> SafeString:
    """A label chip in its GitHub colour (a dashed outline for a suggestion)."""
    return mark_safe(_chip(name, color, suggested, title))  # noqa: S308 - escaped in _chip


def _chip(name: str, color: str = "", suggested: bool = False, title: str = "", possible: bool = False) -> str:
    if suggested:
        kind = "chip suggested possible" if possible else "chip suggested"
        return f'<span class="{kind}" title="{escape_html(str(title))}">{escape_html(str(name))}</span>'
    color = hexcolor(color)
    return (
        f'<span class="chip" style="background:#{color};color:#{readable_text_color(color)}" '
        f'title="{escape_html(str(title))}">{escape_html(str(name))}</span>'
    )


@register.simple_tag
def module_options() -> SafeString:
    """The catalog's module labels as <option>s, for the queue filter's datalist."""
    return _module_options()


@functools.cache
def _module_options() -> SafeString:
    # Built once per process (the catalog ships with the code): 239 options cost 1.5 ms a page in the template.
    return format_html_join("", '<option value="{}">', ((name,) for name in module_label_names()))


@register.simple_tag
def label_datalist(names, oob: bool = False) -> SafeString:
    """The page's <datalist> of catalog labels, each with its description, that every label picker
    (labels.LabelPicker) types ahead from; oob: carried out of band into the page's empty one (the queue's, filled by
    the first preview that shows a picker)."""
    return _label_datalist(tuple(names), oob)


@functools.lru_cache(maxsize=8)
def _label_datalist(names: tuple[str, ...], oob: bool) -> SafeString:
    # Kept per process for the few catalogs in use (the catalog changes only with a label sync): ~290 options.
    described = catalog_descriptions()
    options = format_html_join(
        "", '<option value="{}" label="{}"></option>', ((n, described.get(n) or n) for n in names)
    )
    swap = mark_safe(' hx-swap-oob="true"') if oob else ""
    return format_html('<datalist id="{}"{}>{}</datalist>', LABEL_DATALIST_ID, swap, options)


@register.simple_tag
def label_picker(name: str, number: int, values=()) -> SafeString:
    """A label picker (labels.LabelPicker) of its own on a page of several, e.g. one per meeting card: its field's id
    is `<name>-<number>`; `values` are the labels already picked (shown ticked)."""
    return LabelPicker(placeholder="type to add a label").render(name, list(values or ()), {"id": f"{name}-{number}"})


@register.filter
def ms_from_now(moment) -> int:
    """Milliseconds from now until `moment` (0 once past): the delay of a poll that waits for it."""
    return max(0, int((moment - timezone.now()).total_seconds() * 1000)) if moment else 0


@register.simple_tag(takes_context=True)
def queue_row_values(context, issue) -> dict:
    """What the queue-row partial (queue.html) shows of one issue, read once here: what the row offers the user
    (accepting.row_accepts: the policy is the domain's) and the issue's values and URLs (reverse()), as a dict,
    which the template engine looks up first: a queue page renders fifty rows, each with some forty values."""
    user, lane = context["user"], context.get("lane")
    does = accepting.row_accepts(issue, lane, user, can_apply=user.has_perm("rubric_app.apply_labels"))
    number = issue.number
    needs_preview = does.accept in (accepting.ROW_PREVIEW, accepting.ROW_CONFIRM_FIXED) or (
        does.duplicate and issue.possible_duplicate_id
    )
    return {
        **vars(does),
        "waiting_note": does.waiting_note,
        "number": number,
        "url": issue.get_absolute_url(),
        "title": issue.title,
        "author": issue.author or "?",
        "preview_url": reverse("rubric_app:issue_preview", args=[number]) if needs_preview else "",
        "assign_url": reverse("rubric_app:issue_assign", args=[number]) if does.take else "",
        "confirm_url": reverse("rubric_app:bot_confirm", args=[number]) if does.accept == accepting.ROW_BOT else "",
        "labels_seen": json.dumps(issue.label_names()) if needs_preview else "",
        "label_names": issue.label_names() if does.accept == accepting.ROW_BOT else (),
        "age": age_now(context, issue.created_at),
        "opened": issue.created_at,
        "warnings": violations(issue),
        "verdict": issue.latest_verdict or "",
    }


@register.simple_tag(takes_context=True)
def csrf_input(context) -> SafeString:
    """The CSRF field once for a table of forms (the token is queue_cache's marker there)."""
    return format_html('<input type="hidden" name="csrfmiddlewaretoken" value="{}">', context.get("csrf_token", ""))


def row_labels(number: int, chips: str, oob: bool = False) -> str:
    """The queue row's labels, in a span the decision's poll replaces out of band once GitHub has them."""
    swap = ' hx-swap-oob="true"' if oob else ""
    return f'<span id="row-labels-{number}" class="row-labels"{swap}>{chips}</span>'


@register.simple_tag
def label_chips(issue, where: str = "header") -> SafeString:
    """An issue's labels as chips, out of band (hx-swap-oob) for the issue page's header or its queue row: what
    the finished decision's fragment carries, so the labels refresh in place where GitHub changed them."""
    chips = "".join(f"{_chip(label.name, label.color)} " for label in issue.labels.all())
    if where == "row":
        return mark_safe(row_labels(issue.number, chips, oob=True))  # noqa: S308 - escaped in _chip
    return mark_safe(  # noqa: S308 - escaped in _chip
        f'<p class="labels" id="issue-labels-{issue.number}" hx-swap-oob="true">{chips}</p>'
    )


# What the repro's runs across torch builds say, as the queue marks it (Issue.build_finding).
BUILD_MARKERS = {REGRESSION: ("regression", "R11"), MAY_BE_FIXED: ("may be fixed", "")}


@register.simple_tag
def build_marker(issue) -> SafeString:
    """What the repro's runs across torch builds say, as the queue row marks it (BUILD_MARKERS)."""
    return mark_safe(_build_marker(issue))  # noqa: S308 - escaped in _build_marker


def _build_marker(issue) -> str:
    if issue.build_finding not in BUILD_MARKERS:
        return ""
    text, rule = BUILD_MARKERS[issue.build_finding]
    summary = escape_html(str(issue.build_comparison.get("summary", "")))
    rule = f" ({rule})" if rule else ""
    # "May be fixed" is a claim a triager repeats to the reporter: its evidence is on the row, not only on hover.
    shown = f'<span class="muted" data-build-evidence>{summary}</span> ' if issue.build_finding == MAY_BE_FIXED else ""
    return (
        f'<span class="badge build-{issue.build_finding}" data-build-finding="{issue.build_finding}" '
        f'title="{summary}">{text}{rule}</span> {shown}'
    )


@register.simple_tag
def suggested_chips(issue) -> SafeString:
    """The queue row's Suggested cell: its first three suggestions, else why its route adds no label."""
    chips = "".join(f"{_suggested_chip(s)} " for s in issue.add_suggestions[:3]) or _no_labels_why(issue)
    return mark_safe(chips)  # noqa: S308 - escaped in _chip and _no_labels_why


@register.simple_tag
def row_label_chips(issue) -> SafeString:
    """The queue row's labels as chips, in the span a finished decision's poll replaces (row_labels)."""
    chips = "".join(f"{_chip(label.name, label.color)} " for label in issue.labels.all())
    return mark_safe(row_labels(issue.number, chips))  # noqa: S308 - escaped in _chip


def _suggested_chip(s) -> str:
    """A suggestion in the queue as the issue page shows it: pre-selected (what Accept, `a`, applies) or only
    possible (dotted), with its rule and calibrated confidence on hover."""
    state = "pre-selected" if s.preselected else "possible: not pre-selected"
    return _chip(
        s.label, suggested=True, title=f"{s.rule_id} · {s.confidence:.0%} · {state}", possible=not s.preselected
    )


# The routes that end with no label to add: the rule that says so and what it says (engine: G2's transfer,
# G0's issue already in another oncall's queue).
ROUTES_WITHOUT_LABELS = {Route.TRANSFER: "G2", Route.SKIP: "G0"}


def _no_labels_why(issue) -> str:
    """The queue's Suggested cell for an issue whose route adds no label: the rule's own line, so that an empty
    cell never reads as "the engine found nothing" when it concluded "transfer it"."""
    rule_id = ROUTES_WITHOUT_LABELS.get(issue.suggested_route)
    item = (
        next((i for i in issue.checklist or () if isinstance(i, dict) and i.get("rule_id") == rule_id), None)
        if rule_id
        else None
    )
    if item is None:
        return ""
    return (
        f'<span class="route-note" data-route="{escape_html(issue.suggested_route)}">'
        f'<span class="rule">{escape_html(rule_id)}</span> '
        f"{escape_html(str(item.get('text', '')))}</span>"
    )


@register.filter
def percent(value: float) -> str:
    try:
        return f"{float(value) * 100:.0f}%"
    except (TypeError, ValueError):
        return ""


@register.filter
def source_label(source: str) -> str:
    """'comment:2' -> 'comment 3' (people count from one), 'bisection:7' -> 'bisection run 7', 'run:7' -> a run
    weighed against the thread (rubric/engine/weighing.py), 'issue:170014' -> the issue sharing the failure."""
    kind, _, rest = (source or "").partition(":")
    if kind == "comment" and rest.isdigit():
        return f"comment {int(rest) + 1}"
    if kind == "bisection":
        return f"bisection run {rest}"
    if kind == "run":
        return f"bisection run {rest}, weighed" if rest else "bisection, weighed"
    if kind == "issue":
        return f"#{rest}, same failure"
    return kind or "—"


@register.filter
def json_list(value) -> str:
    """A list as JSON text, for a hidden input (autoescaping still applies)."""
    return json.dumps(list(value))


@register.filter
def md_cell(value) -> str:
    """Text fit for one Markdown table cell: no newlines, pipes escaped (what the chair typed keeps its Markdown)."""
    return " ".join(str(value).split()).replace("|", "\\|")


@register.filter
def md_quote(value) -> str:
    """Someone else's text (an issue's title from GitHub, GitHub's answer) quoted inert in a Markdown table cell: a code
    span, where no mention pings, no image loads, no link, HTML, entity, emphasis or issue reference is read, on GitHub
    or anywhere else; fenced with more backticks than it holds, pipes escaped as a table cell needs even there."""
    text = " ".join(str(value).split())
    if not text:
        return ""
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}".replace("|", "\\|")


@register.filter
def summary(text: str) -> str:
    """The issue's first paragraph of prose, as plain text (auto-escaped by the template)."""
    return markdown_summary(text)


register.filter("age", age)


@register.simple_tag(takes_context=True)
def age_now(context, value) -> str:
    """age(value); in a table rendered for the queue's cache, a marker that queue_cache fills in on each
    request (an age read from the cache would stop growing)."""
    if value and context.get("age_marker"):
        return mark_safe(age_marker(value))  # noqa: S308 - hex digits and an ISO date
    return age(value)


STATE_NAMES = {
    "satisfied": "satisfied",
    "violated": "violated",
    "needs_human": "needs a human",
    "not_applicable": "n/a",
}


@register.filter
def state_name(state: str) -> str:
    return STATE_NAMES.get(state, state or "")


@register.filter
def reply_name(name: str) -> str:
    """A reply template's or close reason's name in words: "redirect_to_forum" -> "redirect to forum"."""
    return name.replace("_", " ")


@register.filter
def ran_on(run_hardware: dict) -> str:
    """Which device and ISA ran a bisection (BisectionRun.hardware), in a few words; "" when it was not recorded."""
    return hardware.describe(run_hardware or {})


@register.filter
def isolation(run) -> str:
    """What sandbox was in force for a run, in one line from its sandbox_report ("" before it ran)."""
    report = run.sandbox_report or {}
    if report.get("refused"):
        return f"refused, the repro did not run: {report['refused']}"
    if not report:
        return ""
    parts = [
        name
        for name, key in (
            ("no network", "netns"),
            ("own pid namespace", "pidns"),
            ("read-only allow-list root", "root"),
        )
        if report.get(key)
    ]
    if report.get("uid", -1) > 0:
        parts.append(f"uid {report['uid']}")
    cgroup = report.get("cgroup") or {}
    if cgroup.get("memory_max_mb"):
        parts.append(f"cgroup {cgroup.get('version', '')} memory {cgroup['memory_max_mb']} MB".replace("  ", " "))
    else:
        parts.append("no cgroup memory cap (per-process limits only)")
    if cgroup.get("pids_max"):
        parts.append(f"pids {cgroup['pids_max']}")
    return ", ".join(parts)
