"""Attacks on the sandbox, each contained and reported, with the same fork server still serving afterwards.

Each attack is a module-style repro whose `fn` misbehaves; running the eager
mode alone is enough to exercise the sandbox (every mode gets the same one).
"""

from __future__ import annotations

import os
import socket
import textwrap
import uuid
from pathlib import Path

import pytest

from rubric_app.bisection import ForkServer, Limits, bisect
from tests.conftest import processes_with_cmdline

pytestmark = pytest.mark.torch
SECRET = "ghp_" + uuid.uuid4().hex  # unique per session, so finding it anywhere means it leaked
PROJECT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def server():
    """A fork server started by a process whose environment holds secrets, as a Celery worker's does."""
    saved = {k: os.environ.get(k) for k in ("GITHUB_TOKEN", "SECRET_KEY", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(GITHUB_TOKEN=SECRET, SECRET_KEY=SECRET, AWS_SECRET_ACCESS_KEY=SECRET)
    fork_server = ForkServer()
    try:
        fork_server.start()
        yield fork_server
    finally:
        fork_server.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def attack(server: ForkServer, body: str, **limits) -> tuple[dict, str, dict]:
    """Run `fn` (whose body is `body`) in eager mode; return (result, captured output, sandbox report)."""
    code = "import os, socket, subprocess, sys, time\nimport torch\n\n\ndef fn(x):\n" + textwrap.indent(
        textwrap.dedent(body), "    ") + "\n    return x\n\n\ndef make_inputs():\n    return (torch.ones(2),)\n"
    reply = server.run_mode(uuid.uuid4().hex, "eager", code, "module", "cpu", Limits(**{"timeout_s": 20, **limits}))
    return reply["result"], reply["log"], reply["sandbox"]


def fill(path: str) -> str:
    """Repro lines that write 1 MiB chunks to `path` until refused, then say how many got in.

    Indented as the attack bodies below are, so that attack() can dedent the two together."""
    return textwrap.indent(textwrap.dedent(f"""
        written = 0
        try:
            with open("{path}", "wb") as fh:
                while True:
                    fh.write(b"x" * 2**20)
                    fh.flush()
                    written += 1
        except OSError as exc:
            print("full after", written, "MiB:", exc.strerror)
    """), " " * 8)


def test_it_keeps_the_parents_secrets_out_of_reach(server):
    result, log, sandbox = attack(server, f"""
        found = [k for k, v in os.environ.items() if "{SECRET[:8]}" in v]
        for pid in os.listdir("/proc"):
            for name in ("environ", "cmdline"):
                try:
                    if b"{SECRET[:8]}" in open(f"/proc/{{pid}}/{{name}}", "rb").read():
                        found.append(pid)
                except OSError:
                    pass
        try:
            open("{PROJECT / 'triage_site' / 'settings.py'}").read()
            found.append("settings.py readable")
        except OSError as exc:
            print("project hidden:", type(exc).__name__)
        print("found:", found, "pids:", sorted(os.listdir("/proc"))[:3], "env:", sorted(os.environ))
    """)
    assert result["status"] == "passed"
    assert "found: []" in log and "project hidden: FileNotFoundError" in log
    assert SECRET not in log and SECRET not in str(result)
    assert not {"GITHUB_TOKEN", "SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL"} & set(sandbox["env_keys"])
    assert sandbox["proc_remounted"] and str(PROJECT) in sandbox["masked"]


def test_it_gives_the_repro_no_network(server):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    result, log, sandbox = attack(server, f"""
        for host, port in (("127.0.0.1", {port}), ("1.1.1.1", 443)):
            s = socket.socket()
            s.settimeout(2)
            print(host, "connect:", os.strerror(s.connect_ex((host, port))))
    """)
    assert result["status"] == "passed"
    assert "127.0.0.1 connect: Network is unreachable" in log
    assert "1.1.1.1 connect: Network is unreachable" in log
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing ever reached the host's loopback
    listener.close()
    assert sandbox["netns"] is True


def test_it_stops_a_fork_bomb(server):
    result, log, sandbox = attack(server, """
        children = 0
        try:
            while True:
                if os.fork() == 0:
                    time.sleep(600)
                    os._exit(0)
                children += 1
        except OSError as exc:
            print("fork refused after", children, "children:", type(exc).__name__)
    """, nproc=64)
    assert result["status"] == "passed"
    assert "fork refused after" in log
    assert sandbox["rlimits"]["RLIMIT_NPROC"] == 64 and sandbox["uid"] == 65534
    assert not _processes_of_uid(65534)  # the sleeping children died with the pid namespace


def test_it_turns_a_50_gb_allocation_into_an_oom_result(server):
    result, log, _ = attack(server, "torch.empty(50 * 2**30, dtype=torch.uint8).fill_(1)", memory_mb=4096)
    assert (result["status"], result["phase"]) == ("oom", "runtime")
    assert "can't allocate memory" in result["message"]


def test_it_confines_writes_to_a_small_private_tmp(server):
    marker = f"bisect-attack-{uuid.uuid4().hex}"
    result, log, sandbox = attack(server, f"""
        for path in ("/tmp/{marker}", "/var/tmp/{marker}", "{PROJECT}/{marker}", "/etc/{marker}", "/root/{marker}"):
            try:
                open(path, "w").write("pwned")
                print("wrote", path)
            except OSError as exc:
                print("refused", path, exc.strerror)
    """ + fill("fill"), disk_mb=32)
    assert result["status"] == "passed"
    assert "full after" in log and "No space left on device" in log
    for path in (Path("/tmp"), Path("/var/tmp"), PROJECT, Path("/etc"), Path("/root")):
        assert not (path / marker).exists(), path  # /tmp writes landed in the run's own tmpfs
    assert sandbox["private_tmp"] and sandbox["no_new_privs"]


def test_it_gives_shared_memory_room_for_torch_but_caps_it(server):
    # DataLoader workers and torch.multiprocessing share tensors through /dev/shm.
    result, log, _ = attack(server, """
        shared = torch.ones(2**20).share_memory_()  # 4 MiB
        print("shared", shared.is_shared(), int(shared.sum()))
    """ + fill("/dev/shm/fill"), shm_mb=16)
    assert result["status"] == "passed"
    assert f"shared True {2**20}" in log
    written = int(log.split("full after ")[1].split(" MiB")[0])
    assert 8 <= written <= 16 and "No space left on device" in log


def test_it_kills_a_repro_that_never_exits_with_its_escapees(server):
    result, log, _ = attack(server, """
        subprocess.Popen(["setsid", "sleep", "987654"])
        if os.fork() == 0:
            os.setsid()
            time.sleep(987654)
        while True:
            pass
    """, timeout_s=4)
    assert result["status"] == "timeout"
    assert not processes_with_cmdline(b"sleep\x00987654\x00")
    assert not _processes_of_uid(65534)


def test_it_survives_a_repro_that_kills_its_process_group(server):
    result, log, _ = attack(server, """
        import signal
        for target in (os.getppid(), 1, -1):
            try:
                os.kill(target, signal.SIGKILL)
            except OSError as exc:
                print("kill", target, exc.strerror)
        os.killpg(0, signal.SIGKILL)
    """)
    # As pid 1 of its own namespace the repro cannot even kill itself; nothing outside is reachable.
    assert result["status"] in ("passed", "crashed"), result
    assert server.request({"op": "ping"}, timeout=10)["ok"]


def test_it_keeps_serving_after_the_attacks(server):
    code = (Path(__file__).parent / "repros" / "dynamo_graph_break.py").read_text()
    report = bisect(code, server=server, limits=Limits(timeout_s=60))
    assert [x["label"] for x in report.labels] == ["module: dynamo"]
    assert report.sandbox["netns"] and report.sandbox["pidns"] and report.sandbox["uid"] == 65534




def _processes_of_uid(uid: int) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as fh:
                if any(line.startswith("Uid:") and int(line.split()[1]) == uid for line in fh):
                    found.append(int(pid))
        except OSError:
            continue
    return found


def test_it_starts_a_new_fork_server_when_the_old_one_died(server):
    server.proc.kill()
    server.proc.wait()
    code = (Path(__file__).parent / "repros" / "broken_in_eager.py").read_text()
    report = bisect(code, server=server, limits=Limits(timeout_s=60))
    assert server.alive and "not a compile bug" in report.summary
