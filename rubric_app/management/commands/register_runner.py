from django.core.management.base import BaseCommand, CommandError

from rubric_app.models import Runner
from rubric_app.runs import registration

BY = "manage.py register_runner"


class Command(BaseCommand):
    help = (
        "Register a bisection runner (or give it a new secret, or revoke it) and print its secret once, with the "
        "environment to start it with (docs/deploy.md#runners). The runners page does the same for operators."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="the runner's name: lowercase letters, digits and dashes")
        parser.add_argument("--device", choices=Runner.Device.values, default="cpu")
        parser.add_argument("--rotate", action="store_true", help="a new secret for a registered runner (or register)")
        parser.add_argument("--revoke", action="store_true", help="revoke the runner: its reports count no more")
        parser.add_argument("--secret-only", action="store_true", help="print the secret alone (for a script)")

    def handle(self, *args, name, device, rotate, revoke, secret_only, **options):
        runner = Runner.objects.filter(name=name).first()
        try:
            if revoke:
                if runner is None:
                    raise CommandError(f"no runner named {name}")
                registration.revoke(runner, by=BY)
                self.stdout.write(f"Runner {name} revoked.")
                return
            if runner is not None and not rotate:
                raise CommandError(f"a runner named {name} is registered already: --rotate gives it a new secret")
            issued = (
                registration.rotate(runner, by=BY)
                if runner is not None
                else registration.register(name=name, device=device, by=BY)
            )
        except registration.Refused as exc:
            raise CommandError(str(exc)) from None
        registration.provision(issued.runner)
        if secret_only:
            self.stdout.write(issued.secret)
            return
        self.stdout.write(f"Runner {issued.runner.name} ({issued.runner.device}): its secret is shown once.\n")
        self.stdout.write(f"  RUNNER_NAME={issued.runner.name}\n  RUNNER_SECRET={issued.secret}\n")
        if issued.managed:
            self.stdout.write(f"Its broker user {issued.broker_user} was made, with the secret as its password.")
        else:
            self.stdout.write(
                "Add its broker user to the runners' broker (a line of its ACL file):\n  " + issued.acl_line
            )
