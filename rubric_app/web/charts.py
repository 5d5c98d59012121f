"""Bar charts as inline SVG, rendered on the server: they show without JavaScript.

Each bar carries its value in `data-value` and a `<title>` tooltip, and the page puts a
table with the same numbers beside the chart (for screen readers and for copying).
Pure Python: numbers and names in, escaped SVG markup out.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT = 560, 220
LEFT, RIGHT, TOP, BOTTOM = 40, 10, 14, 44


@dataclass(frozen=True)
class Series:
    name: str
    values: list[float]
    css: str = "s1"  # triage.css colours .chart .s1, .s2, ...


def _nice_max(value: float) -> float:
    """The smallest 1/2/5 x 10^n at or above value, so the axis reads in round numbers."""
    if value <= 0:
        return 1
    step = 1.0
    while step * 10 <= value:
        step *= 10
    for factor in (1, 2, 5, 10):
        if step * factor >= value:
            return step * factor
    return step * 10


def _fmt(value: float) -> str:
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


def bar_chart(categories: list[str], series: list[Series], *, title: str, slug: str) -> SafeString:
    """An SVG bar chart (grouped when several series) with a y axis, a legend and labelled bars.

    slug names the chart for tests and CSS (`data-chart="<slug>"`). Category names and series
    names are escaped: they include usernames.
    """
    top = _nice_max(max((v for s in series for v in s.values), default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(len(categories), 1)
    bar_w = min(max(slot * 0.8 / max(len(series), 1), 1), 36)  # few categories: bars, not walls
    parts = [
        f'<svg class="chart" data-chart="{escape(slug)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
    ]
    for tick in (0, top / 2, top):
        y = TOP + plot_h - plot_h * tick / top
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="tick" x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{_fmt(tick)}</text>'
        )
    every = max(1, -(-len(categories) // 12))  # at most ~12 category names under the axis
    for i, category in enumerate(categories):
        x0 = LEFT + slot * i + (slot - bar_w * len(series)) / 2
        for j, s in enumerate(series):
            value = s.values[i]
            h = plot_h * value / top
            x, y = x0 + bar_w * j, TOP + plot_h - h
            parts.append(
                f'<rect class="bar {escape(s.css)}" x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                f'data-category="{escape(category)}" data-series="{escape(s.name)}" data-value="{_fmt(value)}">'
                f"<title>{escape(category)}: {escape(s.name)} {_fmt(value)}</title></rect>"
            )
            if len(categories) * len(series) <= 16 and value:
                parts.append(
                    f'<text class="value" x="{x + bar_w / 2:.1f}" y="{y - 3:.1f}" text-anchor="middle">'
                    f"{_fmt(value)}</text>"
                )
        if i % every == 0:
            parts.append(
                f'<text class="cat" x="{LEFT + slot * (i + 0.5):.1f}" y="{TOP + plot_h + 14}" '
                f'text-anchor="middle">{escape(category)}</text>'
            )
    if len(series) > 1:
        for j, s in enumerate(series):
            x = LEFT + j * 120
            parts.append(
                f'<rect class="{escape(s.css)}" x="{x}" y="{HEIGHT - 16}" width="10" height="10"/>'
                f'<text class="legend" x="{x + 14}" y="{HEIGHT - 7}">{escape(s.name)}</text>'
            )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every interpolated name is escaped above
