"""When an issue's runs say "may be fixed", and when they only seem to (issue #36; pure Python, no Django, no torch).

An issue enters the "may be fixed" lane only on evidence:
- ours: the same repro reproduced the failure on an older build and passes on a newer one, on the same device; or
- the reporter's: their stated version is older than ours, their own repro checks its result (it raises or asserts
  on the bug, or runs in the harness's convention, which compares with eager: as a failing run would show), and
  our run used the device class where they saw it.
Never for a performance, compile-time, recompilation, graph-break or UX report (nothing can pass there), never from
a run on another device than the report's, never when the report names hardware the run lacked (an ISA such as
AVX512 or AMX, a GPU model: BisectionRun.hardware) or, for a CPU report, when the reporter's CPU has a feature
oneDNN and Inductor pick kernels by (AMX, AVX-512 and its FP16, BF16 and VNNI extensions: from collect_env's flags,
else its CPU model) that the run's lacked, never from another commenter's repro alone, and never while another
current repro still fails. A regression needs a repro that counts too (rubric_app/runs/repro_sources.py).

decide() returns the comparison stored on the issue (builds.Comparison): for "may be fixed" its summary states the
evidence ("reproduced on 2.12.0 (run 41), passes on 2.13.0 (run 57), same repro, CPU"), which the lane and the
confirm_fixed reply quote; otherwise `held_back` says why a pass is not that evidence.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace

from rubric_app.rubric.reading.text import split_environment

from ..vocabulary import MAY_BE_FIXED, REGRESSION
from . import builds
from .extract import names_cuda, parse

I = re.I

# Reports where nothing can pass: a run tells whether code raises or diverges, never that it got faster, compiles
# sooner, recompiles less, breaks its graph less or says something better. Read from the title and the report's prose.
KINDS = (
    (
        "performance",
        re.compile(
            r"\b(?:slow(?:er|s|ness|down)?|perf(?:ormance)?\b|speed ?(?:up|down)|throughput|latency"
            r"|\d+(?:\.\d+)?\s?x slower|regress(?:ion|ed)? in (?:speed|time)|memory (?:usage|use|regression|leak)"
            r"|(?:peak|high) memory|\bOOMs? (?:at|with) (?:a )?(?:larger|bigger))",
            I,
        ),
    ),
    (
        "compile time",
        re.compile(r"\bcompil(?:e|ation)[- ]time\b|\btakes? \d+\s?(?:s|min|minutes|seconds) to compile", I),
    ),
    ("recompilation", re.compile(r"\brecompil(?:e|es|ing|ation|ations)\b|\bcache_size_limit\b", I)),
    ("graph break", re.compile(r"\bgraph[- ]breaks?\b|\bgraph_break\b", I)),
    (
        "UX",
        re.compile(
            r"\berror message\b|\bconfusing\b|\bunhelpful\b|\bmisleading\b|\bbetter (?:error|message|warning)\b"
            r"|\bwarning (?:is|was) (?:noisy|spammy|wrong)|\btypo\b|\bdocs?\b|\bdocumentation\b",
            I,
        ),
    ),
)

# Hardware a report can name, and what a run's record (runs/hardware.py) must show for its pass to count. The first
# pattern that matches a name wins: "AVX512-BF16" needs avx512_bf16, plain "AVX512" needs avx512f.
ISA_NAMES = (
    (re.compile(r"\bavx[-_ ]?512[-_ ]?bf16\b", I), "avx512_bf16", "AVX512-BF16"),
    (re.compile(r"\bavx[-_ ]?512[-_ ]?fp16\b", I), "avx512_fp16", "AVX512-FP16"),
    (re.compile(r"\bavx[-_ ]?512[-_ ]?vnni\b|\bvnni\b", I), "avx512_vnni", "AVX512-VNNI"),
    (re.compile(r"\bavx[-_ ]?512\w{0,8}\b", I), "avx512f", "AVX512"),
    (re.compile(r"\bamx[-_ ]?bf16\b", I), "amx_bf16", "AMX-BF16"),
    (re.compile(r"\bamx[-_ ]?fp16\b", I), "amx_fp16", "AMX-FP16"),
    (re.compile(r"\bamx[-_ ]?int8\b", I), "amx_int8", "AMX-INT8"),
    (re.compile(r"\bamx\b", I), "amx_tile", "AMX"),
    (re.compile(r"\bavx2\b", I), "avx2", "AVX2"),
    (re.compile(r"\bsve2\b", I), "sve2", "SVE2"),
    (re.compile(r"\bsve\b", I), "sve", "SVE"),
)
# The CPU features oneDNN and Inductor's C++ backend pick their kernels by: a run on a machine without one the
# reporter's CPU has ran other kernels, so its pass says nothing of theirs (AMX, AVX-512 and its FP16, BF16 and VNNI
# extensions). As /proc/cpuinfo and lscpu spell them, with the names the lane shows.
DISPATCH_ISA = {
    "amx_tile": "AMX",
    "amx_bf16": "AMX-BF16",
    "amx_int8": "AMX-INT8",
    "amx_fp16": "AMX-FP16",
    "avx512f": "AVX512",
    "avx512_fp16": "AVX512-FP16",
    "avx512_bf16": "AVX512-BF16",
    "avx512_vnni": "AVX512-VNNI",
}
_AVX512, _VNNI, _BF16, _FP16 = "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16"
_AMX = ("amx_tile", "amx_bf16", "amx_int8")
# What a CPU a report names has of DISPATCH_ISA, where its collect_env gives no flags: Intel's Xeon Scalable by the
# generation digit of its model number (8480+: 4th, Sapphire Rapids), Xeon 6 (Granite Rapids), AMD's EPYC by the
# Zen generation of its last digit (9654: Zen 4). First match wins; an unknown CPU requires nothing.
CPU_MODELS = (
    (re.compile(r"\bXeon\b[^\n]{0,30}?\b6\d{3}[PE]\b", I), (_AVX512, _VNNI, _BF16, _FP16, *_AMX, "amx_fp16")),
    (re.compile(r"\bXeon\b[^\n]{0,30}?\b[3-9][45]\d{2}[A-Z+]{0,3}\b", I), (_AVX512, _VNNI, _BF16, _FP16, *_AMX)),
    (re.compile(r"\bXeon\b[^\n]{0,30}?\b[3-9]3\d{2}H[L]?\b", I), (_AVX512, _VNNI, _BF16)),  # Cooper Lake
    (re.compile(r"\bXeon\b[^\n]{0,30}?\b[3-9][23]\d{2}[A-Z+]{0,3}\b", I), (_AVX512, _VNNI)),  # Cascade, Ice Lake
    (re.compile(r"\bXeon\b[^\n]{0,30}?\b[3-9]1\d{2}[A-Z+]{0,3}\b", I), (_AVX512,)),  # Skylake
    (re.compile(r"\bEPYC\b[^\n]{0,12}?\b9\d{2}[45][A-Z]{0,2}\b", I), (_AVX512, _VNNI, _BF16)),  # Zen 4, Zen 5
    (re.compile(r"\bEPYC\b[^\n]{0,12}?\b7\d{2}[1-3][A-Z]{0,2}\b", I), ()),  # Zen 1-3: AVX2
)
_CPU_LINE = re.compile(r"^[ \t]{0,8}(?:CPU|Model name|model name)[ \t]*:[ \t]*(\S[^\n]{0,120})$", re.M)
_FLAGS_LINE = re.compile(r"^[ \t]{0,8}(?:Flags|flags)[ \t]*:[ \t]*([^\n]{0,4000})$", re.M)


def reporters_cpu(text: str) -> tuple[tuple[str, str], ...]:
    """The reporter's CPU's DISPATCH_ISA as (flag, name) pairs, from collect_env's lscpu flags where it has them,
    else from the CPU model it names (CPU_MODELS); () when neither says."""
    flags = _FLAGS_LINE.search(text)
    cpu = _CPU_LINE.search(text)
    model = cpu.group(1).strip() if cpu else ""
    if flags:
        have = [f for f in DISPATCH_ISA if f in flags.group(1).split()]
    else:
        named = next((set(isa) for pattern, isa in CPU_MODELS if model and pattern.search(model)), set())
        have = [f for f in DISPATCH_ISA if f in named]
    where = f" ({model})" if model else ""
    return tuple((flag, DISPATCH_ISA[flag] + where) for flag in have)


GPU_MODELS = re.compile(
    r"\b(H100|H200|H20|GH200|B200|GB200|A100|A10G?|A30|A40|A6000|L4|L40S?|T4|V100|P100|MI\d{3}X?|RTX ?\d{4})\b"
)
_CUDA_REPORT = re.compile(
    r"\[(?:CUDA|GPU|Triton)\]|\bon (?:the )?(?:CUDA|GPU|NVIDIA)\b|\b(?:CUDA|GPU)[- ]only\b|\bonly on (?:CUDA|GPU)\b"
    r"|\bcudagraphs?\b|reduce-overhead|\bTriton kernel|\billegal memory access\b|\bCUDA error\b",
    I,
)
_RAISES = re.compile(
    r"Traceback \(most recent call last\)|\b\w{0,40}(?:Error|Exception|Unsupported|Failed):|\bsegmentation fault\b"
    r"|\bSIGSEGV\b|\bcore dumped\b",
    I,
)
_WRONG = re.compile(
    r"\bwrong\b|\bincorrect\b|\bNaNs?\b|-?\binf\b|\bdiffers?\b|\bdifferent\b|\bmismatch|\bsilent(?:ly)?\b"
    r"|\bdivergen|\binaccura",
    I,
)
_CPU_REPORT = re.compile(
    r"\[CPU\]|\bon (?:the )?CPU\b|\bCPU[- ]only\b|\bonly on CPU\b|\bcpp_wrapper\b|\bC\+\+ kernel", I
)


@dataclass(frozen=True)
class Report:
    """What the issue says about where it failed: its kind ("" for a failure a run can show), the device class
    ("cpu" or "cuda"), the hardware it names (("avx512f", "AVX512"), ("gpu", "H100")), the reporter's version."""

    kind: str = ""
    device: str = "cpu"
    hardware: tuple[tuple[str, str], ...] = ()
    reported: str = ""
    raises: bool = False  # the failure is an exception (a traceback, an error), not a silently wrong result
    # The reporter's CPU's features its kernels were picked by (reporters_cpu), for a CPU report: a pass on a
    # machine that lacks one is no evidence.
    machine: tuple[tuple[str, str], ...] = ()


def read_report(title: str, body: str, repro: str = "") -> Report:
    """The report's kind, device, hardware and version, from its title, body (collect_env's lines cut: the machine,
    not the bug) and repro (a repro that names cuda was seen on a GPU). Bounded: the text is capped."""
    prose, environment = split_environment(body[:60_000])
    text = f"{title[:500]}\n{prose}"
    kind = next((name for name, pattern in KINDS if pattern.search(title[:500])), "")
    kind = kind or next((name for name, pattern in KINDS[:2] if pattern.search(prose[:5000])), "")
    cuda = names_cuda(repro) if repro else False
    if not cuda and _CUDA_REPORT.search(text) and not _CPU_REPORT.search(title[:500]):
        cuda = True
    named: list[tuple[str, str]] = []
    for word in sorted({m.group(0).lower() for pattern, _flag, _name in ISA_NAMES for m in pattern.finditer(text)}):
        flag, name = next((f, n) for pattern, f, n in ISA_NAMES if pattern.fullmatch(word))
        if (flag, name) not in named:
            named.append((flag, name))
    for model in dict.fromkeys(m.group(1).replace(" ", "").upper() for m in GPU_MODELS.finditer(text)):
        named.append(("gpu", model))
    raises = bool(_RAISES.search(text)) and not _WRONG.search(title[:500])
    machine = () if cuda else reporters_cpu(f"{environment}\n{prose}")
    return Report(kind, "cuda" if cuda else "cpu", tuple(named), builds.reported_version(body), raises, machine)


def checks_result(code: str, style: str, *, original: str = "", raises: bool = False) -> bool:
    """Whether a run of this code would fail on the reported bug, so that its passing is evidence.

    code, style: what ran. original: the posted script when `code` is its conversion to the harness's convention
    (bisection.extract.to_module_style), which keeps the compiled calls and drops what the script did with their
    results: the harness's comparison with eager covers the bug only if the script did nothing but compute and print
    those results (no backward, no gradients or autograd state, no loop around the compiled call). raises: the
    report's failure is an exception, which a script that runs the failing code raises by itself.
    A script otherwise checks its result only if it asserts, raises, calls an assert_* helper or sys.exit, or is the
    Repro Agent's test_fn() -> bool; the harness's own convention (fn + make_calls) is compared with eager.
    """
    if original:
        return _only_reads_outputs(original)
    if style == "module":
        return True
    tree = parse(code)
    if tree is None:
        return False
    if raises:
        return True
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assert, ast.Raise)):
            return True
        if isinstance(node, ast.FunctionDef) and node.name == "test_fn":
            return True
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name.lower().startswith("assert") or name == "exit" and node.args:
                return True
    return False


# What a script can look at that the harness's comparison of outputs with eager never sees.
AUTOGRAD_STATE = frozenset({"backward", "grad", "requires_grad", "requires_grad_", "grad_fn", "is_leaf", "retain_grad"})


def _only_reads_outputs(original: str) -> bool:
    tree = parse(original)
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in AUTOGRAD_STATE:
            return False
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor)) and any(
            isinstance(inner, ast.Call) for inner in ast.walk(node)
        ):
            return False  # called in a loop: side effects, recompiles, state across calls
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return False
    return True


@dataclass(frozen=True)
class Run:
    """One finished run: its id, build, torch version, device class ("cpu" | "cuda"), results, hardware record."""

    run_id: int
    build: str
    version: str
    device: str
    results: list
    hardware: dict = field(default_factory=dict)

    @property
    def outcome(self) -> str:
        return builds.outcome(self.results)


@dataclass(frozen=True)
class Repro:
    """A current repro of the issue and its finished runs (newest first). counts: the reporter's, a maintainer's, the
    automation's or a triager's (repro_sources.py); by_reporter: theirs, so their stated version is where it failed."""

    repro_hash: str
    runs: tuple[Run, ...]
    author: str = ""
    counts: bool = True
    by_reporter: bool = False
    checks_result: bool = False


def decide(report: Report, repros: list[Repro]) -> builds.Comparison | None:
    """What the issue's current repros' runs say together (see the module): a regression or "may be fixed" only
    on evidence, else what there is to show, with `held_back` saying why a pass is not "may be fixed"."""
    compared: list[tuple[Repro, str, builds.Comparison, dict[str, Run]]] = []
    failing: list[str] = []
    passing = False
    for repro in repros:
        for device in ("cpu", "cuda"):
            runs = [r for r in repro.runs if r.device == device]
            if not runs:
                continue
            latest = _latest_per_version(runs)
            newest = latest[max(latest, key=builds.version_key)] if latest else None
            if newest is not None and newest.outcome == "reproduced":
                failing.append(f"{_whose(repro)} still fails on {newest.version} (run {newest.run_id})")
            passing = passing or (newest is not None and newest.outcome == "passed")
            reported = report.reported if repro.by_reporter else ""  # on another device: held back below, saying so
            comparison = builds.compare(
                [builds.BuildRun(r.run_id, r.build, r.version, r.results) for r in runs], reported
            )
            if comparison is not None:
                compared.append((repro, device, comparison, latest))
    if not compared:
        # One version each, nothing to compare; but where one repro passes beside one that fails, say which fails.
        return (
            builds.Comparison("still_fails", failing[0], None, None, held_back=failing[0])
            if passing and failing
            else None
        )
    for repro, _device, comparison, _latest in compared:
        if comparison.kind == REGRESSION and repro.counts:
            return comparison
    held: list[str] = []
    for repro, device, comparison, latest in compared:
        if comparison.kind != MAY_BE_FIXED:
            continue
        why = _not_evidence(report, repro, device, comparison, latest, failing)
        if not why:
            return replace(comparison, summary=_evidence(report, repro, device, comparison, latest))
        held.append(why)
    shown = next((c for r, _d, c, _l in compared if r.counts), compared[0][2])
    if shown.kind in (MAY_BE_FIXED, REGRESSION):  # only another commenter's repro says it: not on its own
        shown = replace(shown, kind=f"{shown.kind}_unconfirmed")
    return replace(shown, held_back=held[0] if held else "")


def _latest_per_version(runs: list[Run]) -> dict[str, Run]:
    latest: dict[str, Run] = {}
    for run in runs:  # newest first: the first per version is its latest
        if run.version and run.outcome != "inconclusive":
            latest.setdefault(run.version, run)
    return latest


def _whose(repro: Repro) -> str:
    return f"@{repro.author}'s repro" if repro.author else "a triager's repro"


def _not_evidence(
    report: Report, repro: Repro, device: str, comparison: builds.Comparison, latest: dict[str, Run], failing: list
) -> str:
    """Why this may-be-fixed comparison is not evidence ("" when it is)."""
    if not repro.counts:
        return f"only {_whose(repro)} passes, another commenter's: offered, never enough on its own"
    if report.kind:
        return f"a {report.kind} report: a run passing says nothing about it"
    if device != report.device:
        return f"our runs were on {_device_name(device)}, the report is about {_device_name(report.device)}"
    if comparison.older is None and not repro.checks_result:
        return (
            "the repro does not check the reported failure (it neither asserts nor raises on it, or what it checked "
            "is not what our run compares): passing on a newer build is no evidence against the reporter's failure"
        )
    runs = [latest[comparison.newer_version]] + ([latest[comparison.older_version]] if comparison.older else [])
    for run in runs:
        lacking = _lacking(report, run)
        if lacking:
            return f"{lacking}, which run {run.run_id} did not have" + (
                "" if run.hardware else " (it recorded no hardware)"
            )
    if failing:
        return failing[0]
    return ""


def _lacking(report: Report, run: Run) -> str:
    """What the report's hardware has that the run's lacked, in words ("" when nothing): what it names (a GPU, an ISA),
    then the dispatch ISA of the reporter's CPU (Report.machine)."""
    isa = set(run.hardware.get("isa", ()))
    gpu = (run.hardware.get("gpu") or "").replace(" ", "").upper()
    for flag, name in report.hardware:
        if flag == "gpu":
            if run.device != "cuda" or name not in gpu:
                return f"the report names the GPU {name}"
        elif flag not in isa:
            return f"the report names {name}"
    missing = next((name for flag, name in report.machine if flag not in isa), "")
    return f"the reporter's CPU has {missing} (oneDNN and Inductor pick kernels by it)" if missing else ""


def _device_name(device: str) -> str:
    return "CUDA" if device == "cuda" else "CPU"


def _evidence(report: Report, repro: Repro, device: str, comparison: builds.Comparison, latest: dict) -> str:
    """ "reproduced on 2.12.0 (run 41), passes on 2.13.0 (run 57), same repro, CPU": what the lane and the reply say."""
    newer = latest[comparison.newer_version]
    if comparison.older is not None:
        before = f"reproduced on {comparison.older_version} (run {comparison.older})"
    else:
        who = f" by @{repro.author}" if repro.author else ""
        before = f"reported failing on {comparison.older_version}{who} (its repro checks its result)"
    where = _device_name(device)
    named = [name for flag, name in report.hardware]
    if named:
        where += f" with {', '.join(named)}"
    return f"{before}, passes on {comparison.newer_version} (run {newer.run_id}), same repro, {where}"
