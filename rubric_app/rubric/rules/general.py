"""RUBRIC.md as code, part 1: the general flow (G) and the components (R1-R5), one function per rule id.

Each rule reads Facts and returns Findings: a label to ADD with a weight, a label to AVOID, a ROUTE,
a FLAG or a checklist item. The engine (engine/assess.py) weighs the findings, applies the invariants
(G4-G7) and builds the Assessment. Part 2 (R6-R12: routing, domains, Helion, functorch, review,
fuzzer) is rules/domain.py.

Weights say how directly the evidence shows the root cause (G8): a bisection verdict or a backend
comparison in the comments beats an exception class, which beats a tag in the title, which beats a
keyword somewhere in the body. Patterns use bounded repetitions only (no nested `.*`), so hostile
text cannot make them backtrack for long.
"""

from __future__ import annotations

import re

from rubric_app.rubric.reading.facts import Facts, Finding, I, _add, rule
from rubric_app.rubric.reading.thread import BackendResult, ThreadFact, backend_results, conclusion, ladder, read_thread
from rubric_app.vocabulary import (
    AUTOGRAD,
    CPU_INDUCTOR_ONCALL,
    DECOMPOSITIONS,
    DYNAMIC_SHAPES,
    DYNAMO,
    FX,
    INDUCTOR,
    PT2_DISPATCHER,
    PT2_ONCALL,
    Kind,
    is_oncall,
)

# --- shared signals --------------------------------------------------------------

COMPILE_CALL = re.compile(r"torch\.compile|\.compile\(|@torch\.compile|torch\._dynamo\.optimize", I)
COMPILE_USE = re.compile(r"torch\.compile|@torch\.compile|torch\._dynamo|\bdynamo\b|\bcompiled?\b", I)
AOT_FRAME = re.compile(r"torch/_functorch/_aot_autograd/[\w/]{1,80}\.py|_aot_autograd\b|aot_autograd\.py", I)
SILENT_WRONG = re.compile(
    r"silent(?:ly)?\b|\bwrong (?:results?|outputs?|values?|answers?|gradients?|graph)"
    r"|\bincorrect(?:ly)? (?:results?|outputs?|values?|gradients?|computes?|returns?|produces?)"
    r"|produces? (?:numerically )?(?:different|inconsistent|incorrect|wrong)"
    r"|\b(?:output|numerical|result|accuracy) mismatch|\b(?:output|numerical|result|accuracy) discrepancy"
    r"|\b(?:output|numerical|result|accuracy) inconsistency"
    r"|\binconsisten(?:t|cy) (?:results?|outputs?|behaviou?r)|\[inconsisten\w{0,4}\]|differs? from eager"
    r"|diverges? from eager|eager and compiled? (?:disagree|differ)"
    r"|\bdivergence\b|return NaN|returns NaN|output NaN|outputs NaN|\bmismatch (?:between|with|compared)"
    # "compile ignores X" / "does nothing": no error, just not what eager does.
    r"|\bignor(?:es|ed|ing) (?:the |a |my )?`?[\w.]{2,40}|\bdoes not (?:recompile|persist|propagate|preserve)"
    r"|\bdoesn't (?:recompile|persist|propagate|preserve)|\bdoes nothing\b"
    r"|\bincorrect(?:ly)? (?:indices|strides|shapes?)\b|\bprecision (?:bug|is lower|appears to be lower|loss)",
    I,
)


# --- G. The general flow -------------------------------------------------------------


@rule("G0")
def g0_other_oncall(f: Facts) -> list[Finding]:
    """An issue already in another oncall's queue is theirs: skip it (cpu inductor is PT2's own lane)."""
    others = sorted(l for l in f.labels if is_oncall(l) and l not in (PT2_ONCALL, CPU_INDUCTOR_ONCALL))
    if others:
        return [Finding("G0", Kind.ROUTE, others[0], 1.0, others[0], "labels", "already in another oncall's queue")]
    if CPU_INDUCTOR_ONCALL in f.labels:
        return [
            Finding(
                "G0", Kind.ROUTE, CPU_INDUCTOR_ONCALL, 1.0, CPU_INDUCTOR_ONCALL, "labels", "PT2's CPU Inductor lane"
            )
        ]
    return []


# G9 (a repro that needs a download, a GPU, a cluster...) is rules/skill_additions.py's.


QUESTION_TITLE = re.compile(
    r"^\s{0,5}(?:\[?question\]?:?\s|how (?:do|can|to|should)\b|is (?:it|there) (?:possible|a way)\b"
    r"|why (?:does|is|do)\b)",
    I,
)
QUESTION_END = re.compile(r"\?\s{0,5}$")
# What makes a question-shaped title a bug report after all: a traceback, a crash, wrong results
# (not the bug template's header: the new-issue form puts it on questions too).
BUG_WORDS = re.compile(
    r"Traceback \(most recent call last\)|segmentation fault|\bcrash\w{0,3}|wrong (?:results?|outputs?)"
    r"|incorrect (?:results?|outputs?)",
    I,
)


@rule("G1")
def g1_question(f: Facts) -> list[Finding]:
    """A usage question rather than a bug: suggest the forum template (a human decides)."""
    title = f.sources[0].text
    hit = f.find(QUESTION_TITLE, "title") or f.find(QUESTION_END, "title")
    if hit and not BUG_WORDS.search(title) and not f.has(BUG_WORDS, "text"):
        return [
            Finding(
                "G1",
                Kind.CHECK,
                weight=0.6,
                evidence=title,
                source="title",
                state="needs_human",
                reason="Reads like a question, not a bug: close with the forum template?",
            )
        ]
    return g1_thread_question(f)


OTHER_REPO = re.compile(r"\b(?:torchvision|torchaudio|torchtext|executorch|torchrec|torchtune)\b", I)


@rule("G2")
def g2_other_repo(f: Facts) -> list[Finding]:
    """The title is about another repo's library, with no compile involved: transfer it."""
    hit = f.find(OTHER_REPO, "title")
    moved = g2_thread_transfer(f)
    if moved:
        return moved
    if hit and not f.has(COMPILE_USE, "title"):
        return [
            Finding(
                "G2",
                Kind.CHECK,
                evidence=hit[0],
                source=hit[1],
                state="needs_human",
                reason=f"Might belong in the {hit[0]} repo: transfer, then stop.",
            )
        ]
    return []


# G3-G7 are invariants of the whole assessment; the engine applies them (engine/assess.py).
# G8 (root cause over keywords) is the weighting scheme of this module.


# --- R1. Dynamo or dynamic shapes --------------------------------------------------------

DYNAMIC_FALSE_FIXES = re.compile(
    r"dynamic\s{0,2}=\s{0,2}False[^\n.]{0,80}?"
    r"\b(?:works|fix(?:es|ed)?|pass(?:es)?|goes away|no (?:error|issue)|resolves?|succeeds|avoids?)"
    r"|(?:works|fix(?:es|ed)?|passes|goes away|resolved?|succeeds)"
    r"[^\n.]{0,40}?(?:with|using|setting|when) `?dynamic\s{0,2}=\s{0,2}False",
    I,
)


@rule("R1.1")
def r1_1_dynamic_false(f: Facts) -> list[Finding]:
    """The failure disappears with dynamic=False: dynamic shapes, and only that."""
    hit = f.find(DYNAMIC_FALSE_FIXES)
    if not hit:
        return []
    return [
        Finding("R1.1", Kind.ADD, DYNAMIC_SHAPES, 1.0, hit[0], hit[1], "goes away with dynamic=False"),
        Finding(
            "R1.1",
            Kind.AVOID,
            DYNAMO,
            evidence=hit[0],
            source=hit[1],
            reason="the failure disappears with dynamic=False: dynamic shapes, not Dynamo",
        ),
    ]


DYNAMO_TITLE = re.compile(
    r"\[(?:torch)?dynamo\]|\b(?:torch)?dynamo\b|graph[ _-]?breaks?\b|\bbytecode\b|\brecompil\w{0,6}", I
)
DYNAMO_ERROR = re.compile(
    r"torch\._dynamo\.exc\.(?:Unsupported|InternalTorchDynamoError|UserError)\b|\bInternalTorchDynamoError\b"
    r"|\bUnsupported: [^\n]{1,80}|graph break\w{0,3}|graph_break\w{0,3}|graph-break\w{0,3}|graphbreak\w{0,3}"
    r"|\bbytecode\b|\bskipfiles\b|InstructionTranslator\w*"
    r"|\b\w{2,40}Variable\(\w{0,40}\)?|\bfullgraph\s{0,2}=\s{0,2}True\b[^\n]{0,60}?(?:fails|error)",
    I,
)


@rule("R1.2")
def r1_2_graph_breaks(f: Facts) -> list[Finding]:
    """Graph breaks, bytecode analysis or transformation errors: Dynamo."""
    named = _add(f, "R1.2", DYNAMO, DYNAMO_TITLE, 0.8, 0.0, "Dynamo named in the title")
    shown = f.find(DYNAMO_ERROR, "text")
    if named and shown:
        # Named in the title and shown by its own error: evidence enough for a second component (R1).
        return [
            Finding(
                "R1.2",
                Kind.ADD,
                DYNAMO,
                0.9,
                shown[0],
                shown[1],
                "Dynamo named in the title and a Dynamo tracing error",
            )
        ]
    return named or _add(f, "R1.2", DYNAMO, DYNAMO_ERROR, 0.8, 0.7, "a Dynamo tracing error or graph break")


SYMBOLIC = re.compile(
    r"\bSym(?:Int|Float|Bool|Node)\w{0,20}|\bsympy\b[\w.]{0,40}|\bShapeEnv\b"
    r"|symbolic (?:shapes?|sizes?|ints?|expressions?)"
    r"|\bguard(?:s|ing)? (?:failure|on (?:data|a size|size))\w{0,10}|dynamic\s{0,2}=\s{0,2}True|\bmark_dynamic\b"
    r"|maybe_mark_dynamic"
    r"|\bdynamic[ _-]shapes?\b|size[ _-]oblivious|\bspeciali[sz]\w{1,8}"
    r"|\bdynamic (?:input|batch|dim\w{0,6}|sequence)\w{0,3}"
    r"|CantSplit|ConstraintViolation\w{0,10}",
    I,
)


@rule("R1.3")
def r1_3_symbolic(f: Facts) -> list[Finding]:
    """Guard failures, SymInt / symbolic size problems: dynamic shapes."""
    return _add(f, "R1.3", DYNAMIC_SHAPES, SYMBOLIC, 0.85, 0.6, "symbolic sizes, guards or dynamic=True")


DATA_DEPENDENT = re.compile(
    r"GuardOnDataDependentSymNode|data[ -]dependent|\bunbacked\b(?: symbols?| sizes?| ints?)?|\bsize[ -]like\b",
    I,
)
DATA_DEPENDENT_OPS = re.compile(r"\.item\(\)|\.nonzero\(|torch\.nonzero\b|\.tolist\(\)|torch\.unique\b", I)


@rule("R1.4")
def r1_4_data_dependent(f: Facts) -> list[Finding]:
    """Data-dependent operations (.item(), nonzero, unbacked sizes): dynamic shapes."""
    found = _add(f, "R1.4", DYNAMIC_SHAPES, DATA_DEPENDENT, 0.85, 0.65, "data-dependent sizes")
    # .item() inside a repro is common boilerplate: only the title makes it the subject.
    return found or _add(f, "R1.4", DYNAMIC_SHAPES, DATA_DEPENDENT_OPS, 0.75, 0.0, "a data-dependent op is the subject")


@rule("R1.5")
def r1_5_compile_is_not_dynamo(f: Facts) -> list[Finding]:
    """Using torch.compile is not evidence for Dynamo: warn when that is all there is."""
    hit = f.find(re.compile(r"torch\.compile", I))
    if hit and not f.has(DYNAMO_TITLE, "title") and not f.has(DYNAMO_ERROR):
        return [
            Finding(
                "R1.5",
                Kind.AVOID,
                DYNAMO,
                evidence=hit[0],
                source=hit[1],
                reason='"it uses torch.compile" is not evidence for Dynamo',
            )
        ]
    return []


# --- R2. Backend bisection for correctness problems ---------------------------------------


@rule("R2")
def r2_read_comments(f: Facts) -> list[Finding]:
    """Read the comments first: they often hold the backend results or a maintainer's diagnosis.

    The diagnosis and a repro already run below Inductor are checklist questions, not suggestions: as
    suggestions they did not raise the held-out figures (README, rubric engine).
    """
    return _comments_checked(f) + _thread_diagnosis(f) + _repro_below_inductor(f) + r2_thread_conclusion(f)


def _comments_checked(f: Facts) -> list[Finding]:
    comments = [s for s in f.sources if s.name.startswith("comment:")]
    # The first failure a comment reports says most; else the first result.
    reported = min(
        (x for x in backend_reports(f) if x.source.startswith("comment:")), key=lambda x: not x.failed, default=None
    )
    if reported:
        return [
            Finding(
                "R2",
                Kind.CHECK,
                evidence=reported.evidence,
                source=reported.source,
                state="satisfied",
                reason="a comment reports a backend result",
            )
        ]
    backend = re.compile(r"\b(?:aot_eager(?:_decomp_partition)?|backend\s{0,2}=\s{0,2}['\"]\w{1,30}['\"])", I)
    for source in comments:
        match = backend.search(source.text)
        if match:
            return [
                Finding(
                    "R2",
                    Kind.CHECK,
                    evidence=match.group(0),
                    source=source.name,
                    state="satisfied",
                    reason="a comment reports a backend result",
                )
            ]
    state = "not_applicable" if not comments else "needs_human"
    return [Finding("R2", Kind.CHECK, state=state, reason="read the comments for backend results before bisecting")]


# A maintainer's conclusion in the thread, naming the component at fault ("looks like an AOTAutograd
# problem", "inductor doesn't preserve the grad", "a bug in dynamo's trace rules").
_COMPONENT_NAMES = (
    (DYNAMO, r"(?:torch)?dynamo(?:'s)?"),
    (INDUCTOR, r"(?:torch)?inductor(?:'s)?"),
    (PT2_DISPATCHER, r"aot[_ ]?autograd(?:'s)?|aot[_ ]?dispatch(?:er)?|functionali[sz]ation|fake ?tensor(?:'s)?"),
    (DYNAMIC_SHAPES, r"dynamic shapes?|unbacked sym\w{1,6}|symbolic shapes?"),
    (DECOMPOSITIONS, r"(?:the |a )?decomposition"),
)
_NAMED = "|".join(names for _label, names in _COMPONENT_NAMES)
_ANY_NAME = re.compile(_NAMED, I)
_NAME_OF = tuple((label, re.compile(rf"\b(?:{names})", I)) for label, names in _COMPONENT_NAMES)
DIAGNOSIS = re.compile(
    rf"\b(?:this is|it's|it is|looks like|seems like|seems to be|appears to be|must be|probably|likely|so) "
    rf"(?:a |an |the )?(?:general |real |genuine )?(?:{_NAMED})(?: side)? (?:bug|issue|problem|regression)\b"
    rf"|\b(?:root[- ]?caused? (?:it )?(?:to|is)|the (?:bug|issue|problem) is in|bug in|issue in|problem in"
    rf"|fix (?:is|belongs) in) (?:the )?(?:{_NAMED})\b"
    rf"|\b(?:{_NAMED}) (?:doesn't|does not|isn't|is not|fails to|can't|cannot)"
    rf" (?:preserve|handle|support|trace|respect|properly)\b"
    rf"|\b(?:not|isn't|is not) (?:\w{{1,20}} ){{0,2}}"
    rf"(?:correctly |properly )?\w{{1,20}}ing [^\n.]{{0,40}}? in (?:{_NAMED})",
    I,
)


def _thread_diagnosis(f: Facts) -> list[Finding]:
    """The latest comment that concludes where the bug is, as a question naming that component."""
    for source in reversed([s for s in f.sources if s.name.startswith("comment:")]):
        # Naming a component at all is rare enough to test first; the full pattern is slow.
        match = _ANY_NAME.search(source.text) and DIAGNOSIS.search(source.text)
        if match:
            label = next(label for label, name in _NAME_OF if name.search(match.group(0)))
            return [
                Finding(
                    "R2",
                    Kind.CHECK,
                    label,
                    evidence=match.group(0),
                    source=source.name,
                    state="needs_human",
                    reason=f"A comment concludes the bug is in {label}: does the suggestion agree?",
                )
            ]
    return []


def _repro_below_inductor(f: Facts) -> list[Finding]:
    """A repro compiled with backend='aot_eager' or 'eager' never reaches Inductor: ask before blaming it."""
    backend = f.code.compile_kwargs.get("backend", "")
    if re.search(r"['\"](?:aot_)?eager(?:_decomp_partition)?['\"]", backend):
        return [
            Finding(
                "R2",
                Kind.CHECK,
                INDUCTOR,
                evidence=backend,
                source="code",
                state="needs_human",
                reason="The repro compiles with a backend that runs no Inductor code: not module: inductor?",
            )
        ]
    return []


def backend_reports(f: Facts) -> list[BackendResult]:
    """Every backend result the thread reports, in thread order (thread.backend_results), read once."""
    if f.backends is None:
        f.backends = backend_results(f.sources)
    return f.backends


def _reported(f: Facts, backend: str, failed: bool) -> BackendResult | None:
    """The thread's latest word on `backend`, when it says it fails (failed=True) or passes (failed=False)."""
    x = ladder(backend_reports(f)).get(backend)
    return x if x is not None and x.failed == failed else None


@rule("R2.1")
def r2_1_aot_eager_fails(f: Facts) -> list[Finding]:
    """Fails on aot_eager, passes in eager: pt2-dispatcher (failing with backend='eager' too is R2.3's)."""
    hit = _reported(f, "aot_eager", failed=True)
    if hit and not _reported(f, "eager", failed=True):
        return [Finding("R2.1", Kind.ADD, PT2_DISPATCHER, 0.9, hit.evidence, hit.source, "reproduces on aot_eager")]
    return []


@rule("R2.2")
def r2_2_inductor(f: Facts) -> list[Finding]:
    """Fails on inductor but not aot_eager, or Inductor's own errors and code: Inductor."""
    hit = _reported(f, "aot_eager", failed=False)
    # Passing aot_eager only places the bug after AOTAutograd: failing aot_eager_decomp_partition
    # too puts it in the decompositions, not codegen (R2.5); an Inductor that passes as well shows no backend at fault.
    if (
        hit
        and not _reported(f, "aot_eager_decomp_partition", failed=True)
        and not _reported(f, "inductor", failed=False)
    ):
        return [
            Finding(
                "R2.2",
                Kind.ADD,
                INDUCTOR,
                0.95,
                hit.evidence,
                hit.source,
                "passes on aot_eager, so the fault is in Inductor",
            )
        ]
    return (
        _add(f, "R2.2", INDUCTOR, INDUCTOR_TITLE, 0.85, 0.0, "Inductor named in the title")
        or _add(f, "R2.2", INDUCTOR, INDUCTOR_ERROR, 0.8, 0.75, "an Inductor error or generated kernel")
        or _add(f, "R2.2", INDUCTOR, INDUCTOR_WEAK, 0.5, 0.45, "Inductor code generation is involved")
        or _default_backend_wrong(f)
    )


def _default_backend_wrong(f: Facts) -> list[Finding]:
    """Wrong numbers under compile with no backend named: Inductor is the default backend, so the
    likeliest place; a weak guess a bisection confirms or overrides (R2.2)."""
    if not f.has(COMPILE_USE):
        return []
    return _add(f, "R2.2", INDUCTOR, SILENT_WRONG, 0.5, 0.45, DEFAULT_BACKEND_GUESS)


# The reason of that guess: the engine never pre-selects a component resting on it (R2: bisect first).
DEFAULT_BACKEND_GUESS = "wrong results with the default (Inductor) backend; bisect to confirm"


INDUCTOR_TITLE = re.compile(r"\[(?:torch)?inductor\]|\b(?:torch)?inductor\b|\btriton\b|\bcodegen\b|max[-_]autotune", I)
INDUCTOR_ERROR = re.compile(
    r"\bInductorError\b|torch\._inductor\.exc\.\w+|\bLoweringException\b|\bCppCompileError\b|C\+\+ compile error"
    r"|triton\.compiler\.errors\.\w+|\bCompilationError\b|\bmax[-_]autotune\b|\bcpp_wrapper\b"
    r"|generated (?:triton |c\+\+ )?(?:kernel|code)"
    r"|\btl\.(?:load|store|where|full|sum|dot)\b|@triton\.jit|triton_heuristics|\bcodegen\b"
    # BackendCompilerFailed wraps an exception of the backend compiler: Inductor unless another backend is named.
    r"|\bBackendCompilerFailed\b",
    I,
)
INDUCTOR_WEAK = re.compile(r"torch/_inductor/[\w/]{1,80}\.py|\binductor\b|\btriton\b", I)


@rule("R2.3")
def r2_3_fails_tracing(f: Facts) -> list[Finding]:
    """Fails while tracing, before any backend runs (the eager backend fails too): Dynamo."""
    hit = _reported(f, "eager", failed=True)
    if hit:
        return [
            Finding(
                "R2.3", Kind.ADD, DYNAMO, 0.95, hit.evidence, hit.source, "fails even with backend='eager': tracing"
            )
        ]
    return []


CPU_TITLE = re.compile(r"\[cpu\]|\bcpu\b|mkldnn|onednn|\bx86\b|\bavx\w{0,6}|\bvectori[sz]ed\b|\bwindows\b|\bmsvc\b", I)
CPU_ONLY = re.compile(
    r"only on cpu|only on the cpu|only with cpu|(?:works|passes|fine) on cuda[^\n.]{0,40}?(?:but|fails) (?:on )?cpu"
    r"|(?:works|passes|fine) on gpu[^\n.]{0,40}?(?:but|fails) (?:on )?cpu"
    r"|\bmkldnn\w{0,20}|\bonednn\b|\bCppCompileError\b|C\+\+ compile error|cpp_fused_\w{1,60}|\bMSVC\b"
    r"|codegen/cpp\w{0,20}\.py|\bCppKernel\w{0,20}|\bCppScheduling\b|C\+\+ backend|C\+\+ CPU backend",
    I,
)
# A CPU-only torch build in a pasted version string says what the reporter installed, not that the bug
# is CPU-only (R2.4): nobody checked CUDA. A question, never a route.
CPU_BUILD = re.compile(r"\b[12]\.\d{1,2}\.\d{1,2}(?:\.dev\d{8})?\+cpu\b", I)
# collect_env's line on a machine without a usable GPU: the same question.
NO_CUDA = re.compile(r"Is CUDA available:[ \t]{0,8}False", I)


# Tensors made without a device live on the CPU: a repro that never names another device runs
# Inductor's CPU backend.
TENSOR_FACTORY = re.compile(r"\btorch\.(?:rand|randn|randint|ones|zeros|tensor|empty|full|arange)\(", I)
OTHER_DEVICE = re.compile(r"cuda|\bgpu\b|device|\.to\(|\bmps\b|\bxpu\b|\bnpu\b|\bhpu\b|\btriton\b", I)


@rule("R2.4")
def r2_4_cpu_only(f: Facts) -> list[Finding]:
    """An Inductor problem that fails only on CPU goes to the cpu inductor sub-queue (see R10)."""
    hit = f.find(CPU_ONLY)
    if hit:
        return [Finding("R2.4", Kind.ROUTE, CPU_INDUCTOR_ONCALL, 0.8, hit[0], hit[1], "Inductor's CPU backend")]
    # The environment report says what was installed: read for this question only (text.split_environment).
    build = f.find(CPU_BUILD) or f.find_environment(CPU_BUILD)
    if build:
        return [
            Finding(
                "R2.4",
                Kind.CHECK,
                evidence=build[0],
                source=build[1],
                state="needs_human",
                reason="A CPU-only torch build (+cpu) was used, so CUDA was never tried: does it pass on CUDA? "
                "Only then route to oncall: cpu inductor.",
            )
        ]
    no_cuda = f.find_environment(NO_CUDA)
    if no_cuda:
        return [
            Finding(
                "R2.4",
                Kind.CHECK,
                evidence=no_cuda[0],
                source=no_cuda[1],
                state="needs_human",
                reason="CUDA was not available where it ran, so it was never tried there: does it pass on CUDA? "
                "Only then route to oncall: cpu inductor.",
            )
        ]
    made = f.find(TENSOR_FACTORY, "text")
    if made and not f.has(OTHER_DEVICE):
        # Failing on the CPU is not failing only there (R2.4, R10: "reproduces on CPU but not CUDA"):
        # a question, not a route.
        return [
            Finding(
                "R2.4",
                Kind.CHECK,
                evidence=made[0],
                source=made[1],
                state="needs_human",
                reason="The repro's tensors get no device, so it ran on the CPU: does it pass on CUDA? "
                "Then route to oncall: cpu inductor.",
            )
        ]
    return []


@rule("R2.5")
def r2_5_decomp_partition(f: Facts) -> list[Finding]:
    """aot_eager_decomp_partition separates decompositions (fails there) from codegen (passes there)."""
    hit = _reported(f, "aot_eager_decomp_partition", failed=True)
    if hit and not _reported(f, "aot_eager", failed=True):
        return [
            Finding(
                "R2.5",
                Kind.ADD,
                DECOMPOSITIONS,
                0.95,
                hit.evidence,
                hit.source,
                "fails on aot_eager_decomp_partition: decompositions",
            )
        ]
    hit = _reported(f, "aot_eager_decomp_partition", failed=False)
    if hit and not _reported(f, "inductor", failed=False):
        return [
            Finding(
                "R2.5",
                Kind.ADD,
                INDUCTOR,
                0.95,
                hit.evidence,
                hit.source,
                "passes on aot_eager_decomp_partition: codegen",
            )
        ]
    return []


# --- R3. Silently dropped operations belong to Dynamo ---------------------------------------

DROPPED_INPLACE = re.compile(
    r"(?:detach_|requires_grad_|retain_grad|register_hook|set_materialize_grads)\(\)?[^\n]{0,80}?"
    r"(?:ignored|skipped|dropped|not (?:applied|respected|work\w{0,3}|captured|preserved)|no effect|doesn't work"
    r"|does not work)"
    r"|(?:ignores?|drops?|skips?)[^\n]{0,30}?(?:detach_|requires_grad_|retain_grad)",
    I,
)


@rule("R3.1")
def r3_1_dropped_inplace(f: Facts) -> list[Finding]:
    """compile silently skips an in-place op that works in eager: Dynamo."""
    return _add(f, "R3.1", DYNAMO, DROPPED_INPLACE, 0.85, 0.8, "an in-place op is silently dropped by tracing")


SIDE_EFFECT = re.compile(
    r"side[ -]effects?|global (?:state|variables?)|\bnonlocal\b|random\.seed|__torch_function__|tensor subclass\w{0,2}"
    r"|autograd\.Function"
    r"|\bfunctools\.\w{1,20}|\bNamedTuple\b|namedtuple|(?:forward|backward)(?:_pre)?_hooks?|register_\w{0,20}hook"
    r"|context manager|\bgenerators?\b"
    r"|\bhooks?\b|activation checkpoint\w{0,3}|torch\.utils\.checkpoint|\bclosures?\b|\bsetattr\b|\binspect\.\w{1,20}"
    r"|\bdict(?:ionary|ionaries|s)?\b|\bitertools\b|\blru_cache\b|\bdataclass\w{0,3}"
    r"|class attribute|attribute is mutated|attributes are mutated|attribute mutated|attributes mutated"
    r"|mutat\w{1,5} (?:a |the )?(?:global|attribute|list|object)|\bcopy\.(?:copy|deepcopy)|python 3\.1\d",
    I,
)


@rule("R3.2")
def r3_2_side_effects(f: Facts) -> list[Finding]:
    """A side effect or a Python feature that tracing must model (globals, hooks, subclasses): Dynamo."""
    return _add(f, "R3.2", DYNAMO, SIDE_EFFECT, 0.7, 0.5, "Python-level behaviour that Dynamo must trace")


@rule("R3.3")
def r3_3_not_autograd(f: Facts) -> list[Finding]:
    """Do not blame autograd for an autograd-related op that compile dropped."""
    hit = f.find(DROPPED_INPLACE)
    if hit:
        return [
            Finding(
                "R3.3",
                Kind.AVOID,
                AUTOGRAD,
                evidence=hit[0],
                source=hit[1],
                reason="eager works, so the autograd engine is fine; the op never reached the graph",
            )
        ]
    return []


# --- R4. Decompositions ------------------------------------------------------------------

DECOMP_WORDS = re.compile(r"\bdecomposition\w{0,2}|\bdecomps?\b|\b_decomp\b|torch\._decomp\w{0,30}|\bdecomposed\b", I)
HIGHER_ORDER_GRAD = re.compile(
    r"(?:higher[- ]order|second[- ]order|double|2nd[- ]order) (?:gradients?|derivatives?|backward)"
    r"|grad(?:ient)? of (?:the )?grad(?:ient)?|hessian",
    I,
)


@rule("R4.1")
def r4_1_operator_numerics(f: Facts) -> list[Finding]:
    """One operator's decomposition gives different numbers traced vs eager: decompositions."""
    return _add(f, "R4.1", DECOMPOSITIONS, DECOMP_WORDS, 0.85, 0.7, "an operator's decomposition")


@rule("R4.2")
def r4_2_higher_order_grads(f: Facts) -> list[Finding]:
    """Wrong higher-order gradients under tracing: decompositions."""
    if f.has(COMPILE_USE) or f.has(re.compile(r"make_fx|aot_function|\btrac(?:e|ed|ing)\b", I)):
        return _add(f, "R4.2", DECOMPOSITIONS, HIGHER_ORDER_GRAD, 0.8, 0.7, "higher-order gradients under tracing")
    return []


MAKE_FX = re.compile(r"\bmake_fx\b[^\n]{0,60}?tracing_mode\s{0,2}=\s{0,2}['\"]symbolic['\"]|\bmake_fx\b", I)


@rule("R4.3")
def r4_3_make_fx(f: Facts) -> list[Finding]:
    """make_fx symbolic tracing diverges from eager: fx + decompositions, staying in oncall: pt2."""
    hit = f.find(MAKE_FX)
    if not hit:
        return []
    return [
        Finding("R4.3", Kind.ADD, FX, 0.8, hit[0], hit[1], "make_fx tracing"),
        Finding("R4.3", Kind.ADD, DECOMPOSITIONS, 0.75, hit[0], hit[1], "make_fx tracing diverges: decompositions"),
    ]


# --- R5. Do not over-tag pt2-dispatcher ----------------------------------------------------

DISPATCHER_TITLE = re.compile(r"\[aot[_ ]?autograd\]|\baot[_ ]?autograd\b|AOTAutograd|\baot[_ ]?dispatch\w{0,3}", I)
DISPATCHER_CAUSE = re.compile(
    r"\bfunctionali[sz]\w{1,10}|\bFakeTensor\w{0,10}|\bfake tensors?\b|\bfake_tensors?\b|\btorch\.library\.\w{1,20}"
    r"|\bcustom ops?\b|\bcustom_ops?\b|\bcustom operators?\b|\bregister_fake\b"
    r"|synthetic[ _]base|input mutations?|(?<!due to )\bmutat\w{1,5} (?:an? )?(?:aliased )?inputs?\b"
    r"|\bmeta (?:kernel|function|impl\w{0,10})s?\b|\bview_replay\b|\bProxyTensor\b",
    I,
)
HOP = re.compile(
    r"flex[_ ]?attention|\bwhile_loop\b|\btorch\.cond\b|\binvoke_subgraph\b|nested_compile_region"
    r"|\bhigher[- ]order op\w{0,8}|associative_scan|\bscan\(",
    I,
)


@rule("R5")
def r5_dispatcher(f: Facts) -> list[Finding]:
    """pt2-dispatcher only when the bug is in AOTAutograd, functionalization, FakeTensor or custom ops."""
    found = (
        _add(f, "R5", PT2_DISPATCHER, DISPATCHER_TITLE, 0.85, 0.0, "AOTAutograd named in the title")
        or _add(
            f, "R5", PT2_DISPATCHER, DISPATCHER_CAUSE, 0.8, 0.6, "functionalization, FakeTensor or custom-op dispatch"
        )
        or _add(f, "R5", PT2_DISPATCHER, HOP, 0.6, 0.45, "a higher-order op, traced by AOT dispatch")
    )
    if found:
        return found
    frame = f.find(AOT_FRAME, "text")
    if frame:
        return [
            Finding(
                "R5",
                Kind.AVOID,
                PT2_DISPATCHER,
                evidence=frame[0],
                source=frame[1],
                reason="_aot_autograd only appears in the stack trace; that is where it failed, not why",
            )
        ]
    return []


# --- The thread's conclusion (thread.py): scope beats keywords (G1, G2, G8, R2, R5) -------------------


def thread_facts(f: Facts) -> list[ThreadFact]:
    """The thread reader's facts for this issue, read once."""
    if f.thread is None:
        comments = f.issue.comments
        authors = {f"comment:{i}": c.author for i, c in enumerate(comments) if c.author}
        f.thread = read_thread(f.sources, authors, f.issue.author)
    return f.thread


@rule("G8")
def g8_thread_scope(f: Facts) -> list[Finding]:
    """A component the thread rules out ("not codegen") or names only as where the error surfaces
    ("AOTAutograd is only the caller"): AVOID it, unless a later comment concludes it after all."""
    facts = thread_facts(f)
    found: list[Finding] = []
    seen: set[str] = set()
    for i, x in enumerate(facts):
        if x.kind not in ("negated", "attributed") or x.label in seen:
            continue
        later = [y for y in facts[i + 1 :] if y.kind == "concluded" and y.label == x.label and y.source != x.source]
        if later:
            continue
        seen.add(x.label)
        rule_id = "R5" if x.label == PT2_DISPATCHER and x.kind == "attributed" else "G8"
        why = "the thread rules it out" if x.kind == "negated" else "named only as where the error surfaces, not why"
        found.append(Finding(rule_id, Kind.AVOID, x.label, evidence=x.evidence, source=x.source, reason=why))
    return found


def r2_thread_conclusion(f: Facts) -> list[Finding]:
    """The thread's latest diagnosis, preferring comments by others than the reporter (R2: read the comments)."""
    last = conclusion(thread_facts(f))
    if last is None or last.source == "body":
        return []
    weight = CONCLUDED_BY_REPORTER if last.by_reporter else CONCLUDED_BY_OTHERS
    return [
        Finding("R2", Kind.ADD, last.label, weight, last.evidence, last.source, "the thread concludes the bug is here")
    ]


# The weight of the thread's conclusion: someone other than the reporter (a maintainer, in practice) is
# surer; the engine ranks that component first (scoring.concluded).
CONCLUDED_BY_OTHERS = 0.8
CONCLUDED_BY_REPORTER = 0.7


def g2_thread_transfer(f: Facts) -> list[Finding]:
    """Someone other than the reporter says the fix belongs in another repository: transfer, stop."""
    moved = [x for x in thread_facts(f) if x.kind == "transfer" and x.source != "body" and not x.by_reporter]
    if not moved:
        return []
    x = moved[-1]
    return [
        Finding(
            "G2", Kind.ROUTE, x.label, 0.9, x.evidence, x.source, f"the fix belongs in {x.label}: transfer, then stop"
        )
    ]


def g1_thread_question(f: Facts) -> list[Finding]:
    """A usage question in the body, or a reply saying it is expected behaviour: G1, nothing pre-selected."""
    for x in thread_facts(f):
        if x.kind != "question":
            continue
        if x.source == "body" and f.has(BUG_WORDS):
            continue
        return [
            Finding(
                "G1",
                Kind.CHECK,
                weight=0.6,
                evidence=x.evidence,
                source=x.source,
                state="needs_human",
                reason="Reads like a question or expected behaviour, not a bug: close with the forum template?",
            )
        ]
    return []
