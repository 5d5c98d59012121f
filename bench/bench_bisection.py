"""Benchmark: a 5-mode bisection on a warm fork server vs five cold `python repro.py` runs.

Both sides run the same small script-style repro (it calls torch.compile itself)
once per mode: eager (compile disabled), backend=eager, aot_eager,
aot_eager_decomp_partition and inductor. The cold side starts a fresh
interpreter per mode and redirects the script's backend with
TORCH_COMPILE_OVERRIDE_BACKENDS, without any sandbox (so it is the cheaper
side); the warm side is the sandboxed harness, which forks a child per mode from
a server that imported torch once. Same hermetic compile settings on both sides
(FX/AOT caches off, a fresh inductor cache dir per run).

    .venv/bin/python bench/bench_bisection.py [--device cpu|cuda] [--rounds 1]

Target: warm <= 0.4 x cold, printed as a ratio measured in this one run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rubric_app.bisection import ForkServer, Limits  # noqa: E402
from rubric_app.bisection.sandbox import scrubbed_env  # noqa: E402

REPRO = """\
import torch

device = "{device}"


def f(x, w):
    return torch.nn.functional.gelu(x @ w).sum(-1)


compiled = torch.compile(f)
print(compiled(torch.randn(4, 8, device=device), torch.randn(8, 8, device=device)).sum().item())
"""
MODES = ("eager", "dynamo_eager", "aot_eager", "aot_eager_decomp_partition", "inductor")
BACKEND = {"dynamo_eager": "eager"}


def cold(path: Path) -> list[float]:
    """Wall seconds of `python repro.py` once per mode, each a fresh interpreter."""
    walls = []
    for mode in MODES:
        with tempfile.TemporaryDirectory() as tmp:
            env = scrubbed_env(tmp)
            if mode == "eager":
                env["TORCH_COMPILE_DISABLE"] = "1"
            else:
                env["TORCH_COMPILE_OVERRIDE_BACKENDS"] = f">=0:{BACKEND.get(mode, mode)}"
            started = time.perf_counter()
            subprocess.run([sys.executable, str(path)], env=env, cwd=tmp, check=True, capture_output=True)
            walls.append(time.perf_counter() - started)
    return walls


def warm(server: ForkServer, code: str, device: str) -> list[float]:
    """Wall seconds of the same five modes through the warm, sandboxed fork server."""
    walls = []
    for mode in MODES:
        started = time.perf_counter()
        reply = server.run_mode("bench", mode, code, "script", device, Limits(timeout_s=300))
        walls.append(time.perf_counter() - started)
        if reply["result"]["status"] != "passed":
            raise SystemExit(f"{mode}: {reply['result']['status']} {reply['result']['message'][:300]}")
    server.forget("bench")
    return walls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rounds", type=int, default=1, help="bisections per side (the figures are per bisection)")
    args = parser.parse_args()
    code = REPRO.format(device=args.device)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "repro.py"
        path.write_text(code)
        server = ForkServer()
        started = time.perf_counter()
        server.start()
        startup = time.perf_counter() - started
        try:
            warm_walls = [warm(server, code, args.device) for _ in range(args.rounds)]
        finally:
            server.close()
        cold_walls = [cold(path) for _ in range(args.rounds)]
    per_mode_warm = [sum(w[i] for w in warm_walls) / args.rounds for i in range(len(MODES))]
    per_mode_cold = [sum(c[i] for c in cold_walls) / args.rounds for i in range(len(MODES))]
    warm_total, cold_total = sum(per_mode_warm), sum(per_mode_cold)
    print(f"torch bisection benchmark on {args.device}, {os.cpu_count()} CPUs, {args.rounds} round(s)")
    print(f"{'mode':<30} {'cold python repro.py':>22} {'warm fork server':>18}")
    for mode, c, w in zip(MODES, per_mode_cold, per_mode_warm):
        print(f"{mode:<30} {c:>20.2f} s {w:>16.2f} s")
    print(f"{'total per bisection':<30} {cold_total:>20.2f} s {warm_total:>16.2f} s")
    print(f"fork server start-up (once per worker process): {startup:.2f} s")
    ratio = warm_total / cold_total
    print(f"ratio warm/cold = {ratio:.2f} (target <= 0.40): {'MET' if ratio <= 0.4 else 'NOT MET'}")
    with_startup = (warm_total + startup) / cold_total
    print(f"ratio counting one server start-up per bisection = {with_startup:.2f}")


if __name__ == "__main__":
    main()
