"""Template helpers of the queue-health pages: formatting the figures the views hand them, and the charts."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from rubric_app.triage import metrics
from rubric_app.web.charts import Series, bar_chart

register = template.Library()


def _h(value: float | None) -> float:
    return round(value or 0.0, 1)


@register.filter
def hours(value: float | None) -> str:
    """Hours with one decimal, as the time-to-triage chart shows them; "–" when nothing was triaged."""
    return "–" if value is None else f"{value:.1f}"


@register.simple_tag
def health_chart(health: metrics.QueueHealth, name: str) -> SafeString:
    """One chart of the metrics page; its table in metrics.html holds the same numbers."""
    weeks = [w.label for w in health.weeks]
    if name == "open":
        return bar_chart(
            weeks,
            [Series("open at the week's end", [w.open_at_end for w in health.weeks])],
            title="Open queue size at the end of each week",
            slug="open",
        )
    if name == "flow":
        return bar_chart(
            weeks,
            [
                Series("opened", [w.opened for w in health.weeks], "s1"),
                Series("left", [w.closed for w in health.weeks], "s2"),
            ],
            title="Inflow and outflow per week",
            slug="flow",
        )
    if name == "age":
        return bar_chart(
            [n for n, _ in health.age_buckets],
            [Series("untriaged", [c for _, c in health.age_buckets], "s3")],
            title="Untriaged oncall: pt2 issues by age",
            slug="age",
        )
    if name == "triage":
        return bar_chart(
            weeks,
            [
                Series("median h", [_h(w.triage_median_h) for w in health.weeks], "s1"),
                Series("p90 h", [_h(w.triage_p90_h) for w in health.weeks], "s4"),
            ],
            title="Time to triage per week (hours)",
            slug="triage",
        )
    if name == "triagers":
        return bar_chart(
            [u for u, _, _ in health.per_triager],
            [
                Series("decisions", [t for _, t, _ in health.per_triager], "s1"),
                Series("applied", [a for _, _, a in health.per_triager], "s2"),
            ],
            title="Decisions per triager",
            slug="triagers",
        )
    raise ValueError(f"no chart named {name!r}")
