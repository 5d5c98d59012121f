"""The dashboard's roles as Django groups.

viewer: read everything. triager: also apply labels and run bisections.
meeting chair: also record meeting decisions (the only way to `high priority`, R11).
"""

from django.apps import apps as global_apps
from django.contrib.auth.management import create_permissions
from django.contrib.auth.models import Group, Permission

VIEW = ["view_issue", "view_bisectionrun", "view_triagedecision", "view_suggestion", "view_meeting"]
ROLES: dict[str, list[str]] = {
    "viewer": VIEW,
    "triager": VIEW + ["apply_labels", "run_bisection"],
    "meeting chair": VIEW + ["apply_labels", "run_bisection", "record_meeting_decision"],
}


def ensure_roles() -> dict[str, Group]:
    """Create (or complete) the role groups; idempotent. Returns them by name."""
    create_permissions(global_apps.get_app_config("rubric_app"), verbosity=0)
    groups = {}
    for name, codenames in ROLES.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.set(Permission.objects.filter(content_type__app_label="rubric_app", codename__in=codenames))
        groups[name] = group
    return groups
