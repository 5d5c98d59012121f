"""Template helpers of the queue-health pages: the charts and the meeting page's summary."""

from __future__ import annotations

from django import template
from django.utils import timezone
from django.utils.safestring import SafeString

from rubric_app import metrics
from rubric_app.charts import Series, bar_chart

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


@register.simple_tag
def queue_health_summary(weeks: int = 4) -> metrics.QueueHealth:
    """The meeting page's figures (the last `weeks` weeks); four queries, see metrics.queue_health."""
    return metrics.queue_health(weeks=weeks)


@register.simple_tag
def roster(now=None) -> dict:
    """The meeting page's roster block: this week's duty, each one's untriaged issues, the triagers
    who could be added. Four queries."""
    from django.contrib.auth import get_user_model
    from django.db.models import Count, Q

    from rubric_app.forms import module_label_names
    from rubric_app.models import Duty, week_start
    from rubric_app.sharing import unassigned as unassigned_issues
    from rubric_app.sharing import untriaged

    week = week_start(now or timezone.now())
    duties = list(Duty.objects.for_week(week))
    assigned = list(
        untriaged()
        .filter(assignment__isnull=False)
        .select_related("assignment__user")
        .order_by("assignment__user__username", "number")[:200]
    )
    unassigned = unassigned_issues().aggregate(n=Count("pk"))["n"]
    can_triage = (
        Q(is_superuser=True)
        | Q(groups__permissions__codename="apply_labels")
        | Q(user_permissions__codename="apply_labels")
    )
    triagers = list(
        get_user_model()
        .objects.filter(can_triage, is_active=True)
        .distinct()
        .order_by("username")
        .values_list("username", flat=True)
    )
    for duty in duties:
        duty.issues = [i for i in assigned if i.assignment.user_id == duty.user_id]
    return {
        "week": week,
        "duties": duties,
        "assigned": assigned,
        "unassigned": unassigned,
        "triagers": triagers,
        "modules": module_label_names(),
    }
