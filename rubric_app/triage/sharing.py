"""Sharing the untriaged queue among the week's on-duty triagers (local to the dashboard:
GitHub assignees are for the people who fix the issue)."""

from __future__ import annotations

from collections import Counter

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Prefetch, Q
from django.utils import timezone

from rubric_app.lanes import LANE_BY_CODE
from rubric_app.models import Assignment, Duty, Issue, Suggestion, week_start
from rubric_app.vocabulary import LANE_PT2


def untriaged():
    """The queue's `oncall: pt2` lane: open, in the queue, not yet `triaged`."""
    return LANE_BY_CODE[LANE_PT2].filter(Issue.objects.in_queue())


def unassigned():
    """The untriaged issues nobody holds. NOT EXISTS, not `assignment__isnull`: the left join's
    IS NULL made PostgreSQL probe each issue's labels one by one (80 ms for 18,000 issues, 30 as an anti-join)."""
    return untriaged().filter(~Exists(Assignment.objects.filter(issue=OuterRef("pk"))))


def share_out(*, by, now=None) -> int:
    """Assign every unassigned untriaged issue to this week's on-duty triagers; returns how many.

    An issue whose module labels (applied or suggested) match triagers' preferred modules goes to
    the least loaded of them; any other issue to the least loaded on duty (round robin, oldest
    issue first). Load counts the untriaged issues each already holds.
    """
    duties = list(Duty.objects.for_week(week_start(now or timezone.now())))
    if not duties:
        return 0
    load = Counter(dict.fromkeys((d.user_id for d in duties), 0))
    load.update(Assignment.objects.filter(issue__in=untriaged(), user_id__in=load).values_list("user_id", flat=True))
    module_suggestions = Suggestion.objects.filter(kind=Suggestion.Kind.ADD, label__startswith="module:")
    issues = (
        unassigned()
        .order_by("created_at", "number")
        .prefetch_related("labels", Prefetch("suggestions", queryset=module_suggestions, to_attr="module_suggestions"))
    )
    rows = []
    for issue in issues:
        modules = set(issue.module_labels) | {s.label for s in issue.module_suggestions}
        fans = [d.user_id for d in duties if modules & set(d.modules)] or list(load)
        user_id = min(fans, key=lambda uid: (load[uid], uid))
        load[user_id] += 1
        rows.append(Assignment(issue=issue, user_id=user_id, assigned_by=by))
    with transaction.atomic():
        Assignment.objects.bulk_create(rows, ignore_conflicts=True)  # someone took one meanwhile: theirs stays
    return len(rows)


def assign(*, issue: Issue, user, by) -> Assignment:
    """Give the issue to user (take it when user is by); replaces any earlier assignment."""
    assignment, _ = Assignment.objects.update_or_create(
        issue=issue, defaults={"user": user, "assigned_by": by, "assigned_at": timezone.now()}
    )
    return assignment


def find_triager(username: str):
    """The active user named `username` if they hold the triager role (apply_labels), else None."""
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    return user if user is not None and user.has_perm("rubric_app.apply_labels") else None


def set_duty(*, username: str, modules: list[str], now=None) -> Duty:
    """Put a triager on this week's roster (or update their modules); ValueError if no such triager."""
    user = find_triager(username)
    if user is None:
        raise ValueError(f"{username!r} is not a triager (the triager role is needed to be on duty).")
    duty, _ = Duty.objects.update_or_create(
        user=user, week=week_start(now or timezone.now()), defaults={"modules": sorted(set(modules))}
    )
    return duty


def roster(now=None) -> dict:
    """The meeting page's roster: this week's duty, each one's untriaged issues (at most 200 listed), how many
    are unassigned, and the triagers who could be put on duty. Four queries."""
    week = week_start(now or timezone.now())
    duties = list(Duty.objects.for_week(week))
    assigned = list(
        untriaged()
        .filter(assignment__isnull=False)
        .select_related("assignment__user")
        .order_by("assignment__user__username", "number")[:200]
    )
    can_triage = (
        Q(is_superuser=True)
        | Q(groups__permissions__codename="apply_labels")
        | Q(user_permissions__codename="apply_labels")
    )
    triagers = (
        get_user_model().objects.filter(can_triage, is_active=True).distinct().order_by("username")
    ).values_list("username", flat=True)
    for duty in duties:
        duty.issues = [i for i in assigned if i.assignment.user_id == duty.user_id]
    return {
        "week": week,
        "duties": duties,
        "assigned": assigned,
        "unassigned": unassigned().aggregate(n=Count("pk"))["n"],
        "triagers": list(triagers),
    }
