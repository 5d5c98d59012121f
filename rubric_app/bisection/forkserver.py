"""The fork server: a long-lived process that imported torch once and forks one sandboxed child per mode.

It is started by `harness.ForkServer` as a fresh interpreter with a scrubbed
environment (never forked from a Celery worker, whose memory holds the
database URL and the GitHub token). Protocol: one JSON request per line on
stdin, one JSON reply per line on the original stdout; the server itself
writes nothing else there.

It also compares each mode's outputs with the eager reference, so torch stays
out of the web and worker processes.
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
from .compare import compare_outputs
from .sandbox import Limits, SandboxReport, become_pid1_sandbox, enter_namespaces, kill_tree

_refs: dict[str, dict] = {}


def _warm_imports() -> str:
    """Import what every mode needs, so a fork costs milliseconds; returns the torch version.

    Nothing here compiles or starts a thread pool: forking after OpenMP or a
    compile worker pool started would hand the child a broken copy.
    """
    import torch
    import torch._dynamo
    import torch._dynamo.backends.debugging  # noqa: F401 - registers aot_eager* backends
    import torch._functorch.aot_autograd  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401
    import torch._inductor.decomposition  # noqa: F401
    import torch._inductor.lowering  # noqa: F401
    import torch._dynamo.utils  # noqa: F401
    import torch._inductor.codecache  # noqa: F401
    import torch._inductor.codegen.cpp  # noqa: F401
    import torch._inductor.codegen.cpp_wrapper_cpu  # noqa: F401
    import torch._inductor.cpp_builder  # noqa: F401
    import torch._inductor.graph  # noqa: F401
    import torch._inductor.scheduler  # noqa: F401
    from torch._inductor import cpu_vec_isa

    # The g++ ISA probes are cached per process: probing once here (trusted code, the
    # server's own cache dir) saves every child's inductor mode several compiles.
    cpu_vec_isa.pick_vec_isa()
    return torch.__version__


def _hidden_and_kept() -> tuple[list[str], list[str]]:
    """Host dirs to hide from the repro, and the interpreter/torch dirs to keep visible inside them."""
    project = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(child.__file__))))
    hide = [p for p in (os.path.expanduser("~root"), "/home", project) if os.path.isdir(p)]
    keep = {sys.base_prefix, sys.prefix, *site.getsitepackages()}
    return hide, sorted(keep)


def _run_child(spec: dict, limits: Limits, res_w: int, out_w: int, ctl_w: int) -> None:
    """Body of C: enter namespaces, fork G (the repro), relay G's pid and exit status on ctl_w."""
    report = SandboxReport()
    hide, keep = _hidden_and_kept()
    enter_namespaces(report, hide=hide, keep=keep, disk_mb=limits.disk_mb, shm_mb=limits.shm_mb)
    g = os.fork()
    if g == 0:
        try:
            os.close(ctl_w)
            devnull = os.open("/dev/null", os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(out_w, 1)
            os.dup2(out_w, 2)
            os.dup2(res_w, 3)
            os.closerange(4, 65536)  # the protocol pipes and anything else the server held
            workdir = become_pid1_sandbox(report, limits, spec["device"])
            os.chdir(workdir)
            report.env_keys = sorted(os.environ)
            child._res_fd = 3
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
    info = {"status": status, "maxrss_mb": round(usage.ru_maxrss / 1024, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2)}
    os.write(ctl_w, (json.dumps(info) + "\n").encode())


def run_mode(spec: dict, limits: Limits) -> dict:
    """Run one mode of one repro in a fresh sandboxed child; return {"result", "log", "sandbox"}."""
    out_r, out_w = os.pipe()
    res_r, res_w = os.pipe()
    ctl_r, ctl_w = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            for fd in (out_r, res_r, ctl_r):
                os.close(fd)
            _run_child(spec, limits, res_w, out_w, ctl_w)
        finally:
            os._exit(0)
    for fd in (out_w, res_w, ctl_w):
        os.close(fd)
    out, res, ctl, timed_out = _drain(pid, out_r, res_r, ctl_r, limits, deadline=started + limits.timeout_s)
    _reap(pid)
    wall = round(time.monotonic() - started, 2)
    log = out.decode("utf-8", "replace") + ("\n[output truncated]" if len(out) >= limits.output_bytes else "")
    return _outcome(spec, limits, res, ctl, timed_out, wall, log)


def _drain(pid: int, out_r: int, res_r: int, ctl_r: int, limits: Limits, deadline: float):
    """Read the child's pipes (capped) until they close or the wall clock runs out; return
    (output, result events, control lines, timed_out). On timeout the sandbox is killed."""
    buffers = {out_r: bytearray(), res_r: bytearray(), ctl_r: bytearray()}
    caps = {out_r: limits.output_bytes, res_r: 64 * 1024 * 1024, ctl_r: 4096}
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
            # Keep reading past the cap (a blocked writer would hang the run), keep nothing more.
            buffers[key.fd] += data[: max(0, caps[key.fd] - len(buffers[key.fd]))]
            if key.fd == ctl_r and g_pid is None and b"\n" in buffers[ctl_r]:
                g_pid = json.loads(buffers[ctl_r].split(b"\n", 1)[0])["pid"]
    selector.close()
    for fd in buffers:
        os.close(fd)
    reaped = b'"status"' in buffers[ctl_r]
    if g_pid is not None and not reaped:
        kill_tree(g_pid)
    elif g_pid is not None and b'"pidns": true' not in buffers[res_r]:
        # No pid namespace: sweep escapees still in G's group (the group id outlives G while used).
        try:
            os.killpg(g_pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return bytes(buffers[out_r]), bytes(buffers[res_r]), bytes(buffers[ctl_r]), timed_out


def _reap(pid: int) -> None:
    """Wait for C, killing it if it outlived G (it only waits for G, so that means G is stuck unkillable)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _outcome(spec: dict, limits: Limits, res: bytes, ctl: bytes, timed_out: bool, wall: float, log: str) -> dict:
    events = []
    for line in res.decode("utf-8", "replace").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue  # a repro may scribble on fd 3; only well-formed events count
    ctl_lines = [json.loads(line) for line in ctl.decode().splitlines() if line.strip()]
    info = next((c for c in ctl_lines if "status" in c), {})
    phases = [e["phase"] for e in events if e.get("event") == "phase"]
    last_phase = phases[-1] if phases else "setup"
    sandbox = next((e["report"] for e in events if e.get("event") == "sandbox"), {})
    final = next((e for e in reversed(events) if e.get("event") == "result"), None)
    result = {"mode": spec["mode"], "status": "", "phase": "", "exception": "", "message": "", "wall_s": wall,
              "maxrss_mb": info.get("maxrss_mb"), "cpu_s": info.get("cpu_s"), "probes": {}}
    status = info.get("status")
    if final is not None and not timed_out:
        result.update(status=final["status"], phase=final["phase"], exception=final["exception"],
                      message=final["message"], traceback=final.get("traceback", ""))
        if final.get("narrowed") is not None:
            result["narrowed"] = final["narrowed"]
        elif final["status"] == "passed":
            _compare(spec, final, result)
    elif timed_out:
        result.update(status="timeout", phase=last_phase, message=f"no result within {limits.timeout_s:g} s wall clock; the whole sandbox was killed")
    elif status is not None and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig in (signal.SIGXCPU, signal.SIGKILL) and (info.get("cpu_s") or 0) >= limits.cpu_seconds() - 1:
            result.update(status="timeout", phase=last_phase, message=f"CPU limit of {limits.cpu_seconds()} s reached")
        else:
            result.update(status="crashed", phase=last_phase, message=f"killed by {signal.Signals(sig).name} during {last_phase}")
    else:
        code = os.WEXITSTATUS(status) if status is not None else "unknown"
        result.update(status="crashed", phase=last_phase, message=f"exited with status {code} during {last_phase} before reporting a result")
    if result["status"] == "passed":
        result["phase"] = ""
    return {"result": result, "log": log, "sandbox": sandbox}


def _load(final: dict):
    import torch

    if "payload" not in final:
        return None
    # Data only: the child is untrusted, never unpickle arbitrary objects from it.
    return torch.load(io.BytesIO(base64.b64decode(final["payload"])), weights_only=True)


def _compare(spec: dict, final: dict, result: dict) -> None:
    """Store eager's outputs as the reference, or compare this mode's outputs with it (sets status diverged)."""
    try:
        payload = _load(final)
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
    problem = compare_outputs(ref, payload, payload.get("tol") or 1e-4)
    if problem:
        result.update(status="diverged", phase="compare", message=problem)


def serve() -> None:
    """Answer requests until stdin closes. Requests: run, forget, ping."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints (torch warnings) must not corrupt the protocol
    version = _warm_imports()
    hide, keep = _hidden_and_kept()
    # Whether a cuda probe can run: checked without initializing CUDA, which must not happen before fork.
    cuda = os.path.exists("/dev/nvidiactl")
    proto.write(json.dumps({"ready": True, "torch": version, "pid": os.getpid(), "hide": hide, "cuda": cuda}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        op = request.get("op")
        if op == "run":
            reply = run_mode(request["spec"], Limits(**request.get("limits", {})))
        elif op == "forget":
            _refs.pop(request["key"], None)
            reply = {"ok": True}
        else:
            reply = {"ok": True, "torch": version}
        proto.write(json.dumps(reply) + "\n")
