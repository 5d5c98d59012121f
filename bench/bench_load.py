"""The queue page under 20 concurrent clients: the production setup (gunicorn) vs runserver.

Starts the real setup on 127.0.0.1 only: a PostgreSQL database of its own (created,
migrated and filled with a queue of --issues issues), a signed-in session, then
`gunicorn triage_site.wsgi` with --workers processes and, as the baseline measured in
the same run, `manage.py runserver` (threaded, one process) on the same database and
settings (DEBUG off, plain http). Each server gets a warm-up, then --clients threads
request the queue page back to back (keep-alive, each request waits for the previous
answer) for --duration seconds, bounded by --max-requests in all.

    .venv/bin/python bench/bench_load.py [--issues 5000] [--workers 4] [--clients 20] [--duration 20]

The user is a triager (the "take it" and "Accept…" forms, the permission queries). --writes N
changes a label's colour N times a second while the clients run (a sync or webhook would): each
write changes what every queue table shows, so the servers render it again instead of answering
from their cache (rubric_app/web/queue_cache.py).

Prints, per server: requests, errors, throughput, p50 and p99, the CPU each request cost (the
server's processes with their PostgreSQL backends, and the client's threads, from /proc), and its
connections to PostgreSQL (peak under load, and left open 3 s after it); then the
ratios gunicorn / runserver (target: gunicorn p50 under 200 ms with 20 clients), and the load average.
Traffic goes to 127.0.0.1 only; every loop is bounded in time and count.
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SECRET = "bench-load-secret-key-not-used-anywhere-else-0123456789abcdef"


def server_env(database_url: str, tmp: Path) -> dict:
    """The production settings as the README's real setup runs them, on plain http for 127.0.0.1."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "DJANGO_ALLOW_ASYNC"))}
    env.update(
        DATABASE_URL=database_url,
        SECRET_KEY=SECRET,
        DEBUG="false",
        HTTPS="false",
        ALLOWED_HOSTS="127.0.0.1",
        CELERY_BROKER_URL="memory://",
        TRIAGE_VAR_DIR=str(tmp),
        STATIC_ROOT=str(tmp / "static"),
        LOG_LEVEL="WARNING",
        DJANGO_SETTINGS_MODULE="triage_site.settings",
    )
    return env


def recreate_database(database_url: str) -> None:
    import psycopg

    base, name = database_url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def populate(issues: int) -> str:
    """Migrate, fill the queue (bench_queue's rows) and return a signed-in session's cookie value."""
    import django

    django.setup()
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.management import call_command

    from bench.bench_queue import make_rows
    from rubric_app.roles import ensure_roles

    call_command("migrate", verbosity=0)
    make_rows(issues)
    user = get_user_model().objects.create_user("bench", password="bench-password-1")
    user.groups.add(ensure_roles()["triager"])
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return session.session_key


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing listened on 127.0.0.1:{port} within {timeout} s")


def one_request(conn: http.client.HTTPConnection, cookie: str) -> int:
    conn.request("GET", "/", headers={"Cookie": f"sessionid={cookie}", "Host": "127.0.0.1"})
    response = conn.getresponse()
    body = response.read()
    if response.status == 200 and b"Triage queue" not in body:
        return 599  # a 200 that is not the queue (e.g. the login page) is an error too
    return response.status


def drive(port: int, cookie: str, clients: int, duration: float, max_requests: int) -> dict:
    """clients threads, back to back, for duration seconds or max_requests in all; latencies in seconds."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + duration
    budget = [max_requests]

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.monotonic() < stop_at:
            with lock:
                if budget[0] <= 0:
                    break
                budget[0] -= 1
            start = time.perf_counter()
            try:
                status = one_request(conn, cookie)
            except (OSError, http.client.HTTPException) as exc:
                status, conn = 0, http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                detail = exc.__class__.__name__
            else:
                detail = str(status)
            elapsed = time.perf_counter() - start
            with lock:
                (latencies.append(elapsed) if status == 200 else errors.append(detail))
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(duration + 60)
    wall = time.monotonic() - started
    latencies.sort()
    pick = lambda q: latencies[min(int(len(latencies) * q), len(latencies) - 1)] if latencies else float("nan")  # noqa: E731
    return {
        "requests": len(latencies),
        "errors": len(errors),
        "error_kinds": sorted(set(errors)),
        "rps": len(latencies) / wall,
        "p50": pick(0.50),
        "p99": pick(0.99),
        "mean": statistics.fmean(latencies) if latencies else float("nan"),
    }


def group_cpu_s(pgid: int) -> float:
    """User + system CPU seconds of the live processes of process group pgid (Linux /proc)."""
    return sum(cpu_s(pid) for pid, group in _stats() if group == pgid)


def cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stats():
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    yield int(name), int(fh.read().rsplit(")", 1)[1].split()[2])
            except OSError:
                continue


def backends(database_url: str) -> list[int]:
    """The pids of the PostgreSQL backends serving the benchmark's database (the servers' connections)."""
    import psycopg

    base, name = database_url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        return [
            pid
            for (pid,) in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend'", [name]
            )
        ]


def write_now_and_then(database_url: str, per_s: float, stop: threading.Event) -> list[int]:
    """Change a label's colour per_s times a second until stop: every queue table shows it."""
    import psycopg

    done = [0]
    with psycopg.connect(database_url.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
        while not stop.wait(1 / per_s):
            conn.execute(
                "UPDATE rubric_app_label SET color = %s WHERE name = 'oncall: pt2'",
                ["e99695" if done[0] % 2 else "d93f0b"],
            )
            done[0] += 1
    return done


def measure(name: str, argv: list[str], env: dict, port: int, cookie: str, args, log_dir: Path) -> dict:
    log = open(log_dir / f"{name}.log", "w")
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_port(port, proc)
        drive(port, cookie, args.clients, min(3.0, args.duration), 10_000)  # warm-up: imports, connections, caches
        pids = backends(args.database_url)
        before, db_before = group_cpu_s(proc.pid), sum(cpu_s(pid) for pid in pids)
        client_before = time.process_time()
        stop, writes = threading.Event(), []
        writer = threading.Thread(
            target=lambda: writes.extend(write_now_and_then(args.database_url, args.writes, stop))
        )
        if args.writes:
            writer.start()
        peak, sampling = [0], threading.Event()

        def sample() -> None:  # the servers' connections to PostgreSQL while the clients run
            while not sampling.wait(0.25):
                peak[0] = max(peak[0], len(backends(args.database_url)))

        sampler = threading.Thread(target=sample)
        sampler.start()
        result = drive(port, cookie, args.clients, args.duration, args.max_requests)
        sampling.set()
        sampler.join(10)
        time.sleep(3)  # idle: what the server keeps open between requests
        idle = len(backends(args.database_url))
        stop.set()
        if args.writes:
            writer.join(10)
        client = time.process_time() - client_before
        web = group_cpu_s(proc.pid) - before
        db = sum(cpu_s(pid) for pid in set(pids) | set(backends(args.database_url))) - db_before
        served = max(result["requests"], 1)
        return {
            **result,
            "server_ms": (web + db) * 1000 / served,
            "db_ms": db * 1000 / served,
            "client_ms": client * 1000 / served,
            "writes": writes[0] if writes else 0,
            "connections_peak": peak[0],
            "connections_idle": idle,
        }
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--issues", type=int, default=5000)
    parser.add_argument(
        "--workers",
        type=int,
        default=max(2 * (os.cpu_count() or 1), 2),
        help="gunicorn worker processes (default: 2 per core)",
    )
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load per server")
    parser.add_argument("--max-requests", type=int, default=50_000, help="a bound on requests per server")
    parser.add_argument(
        "--database-url",
        default="postgres://postgres@127.0.0.1:5432/bench_load",
        help="a database this benchmark may drop and recreate",
    )
    parser.add_argument("--only", choices=["gunicorn", "runserver"], help="measure one server only")
    parser.add_argument(
        "--writes",
        type=float,
        default=0.0,
        help="label colour changes per second while the clients run (each makes every cached table old)",
    )
    args = parser.parse_args()
    if args.database_url.split("@")[-1].split(":")[0].split("/")[0] not in ("127.0.0.1", "localhost"):
        sys.exit("bench_load only runs against a PostgreSQL on 127.0.0.1")
    gunicorn = shutil.which("gunicorn", path=str(Path(sys.executable).parent)) or shutil.which("gunicorn")
    if not gunicorn and args.only != "runserver":
        sys.exit("gunicorn is not installed: `make` installs requirements.txt, which lists it")

    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp_name:
        tmp = Path(tmp_name)
        env = server_env(args.database_url, tmp)
        os.environ.update(env)
        recreate_database(args.database_url)
        started = time.perf_counter()
        cookie = populate(args.issues)
        # DEBUG off: pages link collectstatic's hashed names, which whitenoise serves
        collect = [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"]
        subprocess.run(collect, cwd=ROOT, env=env, check=True)
        from django.db import connections

        connections.close_all()
        print(
            f"data: {args.issues} issues in PostgreSQL ({args.database_url}), "
            f"made in {time.perf_counter() - started:.1f} s; "
            f"{args.clients} clients x {args.duration:.0f} s per server, {os.cpu_count()} CPUs"
        )
        servers = {}
        port = free_port()
        if args.only != "runserver":
            servers["gunicorn"] = (
                [
                    gunicorn,
                    "triage_site.wsgi",
                    "--workers",
                    str(args.workers),
                    "--bind",
                    f"127.0.0.1:{port}",
                    "--log-level",
                    "warning",
                ],
                port,
            )
        port = free_port()
        if args.only != "gunicorn":
            servers["runserver"] = ([sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"], port)
        results = {}
        print(
            f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
            + (f"; {args.writes:g} label changes a second while measuring" if args.writes else "")
        )
        print(
            f"{'server':32} {'requests':>9} {'errors':>7} {'req/s':>7} {'p50 ms':>8} {'p99 ms':>8} "
            f"{'CPU ms/req: server':>19} {'(PostgreSQL)':>12} {'client':>7}"
        )
        for name, (argv, port) in servers.items():
            label = f"{name} ({args.workers} workers)" if name == "gunicorn" else f"{name} (threaded, 1 process)"
            # As deployed: gunicorn keeps its connections (deploy/ sets DB_CONN_MAX_AGE=60); runserver, as
            # `make run` starts it, keeps none (a thread per request would each keep one).
            server_env_ = {**env, "DB_CONN_MAX_AGE": "60" if name == "gunicorn" else "0"}
            r = results[name] = measure(name, argv, server_env_, port, cookie, args, tmp)
            print(
                f"{label:32} {r['requests']:9d} {r['errors']:7d} {r['rps']:7.1f} "
                f"{r['p50'] * 1000:8.1f} {r['p99'] * 1000:8.1f} "
                f"{r['server_ms']:19.2f} {r['db_ms']:12.2f} {r['client_ms']:7.2f}"
                + (f"  ({r['writes']} writes)" if args.writes else "")
                + (f"  errors: {', '.join(r['error_kinds'])}" if r["errors"] else "")
                + f"  PostgreSQL connections: peak {r['connections_peak']}, idle after {r['connections_idle']}"
            )
        if len(results) == 2:
            g, b = results["gunicorn"], results["runserver"]
            print(f"ratio gunicorn / runserver: p50 {g['p50'] / b['p50']:.2f}, throughput {g['rps'] / b['rps']:.2f}x")
        if "gunicorn" in results:
            p50 = results["gunicorn"]["p50"] * 1000
            print(
                f"gunicorn p50 {p50:.0f} ms with {args.clients} clients: "
                f"{'meets' if p50 < 200 else 'MISSES'} the 200 ms target"
            )
        print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        recreate_database(args.database_url)  # leave an empty database, not 5,000 rows


if __name__ == "__main__":
    main()
