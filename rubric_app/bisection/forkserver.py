"""The fork server: a long-lived process that imported torch once and forks one sandboxed child per mode.

It is started by `harness.ForkServer` as a fresh interpreter with a scrubbed
environment (never forked from a Celery worker, whose memory holds the
database URL and the GitHub token). Protocol: one JSON request per line on
stdin, one JSON reply per line on the original stdout; the server itself
writes nothing else there.

It also compares each mode's outputs with the eager reference, so torch stays
out of the web and worker processes. Everything a child sends is untrusted:
result events are validated and capped (`validated_events`), and outputs are
size-checked before and after loading, before any comparison allocates.
"""

from __future__ import annotations

import base64
import io
import json
import os
import selectors
import signal
import site
import sys
import time

from . import child
from .compare import compare_all
from .sandbox import (
    Limits,
    RunCgroup,
    SandboxError,
    SandboxReport,
    become_pid1_sandbox,
    claim_uid,
    die_with_parent,
    enter_namespaces,
    kill_tree,
    require_root,
)

_refs: dict[str, dict] = {}
_uid = -1  # this server's sandbox uid, held through _uid_lock for the server's lifetime
_uid_lock = -1
_runs = 0

# Caps on what a child may send back: one event line, all of them, and the outputs to compare.
MAX_PAYLOAD_B64 = (child.MAX_OUTPUT_BYTES + 2) // 3 * 4
MAX_EVENT_BYTES = MAX_PAYLOAD_B64 + 64 * 1024
MAX_EVENTS_BYTES = MAX_EVENT_BYTES + 1024 * 1024
MAX_EVENTS = 10_000
# A loaded tensor may be a stride-0 view of a tiny storage: cap what comparing would allocate.
MAX_COMPARE_ELEMENTS = 32 * 1024 * 1024
MAX_COMPARE_LEAVES = 10_000

STATUSES = ("passed", "raised", "oom", "crashed", "resource")
PHASES = ("", "setup", "runtime", "dynamo_tracing", "backend_compile", "compare")
# Result event fields: (type, cap on the length of a string); strings beyond the cap are cut.
RESULT_FIELDS = {"status": (str, 20), "phase": (str, 40), "exception": (str, 300), "message": (str, 2000)}
OPTIONAL_FIELDS = {"traceback": (str, 4000), "payload_note": (str, 300), "compared": (str, 600)}
BLOCKER_FIELDS = {"kind": (str, 20), "name": (str, 200), "text": (str, 300)}
BLOCKERS = ("missing_module", "not_runnable")
NARROWED_FIELDS = {"backend": (str, 100), "subsystem": (str, 100), "debug_info": (str, 500)}


def _warm_imports() -> str:
    """Import what every mode needs, so a fork costs milliseconds; returns the torch version.

    Nothing here compiles or starts a thread pool: forking after OpenMP or a
    compile worker pool started would hand the child a broken copy.
    """
    import torch
    import torch._dynamo
    import torch._dynamo.backends.debugging  # noqa: F401 - registers aot_eager* backends
    import torch._dynamo.utils  # noqa: F401
    import torch._functorch.aot_autograd  # noqa: F401
    import torch._inductor.codecache  # noqa: F401
    import torch._inductor.codegen.cpp  # noqa: F401
    import torch._inductor.codegen.cpp_wrapper_cpu  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401
    import torch._inductor.cpp_builder  # noqa: F401
    import torch._inductor.decomposition  # noqa: F401
    import torch._inductor.graph  # noqa: F401
    import torch._inductor.lowering  # noqa: F401
    import torch._inductor.scheduler  # noqa: F401
    from torch._inductor import cpu_vec_isa

    # The g++ ISA probes are cached per process: probing once here (trusted code, the
    # server's own cache dir) saves every child's inductor mode several compiles.
    cpu_vec_isa.pick_vec_isa()
    return torch.__version__


def _visible() -> list[str]:
    """The Python install the repro needs to see (read-only): interpreter, stdlib, venv, site-packages, and the
    directories a .pth file there adds (a build's venv may take torch from another install that way).

    Never the project: the boot put it first on sys.path, and the repro must not read the dashboard's files.
    """
    project = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    installs = {sys.base_prefix, sys.prefix, *site.getsitepackages()}
    added = [
        p
        for p in sys.path
        if p and p != project and os.path.isdir(p) and not any(p == i or p.startswith(i + os.sep) for i in installs)
    ]
    return sorted({*installs, *added})


def _run_child(spec: dict, limits: Limits, cgroup: RunCgroup, res_w: int, out_w: int, ctl_w: int) -> None:
    """Body of C: join the cgroup, enter namespaces, fork G (the repro), relay G's pid and exit status on ctl_w.

    A refused isolation step is reported as {"refused": ...} and G never starts.
    """
    report = SandboxReport()
    try:
        cgroup.join()
        enter_namespaces(
            report, visible=_visible(), uid=_uid, disk_mb=limits.disk_mb, shm_mb=limits.shm_mb, device=spec["device"]
        )
        g = os.fork()
    except (SandboxError, OSError) as exc:
        os.write(ctl_w, (json.dumps({"refused": str(exc)[:500], "report": report.as_dict()}) + "\n").encode())
        return
    if g == 0:
        try:
            os.close(ctl_w)
            devnull = os.open("/dev/null", os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(out_w, 1)
            os.dup2(out_w, 2)
            os.dup2(res_w, 3)
            os.closerange(4, 65536)  # the protocol pipes, the uid lock, anything else the server held
            child._res_fd = 3
            try:
                workdir = become_pid1_sandbox(report, limits, _uid, spec["device"])
            except (SandboxError, OSError) as exc:
                child.emit({"event": "refused", "message": str(exc)[:500], "report": report.as_dict()})
                return
            os.chdir(workdir)
            report.env_keys = sorted(os.environ)
            child.emit({"event": "sandbox", "report": report.as_dict()})
            child.run(spec, 3, workdir)
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001 - exiting anyway
                    pass
            os._exit(0)
    os.write(ctl_w, (json.dumps({"pid": g}) + "\n").encode())
    _, status, usage = os.wait4(g, 0)
    info = {
        "status": status,
        "maxrss_mb": round(usage.ru_maxrss / 1024, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
    }
    os.write(ctl_w, (json.dumps(info) + "\n").encode())


def run_mode(spec: dict, limits: Limits) -> dict:
    """Run one mode of one repro in a fresh sandboxed child, in a cgroup of its own.

    Returns {"result", "log", "sandbox"}, or {"infra_error", "sandbox", "log"} when the
    sandbox could not be built or the run ran out of a resource: never a verdict then.
    """
    global _runs
    _runs += 1
    limits = limits.within_budget()
    cgroup = RunCgroup.create(f"rubric-bisect-{os.getpid()}-{_runs}", limits)
    out_r, out_w = os.pipe()
    res_r, res_w = os.pipe()
    ctl_r, ctl_w = os.pipe()
    started = time.monotonic()
    server = os.getpid()
    try:
        pid = os.fork()
        if pid == 0:
            try:
                die_with_parent(server)
                for fd in (out_r, res_r, ctl_r):
                    os.close(fd)
                _run_child(spec, limits, cgroup, res_w, out_w, ctl_w)
            finally:
                os._exit(0)
        for fd in (out_w, res_w, ctl_w):
            os.close(fd)
        out, lines, dropped, ctl, timed_out = _drain(
            pid, out_r, res_r, ctl_r, limits, deadline=started + limits.timeout_s
        )
        _reap(pid)
        oom = cgroup.oom_killed()
    finally:
        cgroup.destroy()
    wall = round(time.monotonic() - started, 2)
    log = out.decode("utf-8", "replace") + ("\n[output truncated]" if len(out) >= limits.output_bytes else "")
    outcome = _outcome(spec, limits, lines, dropped, ctl, timed_out, wall, log, oom)
    outcome["sandbox"]["cgroup"] = cgroup.report
    return outcome


def _drain(pid: int, out_r: int, res_r: int, ctl_r: int, limits: Limits, deadline: float):
    """Read the child's pipes (capped) until they close or the wall clock runs out; return
    (output, result event lines, lines dropped for size, control lines, timed_out). On timeout the sandbox is killed."""
    buffers = {out_r: bytearray(), res_r: bytearray(), ctl_r: bytearray()}
    caps = {out_r: limits.output_bytes, ctl_r: 4096}
    lines: list[bytes] = []
    kept, dropped, skipping = 0, 0, False
    selector = selectors.DefaultSelector()
    for fd in buffers:
        selector.register(fd, selectors.EVENT_READ)
    timed_out, g_pid = False, None
    while selector.get_map():
        remaining = deadline - time.monotonic()
        if remaining <= 0 and not timed_out:
            timed_out = True
            kill_tree(g_pid) if g_pid else os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10  # let C report G's end, then give up on the pipes
            continue
        if remaining <= 0:
            break
        for key, _ in selector.select(timeout=min(remaining, 1.0)):
            data = os.read(key.fd, 65536)
            if not data:
                selector.unregister(key.fd)
                continue
            if key.fd == res_r:
                # Line by line: an oversized line is dropped alone, the events after it still count.
                partial = buffers[res_r]
                while data:
                    head, newline, data = data.partition(b"\n")
                    if not skipping:
                        partial += head
                        if len(partial) > MAX_EVENT_BYTES:
                            partial.clear()
                            skipping = True
                    if newline:
                        if skipping:
                            dropped += 1
                        elif partial and kept + len(partial) <= MAX_EVENTS_BYTES and len(lines) < MAX_EVENTS:
                            lines.append(bytes(partial))
                            kept += len(partial)
                        elif partial:
                            dropped += 1
                        partial.clear()
                        skipping = False
                continue
            # Keep reading past the cap (a blocked writer would hang the run), keep nothing more.
            buffers[key.fd] += data[: max(0, caps[key.fd] - len(buffers[key.fd]))]
            if key.fd == ctl_r and g_pid is None and b"\n" in buffers[ctl_r]:
                first = json.loads(buffers[ctl_r].split(b"\n", 1)[0])
                g_pid = first.get("pid")
    selector.close()
    for fd in buffers:
        os.close(fd)
    reaped = b'"status"' in buffers[ctl_r]
    if g_pid is not None and not reaped:
        kill_tree(g_pid)
    return bytes(buffers[out_r]), lines, dropped, bytes(buffers[ctl_r]), timed_out


def _reap(pid: int) -> None:
    """Wait for C, killing it if it outlived G (it only waits for G, so that means G is stuck unkillable)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _fields(event: dict, spec: dict[str, tuple[type, int]], required: bool) -> dict | None:
    """The fields of spec found in event, strings cut to their cap; None if a required one is missing or mistyped."""
    out = {}
    for key, (kind, cap) in spec.items():
        if key not in event:
            if required:
                return None
            continue
        if not isinstance(event[key], kind):
            return None
        out[key] = event[key][:cap]
    return out


def validated_events(lines: list[bytes]) -> tuple[list[dict], int]:
    """Parse and validate the child's event lines; return (events, how many were dropped).

    Kept events have exactly the documented keys with the documented types, every
    string capped: phase {"event", "phase"}; result {"event", "status", "phase",
    "exception", "message", optional "traceback", "payload", "payload_note", "compared", "blocker", "narrowed"};
    sandbox/refused only as the very first event (G sends them before the repro runs,
    so a later one is the repro's forgery).
    """
    events, dropped = [], 0
    for index, line in enumerate(lines):
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        clean = _validated(event, first=index == 0) if isinstance(event, dict) else None
        if clean is None:
            dropped += 1
        else:
            events.append(clean)
    return events, dropped


def _validated(event: dict, first: bool) -> dict | None:
    kind = event.get("event")
    if kind == "phase":
        phase = event.get("phase")
        return {"event": "phase", "phase": phase} if isinstance(phase, str) and phase in PHASES else None
    if kind in ("sandbox", "refused") and first:
        report = event.get("report")
        if not isinstance(report, dict):
            return None
        clean = {"event": kind, "report": _known_report(report)}
        if kind == "refused":
            clean["message"] = str(event.get("message", ""))[:500]
        return clean
    if kind != "result":
        return None
    clean = _fields(event, RESULT_FIELDS, required=True)
    if clean is None or clean["status"] not in STATUSES or clean["phase"] not in PHASES:
        return None
    optional = _fields(event, OPTIONAL_FIELDS, required=False)
    if optional is None:
        return None
    clean.update(optional, event="result")
    payload = event.get("payload")
    if isinstance(payload, str):
        if len(payload) <= MAX_PAYLOAD_B64:
            clean["payload"] = payload
        else:
            clean["payload_note"] = "outputs over the size limit: not compared"
    blocker = event.get("blocker")
    if isinstance(blocker, dict):
        found = _fields(blocker, BLOCKER_FIELDS, required=True)
        line = blocker.get("line")
        if found is not None and found["kind"] in BLOCKERS:
            found["line"] = line if isinstance(line, int) and not isinstance(line, bool) and line >= 0 else 0
            clean["blocker"] = found
    narrowed = event.get("narrowed")
    if isinstance(narrowed, dict):
        found = _fields(narrowed, NARROWED_FIELDS, required=False)
        number = narrowed.get("bisect_number")
        if found is not None:
            found["bisect_number"] = number if isinstance(number, int) and not isinstance(number, bool) else None
            clean["narrowed"] = found
    return clean


def _known_report(report: dict) -> dict:
    """Only SandboxReport's own fields, with its types (lists and strings capped)."""
    clean = {}
    for key, default in SandboxReport().as_dict().items():
        value = report.get(key, default)
        if isinstance(default, bool):
            clean[key] = value if isinstance(value, bool) else False
        elif isinstance(default, int):
            clean[key] = value if isinstance(value, int) and not isinstance(value, bool) else -1
        elif isinstance(default, str):
            clean[key] = value[:300] if isinstance(value, str) else ""
        elif isinstance(default, list):
            clean[key] = [str(v)[:300] for v in value[:100]] if isinstance(value, list) else []
        elif isinstance(default, dict):
            clean[key] = (
                {str(k)[:50]: v for k, v in list(value.items())[:20] if isinstance(v, (int, str, bool))}
                if isinstance(value, dict)
                else {}
            )
    return clean


def _outcome(
    spec: dict,
    limits: Limits,
    lines: list[bytes],
    dropped: int,
    ctl: bytes,
    timed_out: bool,
    wall: float,
    log: str,
    oom: bool = False,
) -> dict:
    events, invalid = validated_events(lines)
    dropped += invalid
    if dropped:
        log += f"\n[{dropped} malformed or oversized result event(s) from the child dropped]"
    ctl_lines = []
    for line in ctl.decode("utf-8", "replace").splitlines():
        try:
            ctl_lines.append(json.loads(line))
        except ValueError:
            continue
    info = next((c for c in ctl_lines if "status" in c), {})
    refused = next((c for c in ctl_lines if "refused" in c), None)
    if refused is None and events and events[0]["event"] == "refused":
        refused = {"refused": events[0]["message"], "report": events[0]["report"]}
    if refused is not None:
        report = {**refused.get("report", {}), "refused": refused["refused"]}
        return {
            "infra_error": f"the sandbox could not be built, so the repro did not run: {refused['refused']}",
            "sandbox": report,
            "log": log,
        }
    phases = [e["phase"] for e in events if e["event"] == "phase"]
    last_phase = phases[-1] if phases else "setup"
    sandbox = next((e["report"] for e in events if e["event"] == "sandbox"), {})
    final = next((e for e in reversed(events) if e["event"] == "result"), None)
    result = {
        "mode": spec["mode"],
        "status": "",
        "phase": "",
        "exception": "",
        "message": "",
        "wall_s": wall,
        "maxrss_mb": info.get("maxrss_mb"),
        "cpu_s": info.get("cpu_s"),
        "probes": {},
    }
    if dropped:
        result["dropped_events"] = dropped
    status = info.get("status")
    if oom and not timed_out:
        result.update(
            status="oom",
            phase=last_phase,
            message=(
                f"the run's memory budget of {limits.memory_mb} MB (every process and its tmpfs) was exhausted; "
                "the kernel killed a process of the run"
            ),
        )
    elif final is not None and final["status"] == "resource":
        return {
            "infra_error": f"{spec['mode']}: the sandbox ran out of a resource ({final['exception']}: "
            f"{final['message'][:300]}); an infrastructure failure, not a verdict",
            "sandbox": sandbox,
            "log": log,
        }
    elif final is not None and not timed_out:
        result.update(
            status=final["status"],
            phase=final["phase"],
            exception=final["exception"],
            message=final["message"],
            traceback=final.get("traceback", ""),
            compared=final.get("compared", ""),
        )
        if "blocker" in final:
            result["blocker"] = final["blocker"]
        if final.get("narrowed") is not None:
            result["narrowed"] = final["narrowed"]
        elif final["status"] == "passed":
            _compare(spec, final, result)
    elif timed_out:
        result.update(
            status="timeout",
            phase=last_phase,
            message=f"no result within {limits.timeout_s:g} s wall clock; the whole sandbox was killed",
        )
    elif isinstance(status, int) and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig in (signal.SIGXCPU, signal.SIGKILL) and (info.get("cpu_s") or 0) >= limits.cpu_seconds() - 1:
            result.update(status="timeout", phase=last_phase, message=f"CPU limit of {limits.cpu_seconds()} s reached")
        else:
            result.update(
                status="crashed", phase=last_phase, message=f"killed by {signal.Signals(sig).name} during {last_phase}"
            )
    else:
        code = os.WEXITSTATUS(status) if isinstance(status, int) else "unknown"
        result.update(
            status="crashed",
            phase=last_phase,
            message=f"exited with status {code} during {last_phase} before reporting a result",
        )
    if result["status"] == "passed":
        result["phase"] = ""
    return {"result": result, "log": log, "sandbox": sandbox}


class OutputsTooLarge(ValueError):
    """A child's outputs that would cost the fork server more memory than comparing is worth."""


def _load(final: dict):
    """The child's outputs, read as data only; OutputsTooLarge if they are too big to compare."""
    import torch
    from torch.utils._pytree import tree_leaves

    if "payload" not in final:
        return None
    raw = base64.b64decode(final["payload"], validate=True)
    if len(raw) > child.MAX_OUTPUT_BYTES:
        raise OutputsTooLarge(f"outputs file of {len(raw)} bytes is over the limit")
    # Data only: the child is untrusted, never unpickle arbitrary objects from it.
    payload = torch.load(io.BytesIO(raw), weights_only=True)
    if not isinstance(payload, dict) or not isinstance(payload.get("outputs"), list):
        raise ValueError("outputs are not in the expected form")
    leaves = tree_leaves(payload)
    elements = sum(leaf.numel() for leaf in leaves if isinstance(leaf, torch.Tensor))
    if len(leaves) > MAX_COMPARE_LEAVES or elements > MAX_COMPARE_ELEMENTS:
        # e.g. a stride-0 view of one element claiming billions: comparing would materialize it.
        raise OutputsTooLarge(f"outputs of {elements} elements in {len(leaves)} values are over the comparison limit")
    return payload


def _compare(spec: dict, final: dict, result: dict) -> None:
    """Store eager's outputs as the reference, or compare this mode's outputs with it (sets status diverged)."""
    try:
        payload = _load(final)
    except OutputsTooLarge as exc:
        result["message"] = f"outputs too large to compare ({exc}); not compared"
        return
    except Exception as exc:  # noqa: BLE001 - an unreadable payload is the repro's doing
        result["message"] = f"outputs could not be read back ({type(exc).__name__}); not compared"
        return
    if payload is None:  # e.g. outputs over MAX_OUTPUT_BYTES: the mode passed, uncompared
        result["message"] = final.get("payload_note") or "no outputs to compare"
        return
    if spec["mode"] == "eager":
        if not spec.get("overrides"):
            _refs[spec["key"]] = payload
        return
    ref = _refs.get(spec["key"])
    if ref is None:
        result["message"] = "no eager reference to compare with"
        return
    tol = payload.get("tol")
    differed, problem = compare_all(ref, payload, float(tol) if isinstance(tol, (int, float)) else 1e-4)
    if problem:
        result.update(status="diverged", phase="compare", message=problem[:2000], differed=differed)


def serve(expected_parent: int = 0) -> None:
    """Answer requests until stdin closes. Requests: run, forget, ping.

    Refuses to start (a {"ready": false, "error"} hello) where the sandbox cannot be
    built; dies with the process that started it (expected_parent).
    """
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints (torch warnings) must not corrupt the protocol
    global _uid, _uid_lock
    try:
        require_root()
        die_with_parent(expected_parent)
        _uid, _uid_lock = claim_uid()
    except SandboxError as exc:
        proto.write(json.dumps({"ready": False, "error": str(exc)}) + "\n")
        return
    RunCgroup.sweep_stale()
    version = _warm_imports()
    # Whether a cuda probe can run: checked without initializing CUDA, which must not happen before fork.
    cuda = os.path.exists("/dev/nvidiactl")
    proto.write(json.dumps({"ready": True, "torch": version, "pid": os.getpid(), "uid": _uid, "cuda": cuda}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        op = request.get("op")
        try:
            if op == "run":
                reply = run_mode(request["spec"], Limits(**request.get("limits", {})))
            elif op == "forget":
                _refs.pop(request["key"], None)
                reply = {"ok": True}
            else:
                reply = {"ok": True, "torch": version}
        except Exception as exc:  # noqa: BLE001 - one bad run must not take the server down
            reply = {
                "infra_error": f"the fork server failed on this run: {type(exc).__name__}: {str(exc)[:300]}",
                "sandbox": {},
                "log": "",
            }
        proto.write(json.dumps(reply) + "\n")
