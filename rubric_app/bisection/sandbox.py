"""Process isolation for untrusted repro code (pure Python, Linux; no Django).

A repro runs as the grandchild G of the fork server, inside a per-run cgroup:

    fork server (root, trusted, scrubbed env, torch imported; dies with its worker)
      └─ C  (root, forked, dies with the server)  joins the run's cgroup; unshare(net, mount, pid, ipc, uts);
           │  pivots into a fresh tmpfs root holding only an allow-list of read-only paths
           └─ G  (pid 1 of its pid namespace, dies with C)  mounts /proc, rlimits,
                 drops to the server's own uid (one per concurrent run), no_new_privs

No isolation, no run: every step that the OS refuses raises `SandboxError`
and the repro never starts (a worker that is not root is refused outright).
Killing G tears down its whole pid namespace, so a repro that double-forks
or calls setsid() cannot outlive its run; the parent-death signals make that
hold when the worker itself is killed. `SandboxReport` says what was in force,
measured where it applies, and becomes the run's `sandbox_report`.
"""

from __future__ import annotations

import ctypes
import fcntl
import glob
import os
import resource
import signal
import time
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
MNT_DETACH = 2
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}

# Each fork server runs one sandbox at a time under a uid of its own from this range, so
# RLIMIT_NPROC is a per-run budget: a repro holding its processes cannot starve another run.
UID_BASE = 1_900_000_000
UID_SLOTS = 1024
UID_LOCK_DIR = "/run/rubric-bisect-uids"

# Where the repro works: a private tmpfs of Limits.disk_mb, inside the run's memory budget.
SANDBOX_TMP = "/tmp"
WORKDIR = "/tmp/work"

# The filesystem the repro sees, all read-only: the toolchain (Inductor runs gcc on CPU),
# the Python install (added by the caller), and a few /etc files the loader needs.
# Nothing else of the host: no /run, /var, /home, /root, no host socket.
SYSTEM_DIRS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/alternatives",
    "/etc/ld.so.conf.d",
    "/sys/devices/system/cpu",
)
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/localtime")
DEVICES = ("null", "zero", "full", "random", "urandom")
# GPU runs also need the driver's device nodes and the PCI tree it walks.
CUDA_DIRS = ("/sys/bus", "/sys/devices", "/sys/class", "/sys/module")
CUDA_DEVICE_GLOB = "/dev/nvidia*"

# The only host variables a repro sees; secrets never pass, whatever their name.
ENV_ALLOWLIST = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")

_libc = ctypes.CDLL(None, use_errno=True)


class SandboxError(RuntimeError):
    """A step of the isolation could not be put in force: the repro must not run."""


NOT_ROOT = (
    "the bisection sandbox needs root (namespaces, a read-only root, a per-run uid and cgroup); "
    "this process runs as uid {uid}: refusing to run untrusted repro code without isolation"
)


def require_root() -> None:
    """Raise SandboxError unless this process can build the sandbox (no isolation, no run)."""
    if os.geteuid() != 0:
        raise SandboxError(NOT_ROOT.format(uid=os.geteuid()))


@dataclass
class Limits:
    """Per-mode resource limits. memory_mb caps the whole run (its cgroup: every process and its
    tmpfs pages) and each process's address space; disk_mb sizes the private /tmp, shm_mb its
    /dev/shm, both counted inside memory_mb (see within_budget)."""

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

    def within_budget(self) -> Limits:
        """A copy whose tmpfs sizes fit in half the memory budget (tmpfs is RAM), shm first."""
        half = max(2, self.memory_mb // 2)
        shm = max(1, min(self.shm_mb, half // 4))
        disk = max(1, min(self.disk_mb, half - shm))
        return Limits(**{**asdict(self), "shm_mb": shm, "disk_mb": disk})


@dataclass
class SandboxReport:
    """What isolation was in force for one child, as measured in that child (and its cgroup)."""

    netns: bool = False
    pidns: bool = False
    mountns: bool = False
    root: str = ""
    visible: list[str] = field(default_factory=list)
    private_tmp: bool = False
    proc_remounted: bool = False
    uid: int = -1
    no_new_privs: bool = False
    pdeathsig: bool = False
    cgroup: dict = field(default_factory=dict)
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
        raise SandboxError(f"{what}: {os.strerror(err)}")


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


def die_with_parent(expected_parent: int) -> None:
    """SIGKILL this process when its parent dies; exits at once if the parent is already gone.

    The kernel clears this setting on fork and on any uid change, so each level sets it itself.
    """
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if expected_parent and os.getppid() != expected_parent:
        os._exit(1)  # the parent died before the signal was armed


# ---------------------------------------------------------------- per-run uid


def claim_uid(lock_dir: str = UID_LOCK_DIR) -> tuple[int, int]:
    """Claim a sandbox uid for this process's lifetime: returns (uid, fd of the held lock).

    A lock per slot in a root-only directory; the kernel drops it when the process dies, so a
    crashed server frees its uid. Leftover processes of the uid (none should exist) are killed.
    Raises SandboxError when every slot is taken or the directory is not root's.
    """
    os.makedirs(lock_dir, mode=0o700, exist_ok=True)
    info = os.stat(lock_dir)
    if info.st_uid != 0 or info.st_mode & 0o022:
        raise SandboxError(f"{lock_dir} must be owned by root and not writable by others")
    for slot in range(UID_SLOTS):
        fd = os.open(os.path.join(lock_dir, str(slot)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        uid = UID_BASE + slot
        kill_uid(uid)
        return uid, fd
    raise SandboxError(f"all {UID_SLOTS} sandbox uids are in use")


def kill_uid(uid: int) -> None:
    """SIGKILL every process whose real uid is uid."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as fh:
                if any(line.startswith("Uid:") and int(line.split()[1]) == uid for line in fh):
                    os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            continue


# ---------------------------------------------------------------- cgroup


def _cgroup_mounts() -> tuple[str | None, dict[str, str]]:
    """(cgroup v2 mount point or None, {v1 controller: its mount point})."""
    v2, v1 = None, {}
    with open("/proc/self/mounts") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) < 4:
                continue
            if parts[2] == "cgroup2":
                v2 = parts[1]
            elif parts[2] == "cgroup":
                for option in parts[3].split(","):
                    if option in ("memory", "pids"):
                        v1[option] = parts[1]
    return v2, v1


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and "" for v2."""
    paths = {}
    with open("/proc/self/cgroup") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                paths[controller] = path
    return paths


class RunCgroup:
    """One mode's cgroup: a memory cap over every process of the run and its tmpfs pages, and a pids cap.

    cgroup v2 where its memory controller is delegated to us, else v1's memory and
    pids hierarchies. Created by the fork server, joined by C before it forks G.
    """

    def __init__(self, name: str):
        self.name = name
        self.dirs: list[str] = []
        self.memory_dir = ""
        self.version = ""
        self.report: dict = {}

    @classmethod
    def create(cls, name: str, limits: Limits) -> RunCgroup:
        """Create and configure it; what could not be put in force is in .report["notes"]."""
        group = cls(name)
        memory = limits.memory_mb * 1024 * 1024
        notes: list[str] = []
        v2, v1 = _cgroup_mounts()
        own = _own_cgroups()
        v2_parent = os.path.join(v2, own.get("", "/").lstrip("/")) if v2 else ""
        if v2 and "memory" in _read(os.path.join(v2_parent, "cgroup.subtree_control")).split():
            path = os.path.join(v2_parent, name)
            try:
                os.mkdir(path)
                group.dirs, group.memory_dir, group.version = [path], path, "v2"
                _write(os.path.join(path, "memory.max"), str(memory))
                _write(os.path.join(path, "memory.swap.max"), "0", required=False)
                if "pids" in _read(os.path.join(path, "cgroup.controllers")).split():
                    _write(os.path.join(path, "pids.max"), str(limits.nproc))
                    group.report["pids_max"] = limits.nproc
                group.report["memory_max_mb"] = limits.memory_mb
            except OSError as exc:
                notes.append(f"cgroup v2 refused: {exc}")
        elif v1:
            group.version = "v1"
            for controller in ("memory", "pids"):
                if controller not in v1:
                    notes.append(f"no cgroup v1 {controller} hierarchy")
                    continue
                path = os.path.join(v1[controller], own.get(controller, "/").lstrip("/"), name)
                try:
                    os.mkdir(path)
                    group.dirs.append(path)
                    if controller == "memory":
                        _write(os.path.join(path, "memory.limit_in_bytes"), str(memory))
                        _write(os.path.join(path, "memory.memsw.limit_in_bytes"), str(memory), required=False)
                        group.memory_dir = path
                        group.report["memory_max_mb"] = limits.memory_mb
                    else:
                        _write(os.path.join(path, "pids.max"), str(limits.nproc))
                        group.report["pids_max"] = limits.nproc
                except OSError as exc:
                    notes.append(f"cgroup v1 {controller} refused: {exc}")
        else:
            notes.append("no cgroup hierarchy with a memory controller is mounted")
        group.report.update(version=group.version, notes=notes)
        return group

    @staticmethod
    def sweep_stale(prefix: str = "rubric-bisect-") -> int:
        """Remove the run cgroups of fork servers that died mid-run (named prefix<pid>-<n>); return how many."""
        v2, v1 = _cgroup_mounts()
        own = _own_cgroups()
        parents = [os.path.join(v2, own.get("", "/").lstrip("/"))] if v2 else []
        parents += [os.path.join(mount, own.get(c, "/").lstrip("/")) for c, mount in v1.items()]
        removed = 0
        for parent in parents:
            try:
                names = [n for n in os.listdir(parent) if n.startswith(prefix)]
            except OSError:
                continue
            for name in names:
                owner = name[len(prefix) :].split("-")[0]
                if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
                    group = RunCgroup(name)
                    group.dirs = [os.path.join(parent, name)]
                    group.destroy()
                    removed += 1
        return removed

    def join(self) -> None:
        """Move the calling process (C, before it forks G) into every hierarchy of this cgroup."""
        for path in self.dirs:
            try:
                _write(os.path.join(path, "cgroup.procs"), str(os.getpid()))
            except OSError as exc:
                raise SandboxError(f"could not join the run's cgroup {path}: {exc}") from None

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of this run for exceeding memory_max."""
        if not self.memory_dir:
            return False
        name = "memory.events" if self.version == "v2" else "memory.oom_control"
        for line in _read(os.path.join(self.memory_dir, name)).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit() and int(value) > 0:
                return True
        return False

    def destroy(self) -> None:
        """Kill whatever is left in it and remove it."""
        for _ in range(50):
            pids = set()
            for path in self.dirs:
                pids.update(int(p) for p in _read(os.path.join(path, "cgroup.procs")).split() if p.isdigit())
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            remaining = [path for path in self.dirs if not _rmdir(path)]
            if not remaining:
                break
            self.dirs = remaining
            time.sleep(0.05)


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def _write(path: str, value: str, required: bool = True) -> None:
    try:
        with open(path, "w") as fh:
            fh.write(value)
    except OSError:
        if required:
            raise


def _rmdir(path: str) -> bool:
    try:
        os.rmdir(path)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


# ---------------------------------------------------------------- filesystem


def _bind(fd_path: str, target: str, flags: int) -> None:
    _mount(fd_path, target, None, MS_BIND | MS_REC)
    _mount(None, target, None, MS_REMOUNT | MS_BIND | flags)


def enter_namespaces(
    report: SandboxReport, *, visible: list[str], uid: int, disk_mb: int, shm_mb: int, device: str = "cpu"
) -> None:
    """In C (a forked child, before forking G): new net/mount/pid/ipc/uts namespaces, then a new root.

    The root is a fresh tmpfs holding only `visible` (the Python install), SYSTEM_DIRS
    and SYSTEM_FILES bound read-only, a few device nodes, a /tmp of disk_mb (with the
    repro's workdir, owned by uid) and a /dev/shm of shm_mb. Raises SandboxError when
    the OS refuses any step: the caller must not run the repro then.
    """
    require_root()
    _check(_libc.unshare(CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    report.netns = report.pidns = report.mountns = True
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    # Open every source before anything is covered: /proc/self/fd/N still reaches it afterwards
    # (a checkout and its venv may live under /tmp, which the new root is mounted on).
    dirs = list(SYSTEM_DIRS) + (list(CUDA_DIRS) if device == "cuda" else [])
    binds: list[tuple[str, int, bool]] = []  # (target, O_PATH fd, is a directory)
    links: list[tuple[str, str]] = []
    wanted: dict[str, str] = {}  # target -> real source; a venv is seen by its own path and its real one
    for path in dirs + list(visible):
        if os.path.islink(path) and os.path.dirname(path) == "/":
            links.append((path, os.readlink(path)))  # /lib -> usr/lib on merged-/usr systems
            continue
        real = os.path.realpath(path)
        if os.path.isdir(real):
            wanted.setdefault(os.path.abspath(path), real)
            wanted.setdefault(real, real)
    for target in sorted(wanted):
        if not any(target.startswith(other.rstrip("/") + "/") for other, _, _ in binds):
            binds.append((target, os.open(wanted[target], os.O_PATH | os.O_CLOEXEC), True))
    for path in SYSTEM_FILES:
        if os.path.isfile(path):
            binds.append((path, os.open(path, os.O_PATH | os.O_CLOEXEC), False))
    devices = [f"/dev/{name}" for name in DEVICES]
    if device == "cuda":
        devices += sorted(glob.glob(CUDA_DEVICE_GLOB))
    device_fds = [(path, os.open(path, os.O_PATH | os.O_CLOEXEC)) for path in devices if os.path.exists(path)]

    new_root = SANDBOX_TMP
    _mount("tmpfs", new_root, "tmpfs", MS_NOSUID, "mode=755,size=4m")
    # The repro's /tmp first: a checkout and its venv under /tmp are then bound inside it, not hidden by it.
    os.makedirs(new_root + SANDBOX_TMP)
    _mount("tmpfs", new_root + SANDBOX_TMP, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={disk_mb}m")
    for target, fd, is_dir in binds:
        where = new_root + target
        if is_dir:
            os.makedirs(where, mode=0o755, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(where), mode=0o755, exist_ok=True)
            open(where, "w").close()
        _bind(f"/proc/self/fd/{fd}", where, MS_RDONLY | MS_NOSUID | MS_NODEV)
        os.close(fd)
        report.visible.append(target)
    for path, target in links:
        if not os.path.lexists(new_root + path):
            os.symlink(target, new_root + path)
    os.makedirs(new_root + "/dev", mode=0o755)
    for path, fd in device_fds:
        if os.path.isdir(path):  # e.g. /dev/nvidia-caps
            os.makedirs(new_root + path, mode=0o755)
        else:
            open(new_root + path, "w").close()
        _bind(f"/proc/self/fd/{fd}", new_root + path, MS_NOSUID | MS_NOEXEC)
        os.close(fd)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"{new_root}/dev/{name}")
    os.makedirs(new_root + "/dev/shm")
    _mount("tmpfs", new_root + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={shm_mb}m")
    os.makedirs(new_root + "/proc")
    os.makedirs(new_root + WORKDIR, mode=0o700)
    os.chown(new_root + WORKDIR, uid, uid)
    os.makedirs(new_root + "/etc", exist_ok=True)
    # Only who the repro is: getpass.getuser() (Inductor's default cache dir) needs an entry.
    with open(new_root + "/etc/passwd", "w") as fh:
        fh.write(
            f"root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{uid}:{uid}:sandbox:{WORKDIR}:/usr/sbin/nologin\n"
        )
    with open(new_root + "/etc/group", "w") as fh:
        fh.write(f"root:x:0:\nsandbox:x:{uid}:\n")

    os.chdir(new_root)
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise SandboxError(f"pivot_root: unknown syscall number on {os.uname().machine}")
    _check(_libc.syscall(number, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "umount the host root")
    os.chdir("/")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)
    report.root = "fresh tmpfs (read-only) with a read-only allow-list; host root detached"
    report.private_tmp = True


def become_pid1_sandbox(report: SandboxReport, limits: Limits, uid: int, device: str = "cpu") -> str:
    """In G: /proc for the new pid namespace, a new session, rlimits, drop to uid with no_new_privs,
    die with C. Returns the directory the repro must use as HOME/cwd/TMPDIR.

    Raises SandboxError when any of it is refused.
    """
    os.setsid()  # a repro's killpg(0) then only reaches its own group
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    report.proc_remounted = True
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
        # limit makes CUDA initialization itself fail, so GPU runs rely on the cgroup.
        del wanted["RLIMIT_AS"]
        report.notes.append("RLIMIT_AS not set on cuda (the driver reserves large virtual ranges)")
    for name, (soft, hard) in wanted.items():
        try:
            resource.setrlimit(getattr(resource, name), (soft, hard))
        except (ValueError, OSError) as exc:
            raise SandboxError(f"{name} refused: {exc}") from None
        report.rlimits[name] = soft
    try:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    except OSError as exc:
        raise SandboxError(f"uid drop refused: {exc}") from None
    report.uid = os.getuid()
    if report.uid == 0 or os.geteuid() == 0:
        raise SandboxError("still root after the uid drop")
    # After the uid change, which clears it: G (and so its pid namespace) dies with C.
    die_with_parent(0)
    report.pdeathsig = True
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    report.no_new_privs = True
    # Python ignores SIGXFSZ already; make a runaway file write an EFBIG error, not a kill.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return WORKDIR


def kill_tree(pid: int) -> None:
    """SIGKILL G and its group. G is pid 1 of its namespace, so this reaps every descendant."""
    for kill in (os.kill, os.killpg):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
