import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from rubric_app import bisection
from rubric_app.bisection import builds as builds_module


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
        parser.add_argument(
            "--build",
            action="append",
            dest="builds",
            metavar="NAME",
            help="a torch build of TORCH_BUILDS to run on (repeat it to compare builds: a regression, R11); "
            "default: the first",
        )

    def handle(self, *args, file, device, style, timeout, as_json: bool, builds, **options):
        path = Path(file)
        try:
            code = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {file}: {exc}") from None
        hosted = settings.TORCH_BUILDS
        names = builds or [next(iter(hosted))]
        unknown = [name for name in names if name not in hosted]
        if unknown:
            raise CommandError(f"unknown build {', '.join(unknown)}: TORCH_BUILDS has {', '.join(hosted)}")
        limits = bisection.Limits(timeout_s=timeout, memory_mb=settings.BISECTION_MEMORY_MB)
        verbose = not as_json and options["verbosity"] > 1
        progress = (lambda mode, results: self.stderr.write(f"... {mode}")) if verbose else None
        reports = {}
        for name in dict.fromkeys(names):
            try:
                reports[name] = bisection.bisect(
                    code,
                    device=device,
                    style=style,
                    limits=limits,
                    on_progress=progress,
                    server=bisection.shared_server(hosted[name]),
                )
            except bisection.ForkServerError as exc:
                raise CommandError(f"build {name}: {exc}") from None
        runs = [
            builds_module.BuildRun(i, name, report.torch_version, report.results)
            for i, (name, report) in enumerate(reports.items())
        ]
        comparison = builds_module.compare(runs[::-1]) if len(runs) > 1 else None
        if as_json:
            out = {name: report.as_dict() for name, report in reports.items()}
            if len(reports) == 1:
                out = next(iter(out.values()))
            else:
                out = {"builds": out, "comparison": comparison.as_dict() if comparison else None}
            self.stdout.write(json.dumps(out, indent=2))
            return
        for name, report in reports.items():
            self._print(path, device, name if len(reports) > 1 else "", report)
        if len(reports) > 1:
            kind = comparison.kind.replace("_", " ") if comparison else "nothing to compare"
            self.stdout.write(f"Across builds: {kind}" + (f": {comparison.summary}" if comparison else ""))

    def _print(self, path: Path, device: str, build: str, report) -> None:
        on = f", build {build}" if build else ""
        self.stdout.write(f"{path.name}: {report.style} style on {device}{on}, torch {report.torch_version}")
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
