"""Process isolation for untrusted repro code (pure Python, Linux; no Django).

A repro runs as the grandchild G of the fork server:

    fork server (trusted, scrubbed env, torch imported)
      └─ C  (root, forked)   unshare(net, mount, pid, ipc, uts); masks host dirs
           └─ G  (pid 1 of its pid namespace)  mounts /proc, rlimits, uid 65534, no_new_privs

Killing G from the fork server tears down the whole pid namespace, so a repro
that double-forks or calls setsid() cannot outlive its run. Every step degrades
when the OS refuses it, and `SandboxReport` says what was actually in force:
the run's `sandbox_report` is built from it, never from what we hoped for.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
from dataclasses import asdict, dataclass, field

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
PR_SET_NO_NEW_PRIVS = 38
NOBODY = 65534

# Where the repro works. Inside the mount namespace it is a fresh tmpfs over /tmp,
# so "write outside the temp dir" lands in memory that vanishes with the run.
SANDBOX_TMP = "/tmp"
WORKDIR = "/tmp/work"
# World-writable host dirs hidden behind a private tmpfs.
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")

# The only host variables a repro sees; secrets never pass, whatever their name.
ENV_ALLOWLIST = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")

_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class Limits:
    """Per-mode resource limits. disk_mb sizes the private tmpfs that is the repro's only writable place;
    shm_mb its /dev/shm, where torch.multiprocessing and DataLoader workers share tensors."""

    timeout_s: float = 120.0
    cpu_s: int = 0  # 0: twice the wall-clock timeout
    memory_mb: int = 6144
    fsize_mb: int = 256
    disk_mb: int = 1024
    shm_mb: int = 64
    nofile: int = 1024
    nproc: int = 256
    output_bytes: int = 64 * 1024

    def cpu_seconds(self) -> int:
        return self.cpu_s or max(10, int(self.timeout_s * 2))


@dataclass
class SandboxReport:
    """What isolation was in force for one child, as measured in that child."""

    netns: bool = False
    pidns: bool = False
    mountns: bool = False
    private_tmp: bool = False
    masked: list[str] = field(default_factory=list)
    proc_remounted: bool = False
    uid: int = -1
    no_new_privs: bool = False
    rlimits: dict[str, int] = field(default_factory=dict)
    env_keys: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def scrubbed_env(base_dir: str, host_env: dict[str, str] | None = None) -> dict[str, str]:
    """The fork server's whole environment: an allowlist of host variables plus hermetic compile settings.

    Returns a new dict; TORCH_*/TORCHINDUCTOR_*/PYTHON* from the host never pass
    (they could redirect compiles or load code), nor does anything else.
    """
    host_env = os.environ if host_env is None else host_env
    env = {key: host_env[key] for key in ENV_ALLOWLIST if key in host_env}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        HOME=base_dir,
        TMPDIR=base_dir,
        PYTHONNOUSERSITE="1",
        PYTHONHASHSEED="0",
        PYTHONDONTWRITEBYTECODE="1",
        OMP_NUM_THREADS="1",
        TORCHINDUCTOR_CACHE_DIR=os.path.join(base_dir, "inductor"),
        # Their keys miss monkeypatched lowerings/decompositions/fake kernels: a repro
        # could replay another one's artifact (or plant one), so they stay off.
        TORCHINDUCTOR_FX_GRAPH_CACHE="0",
        TORCHINDUCTOR_AUTOGRAD_CACHE="0",
        TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS="0",
        TORCHINDUCTOR_COMPILE_THREADS="1",
    )
    return env


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def enter_namespaces(report: SandboxReport, *, hide: list[str], keep: list[str], disk_mb: int, shm_mb: int) -> None:
    """In C (a forked child, before forking G): new net/mount/pid/ipc/uts namespaces and a private filesystem view.

    hide: host dirs covered with an empty tmpfs (e.g. root's home, the project);
    keep: dirs under them re-bound read-only so Python and torch stay importable.
    Fills report; never raises for a refused step.
    """
    if os.geteuid() != 0:
        report.notes.append("not root: no namespaces, no uid drop; rlimits and env scrub only")
        return
    try:
        _check(_libc.unshare(CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    except OSError as exc:
        report.notes.append(f"namespaces refused ({exc}); network is NOT isolated")
        return
    report.netns = report.pidns = report.mountns = True
    try:
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        # Open the dirs to keep before hiding their parents: /proc/self/fd/N still reaches them.
        fds = [(path, os.open(path, os.O_PATH)) for path in keep if os.path.isdir(path)]
        for path in hide:
            if not os.path.isdir(path):
                continue
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m")
            report.masked.append(path)
        covered = list(report.masked)
        for path in SCRATCH_DIRS:
            if os.path.isdir(path):
                size = {SANDBOX_TMP: f"size={disk_mb}m", "/dev/shm": f"size={shm_mb}m"}.get(path, "size=1m")
                _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,{size}")
                covered.append(path)
        # After every tmpfs is in place: a checkout (and its venv) may itself live under /tmp.
        for path, fd in fds:
            if any(path == c or path.startswith(c.rstrip("/") + "/") for c in covered):
                os.makedirs(path, mode=0o755, exist_ok=True)
                _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
                _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
            os.close(fd)
        os.makedirs(WORKDIR, mode=0o700)
        os.chown(WORKDIR, NOBODY, NOBODY)
        report.private_tmp = True
    except OSError as exc:
        report.notes.append(f"filesystem masking incomplete: {exc}")


def become_pid1_sandbox(report: SandboxReport, limits: Limits, device: str = "cpu") -> str:
    """In G: /proc for the new pid namespace, a new session, rlimits, then drop to nobody with no_new_privs.

    Returns the directory the repro must use as HOME/cwd/TMPDIR.
    """
    os.setsid()  # a repro's killpg(0) then only reaches its own group
    if report.pidns:
        try:
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            report.proc_remounted = True
        except OSError as exc:
            report.notes.append(f"/proc not remounted: {exc}")
    workdir = WORKDIR if report.private_tmp else os.environ.get("TMPDIR", "/tmp")
    mb = 1024 * 1024
    wanted = {
        "RLIMIT_CPU": (limits.cpu_seconds(), limits.cpu_seconds() + 5),
        "RLIMIT_AS": (limits.memory_mb * mb,) * 2,
        "RLIMIT_FSIZE": (limits.fsize_mb * mb,) * 2,
        "RLIMIT_NOFILE": (limits.nofile,) * 2,
        "RLIMIT_NPROC": (limits.nproc,) * 2,
        "RLIMIT_CORE": (0, 0),
    }
    if device == "cuda":
        # The CUDA driver reserves far more virtual address space than it uses: an AS
        # limit makes CUDA initialization itself fail, so GPU runs go without one.
        del wanted["RLIMIT_AS"]
        report.notes.append("RLIMIT_AS not set on cuda (the driver reserves large virtual ranges)")
    for name, (soft, hard) in wanted.items():
        try:
            resource.setrlimit(getattr(resource, name), (soft, hard))
            report.rlimits[name] = soft
        except (ValueError, OSError) as exc:
            report.notes.append(f"{name} not set: {exc}")
    if os.geteuid() == 0:
        try:
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
        except OSError as exc:
            report.notes.append(f"uid drop refused ({exc}): running as root, RLIMIT_NPROC not enforced")
    report.uid = os.getuid()
    try:
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl")
        report.no_new_privs = True
    except OSError as exc:
        report.notes.append(f"no_new_privs refused: {exc}")
    # Python ignores SIGXFSZ already; make a runaway file write an EFBIG error, not a kill.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return workdir


def kill_tree(pid: int) -> None:
    """SIGKILL G and its group. When G is pid 1 of its namespace this reaps every descendant."""
    for kill in (os.kill, os.killpg):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
