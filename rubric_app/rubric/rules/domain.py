"""RUBRIC.md as code, part 2: routing and ownership (R6), domain labels (R7), Helion (R8),
functorch (R9), CPU Inductor (R10); the review flag (R11) and fuzzer reports (R12) are rules/review.py.

Same shape as rules/general.py: one function per rule id, registered with @rule, returning Findings.
"""

from __future__ import annotations

import re

from rubric_app.rubric.reading.facts import Facts, Finding, I, _add, rule
from rubric_app.rubric.rules.general import (
    AOT_FRAME,
    COMPILE_CALL,
    COMPILE_USE,
    CPU_TITLE,
    INDUCTOR_ERROR,
    INDUCTOR_TITLE,
)
from rubric_app.vocabulary import (
    COMPILE_TIME,
    COMPILE_UX,
    CPU_INDUCTOR_ONCALL,
    CUDA_GRAPHS,
    DDP,
    DETERMINISM,
    DISTRIBUTED_ONCALL,
    DTENSOR,
    EXPORT_ONCALL,
    FLEX_ATTENTION,
    FSDP,
    FUNCTORCH,
    HELION,
    INDUCTOR,
    MEMORY_USAGE,
    NUMERICAL_STABILITY,
    PERFORMANCE,
    PT2_DISPATCHER,
    Kind,
)

# --- R6. PT2 keeps what PT2 owns ---------------------------------------------------------------


@rule("R6.1")
def r6_1_where_is_the_fix(f: Facts) -> list[Finding]:
    """The routing test: where would the fix be made?"""
    return [
        Finding(
            "R6.1", Kind.CHECK, state="needs_human", reason="Where would the fix be made? In PT2 code: PT2 owns it."
        )
    ]


EXPORT_USE = re.compile(
    r"torch\.export\.\w{1,20}|torch\._export\w{0,20}|\bExportedProgram\b|aoti_compile_and_package|\bAOTInductor\b"
    r"|\baot_compile\b|run_decompositions|\[export\]|\bexport(?:ing|ed)? (?:a |the )?(?:model|module|program)",
    I,
)
# The reporter checked that compile is not involved: the fix is outside PT2 (R6.1).
COMPILE_NOT_INVOLVED = re.compile(
    r"(?:torch\.)?compile (?:is fine|works)|no (?:torch\.)?compile is involved|without (?:any )?(?:torch\.)?compile"
    r"|in plain eager|reproduces in eager|eager (?:mode )?(?:too|also) (?:fails|is wrong)"
    r"|also (?:fails|happens|wrong) in eager",
    I,
)
LEAKED_HOOK = re.compile(
    r"leak\w{0,3}[^\n]{0,40}?(?:aot_?autograd|hook)|(?:aot_?autograd|hook)[^\n]{0,40}?leak\w{0,3}", I
)


@rule("R6.2")
def r6_2_keep(f: Facts) -> list[Finding]:
    """Do not redirect: export leaking an AOTAutograd hook, DTensor error UX under compile, an Inductor bug
    in distributed training."""
    hit = f.find(LEAKED_HOOK)
    if hit:
        return [
            Finding(
                "R6.2",
                Kind.CHECK,
                evidence=hit[0],
                source=hit[1],
                state="satisfied",
                reason="a leaked AOTAutograd hook is PT2's to fix: keep it",
            )
        ]
    # A distributed feature's bad error message under compile: PT2 owns the UX.
    ux = f.find(COMPILE_UX_TEXT)
    if ux and f.has(PT2D) and f.has(COMPILE_USE):
        return [
            Finding(
                "R6.2", Kind.ADD, COMPILE_UX, 0.8, ux[0], ux[1], "a bad error message under compile: PT2 owns the UX"
            )
        ]
    return []


DTENSOR_IMPL = re.compile(
    r"sharding (?:propagation|strategy|rule)|\bredistribute\b|\bPlacement\b|\bShard\(\d\)|\bReplicate\(\)", I
)


@rule("R6.3")
def r6_3_redirect(f: Facts) -> list[Finding]:
    """Redirect export-only problems (no compile) to export, DTensor internals to distributed."""
    found: list[Finding] = []
    export = f.find(EXPORT_USE)
    compile_free = not f.has(COMPILE_CALL) or f.has(COMPILE_NOT_INVOLVED)
    if export and compile_free:
        found.append(
            Finding(
                "R6.3",
                Kind.ROUTE,
                EXPORT_ONCALL,
                0.85,
                export[0],
                export[1],
                "an export-only problem, no torch.compile",
            )
        )
    dtensor = f.find(DTENSOR_IMPL)
    if dtensor and f.has(re.compile(r"\bDTensor\b")) and compile_free:
        found.append(
            Finding(
                "R6.3",
                Kind.ROUTE,
                DISTRIBUTED_ONCALL,
                0.8,
                dtensor[0],
                dtensor[1],
                "DTensor's own implementation, no compile",
            )
        )
    return found


PT2D = re.compile(
    r"\bDTensor\b|\bFSDP\d?\b|fully_shard|\bDDP\b|DistributedDataParallel|tensor parallel\w{0,3}|\bdeepspeed\b"
    r"|\btorchrun\b|\bc10d\b",
    I,
)


@rule("R6.4")
def r6_4_pt2d(f: Facts) -> list[Finding]:
    """PT2 + distributed: add oncall: distributed for visibility, keep oncall: pt2 (no full handoff)."""
    hit = f.find(PT2D, "title")
    if hit and f.has(COMPILE_USE):
        return [
            Finding(
                "R6.4",
                Kind.ADD,
                DISTRIBUTED_ONCALL,
                0.7,
                hit[0],
                hit[1],
                "PT2-D: visibility for distributed, PT2 keeps it",
            )
        ]
    return []


@rule("R6.5")
def r6_5_visibility_only(f: Facts) -> list[Finding]:
    """Domain module: labels are fine for visibility; an oncall: label only on a handoff (engine enforces)."""
    return []


# --- R7. Domain and feature labels ----------------------------------------------------------------

VISIBILITY = (
    (DTENSOR, re.compile(r"\bDTensor\b|tensor parallel\w{0,3}|\bparallelize_module\b", I)),
    (FSDP, re.compile(r"\bFSDP\d?\b|\bfully_shard\b|FullyShardedDataParallel", I)),
    (DDP, re.compile(r"\bDDP\b|DistributedDataParallel", I)),
    (
        FLEX_ATTENTION,
        re.compile(r"flex[_ ]?attention|\bBlockMask\b|\bblock_mask\b|create_block_mask|mask_mod|score_mod", I),
    ),
)


@rule("R7.1")
def r7_1_visibility(f: Facts) -> list[Finding]:
    """DTensor, FSDP, DDP, flex attention: their module labels for visibility."""
    found: list[Finding] = []
    for label, pattern in VISIBILITY:
        found += _add(f, "R7.1", label, pattern, 0.9, 0.7, "for visibility")
    return found


FEATURES = (
    (
        "compile-cache",
        re.compile(
            r"\bFXGraphCache\b|\bFX graph cache\b|\bfx_graph_cache\b|\bcompile-cache\b|\bcompile cache\b"
            r"|\bcache (?:hit|miss)\w{0,2}|\bmega[ -]?cache\b|TORCHINDUCTOR_CACHE_DIR|\bautotune cache\b"
            r"|\bwarm cache\b",
            I,
        ),
        0.85,
        0.7,
    ),
    (
        DETERMINISM,
        re.compile(r"use_deterministic_algorithms|\bnon-?deterministic\w{0,3}|\bdeterminism\b", I),
        0.9,
        0.7,
    ),
    (
        COMPILE_TIME,
        re.compile(
            r"\bcompile-time\b|\bcompile time\b|\bcompilation time\b|\bslow to compile|\blong to compile"
            r"|\bslow compil\w{1,6}|\blong compil\w{1,6}|\bcompilation is (?:very |extremely |too )?slow"
            r"|\bcompile is (?:very |extremely |too )?slow"
            r"|takes? \d{1,5} ?(?:s|sec|seconds|minutes|mins|hours) to compile|\bcold start\b|\bstartup time\b",
            I,
        ),
        0.85,
        0.6,
    ),
    (NUMERICAL_STABILITY, re.compile(r"numerical(?:ly)? (?:stab\w{1,6}|unstable|instability)", I), 0.85, 0.6),
    (
        MEMORY_USAGE,
        re.compile(r"\bOOM\b|out of memory|peak memory|memory (?:usage|leak|footprint|consumption)|more memory", I),
        0.85,
        0.6,
    ),
    (
        PERFORMANCE,
        re.compile(
            r"slower than eager|\d{1,3}(?:\.\d{1,2})?\s?x slower|perf(?:ormance)? regression|\bperformance bug\b"
            r"|slows? down|\bslowdown\b"
            r"|\b(?:much |significantly |\d{1,3}%\s)?slower\b|\bthroughput\b|\bscales? poorly\b"
            r"|\bredundant (?:compute|computation|loads?|copies|kernels?)\b",
            I,
        ),
        0.8,
        0.0,
    ),
    (CUDA_GRAPHS, re.compile(r"cuda ?graphs?\b|\bcudagraph\w{0,20}|CUDAGraph\w{0,10}", I), 0.9, 0.0),
)


@rule("R7.2")
def r7_2_features(f: Facts) -> list[Finding]:
    """Feature labels (check the catalog first): caching, determinism, compile time, numerics, memory,
    performance, cuda graphs."""
    found: list[Finding] = []
    for label, pattern, title_w, text_w in FEATURES:
        found += _add(f, "R7.2", label, pattern, title_w, text_w, "feature label")
    mode = f.find(REDUCE_OVERHEAD, "title")
    if mode and not any(x.label == CUDA_GRAPHS for x in found):  # read after the learned labeler (issue 43)
        found.append(Finding("R7.2", Kind.ADD, CUDA_GRAPHS, 0.9, mode[0], mode[1], "CUDA graphs' mode", learned=False))
    return found


# torch.compile's CUDA graphs mode, named in the title: the report is about CUDA graphs.
REDUCE_OVERHEAD = re.compile(r"\breduce-overhead\b", I)


COMPILE_UX_TEXT = re.compile(
    r"\bno suggestion\w{0,2}|\b\d{2,4}-line traceback|\bdid you mean\b|hard to understand|"
    r"(?:bad|confusing|unhelpful|misleading|inscrutable|cryptic|unclear|better|improve\w{0,3}|irrelevant)"
    r" (?:error )?(?:messages?|errors?|warnings?|logs?|logging)"
    r"|error messages? (?:is|are) (?:confusing|unhelpful|misleading)|\bwarning spam\b"
    r"|(?:shorter|noisy|spammy|verbose) logs?"
    # An error that says nothing: "opaque AssertionError", "bare exception", "no hint about placements".
    r"|\b(?:opaque|bare|obscure|useless|vague|cryptic) `?(?:\w{0,20}Error|exceptions?|assert(?:ion)?s?|tracebacks?)\b"
    r"|\bno (?:hint|clue|indication) (?:about|what|why|where)\b|\b(?:PT2|compile)'s UX\b",
    I,
)


@rule("R7.3")
def r7_3_compile_ux(f: Facts) -> list[Finding]:
    """The quick reference's holistic label: UX and error messages -> compile ux."""
    return _add(f, "R7.3", COMPILE_UX, COMPILE_UX_TEXT, 0.85, 0.6, "the complaint is the user experience")


# R7.4 (a label the catalog lacks is shown as "not in the catalog") is enforced by the engine.


# --- R8. Helion ----------------------------------------------------------------------------------

# "plain Triton, no Helion" is not a mention (R8.5).
HELION_TEXT = re.compile(r"@helion\.kernel|helion\.language|\bhl\.tile\b|(?<!no )(?<!not )(?<!without )\bhelion\b", I)
PLAIN_TRITON = re.compile(r"@triton\.jit|\btl\.(?:load|store|program_id|arange|dot)\b|\btriton\.jit\b", I)
GENERATED_TRITON = re.compile(
    r"triton_heuristics|generated (?:triton )?(?:kernel|code)|\btriton_(?:poi|red|per|tem)_\w{1,60}", I
)


@rule("R8.1")
def r8_1_helion(f: Facts) -> list[Finding]:
    """Mentions helion, @helion.kernel, helion.language, hl.tile or helion frames: module: helion."""
    return _add(f, "R8.1", HELION, HELION_TEXT, 0.95, 0.9, "Helion is named")


@rule("R8.2")
def r8_2_helion_alone(f: Facts) -> list[Finding]:
    """A Helion kernel wrong on its own, without torch.compile: helion only."""
    if f.has(HELION_TEXT) and (not f.has(COMPILE_CALL) or f.has(COMPILE_NOT_INVOLVED)):
        hit = f.find(HELION_TEXT)
        return [
            Finding(
                "R8.2",
                Kind.AVOID,
                INDUCTOR,
                evidence=hit[0],
                source=hit[1],
                reason="the Helion kernel fails without torch.compile: helion only",
            )
        ]
    return []


@rule("R8.3")
def r8_3_helion_under_compile(f: Facts) -> list[Finding]:
    """A Helion kernel under torch.compile, or Inductor's fusion of a Helion template: helion + inductor."""
    if f.has(HELION_TEXT):
        hit = f.find(COMPILE_CALL) or f.find(re.compile(r"template fusion|epilogue fusion|prologue fusion", I))
        if hit:
            return [Finding("R8.3", Kind.ADD, INDUCTOR, 0.85, hit[0], hit[1], "a Helion kernel inside torch.compile")]
    return []


@rule("R8.4")
def r8_4_plain_triton(f: Facts) -> list[Finding]:
    """Plain Triton without Helion is Inductor, not Helion."""
    hit = f.find(PLAIN_TRITON)
    if hit and not f.has(HELION_TEXT):
        return [
            Finding("R8.4", Kind.ADD, INDUCTOR, 0.8, hit[0], hit[1], "user Triton kernels go through Inductor"),
            Finding("R8.4", Kind.AVOID, HELION, evidence=hit[0], source=hit[1], reason="plain Triton, no Helion"),
        ]
    return []


@rule("R8.5")
def r8_5_generated_triton(f: Facts) -> list[Finding]:
    """Inductor's generated Triton code is not Helion: require an explicit Helion import or mention."""
    hit = f.find(GENERATED_TRITON)
    if hit and not f.has(HELION_TEXT) and not f.has(PLAIN_TRITON):
        return [
            Finding(
                "R8.5",
                Kind.AVOID,
                HELION,
                evidence=hit[0],
                source=hit[1],
                reason="generated Triton from Inductor, not Helion",
            )
        ]
    return []


# --- R9. functorch and compile -----------------------------------------------------------------

FUNCTORCH_TRANSFORM = re.compile(
    r"torch\.func\.(?:grad|vjp|jvp|vmap|jacrev|jacfwd|hessian|functional_call|grad_and_value)\b|\bfunctorch\b|\bvmap\b|\bjacrev\b|\bjacfwd\b|\bvjp\b|\bjvp\b",
    I,
)


@rule("R9.1")
def r9_1_functorch(f: Facts) -> list[Finding]:
    """Compiling a functorch transform: module: functorch and dynamo-functorch."""
    hit = f.find(FUNCTORCH_TRANSFORM)
    if not hit or not f.has(COMPILE_CALL):
        return []
    weight = 0.85 if hit[1] == "title" else 0.7
    return [
        Finding("R9.1", Kind.ADD, FUNCTORCH, weight, hit[0], hit[1], "a functorch transform under compile"),
        Finding("R9.1", Kind.ADD, "dynamo-functorch", weight, hit[0], hit[1], "a functorch transform under compile"),
    ]


@rule("R9.2")
def r9_2_functorch_dispatcher(f: Facts) -> list[Finding]:
    """pt2-dispatcher on top of functorch only when AOTAutograd is at the fault."""
    if not f.has(FUNCTORCH_TRANSFORM) or not f.has(COMPILE_CALL):
        return []
    frame = f.find(AOT_FRAME, "text")
    if frame:
        return [
            Finding(
                "R9.2",
                Kind.ADD,
                PT2_DISPATCHER,
                0.7,
                frame[0],
                frame[1],
                "AOTAutograd at the fault of a functorch transform",
            )
        ]
    hit = f.find(FUNCTORCH_TRANSFORM)
    return [
        Finding(
            "R9.2",
            Kind.AVOID,
            PT2_DISPATCHER,
            evidence=hit[0],
            source=hit[1],
            reason="a functorch transform bug: module: functorch, not the dispatcher",
        )
    ]


# --- R10. CPU Inductor routing ----------------------------------------------------------------------

CPU_HALF = re.compile(r"(?:float16|fp16|bfloat16|bf16)[^\n]{0,30}?\bon cpu\b|\bcpu\b[^\n]{0,30}?(?:float16|fp16)", I)
# A title that names a GPU beside the CPU ("... (CUDA and CPU)", "a CPU index and CUDA tensors") reports a
# bug on both devices or a device mix-up, not one only the CPU shows (R2.4).
OTHER_DEVICE_TITLE = re.compile(r"\bcuda\b|\bgpus?\b|\bxpu\b|\bmps\b|\brocm\b", I)


@rule("R10")
def r10_cpu_inductor(f: Facts) -> list[Finding]:
    """Clearly Inductor's CPU backend ([CPU] tag, MKLDNN, float16 on CPU, C++ codegen): oncall: cpu inductor."""
    title = f.find(CPU_TITLE, "title")
    if (
        title
        and not f.has(OTHER_DEVICE_TITLE, "title")
        and (f.has(INDUCTOR_TITLE, "title") or f.has(INDUCTOR_ERROR) or f.has(COMPILE_USE, "title"))
    ):
        return [Finding("R10", Kind.ROUTE, CPU_INDUCTOR_ONCALL, 0.9, title[0], title[1], "tagged CPU in the title")]
    hit = f.find(CPU_HALF)
    if hit:
        return [Finding("R10", Kind.ROUTE, CPU_INDUCTOR_ONCALL, 0.75, hit[0], hit[1], "reduced precision on CPU")]
    return []
