from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management.base import BaseCommand

from rubric_app.demo.loading import DEMO_FILE, load_catalog_labels, load_demo_issues
from rubric_app.roles import ensure_roles

DEMO_USERS = {"triager": "triager", "chair": "meeting chair", "viewer": "viewer"}


class Command(BaseCommand):
    help = "Load the label catalog and the demo PT2 issues; with --users, demo accounts too."

    def add_arguments(self, parser):
        parser.add_argument("--file", default=str(DEMO_FILE), help="demo issues JSON file")
        parser.add_argument(
            "--users",
            action="store_true",
            help="create demo accounts (password = user name); for a local demo only",
        )

    def handle(self, *args, file, users, **options):
        groups = ensure_roles()
        labels = load_catalog_labels()
        issues = load_demo_issues(file)
        self.stdout.write(f"Loaded {labels} catalog labels and {issues} demo issues.")
        if users:
            User = get_user_model()
            for username, role in DEMO_USERS.items():
                user, created = User.objects.get_or_create(username=username)
                if created:
                    user.set_password(username)
                    user.save(update_fields=["password"])
                user.groups.add(groups[role])
            # Who registers the runners is no triage role: an operator holds that one permission (the runners page).
            operator, created = User.objects.get_or_create(username="operator")
            if created:
                operator.set_password("operator")
                operator.save(update_fields=["password"])
            operator.groups.add(groups["viewer"])
            operator.user_permissions.add(Permission.objects.get(codename="manage_runners"))
            self.stdout.write("Demo accounts: triager/triager, chair/chair, viewer/viewer, operator/operator.")
