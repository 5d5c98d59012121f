"""What a worker's machine has, for its heartbeat and for each run it makes (issue #36): the CPU's model and the
instruction-set extensions a PT2 report may name (AVX2, AVX512 and its parts, AMX, SVE...), and the GPU's name.

A report about an AVX512-only vectorization bug, or one seen on an H100, is not fixed by a pass on a machine without
AVX512 or that H100: build_checks.py reads the run's record (BisectionRun.hardware) before it calls an issue "may be
fixed", and the issue page and the lane say which ISA and device ran it. Read from /proc (Linux), once per process:
a machine's hardware does not change under a running worker.
"""

from __future__ import annotations

import functools
import glob
import re
import shutil
import subprocess

# The CPU flags (as /proc/cpuinfo spells them) a report can depend on: x86's vector and matrix extensions, and Arm's.
ISA_FLAGS = frozenset(
    {
        "sse4_2",
        "avx",
        "avx2",
        "fma",
        "f16c",
        "avx_vnni",
        "avx512f",
        "avx512bw",
        "avx512vl",
        "avx512dq",
        "avx512cd",
        "avx512_vnni",
        "avx512_bf16",
        "avx512_fp16",
        "avx512vbmi",
        "amx_tile",
        "amx_bf16",
        "amx_int8",
        "amx_fp16",
        "asimd",
        "asimdhp",
        "sve",
        "sve2",
        "bf16",
        "i8mm",
    }
)
_MODEL = re.compile(r"^(?:model name|Model Name|cpu model|Hardware)\s*:\s*(.{1,120})$", re.M)
_FLAGS = re.compile(r"^(?:flags|Features)\s*:\s*(.{0,4000})$", re.M)
_GPU_MODEL = re.compile(r"^Model:\s*(.{1,120})$", re.M)


def read_cpuinfo(text: str) -> tuple[str, list[str]]:
    """(the CPU's model, its ISA_FLAGS) from the text of /proc/cpuinfo (the first processor's lines)."""
    model = _MODEL.search(text)
    flags = _FLAGS.search(text)
    found = set(flags.group(1).split()) & ISA_FLAGS if flags else set()
    return (model.group(1).strip() if model else ""), sorted(found)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(200_000)
    except OSError:
        return ""


def gpu_name() -> str:
    """The first NVIDIA GPU's name ("NVIDIA H100 80GB HBM3"), from the driver's /proc files or nvidia-smi; ""
    without one."""
    for path in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
        found = _GPU_MODEL.search(_read(path))
        if found:
            return found.group(1).strip()
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            done = subprocess.run(
                [smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return ""
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip().splitlines()[0][:120]
    return ""


@functools.cache
def this_machine() -> dict:
    """{"cpu": model, "isa": [ISA_FLAGS it has], "gpu": name or ""}: what the heartbeat reports and a run records."""
    model, isa = read_cpuinfo(_read("/proc/cpuinfo"))
    return {"cpu": model, "isa": isa, "gpu": gpu_name()}


def describe(hardware: dict) -> str:
    """A run's hardware in a few words for the page: "CPU (AMD EPYC; avx2, avx512f)", "GPU (NVIDIA H100)"."""
    if not hardware:
        return ""
    if hardware.get("device") == "cuda":
        return f"GPU ({hardware.get('gpu') or 'unknown model'})"
    vector = [flag for flag in hardware.get("isa", ()) if flag.startswith(("avx", "amx", "sve"))]
    parts = [p for p in (hardware.get("cpu", ""), ", ".join(vector)) if p]
    return f"CPU ({'; '.join(parts)})" if parts else "CPU"
