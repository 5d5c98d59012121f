"""The bisection itself: modes in order, probes on the first failure, verdict (pure Python, no torch here).

`bisect()` talks to a `ForkServer` (one per process, started on first use and
kept warm), so the Celery worker and the CLI never import torch nor run repro
code themselves.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from . import builds
from . import verdict as verdict_rules
from .child import MODES
from .extract import detect_style
from .sandbox import Limits, SandboxError, require_root, scrubbed_env

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOG_CAP = 200_000
DYNAMIC_HINT = re.compile(r"dynamic\s*=\s*True|mark_dynamic|make_calls")
FULLGRAPH_HINT = re.compile(r"fullgraph\s*=\s*True")


class ForkServerError(RuntimeError):
    """The fork server died or stopped answering; the run is failed, the next call starts a new one."""


class SandboxRefused(ForkServerError):
    """No run without isolation: the sandbox could not be built (not root, a refused namespace, mount
    or uid drop), or a mode ran out of its process/file budget, which is no verdict either.

    report: what isolation was in force (or {"refused": why}), for the run's page.
    """

    def __init__(self, message: str, report: dict | None = None):
        super().__init__(message)
        self.report = {"refused": message[:500], **(report or {})}


class ForkServer:
    """A warm process with torch imported that forks a sandboxed child per mode."""

    def __init__(self, python: str = sys.executable):
        self.python = python
        self.proc: subprocess.Popen | None = None
        self.base = ""
        self.torch_version = ""
        self.installed = ""  # the build's torch version by its metadata when the server started (builds.py)
        self.cuda = False
        self.uid = -1
        self.lock = threading.Lock()

    def start(self) -> None:
        """Start (or restart) the server process and wait until it has imported torch."""
        self.close()
        try:
            require_root()  # before anything starts: a repro must never run as the worker's own uid
        except SandboxError as exc:
            raise SandboxRefused(str(exc)) from None
        self.installed = builds.installed_version(self.python)
        self.base = tempfile.mkdtemp(prefix="bisect-server-")
        # The server (and through it every sandbox) dies with this process: no repro outlives its worker.
        boot = (
            f"import sys; sys.path.insert(0, {PROJECT_ROOT!r}); "
            f"from rubric_app.bisection.forkserver import serve; serve(expected_parent={os.getpid()})"
        )
        # -I: no PYTHON* variables, no user site; the env is an allowlist (no secrets in its memory).
        self.proc = subprocess.Popen(
            [self.python, "-I", "-c", boot],
            env=scrubbed_env(self.base),
            cwd=self.base,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,  # stderr: the worker's log
        )
        hello = self._read(timeout=120)
        if not hello.get("ready"):
            self.close()
            raise SandboxRefused(hello.get("error") or "the fork server refused to start")
        self.torch_version, self.cuda, self.uid = hello["torch"], hello["cuda"], hello["uid"]

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _read(self, timeout: float) -> dict:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            raise ForkServerError("the bisection fork server died or stopped answering")
        return json.loads(line)

    def request(self, payload: dict, timeout: float) -> dict:
        """Send one request and return its reply; starts the server if needed."""
        with self.lock:
            if not self.alive:
                self.start()
            try:
                self.proc.stdin.write(json.dumps(payload) + "\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                self.close()
                raise ForkServerError("the bisection fork server died") from None
            return self._read(timeout)

    def run_mode(
        self,
        key: str,
        mode: str,
        code: str,
        style: str,
        device: str,
        limits: Limits,
        overrides: dict | None = None,
        narrow: bool = False,
    ) -> dict:
        """Run one mode in a fresh sandboxed child; returns {"result", "log", "sandbox"}.

        narrow: run torch's CompilerBisector in that child instead (module style).
        Raises SandboxRefused when the sandbox could not be built or the mode ran out of
        its process budget: never a result then.
        """
        spec = {
            "key": key,
            "mode": mode,
            "code": code,
            "style": style,
            "device": device,
            "overrides": overrides or {},
            "narrow": narrow,
        }
        reply = self.request({"op": "run", "spec": spec, "limits": asdict(limits)}, timeout=limits.timeout_s + 60)
        if "infra_error" in reply:
            raise SandboxRefused(reply["infra_error"], reply.get("sandbox"))
        return reply

    def forget(self, key: str) -> None:
        if self.alive:
            self.request({"op": "forget", "key": key}, timeout=30)

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None
        if self.base:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = ""


_servers: dict[str, ForkServer] = {}


def shared_server(python: str = sys.executable) -> ForkServer:
    """This process's fork server for the build at `python` (a Celery worker keeps one warm per build it hosts,
    TORCH_BUILDS: each build's repros run on the torch installed for that interpreter)."""
    if python not in _servers:
        _servers[python] = ForkServer(python)
        atexit.register(_servers[python].close)
    return _servers[python]


@dataclass
class Report:
    """One bisection: results (the BisectionRun.results contract), labels, summary, sandbox, capped log."""

    device: str
    style: str
    results: list[dict] = field(default_factory=list)
    labels: list[dict] = field(default_factory=list)
    summary: str = ""
    torch_version: str = ""
    sandbox: dict = field(default_factory=dict)
    log: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _probe_plan(result: dict, code: str, device: str, style: str, cuda: bool) -> list[tuple[str, dict, str]]:
    """Which re-runs of the first failing mode tell us more: (probe name, overrides, device)."""
    if result["mode"] == "eager" or result["status"] == "timeout":
        return []  # a timeout probe would cost another full timeout
    plan = []
    if DYNAMIC_HINT.search(code):
        plan.append(("dynamic=False", {"dynamic": False}, device))
    if FULLGRAPH_HINT.search(code):
        if result["phase"] == "dynamo_tracing":
            plan.append(("fullgraph=False", {"fullgraph": False}, device))
    elif result["mode"] != "inductor":
        plan.append(("fullgraph=True", {"fullgraph": True}, device))
    if result["mode"] == "inductor" and device == "cpu" and cuda and style == "module":
        plan.append(("device=cuda", {}, "cuda"))
    return plan


def bisect(
    code: str,
    *,
    device: str = "cpu",
    style: str | None = None,
    limits: Limits | None = None,
    server: ForkServer | None = None,
    on_progress: Callable[[str, list[dict]], None] | None = None,
    repeats: int = 0,
    cuda_probe: bool | None = None,
    narrow: bool = True,
    budget_s: float | None = None,
) -> Report:
    """Run code under each mode (child.MODES) until the first failure, probe that failure, decide labels.

    on_progress(current_mode, results) is called before each mode and after
    each result, so callers can persist progress as it happens. cuda_probe
    (default: when the machine has a GPU) re-runs a CPU inductor failure on
    cuda for R2.4; narrow runs torch's CompilerBisector on an Inductor error or
    divergence of a module-style repro (the subsystem and pass/op to blame).
    budget_s (automatic runs): everything after the eager reference, the compile modes and the probes together,
    gets at most this long; the mode that reaches it ends as a timeout marked "budget_s" and the chain stops there,
    so a repro built to run each mode to just under its limit costs one limit plus eager, not one per mode.
    Raises ForkServerError only if the fork server itself dies.
    """
    run = _Bisection(
        code,
        device,
        style or detect_style(code),
        limits or Limits(),
        server or shared_server(),
        on_progress or (lambda mode, results: None),
        budget_s,
    )
    stopping = False
    try:
        failed = run.chain()
        if failed is not None:
            run.probe(failed, repeats, run.server.cuda if cuda_probe is None else cuda_probe, narrow)
    except (SystemExit, KeyboardInterrupt):
        # The worker is stopping (its SIGTERM handler raised): the server is busy with the running mode and would
        # answer `forget` only once that mode ends (minutes). Closing it kills the mode's sandbox with it.
        stopping = True
        run.server.close()
        raise
    finally:
        try:
            if not stopping:
                run.server.forget(run.key)
        except ForkServerError:
            pass
    report = run.report
    report.torch_version = run.server.torch_version
    decided = verdict_rules.decide(report.results, device)
    report.labels, report.summary = decided.labels, decided.summary
    report.log = "\n".join(run.logs)[-LOG_CAP:]
    return report


class _Bisection:
    """One bisection's state: the results so far, the logs, and how to run a mode of this repro."""

    def __init__(
        self,
        code: str,
        device: str,
        style: str,
        limits: Limits,
        server: ForkServer,
        progress: Callable[[str, list[dict]], None],
        budget_s: float | None = None,
    ):
        self.code, self.device, self.style, self.limits, self.server = code, device, style, limits, server
        self.progress, self.key, self.logs = progress, uuid.uuid4().hex, []
        self.report = Report(device=device, style=style)
        self.budget_s = budget_s
        self.deadline: float | None = None  # monotonic; set once the eager reference has run

    def run(self, mode: str, overrides: dict | None = None, on: str = "", narrow: bool = False) -> dict:
        on = on or self.device
        limits, capped = self.limits, False
        if self.deadline is not None:
            left = max(self.deadline - time.monotonic(), 1.0)
            if left < limits.timeout_s:
                limits, capped = replace(limits, timeout_s=round(left, 1)), True
        reply = self.server.run_mode(self.key, mode, self.code, self.style, on, limits, overrides, narrow)
        result = reply["result"]
        if capped and result["status"] == "timeout":
            result["budget_s"] = self.budget_s
            result["message"] = (
                f"the automatic run's budget ({self.budget_s:g} s for everything after eager) ran out here: "
                f"{result['message']}"
            )
        self.report.sandbox = self.report.sandbox or reply["sandbox"]
        tag = mode + (f" {overrides}" if overrides else "") + (f" on {on}" if on != self.device else "")
        self.logs.append(f"===== {tag}: {result['status']} =====\n{reply['log']}")
        return result

    def chain(self) -> dict | None:
        """Run the modes in order until one fails (the rest are recorded as skipped); return that result."""
        results, failed = self.report.results, None
        for mode in MODES:
            if failed is not None:
                results.append(
                    {
                        "mode": mode,
                        "status": "skipped",
                        "phase": "",
                        "exception": "",
                        "wall_s": 0.0,
                        "message": f"not run: {failed['mode']} already fails",
                        "probes": {},
                    }
                )
                continue
            self.progress(mode, results)
            results.append(self.run(mode))
            if self.budget_s is not None and self.deadline is None:
                self.deadline = time.monotonic() + self.budget_s  # the eager reference is not counted
            self.progress(mode, results)
            if results[-1]["status"] != "passed":
                failed = results[-1]
        return failed

    def probe(self, failed: dict, repeats: int, cuda: bool, narrow: bool) -> None:
        """Re-run the failing mode as the probes ask; record them on its result."""
        if verdict_rules.needs_gpu(failed):
            return  # CUDA is missing here: probes, repeats and narrowing would only fail the same way
        plan = _probe_plan(failed, self.code, self.device, self.style, cuda)
        # A crash may be memory corruption, which comes and goes: always check it once more.
        repeats = max(repeats, 1) if failed["status"] == "crashed" else repeats
        plan += [("repeat" if i == 0 else f"repeat{i + 1}", {}, self.device) for i in range(repeats)]
        for name, overrides, on in plan:
            self.progress(f"{failed['mode']} ({name})", self.report.results)
            result = self.run(failed["mode"], overrides, on)
            # "probes" keeps the contract's name -> status; the details tell a graph break from the same failure.
            failed["probes"][name] = result["status"]
            failed.setdefault("probe_details", {})[name] = {
                key: result[key] for key in ("status", "phase", "exception", "wall_s")
            }
        if (
            narrow
            and failed["mode"] == "inductor"
            and failed["status"] in ("raised", "diverged")
            and self.style == "module"
        ):
            self.progress("inductor (CompilerBisector)", self.report.results)
            narrowed = self.run("inductor", narrow=True)
            failed["probes"]["CompilerBisector"] = narrowed["status"]
            failed["narrowed"] = narrowed.get("narrowed") or {}
        self.progress(failed["mode"], self.report.results)
