"""The queue page under 20 concurrent clients: the production setup (gunicorn) vs runserver.

Starts the real setup on 127.0.0.1 only: a PostgreSQL database of its own (created,
migrated and filled with a queue of --issues issues), a signed-in session, then
`gunicorn triage_site.wsgi` with --workers processes and, as the baseline measured in
the same run, `manage.py runserver` (threaded, one process) on the same database and
settings (DEBUG off, plain http). Each server gets a warm-up, then --clients threads
request the queue page back to back (keep-alive, each request waits for the previous
answer) for --duration seconds, bounded by --max-requests in all.

    .venv/bin/python bench/bench_load.py [--issues 5000] [--workers 4] [--clients 20] [--duration 20]

Prints, per server: requests, errors, throughput, p50 and p99; then the ratios
gunicorn / runserver (target: gunicorn p50 under 200 ms with 20 clients).
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
    env.update(DATABASE_URL=database_url, SECRET_KEY=SECRET, DEBUG="false", HTTPS="false",
               ALLOWED_HOSTS="127.0.0.1", CELERY_BROKER_URL="memory://", TRIAGE_VAR_DIR=str(tmp),
               LOG_LEVEL="WARNING", DJANGO_SETTINGS_MODULE="triage_site.settings")
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

    call_command("migrate", verbosity=0)
    make_rows(issues)
    user = get_user_model().objects.create_superuser("bench", password="bench-password-1")
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
    return {"requests": len(latencies), "errors": len(errors), "error_kinds": sorted(set(errors)),
            "rps": len(latencies) / wall, "p50": pick(0.50), "p99": pick(0.99),
            "mean": statistics.fmean(latencies) if latencies else float("nan")}


def measure(name: str, argv: list[str], env: dict, port: int, cookie: str, args, log_dir: Path) -> dict:
    log = open(log_dir / f"{name}.log", "w")
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_port(port, proc)
        drive(port, cookie, args.clients, min(3.0, args.duration), 10_000)  # warm-up: imports, connections, caches
        return drive(port, cookie, args.clients, args.duration, args.max_requests)
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
    parser.add_argument("--workers", type=int, default=max(2 * (os.cpu_count() or 1), 2),
                        help="gunicorn worker processes (default: 2 per core)")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load per server")
    parser.add_argument("--max-requests", type=int, default=50_000, help="a bound on requests per server")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/bench_load",
                        help="a database this benchmark may drop and recreate")
    parser.add_argument("--only", choices=["gunicorn", "runserver"], help="measure one server only")
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
        from django.db import connections

        connections.close_all()
        print(f"data: {args.issues} issues in PostgreSQL ({args.database_url}), made in {time.perf_counter() - started:.1f} s; "
              f"{args.clients} clients x {args.duration:.0f} s per server, {os.cpu_count()} CPUs")
        servers = {}
        port = free_port()
        if args.only != "runserver":
            servers["gunicorn"] = (
                [gunicorn, "triage_site.wsgi", "--workers", str(args.workers), "--bind", f"127.0.0.1:{port}",
                 "--access-logfile", "-", "--log-level", "warning"], port)
        port = free_port()
        if args.only != "gunicorn":
            servers["runserver"] = ([sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"], port)
        results = {}
        print(f"{'server':28} {'requests':>9} {'errors':>7} {'req/s':>7} {'p50 ms':>8} {'p99 ms':>8}")
        for name, (argv, port) in servers.items():
            label = f"{name} ({args.workers} workers)" if name == "gunicorn" else f"{name} (threaded, 1 process)"
            r = results[name] = measure(name, argv, env, port, cookie, args, tmp)
            print(f"{label:28} {r['requests']:9d} {r['errors']:7d} {r['rps']:7.1f} {r['p50'] * 1000:8.1f} {r['p99'] * 1000:8.1f}"
                  + (f"  errors: {', '.join(r['error_kinds'])}" if r["errors"] else ""))
        if len(results) == 2:
            g, b = results["gunicorn"], results["runserver"]
            print(f"ratio gunicorn / runserver: p50 {g['p50'] / b['p50']:.2f}, throughput {g['rps'] / b['rps']:.2f}x")
        if "gunicorn" in results:
            p50 = results["gunicorn"]["p50"] * 1000
            print(f"gunicorn p50 {p50:.0f} ms with {args.clients} clients: {'meets' if p50 < 200 else 'MISSES'} the 200 ms target")
        recreate_database(args.database_url)  # leave an empty database, not 5,000 rows


if __name__ == "__main__":
    main()
