#!/usr/bin/env bash
# The GPU path end to end on one GPU machine, in a few minutes, without Django or a database:
#  1. a wrong Inductor lowering bisected on cuda (module: inductor, R2.2 + triage review, R11);
#  2. a CPU-only Inductor bug bisected on cpu, re-run on cuda by the probe (oncall: cpu inductor, R2.4);
#  3. the benchmark on cuda (warm fork server vs five cold `python repro.py`).
# Usage: bench/gpu_check.sh   (PY=/path/to/python with a CUDA build of torch, default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3

"$PY" - <<'PYEOF'
import sys
import time

import torch

if not torch.cuda.is_available():
    sys.exit("gpu_check: torch.cuda.is_available() is False: no GPU here, nothing to check")
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
sys.path.insert(0, ".")
from rubric_app.bisection import Limits, bisect

failures = []
for repro, device, expected in (
    ("inductor_lowering", "cuda", [("module: inductor", "R2.2"), ("triage review", "R11")]),
    ("cpu_only_inductor", "cpu", [("module: inductor", "R2.2"), ("oncall: cpu inductor", "R2.4"),
                                  ("triage review", "R11")]),
    ("dynamo_graph_break", "cuda", [("module: dynamo", "R2.3")]),
):
    started = time.perf_counter()
    report = bisect(open(f"tests/repros/{repro}.py").read(), device=device, limits=Limits(timeout_s=300))
    labels = [(x["label"], x["rule_id"]) for x in report.labels]
    ok = labels == expected
    print(f"{'ok  ' if ok else 'FAIL'} {repro} on {device} in {time.perf_counter() - started:.1f} s: {labels}")
    for r in report.results:
        print(f"       {r['mode']:<38} {r['status']:<9} {r['wall_s']:>6.2f} s {r['probes'] or ''} {r['exception']}")
    if not ok:
        failures.append(repro)
        print(report.summary, "\n", report.log[-3000:])
print("sandbox:", {k: report.sandbox.get(k) for k in ("netns", "pidns", "uid", "private_tmp", "notes")})
sys.exit(f"gpu_check: {failures} gave unexpected labels" if failures else 0)
PYEOF

"$PY" bench/bench_bisection.py --device cuda
