import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from rubric_app import bisection


class Command(BaseCommand):
    help = (
        "Bisect a repro file synchronously in the sandbox (no database rows): print each mode's "
        "result and the verdict labels."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", help="a repro: a script calling torch.compile, or fn + make_inputs()")
        parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
        parser.add_argument("--style", choices=["script", "module"], help="default: detected from the code")
        parser.add_argument("--timeout", type=float, default=settings.BISECTION_TIMEOUT_S, help="seconds per mode")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the whole report as JSON")

    def handle(self, *args, file, device, style, timeout, as_json: bool, **options):
        path = Path(file)
        try:
            code = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {file}: {exc}") from None
        limits = bisection.Limits(timeout_s=timeout, memory_mb=settings.BISECTION_MEMORY_MB)
        verbose = not as_json and options["verbosity"] > 1
        progress = (lambda mode, results: self.stderr.write(f"... {mode}")) if verbose else None
        try:
            report = bisection.bisect(code, device=device, style=style, limits=limits, on_progress=progress)
        except bisection.ForkServerError as exc:
            raise CommandError(str(exc)) from None
        if as_json:
            self.stdout.write(json.dumps(report.as_dict(), indent=2))
            return
        self.stdout.write(f"{path.name}: {report.style} style on {device}, torch {report.torch_version}")
        for r in report.results:
            probes = ", ".join(f"{k}: {v}" for k, v in r["probes"].items())
            where = f" [{r['phase']}]" if r["phase"] else ""
            self.stdout.write(
                f"  {r['mode']:<38} {r['status']:<9}{where} {r['wall_s']:>6.1f} s  {r['exception']}"
                + (f"  probes: {probes}" if probes else "")
            )
        self.stdout.write("Verdict: " + report.summary)
        for label in report.labels:
            self.stdout.write(f"  {label['label']} ({label['rule_id']}): {label['evidence']}")
        sandbox = report.sandbox
        self.stdout.write(
            f"Sandbox: netns={sandbox.get('netns')} pidns={sandbox.get('pidns')} uid={sandbox.get('uid')} "
            f"private /tmp={sandbox.get('private_tmp')} no_new_privs={sandbox.get('no_new_privs')}"
        )
