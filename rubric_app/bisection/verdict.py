"""Per-mode results -> labels with RUBRIC rule ids and a one-paragraph summary (pure Python).

The first mode that does not pass decides the component (R2); the probes
refine it (R1.1 dynamic=False) and the kind of failure flags the meeting (R11).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rubric_app.rubric.likeness.signature import pt2_frame

from ..vocabulary import CPU_INDUCTOR_ONCALL as CPU_INDUCTOR
from ..vocabulary import DECOMPOSITIONS, DYNAMIC_SHAPES, DYNAMO, FUNCTORCH, INDUCTOR, NEEDS_REPRODUCTION, TRIAGE_REVIEW
from ..vocabulary import PT2_DISPATCHER as DISPATCHER

# (label, rule id, what the first failing mode says) by first failing mode.
COMPONENT = {
    "dynamo_eager": (DYNAMO, "R2.3", "fails while tracing on backend=eager (Dynamo only)"),
    "aot_eager": (DISPATCHER, "R2.1", "fails on aot_eager, passes on backend=eager"),
    "aot_eager_decomp_partition": (
        DECOMPOSITIONS,
        "R2.5",
        "fails on aot_eager_decomp_partition, passes on aot_eager",
    ),
    "aot_eager_decomp_partition_crossref": (
        DISPATCHER,
        "R5",
        "a custom op's fake implementation disagrees with its real kernel (crossref), "
        "passes on aot_eager_decomp_partition",
    ),
    "inductor": (INDUCTOR, "R2.2", "fails on inductor, passes on aot_eager_decomp_partition"),
}


# Where the failure was raised decides the owner where the first failing mode alone would not (G8: the mode
# says where to start, the innermost PT2 frame and the exception say whose code failed). Measured on the
# training pool's repros (docs/bisection.md#reading-the-failure): the mode alone named pt2-dispatcher for a
# functorch transform and dynamo for a custom op's registration error, where humans (and R5, R9.2) say otherwise.
# Each entry: (label, rule id, what it says, exception names, message words, frame path prefixes).
OWNERS = (
    (
        DYNAMIC_SHAPES,
        "R1.3",
        "a guard or symbolic size failed",
        (
            "GuardOnDataDependentSymNode",
            "DataDependentOutputException",
            "DynamicOutputShapeException",
            "ConstraintViolationError",
            "PendingUnbackedSymbolNotFound",
        ),
        ("could not guard on data-dependent", "data-dependent expression", "unbacked symbol"),
        # Not torch/utils/_sympy/: Inductor's own bounds and indexing analysis runs there (value ranges).
        ("torch/fx/experimental/symbolic_shapes.py",),
    ),
    (
        FUNCTORCH,
        "R9.2",
        "a functorch transform or higher-order op failed",
        (),
        ("unsupported functorch", "functorch tracing", "higher order op", "higherorderoperator", "torch.func."),
        (
            "torch/_higher_order_ops/",
            "torch/_functorch/apis.py",
            "torch/_functorch/eager_transforms.py",
            "torch/_functorch/vmap.py",
            "torch/_functorch/pyfunctorch.py",
            "torch/_functorch/autograd_function.py",
            "torch/_functorch/functional_call.py",
            "torch/_dynamo/variables/higher_order_ops.py",
        ),
    ),
    (
        DISPATCHER,
        "R5",
        "FakeTensor, functionalization or a custom op's registration failed",
        ("UnsupportedOperatorException",),
        ("register_fake", "no fake impl", "abstract impl", "torch.library", "custom op", "functionaliz"),
        (
            "torch/_subclasses/fake_tensor.py",
            "torch/_subclasses/fake_impls.py",
            "torch/_subclasses/functional_tensor.py",
            "torch/_library/",
            "torch/library.py",
            "torch/_ops.py",
            "torch/_functorch/_aot_autograd/",
            "torch/_functorch/aot_autograd.py",
        ),
    ),
    (
        DECOMPOSITIONS,
        "R4",
        "a decomposition failed",
        (),
        (),
        ("torch/_decomp/", "torch/_refs/", "torch/_inductor/decomposition.py"),
    ),
    (INDUCTOR, "R2.2", "Inductor's code generation failed", (), (), ("torch/_inductor/",)),
)
# Paths the verdict reads that signature.PT2_PATHS does not count as PT2 (the dispatcher's entry points).
_DISPATCH_PATHS = ("torch/library.py", "torch/_ops.py")
_FRAME = re.compile(r'File "([^"\n]{1,500})", line \d{1,9}, in ([^\s]{1,200})')
_TORCH_PATH = re.compile(r"(?:^|/)(torch/[^\s]{1,300})$")


def innermost_frames(traceback_text: str, kept: int = 3) -> list[str]:
    """The innermost PT2 frames ("torch/_inductor/lowering.py:make_fallback"), innermost first, of a
    traceback tail (child.traceback_tail: the root cause's frames last). Linear: one bounded regex a line."""
    frames = []
    for line in traceback_text.splitlines()[-400:]:
        match = _FRAME.search(line[:1000])
        if not match:
            continue
        path, function = match.group(1).replace("\\", "/"), match.group(2)
        frame = pt2_frame(path, function)
        if not frame:
            torch_path = _TORCH_PATH.search(path)
            if torch_path and torch_path.group(1).startswith(_DISPATCH_PATHS):
                frame = f"{torch_path.group(1)}:{function}"
        if frame:
            frames.append(frame)
    return frames[::-1][:kept]


def read_failure(result: dict) -> tuple[str, str, str] | None:
    """(label, rule id, what it says, with the frame or exception that shows it) for the component whose
    code raised result's failure, or None where the failure does not say (a divergence, a Dynamo frame).

    The exception's name and message are read first (a data-dependent guard raised inside FakeTensor is a
    dynamic-shapes problem), then the innermost PT2 frame, innermost first.
    """
    if result.get("status") not in ("raised", "crashed"):
        return None
    exception = result.get("exception") or ""
    message = (result.get("message") or "")[:2000]
    words = message.lower()
    frames = innermost_frames(result.get("traceback") or "")
    for label, rule, says, exceptions, phrases, _paths in OWNERS:
        named = next((name for name in exceptions if name in exception or name in message), "")
        if named:
            return label, rule, f"{says} ({named})"
        said = next((phrase for phrase in phrases if phrase in words), "")
        if said:
            return label, rule, f'{says} (the error says "{said}")'
    for frame in frames[:1]:
        for label, rule, says, _exceptions, _phrases, paths in OWNERS:
            if frame.startswith(paths):
                return label, rule, f"{says} (raised in {frame})"
    return None


# What torch raises when a repro asks for CUDA on a machine without it: a CPU-only build, no driver,
# no visible device. The repro is fine and the compiler untested, so it is neither "fix the repro"
# nor a component: it needs a GPU worker.
NO_CUDA = re.compile(
    r"Torch not compiled with CUDA enabled|Found no NVIDIA driver|No CUDA GPUs are available"
    r"|no CUDA-capable device|CUDA driver initialization failed|Cannot access accelerator device when none is available"
)


def needs_gpu(result: dict) -> bool:
    """True when a mode failed only because CUDA is unavailable where it ran."""
    if result.get("status") not in ("raised", "crashed"):
        return False
    return bool(NO_CUDA.search(f"{result.get('exception', '')} {result.get('message', '')}"))


@dataclass
class Verdict:
    labels: list[dict] = field(default_factory=list)
    summary: str = ""
    first_failure: str = ""


def _evidence(prefix: str, result: dict) -> str:
    """E.g. "fails while tracing on backend=eager (Dynamo only): torch._dynamo.exc.Unsupported: Call to ..."."""
    first_line = (result["message"] or "").strip().splitlines()[0][:240] if result["message"] else ""
    if result["status"] in ("raised", "oom") and result["exception"]:
        what = first_line if first_line.startswith(result["exception"]) else f"{result['exception']}: {first_line}"
    else:
        what = f"{result['status']}: {first_line}" if first_line else result["status"]
    where = f" [{result['phase']}]" if result["phase"] and result["status"] != "diverged" else ""
    return f"{prefix}: {what}{where}"


def decide(results: list[dict], device: str, read_failures: bool = True, packages: tuple[str, ...] = ()) -> Verdict:
    """Return the labels (dicts with label, rule_id, evidence) and a summary for one bisection's results.

    read_failures=False decides by the first failing mode alone (how verdicts were decided before
    read_failure; evaluate_verdicts measures one against the other). packages: what the runner that ran it has
    installed (its RESULT's list), for a repro that cannot run here."""
    ran = [r for r in results if r["status"] != "skipped"]
    if not ran:
        return Verdict(summary="Nothing ran.")
    first_bad = next((r for r in ran if r["status"] != "passed"), None)
    if first_bad is not None and needs_gpu(first_bad):
        # No labels: a run that never reached the compiler says nothing about a component.
        return Verdict(
            first_failure=first_bad["mode"],
            summary=f"needs a GPU: re-run on cuda. The repro uses CUDA, which this {device} run does not have "
            f"({first_bad['mode']}: "
            f"{(first_bad['message'] or first_bad['exception']).strip().splitlines()[-1][:160]}); "
            "nothing was learned about the compiler, so no labels.",
        )
    broken = next((r for r in ran if r["phase"] == "setup"), None)
    if broken is not None:
        return Verdict(
            summary=f"The bisection harness failed on {broken['mode']} (not the repro): {broken['message'][:300]}"
        )
    eager = ran[0]
    if eager["mode"] == "eager" and eager["status"] != "passed":
        return _eager_failed(eager, packages)
    bad = next((r for r in ran if r["status"] != "passed"), None)
    if bad is None:
        return Verdict(
            summary=f"No failure reproduced on {device}: every mode matched eager. {compared(eager)} "
            "Try other inputs, another device, or ask for a fuller repro."
        )
    if bad.get("budget_s"):
        # An automatic run's own limit, not the compiler's: which mode it stopped in says nothing about a component.
        return Verdict(
            first_failure=bad["mode"],
            summary=f"The automatic run's budget ({bad['budget_s']:g} s after eager) ran out in {bad['mode']}: "
            "no verdict. A triager can bisect it with the full per-mode limits.",
        )
    label, rule, prefix = COMPONENT[bad["mode"]]
    owner = read_failure(bad) if read_failures else None
    if owner is not None and owner[0] != label:
        label, rule = owner[0], owner[1]
        prefix = f"{prefix}; {owner[2]}"
    probes = bad.get("probes", {})
    labels = []
    if probes.get("dynamic=False") == "passed":
        # R1.1: dynamic=False makes it pass -> dynamic shapes only, not dynamo nor the backend.
        labels.append(
            {
                "label": DYNAMIC_SHAPES,
                "rule_id": "R1.1",
                "evidence": _evidence(prefix, bad) + "; passes with dynamic=False",
            }
        )
        component = "dynamic shapes"
    else:
        labels.append({"label": label, "rule_id": rule, "evidence": _evidence(prefix, bad)})
        component = label
    if label == INDUCTOR and device == "cpu" and probes.get("device=cuda") == "passed":
        labels.append(
            {"label": CPU_INDUCTOR, "rule_id": "R2.4", "evidence": "inductor fails on cpu and passes on cuda"}
        )
    if bad["status"] in ("crashed", "diverged"):
        kind = "crash" if bad["status"] == "crashed" else "silently wrong result (differs from eager, no error)"
        labels.append({"label": TRIAGE_REVIEW, "rule_id": "R11", "evidence": f"{kind} on {bad['mode']}"})
    notes = []
    if probes.get("fullgraph=False") == "passed":
        notes.append("passes with fullgraph=False: a graph break made fatal by fullgraph=True (R1.2)")
    fullgraph = bad.get("probe_details", {}).get("fullgraph=True", {})
    if fullgraph.get("phase") == "dynamo_tracing":
        notes.append(f"has graph breaks ({fullgraph['exception'] or 'fails'} with fullgraph=True)")
    if probes.get("repeat") == "passed":
        notes.append("did not fail again on a repeat run: flaky")
    elif "repeat" in probes:
        notes.append(f"reproduced on a repeat run ({probes['repeat']})")
    narrowed = bad.get("narrowed") or {}
    if narrowed.get("subsystem"):
        where = f" ({narrowed['debug_info']})" if narrowed.get("debug_info") else ""
        notes.append(f"torch's CompilerBisector narrows it to {narrowed['backend']} / {narrowed['subsystem']}{where}")
    elif narrowed.get("backend"):
        notes.append(f"torch's CompilerBisector blames backend {narrowed['backend']} (no narrower subsystem)")
    if label == INDUCTOR and device == "cpu" and "device=cuda" not in probes:
        notes.append("CUDA not checked: oncall: cpu inductor (R2.4) needs a passing GPU run")
    differed = f", {bad['differed']} differ first" if bad.get("differed") else ""
    summary = f"First failure: {bad['mode']} ({bad['status']}{differed}). Component: {component}."
    if notes:
        summary += " " + "; ".join(notes) + "."
    summary += " " + compared(eager)
    return Verdict(labels=labels, summary=summary, first_failure=bad["mode"])


# The outcome a verdict reads first (evaluate_bisection counts them).
FAILURE, NO_FAILURE, CANNOT_RUN, NOT_RUNNABLE, EAGER_FAILS = (
    "failure at a mode",
    "no failure",
    "cannot run here",
    "not runnable as posted",
    "fails in plain eager",
)


def outcome(results: list[dict]) -> str:
    """Which of the verdict's outcomes these results make: FAILURE, NO_FAILURE, CANNOT_RUN, NOT_RUNNABLE,
    EAGER_FAILS, or "needs a GPU" / "no verdict" (a harness failure, an automatic run's budget)."""
    ran = [r for r in results if r["status"] != "skipped"]
    bad = next((r for r in ran if r["status"] != "passed"), None)
    if bad is None:
        return NO_FAILURE if ran else "no verdict"
    if needs_gpu(bad):
        return "needs a GPU"
    if bad["phase"] == "setup" or bad.get("budget_s"):
        return "no verdict"
    if bad["mode"] == "eager":
        kind = (bad.get("blocker") or {}).get("kind")
        return {"missing_module": CANNOT_RUN, "not_runnable": NOT_RUNNABLE}.get(kind, EAGER_FAILS)
    return FAILURE


def compared(eager: dict) -> str:
    """What the verdict rests on (the eager reference's record of what it compared), in one sentence."""
    what = (eager.get("compared") or "").strip()
    return f"Compared: {what}." if what else "Compared: the outputs of the compiled calls."


def g9_label(evidence: str) -> dict:
    """The request for a self-contained reproduction (G9) a repro that could not run here makes: never a component."""
    return {"label": NEEDS_REPRODUCTION, "rule_id": "G9", "evidence": evidence[:500]}


def _eager_failed(eager: dict, packages: tuple[str, ...] = ()) -> Verdict:
    """Plain eager failed: the repro cannot run on this runner (a package it lacks), is not runnable as posted (an
    undefined name, a syntax error), or really fails without the compiler. None of these says anything about a
    component; the first two ask for a self-contained reproduction (G9)."""
    blocker = eager.get("blocker") or {}
    error = (eager["message"] or eager["exception"]).strip().splitlines()
    error = error[-1][:200] if error else eager["status"]
    if blocker.get("kind") == "missing_module":
        name = blocker["name"]
        package = name.split(".")[0]
        lacks = f"this runner lacks the package {package}"
        if packages and package.lower().replace("-", "_") not in packages:
            lacks += f" (not among the {len(packages)} packages it has installed)"
        if package == "torch":
            lacks = f"this runner's torch has no module {name}"
        return Verdict(
            labels=[] if package == "torch" else [g9_label(f"cannot run here: the repro imports {name} ({lacks})")],
            first_failure="eager",
            summary=f"Cannot run here: the repro imports {name}, and {lacks} (ModuleNotFoundError), so it stopped "
            "before any compile. Nothing was learned about the compiler and no mode was compared. Ask for a "
            "reproduction that needs only torch (G9).",
        )
    if blocker.get("kind") == "not_runnable":
        where = f" at line {blocker['line']}: `{blocker['text']}`" if blocker.get("line") else ""
        what = f"{blocker['name']}{where}"
        return Verdict(
            labels=[g9_label(f"not runnable as posted: {what}")],
            first_failure="eager",
            summary=f"Not runnable as posted: {what}. The snippet is not a whole program, so nothing was learned "
            "about the compiler and no mode was compared. Ask for a self-contained reproduction (G9).",
        )
    return Verdict(
        first_failure="eager",
        summary=f"Fails in plain eager, without torch.compile ({eager['status']}: {error}): not a compile bug as "
        f"posted. {compared(eager)} Fix the repro or ask the reporter for one that runs in eager.",
    )
