"""RUBRIC.md as code: one small function per rule id, in the rubric's order.

Each rule reads Facts and returns Findings: a label to ADD with a weight, a
label to AVOID, a ROUTE, a FLAG or a checklist item. The engine (engine.py)
weighs the findings, applies the invariants (G4-G7) and builds the Assessment.

Weights say how directly the evidence shows the root cause (G8): a bisection
verdict or a backend comparison in the comments beats an exception class, which
beats a tag in the title, which beats a keyword somewhere in the body. Patterns
use bounded repetitions only (no nested `.*`), so hostile text cannot make them
backtrack for long.
"""

from __future__ import annotations

import re
import re._constants as sre_constants
import re._parser as sre_parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from .text import CodeFacts, Source
from .types import IssueText

DYNAMO = "module: dynamo"
INDUCTOR = "module: inductor"
DYNAMIC = "module: dynamic shapes"
DISPATCHER = "module: pt2-dispatcher"
DECOMP = "module: decompositions"
FX = "module: fx"
FUNCTORCH = "module: functorch"
HELION = "module: helion"
COMPILE_UX = "module: compile ux"
CPU_ONCALL = "oncall: cpu inductor"
EXPORT_ONCALL = "oncall: export"
DIST_ONCALL = "oncall: distributed"
PT2_ONCALL = "oncall: pt2"
TRIAGED = "triaged"
REVIEW = "triage review"
LOW = "low priority"
HIGH = "high priority"

# The core components: a PT2 issue normally gets one of these, two when both are clearly shown.
CORE = (DYNAMO, INDUCTOR, DYNAMIC, DISPATCHER, DECOMP)

I = re.I


@dataclass(frozen=True)
class Finding:
    """One conclusion of one rule.

    kind: add (a component or domain label, weighed by the engine), avoid, route
    (an oncall: label to hand off or redirect to), flag (a status label), check
    (a checklist item; `state` is satisfied | violated | needs_human | not_applicable).
    """

    rule_id: str
    kind: str
    label: str = ""
    weight: float = 0.0
    evidence: str = ""
    source: str = ""
    reason: str = ""
    state: str = ""
    origin: str = "rule"  # rule | model | bisection: what the Suggested's `source` will say


@lru_cache(maxsize=None)
def needles(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """Lowercase literals of which any match must contain at least one; None when the pattern has
    an alternative without one. A cheap `in` test on them skips most regex searches (the hot path)."""
    try:
        tree = sre_parse.parse(pattern.pattern.lower())
    except re.error:
        return None
    found = _alternatives_needles(list(tree))
    return tuple(found) if found else None


def _alternatives_needles(seq: list) -> list[str] | None:
    """Needles of a parsed sequence: its longest literal run, else a required group's alternatives."""
    if len(seq) == 1 and seq[0][0] is sre_constants.BRANCH:
        found: list[str] = []
        for branch in seq[0][1][1]:
            sub = _alternatives_needles(list(branch))
            if sub is None:
                return None
            found += sub
        return found
    best = run = ""
    for op, arg in seq:
        if op is sre_constants.LITERAL:
            run += chr(arg)
        else:
            best, run = max(best, run, key=len), ""
    best = max(best, run, key=len)
    if len(best) >= 3:
        return [best]
    for op, arg in seq:
        # A group that must match (not optional): any of its alternatives' needles will do.
        sub = (
            _alternatives_needles(list(arg[3])) if op is sre_constants.SUBPATTERN
            else _alternatives_needles([(op, arg)]) if op is sre_constants.BRANCH
            else None
        )
        if sub:
            return sub
    return None


def _contains_any(text: str, required: tuple[str, ...]) -> bool:
    for needle in required:
        if needle in text:
            return True
    return False


@dataclass
class Facts:
    """The issue as the rules see it: capped sources, repro-code facts, current labels."""

    issue: IssueText
    sources: list[Source]
    code: CodeFacts
    labels: frozenset[str]
    _lowered: list[str] = field(default_factory=list, repr=False)
    _found: dict[tuple[int, str], tuple[str, str] | None] = field(default_factory=dict, repr=False)
    _lowered_whole: tuple[str, str, str] = ("", "", "")

    def find(self, pattern: re.Pattern[str], where: str = "all") -> tuple[str, str] | None:
        """First match as (exact matched text, source name), looking in title, body, then comments.

        where: "all", "title", or "text" (body and comments, not the title). Memoized per issue:
        several rules ask the same question.
        """
        key = (id(pattern), where)
        if key not in self._found:
            self._found[key] = self._search(pattern, where)
        return self._found[key]

    def _search(self, pattern: re.Pattern[str], where: str) -> tuple[str, str] | None:
        if not self._lowered:
            self._lowered = [s.text.lower() for s in self.sources]
            # title, then body and comments as one string: one `in` test rules out every source at once.
            text = "\n".join(self._lowered[1:])
            self._lowered_whole = (self._lowered[0], text, self._lowered[0] + "\n" + text)
        required = needles(pattern)
        if required is not None:
            scope = self._lowered_whole[{"title": 0, "text": 1}.get(where, 2)]
            if not _contains_any(scope, required):
                return None
        for source, lowered in zip(self.sources, self._lowered):
            if where == "title" and source.name != "title":
                continue
            if where == "text" and source.name == "title":
                continue
            if required is not None and not _contains_any(lowered, required):
                continue
            match = pattern.search(source.text)
            if match and match.group(0):
                return match.group(0), source.name
        return None

    def has(self, pattern: re.Pattern[str], where: str = "all") -> bool:
        return self.find(pattern, where) is not None


RuleFn = Callable[[Facts], Iterable[Finding]]
RULES: list[tuple[str, RuleFn]] = []


def rule(rule_id: str) -> Callable[[RuleFn], RuleFn]:
    def register(fn: RuleFn) -> RuleFn:
        RULES.append((rule_id, fn))
        return fn

    return register


def _add(f: Facts, rule_id: str, label: str, pattern: re.Pattern[str], title_w: float, text_w: float, reason: str):
    """An ADD finding from the first match of pattern: title_w when it is in the title, text_w elsewhere."""
    hit = f.find(pattern, "title")
    if hit:
        return [Finding(rule_id, "add", label, title_w, hit[0], hit[1], reason)]
    hit = f.find(pattern, "text")
    if hit and text_w > 0:
        return [Finding(rule_id, "add", label, text_w, hit[0], hit[1], reason)]
    return []


# --- shared signals --------------------------------------------------------------

COMPILE_USE = re.compile(r"torch\.compile|@torch\.compile|torch\._dynamo|\bdynamo\b|\bcompiled?\b", I)
AOT_EAGER_FAILS = re.compile(
    r"(?:backend\s{0,3}=\s{0,3}['\"])?aot_eager['\"]?[^\n.;,]{0,60}?\b(?:also )?(?:fails|failed|errors|raises|reproduces|crashes|is wrong|diverges)\b",
    I,
)
AOT_EAGER_PASSES = re.compile(
    r"(?:backend\s{0,3}=\s{0,3}['\"])?aot_eager['\"]?[^\n.;,]{0,60}?\b(?:works|passes|is fine|is ok|succeeds|runs fine|matches|no error)",
    I,
)
EAGER_BACKEND_FAILS = re.compile(
    r"backend\s{0,3}=\s{0,3}['\"]eager['\"][^\n.;,]{0,60}?\b(?:also )?(?:fails|failed|errors|raises|reproduces|crashes)\b", I
)
DECOMP_PARTITION_FAILS = re.compile(r"aot_eager_decomp_partition['\"]?[^\n.;,]{0,60}?\b(?:also )?(?:fails|failed|errors|reproduces|diverges)\b", I)
DECOMP_PARTITION_PASSES = re.compile(r"aot_eager_decomp_partition['\"]?[^\n.;,]{0,60}?\b(?:works|passes|is fine|succeeds|matches)", I)
AOT_FRAME = re.compile(r"torch/_functorch/_aot_autograd/[\w/]{1,80}\.py|_aot_autograd\b|aot_autograd\.py", I)
SILENT_WRONG = re.compile(
    r"silent(?:ly)?\b|\bwrong (?:results?|outputs?|values?|answers?|gradients?|graph)|\bincorrect(?:ly)? (?:results?|outputs?|values?|gradients?|computes?|returns?|produces?)"
    r"|produces? (?:numerically )?(?:different|inconsistent|incorrect|wrong)|\b(?:output|numerical|result|accuracy) (?:mismatch|discrepancy|inconsistency)"
    r"|\binconsisten(?:t|cy) (?:results?|outputs?|behaviou?r)|\[inconsisten\w{0,4}\]|differs? from eager|diverges? from eager|eager and compiled? (?:disagree|differ)"
    r"|\bdivergence\b|returns? NaN|outputs? NaN|\bmismatch (?:between|with|compared)"
    # "compile ignores X" / "does nothing": no error, just not what eager does.
    r"|\bignor(?:es|ed|ing) (?:the |a |my )?`?[\w.]{2,40}|\bdoes(?: not|n't) (?:recompile|persist|propagate|preserve)|\bdoes nothing\b"
    r"|\bincorrect(?:ly)? (?:indices|strides|shapes?)\b|\bprecision (?:bug|is lower|appears to be lower|loss)",
    I,
)


# --- G. The general flow -------------------------------------------------------------


@rule("G0")
def g0_other_oncall(f: Facts) -> list[Finding]:
    """An issue already in another oncall's queue is theirs: skip it (cpu inductor is PT2's own lane)."""
    others = sorted(l for l in f.labels if l.startswith("oncall:") and l not in (PT2_ONCALL, CPU_ONCALL))
    if others:
        return [Finding("G0", "route", others[0], 1.0, others[0], "labels", "already in another oncall's queue")]
    if CPU_ONCALL in f.labels:
        return [Finding("G0", "route", CPU_ONCALL, 1.0, CPU_ONCALL, "labels", "PT2's CPU Inductor lane")]
    return []


QUESTION_TITLE = re.compile(r"^\s{0,5}(?:\[?question\]?:?\s|how (?:do|can|to|should)\b|is (?:it|there) (?:possible|a way)\b|why (?:does|is|do)\b)", I)
QUESTION_END = re.compile(r"\?\s{0,5}$")
BUG_WORDS = re.compile(r"🐛|\bbug\b|error|traceback|fails?\b|crash|wrong|incorrect|exception", I)


@rule("G1")
def g1_question(f: Facts) -> list[Finding]:
    """A usage question rather than a bug: suggest the forum template (a human decides)."""
    title = f.sources[0].text
    hit = f.find(QUESTION_TITLE, "title") or f.find(QUESTION_END, "title")
    if hit and not BUG_WORDS.search(title) and not f.has(BUG_WORDS, "text"):
        return [Finding("G1", "check", weight=0.6, evidence=title, source="title", state="needs_human",
                        reason="Reads like a question, not a bug: close with the forum template?")]
    return []


OTHER_REPO = re.compile(r"\b(?:torchvision|torchaudio|torchtext|executorch|torchrec|torchtune)\b", I)


@rule("G2")
def g2_other_repo(f: Facts) -> list[Finding]:
    """The title is about another repo's library, with no compile involved: transfer it."""
    hit = f.find(OTHER_REPO, "title")
    if hit and not f.has(COMPILE_USE, "title"):
        return [Finding("G2", "check", evidence=hit[0], source=hit[1], state="needs_human",
                        reason=f"Might belong in the {hit[0]} repo: transfer, then stop.")]
    return []


# G3-G7 are invariants of the whole assessment; the engine applies them (engine.py).
# G8 (root cause over keywords) is the weighting scheme of this module.


# --- R1. Dynamo or dynamic shapes --------------------------------------------------------

DYNAMIC_FALSE_FIXES = re.compile(
    r"dynamic\s{0,2}=\s{0,2}False[^\n.]{0,80}?\b(?:works|fix(?:es|ed)?|pass(?:es)?|goes away|no (?:error|issue)|resolves?|succeeds|avoids?)"
    r"|(?:works|fix(?:es|ed)?|passes|goes away|resolved?|succeeds)[^\n.]{0,40}?(?:with|using|setting|when) `?dynamic\s{0,2}=\s{0,2}False",
    I,
)


@rule("R1.1")
def r1_1_dynamic_false(f: Facts) -> list[Finding]:
    """The failure disappears with dynamic=False: dynamic shapes, and only that."""
    hit = f.find(DYNAMIC_FALSE_FIXES)
    if not hit:
        return []
    return [
        Finding("R1.1", "add", DYNAMIC, 1.0, hit[0], hit[1], "goes away with dynamic=False"),
        Finding("R1.1", "avoid", DYNAMO, evidence=hit[0], source=hit[1],
                reason="the failure disappears with dynamic=False: dynamic shapes, not Dynamo"),
    ]


DYNAMO_TITLE = re.compile(r"\[(?:torch)?dynamo\]|\b(?:torch)?dynamo\b|graph[ _-]?breaks?\b|\bbytecode\b|\brecompil\w{0,6}", I)
DYNAMO_ERROR = re.compile(
    r"torch\._dynamo\.exc\.(?:Unsupported|InternalTorchDynamoError|UserError)\b|\bInternalTorchDynamoError\b"
    r"|\bUnsupported: [^\n]{1,80}|graph[ _-]?break(?:s|ing)?\b|\bbytecode\b|\bskipfiles\b|InstructionTranslator\w*"
    r"|\b\w{2,40}Variable\(\w{0,40}\)?|\bfullgraph\s{0,2}=\s{0,2}True\b[^\n]{0,60}?(?:fails|error)",
    I,
)


@rule("R1.2")
def r1_2_graph_breaks(f: Facts) -> list[Finding]:
    """Graph breaks, bytecode analysis or transformation errors: Dynamo."""
    return _add(f, "R1.2", DYNAMO, DYNAMO_TITLE, 0.8, 0.0, "Dynamo named in the title") or _add(
        f, "R1.2", DYNAMO, DYNAMO_ERROR, 0.8, 0.7, "a Dynamo tracing error or graph break"
    )


SYMBOLIC = re.compile(
    r"\bSym(?:Int|Float|Bool|Node)\w{0,20}|\bsympy\b[\w.]{0,40}|\bShapeEnv\b|symbolic (?:shapes?|sizes?|ints?|expressions?)"
    r"|\bguard(?:s|ing)? (?:failure|on (?:data|a size|size))\w{0,10}|dynamic\s{0,2}=\s{0,2}True|\bmark_dynamic\b|maybe_mark_dynamic"
    r"|\bdynamic[ _-]shapes?\b|size[ _-]oblivious|\bspeciali[sz]\w{1,8}|\bdynamic (?:input|batch|dim\w{0,6}|sequence)\w{0,3}"
    r"|CantSplit|ConstraintViolation\w{0,10}",
    I,
)


@rule("R1.3")
def r1_3_symbolic(f: Facts) -> list[Finding]:
    """Guard failures, SymInt / symbolic size problems: dynamic shapes."""
    return _add(f, "R1.3", DYNAMIC, SYMBOLIC, 0.85, 0.6, "symbolic sizes, guards or dynamic=True")


DATA_DEPENDENT = re.compile(
    r"GuardOnDataDependentSymNode|data[ -]dependent|\bunbacked\b(?: symbols?| sizes?| ints?)?|\bsize[ -]like\b"
    r"|capture_dynamic_output_shape_ops",
    I,
)
DATA_DEPENDENT_OPS = re.compile(r"\.item\(\)|\.nonzero\(|torch\.nonzero\b|\.tolist\(\)|torch\.unique\b", I)


@rule("R1.4")
def r1_4_data_dependent(f: Facts) -> list[Finding]:
    """Data-dependent operations (.item(), nonzero, unbacked sizes): dynamic shapes."""
    found = _add(f, "R1.4", DYNAMIC, DATA_DEPENDENT, 0.85, 0.65, "data-dependent sizes")
    # .item() inside a repro is common boilerplate: only the title makes it the subject.
    return found or _add(f, "R1.4", DYNAMIC, DATA_DEPENDENT_OPS, 0.75, 0.0, "a data-dependent op is the subject")


@rule("R1.5")
def r1_5_compile_is_not_dynamo(f: Facts) -> list[Finding]:
    """Using torch.compile is not evidence for Dynamo: warn when that is all there is."""
    hit = f.find(re.compile(r"torch\.compile", I))
    if hit and not f.has(DYNAMO_TITLE, "title") and not f.has(DYNAMO_ERROR):
        return [Finding("R1.5", "avoid", DYNAMO, evidence=hit[0], source=hit[1],
                        reason="\"it uses torch.compile\" is not evidence for Dynamo")]
    return []


# --- R2. Backend bisection for correctness problems ---------------------------------------


@rule("R2")
def r2_read_comments(f: Facts) -> list[Finding]:
    """Read the comments first: they often hold the backend results."""
    comments = [s for s in f.sources if s.name.startswith("comment:")]
    backend = re.compile(r"\b(?:aot_eager(?:_decomp_partition)?|backend\s{0,2}=\s{0,2}['\"]\w{1,30}['\"])", I)
    for source in comments:
        match = backend.search(source.text)
        if match:
            return [Finding("R2", "check", evidence=match.group(0), source=source.name, state="satisfied",
                            reason="a comment reports a backend result")]
    state = "not_applicable" if not comments else "needs_human"
    return [Finding("R2", "check", state=state, reason="read the comments for backend results before bisecting")]


@rule("R2.1")
def r2_1_aot_eager_fails(f: Facts) -> list[Finding]:
    """Fails on aot_eager, passes in eager: pt2-dispatcher."""
    hit = f.find(AOT_EAGER_FAILS)
    if hit and "decomp_partition" not in hit[0]:
        return [Finding("R2.1", "add", DISPATCHER, 0.9, hit[0], hit[1], "reproduces on aot_eager")]
    return []


@rule("R2.2")
def r2_2_inductor(f: Facts) -> list[Finding]:
    """Fails on inductor but not aot_eager, or Inductor's own errors and code: Inductor."""
    hit = f.find(AOT_EAGER_PASSES)
    if hit and "decomp_partition" not in hit[0]:
        return [Finding("R2.2", "add", INDUCTOR, 0.95, hit[0], hit[1], "passes on aot_eager, so the fault is in Inductor")]
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
    return _add(f, "R2.2", INDUCTOR, SILENT_WRONG, 0.5, 0.45, "wrong results with the default (Inductor) backend; bisect to confirm")


INDUCTOR_TITLE = re.compile(r"\[(?:torch)?inductor\]|\b(?:torch)?inductor\b|\btriton\b|\bcodegen\b|max[-_]autotune", I)
INDUCTOR_ERROR = re.compile(
    r"\bInductorError\b|torch\._inductor\.exc\.\w+|\bLoweringException\b|\bCppCompileError\b|C\+\+ compile error"
    r"|triton\.compiler\.errors\.\w+|\bCompilationError\b|\bmax[-_]autotune\b|\bcpp_wrapper\b|generated (?:triton |c\+\+ )?(?:kernel|code)"
    r"|\btl\.(?:load|store|where|full|sum|dot)\b|@triton\.jit|triton_heuristics|\bcodegen\b"
    # BackendCompilerFailed wraps an exception of the backend compiler: Inductor unless another backend is named.
    r"|\bBackendCompilerFailed\b",
    I,
)
INDUCTOR_WEAK = re.compile(r"torch/_inductor/[\w/]{1,80}\.py|\binductor\b|\btriton\b", I)


@rule("R2.3")
def r2_3_fails_tracing(f: Facts) -> list[Finding]:
    """Fails while tracing, before any backend runs (the eager backend fails too): Dynamo."""
    hit = f.find(EAGER_BACKEND_FAILS)
    if hit:
        return [Finding("R2.3", "add", DYNAMO, 0.95, hit[0], hit[1], "fails even with backend='eager': tracing")]
    return []


CPU_TITLE = re.compile(r"\[cpu\]|\bcpu\b|mkldnn|onednn|\bx86\b|\bavx\w{0,6}|\bvectori[sz]ed\b|\bwindows\b|\bmsvc\b", I)
CPU_ONLY = re.compile(
    r"only (?:on|with) (?:the )?cpu|(?:works|passes|fine) on (?:cuda|gpu)[^\n.]{0,40}?(?:but|fails) (?:on )?cpu"
    r"|\bmkldnn\w{0,20}|\bonednn\b|\bCppCompileError\b|C\+\+ compile error|cpp_fused_\w{1,60}|\bMSVC\b"
    r"|codegen/cpp\w{0,20}\.py|\bCppKernel\w{0,20}|\bCppScheduling\b|C\+\+ (?:CPU )?backend"
    # A CPU-only torch build (the version string of collect_env): whatever fails, fails on Inductor's CPU backend.
    r"|\b[12]\.\d{1,2}\.\d{1,2}(?:\.dev\d{8})?\+cpu\b",
    I,
)


@rule("R2.4")
def r2_4_cpu_only(f: Facts) -> list[Finding]:
    """An Inductor problem that fails only on CPU goes to the cpu inductor sub-queue (see R10)."""
    hit = f.find(CPU_ONLY)
    if hit:
        return [Finding("R2.4", "route", CPU_ONCALL, 0.8, hit[0], hit[1], "Inductor's CPU backend")]
    return []


@rule("R2.5")
def r2_5_decomp_partition(f: Facts) -> list[Finding]:
    """aot_eager_decomp_partition separates decompositions (fails there) from codegen (passes there)."""
    hit = f.find(DECOMP_PARTITION_FAILS)
    if hit:
        return [Finding("R2.5", "add", DECOMP, 0.95, hit[0], hit[1], "fails on aot_eager_decomp_partition: decompositions")]
    hit = f.find(DECOMP_PARTITION_PASSES)
    if hit:
        return [Finding("R2.5", "add", INDUCTOR, 0.95, hit[0], hit[1], "passes on aot_eager_decomp_partition: codegen")]
    return []


# --- R3. Silently dropped operations belong to Dynamo ---------------------------------------

DROPPED_INPLACE = re.compile(
    r"(?:detach_|requires_grad_|retain_grad|register_hook|set_materialize_grads)\(\)?[^\n]{0,80}?(?:ignored|skipped|dropped|not (?:applied|respected|work\w{0,3}|captured|preserved)|no effect|doesn't work|does not work)"
    r"|(?:ignores?|drops?|skips?)[^\n]{0,30}?(?:detach_|requires_grad_|retain_grad)",
    I,
)


@rule("R3.1")
def r3_1_dropped_inplace(f: Facts) -> list[Finding]:
    """compile silently skips an in-place op that works in eager: Dynamo."""
    return _add(f, "R3.1", DYNAMO, DROPPED_INPLACE, 0.85, 0.8, "an in-place op is silently dropped by tracing")


SIDE_EFFECT = re.compile(
    r"side[ -]effects?|global (?:state|variables?)|\bnonlocal\b|random\.seed|__torch_function__|tensor subclass\w{0,2}|autograd\.Function"
    r"|\bfunctools\.\w{1,20}|\bNamedTuple\b|namedtuple|(?:forward|backward)(?:_pre)?_hooks?|register_\w{0,20}hook|context manager|\bgenerators?\b"
    r"|\bhooks?\b|activation checkpoint\w{0,3}|torch\.utils\.checkpoint|\bclosures?\b|\bsetattr\b|\bsuper\(\)|\binspect\.\w{1,20}|\bdict(?:ionary|ionaries|s)?\b|\bitertools\b|\blru_cache\b|\bdataclass\w{0,3}"
    r"|class attribute|attributes? (?:is |are )?mutated|mutat\w{1,5} (?:a |the )?(?:global|attribute|list|object)|\bcopy\.(?:copy|deepcopy)|python 3\.1\d",
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
        return [Finding("R3.3", "avoid", "module: autograd", evidence=hit[0], source=hit[1],
                        reason="eager works, so the autograd engine is fine; the op never reached the graph")]
    return []


# --- R4. Decompositions ------------------------------------------------------------------

DECOMP_WORDS = re.compile(r"\bdecomposition\w{0,2}|\bdecomps?\b|\b_decomp\b|torch\._decomp\w{0,30}|\bdecomposed\b", I)
HIGHER_ORDER_GRAD = re.compile(
    r"(?:higher[- ]order|second[- ]order|double|2nd[- ]order) (?:gradients?|derivatives?|backward)|grad(?:ient)? of (?:the )?grad(?:ient)?|hessian",
    I,
)


@rule("R4.1")
def r4_1_operator_numerics(f: Facts) -> list[Finding]:
    """One operator's decomposition gives different numbers traced vs eager: decompositions."""
    return _add(f, "R4.1", DECOMP, DECOMP_WORDS, 0.85, 0.7, "an operator's decomposition")


@rule("R4.2")
def r4_2_higher_order_grads(f: Facts) -> list[Finding]:
    """Wrong higher-order gradients under tracing: decompositions."""
    if f.has(COMPILE_USE) or f.has(re.compile(r"make_fx|aot_function|\btrac(?:e|ed|ing)\b", I)):
        return _add(f, "R4.2", DECOMP, HIGHER_ORDER_GRAD, 0.8, 0.7, "higher-order gradients under tracing")
    return []


MAKE_FX = re.compile(r"\bmake_fx\b[^\n]{0,60}?tracing_mode\s{0,2}=\s{0,2}['\"]symbolic['\"]|\bmake_fx\b", I)


@rule("R4.3")
def r4_3_make_fx(f: Facts) -> list[Finding]:
    """make_fx symbolic tracing diverges from eager: fx + decompositions, staying in oncall: pt2."""
    hit = f.find(MAKE_FX)
    if not hit:
        return []
    return [
        Finding("R4.3", "add", FX, 0.8, hit[0], hit[1], "make_fx tracing"),
        Finding("R4.3", "add", DECOMP, 0.75, hit[0], hit[1], "make_fx tracing diverges: decompositions"),
    ]


# --- R5. Do not over-tag pt2-dispatcher ----------------------------------------------------

DISPATCHER_TITLE = re.compile(r"\[aot[_ ]?autograd\]|\baot[_ ]?autograd\b|AOTAutograd|\baot[_ ]?dispatch\w{0,3}", I)
DISPATCHER_CAUSE = re.compile(
    r"\bfunctionali[sz]\w{1,10}|\bFakeTensor\w{0,10}|\bfake[ _]tensors?\b|\btorch\.library\.\w{1,20}|\bcustom[ _]op(?:erator)?s?\b|\bregister_fake\b"
    r"|synthetic[ _]base|input mutations?|\bmutat\w{1,5} (?:an? )?(?:aliased )?inputs?\b|\bmeta (?:kernel|function|impl\w{0,10})s?\b|\bview_replay\b|\bProxyTensor\b",
    I,
)
HOP = re.compile(r"flex[_ ]?attention|\bwhile_loop\b|\btorch\.cond\b|\binvoke_subgraph\b|nested_compile_region|\bhigher[- ]order op\w{0,8}|associative_scan|\bscan\(", I)


@rule("R5")
def r5_dispatcher(f: Facts) -> list[Finding]:
    """pt2-dispatcher only when the bug is in AOTAutograd, functionalization, FakeTensor or custom ops."""
    found = _add(f, "R5", DISPATCHER, DISPATCHER_TITLE, 0.85, 0.0, "AOTAutograd named in the title") or _add(
        f, "R5", DISPATCHER, DISPATCHER_CAUSE, 0.8, 0.6, "functionalization, FakeTensor or custom-op dispatch"
    ) or _add(f, "R5", DISPATCHER, HOP, 0.6, 0.45, "a higher-order op, traced by AOT dispatch")
    if found:
        return found
    frame = f.find(AOT_FRAME, "text")
    if frame:
        return [Finding("R5", "avoid", DISPATCHER, evidence=frame[0], source=frame[1],
                        reason="_aot_autograd only appears in the stack trace; that is where it failed, not why")]
    return []


# --- R6. PT2 keeps what PT2 owns ---------------------------------------------------------------


@rule("R6.1")
def r6_1_where_is_the_fix(f: Facts) -> list[Finding]:
    """The routing test: where would the fix be made?"""
    return [Finding("R6.1", "check", state="needs_human", reason="Where would the fix be made? In PT2 code: PT2 owns it.")]


EXPORT_USE = re.compile(
    r"torch\.export\.\w{1,20}|torch\._export\w{0,20}|\bExportedProgram\b|aoti_compile_and_package|\bAOTInductor\b|\baot_compile\b|run_decompositions|\[export\]|\bexport(?:ing|ed)? (?:a |the )?(?:model|module|program)",
    I,
)
COMPILE_CALL = re.compile(r"torch\.compile|\.compile\(|@torch\.compile|torch\._dynamo\.optimize", I)
LEAKED_HOOK = re.compile(r"leak\w{0,3}[^\n]{0,40}?(?:aot_?autograd|hook)|(?:aot_?autograd|hook)[^\n]{0,40}?leak\w{0,3}", I)


@rule("R6.2")
def r6_2_keep(f: Facts) -> list[Finding]:
    """Do not redirect: export leaking an AOTAutograd hook, DTensor error UX under compile, an Inductor bug in distributed training."""
    hit = f.find(LEAKED_HOOK)
    if hit:
        return [Finding("R6.2", "check", evidence=hit[0], source=hit[1], state="satisfied",
                        reason="a leaked AOTAutograd hook is PT2's to fix: keep it")]
    return []


DTENSOR_IMPL = re.compile(r"sharding (?:propagation|strategy|rule)|\bredistribute\b|\bPlacement\b|\bShard\(\d\)|\bReplicate\(\)", I)


@rule("R6.3")
def r6_3_redirect(f: Facts) -> list[Finding]:
    """Redirect export-only problems (no compile) to export, DTensor internals to distributed."""
    found: list[Finding] = []
    export = f.find(EXPORT_USE)
    if export and not f.has(COMPILE_CALL):
        found.append(Finding("R6.3", "route", EXPORT_ONCALL, 0.85, export[0], export[1], "an export-only problem, no torch.compile"))
    dtensor = f.find(DTENSOR_IMPL)
    if dtensor and f.has(re.compile(r"\bDTensor\b")) and not f.has(COMPILE_CALL):
        found.append(Finding("R6.3", "route", DIST_ONCALL, 0.8, dtensor[0], dtensor[1], "DTensor's own implementation, no compile"))
    return found


PT2D = re.compile(r"\bDTensor\b|\bFSDP\d?\b|fully_shard|\bDDP\b|DistributedDataParallel|tensor parallel\w{0,3}|\bdeepspeed\b|\btorchrun\b|\bc10d\b", I)


@rule("R6.4")
def r6_4_pt2d(f: Facts) -> list[Finding]:
    """PT2 + distributed: add oncall: distributed for visibility, keep oncall: pt2 (no full handoff)."""
    hit = f.find(PT2D, "title")
    if hit and f.has(COMPILE_USE):
        return [Finding("R6.4", "add", DIST_ONCALL, 0.7, hit[0], hit[1], "PT2-D: visibility for distributed, PT2 keeps it")]
    return []


@rule("R6.5")
def r6_5_visibility_only(f: Facts) -> list[Finding]:
    """Domain module: labels are fine for visibility; an oncall: label only on a handoff (engine enforces)."""
    return []


# --- R7. Domain and feature labels ----------------------------------------------------------------

VISIBILITY = (
    ("module: dtensor", re.compile(r"\bDTensor\b|tensor parallel\w{0,3}|\bparallelize_module\b", I)),
    ("module: fsdp", re.compile(r"\bFSDP\d?\b|\bfully_shard\b|FullyShardedDataParallel", I)),
    ("module: ddp", re.compile(r"\bDDP\b|DistributedDataParallel", I)),
    ("module: flex attention", re.compile(r"flex[_ ]?attention|\bBlockMask\b|\bblock_mask\b|create_block_mask|mask_mod|score_mod", I)),
)


@rule("R7.1")
def r7_1_visibility(f: Facts) -> list[Finding]:
    """DTensor, FSDP, DDP, flex attention: their module labels for visibility."""
    found: list[Finding] = []
    for label, pattern in VISIBILITY:
        found += _add(f, "R7.1", label, pattern, 0.9, 0.7, "for visibility")
    return found


FEATURES = (
    ("compile-cache", re.compile(r"\bFX ?graph ?cache\b|\bcompile[ -]cache\b|\bcache (?:hit|miss)\w{0,2}|\bmega[ -]?cache\b|TORCHINDUCTOR_CACHE_DIR|\bautotune cache\b|\bwarm cache\b", I), 0.85, 0.7),
    ("module: determinism", re.compile(r"use_deterministic_algorithms|\bnon-?deterministic\w{0,3}|\bdeterminism\b", I), 0.9, 0.7),
    ("module: compile-time", re.compile(r"\bcompil(?:e|ation)[ -]time\b|(?:slow|long) (?:to )?compil\w{1,6}|compil\w{1,6} (?:is |are )?(?:very |extremely |too )?slow|takes? \d{1,5} ?(?:s|sec|seconds|minutes|mins|hours)\b[^\n]{0,20}?compil|\bcold start\b|\bstartup time\b", I), 0.85, 0.6),
    ("module: numerical-stability", re.compile(r"numerical(?:ly)? (?:stab\w{1,6}|unstable|instability)", I), 0.85, 0.6),
    ("module: memory usage", re.compile(r"\bOOM\b|out of memory|peak memory|memory (?:usage|leak|footprint|consumption)|more memory", I), 0.85, 0.6),
    ("module: performance", re.compile(r"slower than eager|\d{1,3}(?:\.\d{1,2})?\s?x slower|perf(?:ormance)? regression|\bperformance bug\b|slows? down|\bslowdown\b", I), 0.8, 0.0),
    ("module: cuda graphs", re.compile(r"cuda ?graphs?\b|\bcudagraph\w{0,20}|CUDAGraph\w{0,10}", I), 0.9, 0.0),
)


@rule("R7.2")
def r7_2_features(f: Facts) -> list[Finding]:
    """Feature labels (check the catalog first): caching, determinism, compile time, numerics, memory, performance, cuda graphs."""
    found: list[Finding] = []
    for label, pattern, title_w, text_w in FEATURES:
        found += _add(f, "R7.2", label, pattern, title_w, text_w, "feature label")
    return found


COMPILE_UX_TEXT = re.compile(
    r"(?:bad|confusing|unhelpful|misleading|inscrutable|cryptic|unclear|better|improve\w{0,3}|irrelevant) (?:error )?(?:messages?|errors?|warnings?|logs?|logging)"
    r"|error messages? (?:is|are) (?:confusing|unhelpful|misleading)|\bwarning spam\b|(?:shorter|noisy|spammy|verbose) logs?",
    I,
)


@rule("R7.3")
def r7_3_compile_ux(f: Facts) -> list[Finding]:
    """The quick reference's holistic label: UX and error messages -> compile ux."""
    return _add(f, "R7.3", COMPILE_UX, COMPILE_UX_TEXT, 0.85, 0.6, "the complaint is the user experience")


# R7.4 (a label the catalog lacks is shown as "not in the catalog") is enforced by the engine.


# --- R8. Helion ----------------------------------------------------------------------------------

HELION_TEXT = re.compile(r"@helion\.kernel|helion\.language|\bhl\.tile\b|\bhelion\b", I)
PLAIN_TRITON = re.compile(r"@triton\.jit|\btl\.(?:load|store|program_id|arange|dot)\b|\btriton\.jit\b", I)
GENERATED_TRITON = re.compile(r"triton_heuristics|generated (?:triton )?(?:kernel|code)|\btriton_(?:poi|red|per|tem)_\w{1,60}", I)


@rule("R8.1")
def r8_1_helion(f: Facts) -> list[Finding]:
    """Mentions helion, @helion.kernel, helion.language, hl.tile or helion frames: module: helion."""
    return _add(f, "R8.1", HELION, HELION_TEXT, 0.95, 0.9, "Helion is named")


@rule("R8.2")
def r8_2_helion_alone(f: Facts) -> list[Finding]:
    """A Helion kernel wrong on its own, without torch.compile: helion only."""
    if f.has(HELION_TEXT) and not f.has(COMPILE_CALL):
        hit = f.find(HELION_TEXT)
        return [Finding("R8.2", "avoid", INDUCTOR, evidence=hit[0], source=hit[1],
                        reason="the Helion kernel fails without torch.compile: helion only")]
    return []


@rule("R8.3")
def r8_3_helion_under_compile(f: Facts) -> list[Finding]:
    """A Helion kernel under torch.compile, or Inductor's fusion of a Helion template: helion + inductor."""
    if f.has(HELION_TEXT):
        hit = f.find(COMPILE_CALL) or f.find(re.compile(r"template fusion|epilogue fusion|prologue fusion", I))
        if hit:
            return [Finding("R8.3", "add", INDUCTOR, 0.85, hit[0], hit[1], "a Helion kernel inside torch.compile")]
    return []


@rule("R8.4")
def r8_4_plain_triton(f: Facts) -> list[Finding]:
    """Plain Triton without Helion is Inductor, not Helion."""
    hit = f.find(PLAIN_TRITON)
    if hit and not f.has(HELION_TEXT):
        return [
            Finding("R8.4", "add", INDUCTOR, 0.8, hit[0], hit[1], "user Triton kernels go through Inductor"),
            Finding("R8.4", "avoid", HELION, evidence=hit[0], source=hit[1], reason="plain Triton, no Helion"),
        ]
    return []


@rule("R8.5")
def r8_5_generated_triton(f: Facts) -> list[Finding]:
    """Inductor's generated Triton code is not Helion: require an explicit Helion import or mention."""
    hit = f.find(GENERATED_TRITON)
    if hit and not f.has(HELION_TEXT) and not f.has(PLAIN_TRITON):
        return [Finding("R8.5", "avoid", HELION, evidence=hit[0], source=hit[1], reason="generated Triton from Inductor, not Helion")]
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
        Finding("R9.1", "add", FUNCTORCH, weight, hit[0], hit[1], "a functorch transform under compile"),
        Finding("R9.1", "add", "dynamo-functorch", weight, hit[0], hit[1], "a functorch transform under compile"),
    ]


@rule("R9.2")
def r9_2_functorch_dispatcher(f: Facts) -> list[Finding]:
    """pt2-dispatcher on top of functorch only when AOTAutograd is at the fault."""
    if not f.has(FUNCTORCH_TRANSFORM) or not f.has(COMPILE_CALL):
        return []
    frame = f.find(AOT_FRAME, "text")
    if frame:
        return [Finding("R9.2", "add", DISPATCHER, 0.7, frame[0], frame[1], "AOTAutograd at the fault of a functorch transform")]
    hit = f.find(FUNCTORCH_TRANSFORM)
    return [Finding("R9.2", "avoid", DISPATCHER, evidence=hit[0], source=hit[1],
                    reason="a functorch transform bug: module: functorch, not the dispatcher")]


# --- R10. CPU Inductor routing ----------------------------------------------------------------------

CPU_HALF = re.compile(r"(?:float16|fp16|bfloat16|bf16)[^\n]{0,30}?\bon cpu\b|\bcpu\b[^\n]{0,30}?(?:float16|fp16)", I)


@rule("R10")
def r10_cpu_inductor(f: Facts) -> list[Finding]:
    """Clearly Inductor's CPU backend ([CPU] tag, MKLDNN, float16 on CPU, C++ codegen): oncall: cpu inductor."""
    title = f.find(CPU_TITLE, "title")
    if title and (f.has(INDUCTOR_TITLE, "title") or f.has(INDUCTOR_ERROR) or f.has(COMPILE_USE, "title")):
        return [Finding("R10", "route", CPU_ONCALL, 0.9, title[0], title[1], "tagged CPU in the title")]
    hit = f.find(CPU_HALF)
    if hit:
        return [Finding("R10", "route", CPU_ONCALL, 0.75, hit[0], hit[1], "reduced precision on CPU")]
    return []


# --- R11. High priority goes through the meeting ------------------------------------------------------

CRASH = re.compile(
    r"segmentation fault|\bseg ?fault\w{0,3}|\bSIG(?:SEGV|FPE|ABRT|BUS|ILL)\b|illegal memory access|device-side assert\w{0,3}|core dumped|hard crash",
    I,
)
# In a title "crashes" is the report's subject; in a body it is often a loose word for "raises".
CRASH_TITLE = re.compile(CRASH.pattern + r"|\bcrash(?:es|ed|ing)?\b", I)
# A performance regression counts only as PERF_REGRESSION (more than 10% on an important model).
REGRESSION = re.compile(
    r"(?<!perf )(?<!performance )\bregress\w{0,4}|used to work|no longer works?|worked (?:fine |well )?(?:in|with|on|before) (?:v|version |torch |pytorch )?\d|after upgrad\w{1,4}|broken (?:in|since|after) (?:v|version |torch |pytorch )?\d",
    I,
)
FLAKY = re.compile(r"\bflaky\b|\bintermittent(?:ly)?\b|\bnon-?deterministic(?:ally)? fail\w{0,3}", I)
ECOSYSTEM = re.compile(r"hugging ?face|\btransformers\b|\bdiffusers\b|\bvLLM\b|\btorchtitan\b|\bHF\b|\b(?:llama|mistral|gpt-?\d|stable diffusion|timm|torchbench)\w{0,10}", I)
PERF_REGRESSION = re.compile(r"(?:[1-9]\d(?:\.\d)?\s?%|\d(?:\.\d)?\s?x) (?:slower|perf\w{0,9} regression|regression|slow ?down)", I)


@rule("R11")
def r11_review(f: Facts) -> list[Finding]:
    """Crash, silently wrong results, regression, flaky test, important model or user: FLAG triage review.

    A fuzzer report goes through R12's checklist instead: its divergences are not user-facing yet.
    """
    if _is_fuzzer(f):
        return []
    reasons = (
        (CRASH_TITLE, "a crash"),
        (SILENT_WRONG, "silently wrong results"),
        (REGRESSION, "a regression"),
        (FLAKY, "a flaky test, usually a regression"),
        (PERF_REGRESSION, "a performance regression"),
        (ECOSYSTEM, "an important model or ecosystem user"),
    )
    for pattern, why in reasons:
        hit = f.find(pattern, "title")
        if hit:
            return [Finding("R11", "flag", REVIEW, 0.8, hit[0], hit[1], f"{why}: the weekly meeting decides priority")]
    for pattern, why in ((CRASH, "a crash"), (SILENT_WRONG, "silently wrong results")):
        hit = f.find(pattern, "text")
        if hit and hit[1] == "body":
            return [Finding("R11", "flag", REVIEW, 0.6, hit[0], hit[1], f"{why}: the weekly meeting decides priority")]
    return []


# --- R12. Fuzzer issues ----------------------------------------------------------------------------------

FUZZER = re.compile(r"\[fuzzer\]|\bfuzz(?:er|ing|ed)\b", I)


def _is_fuzzer(f: Facts) -> bool:
    return "topic: fuzzer" in f.labels or f.has(FUZZER, "title")


@rule("R12.1")
def r12_1_default_tolerances(f: Facts) -> list[Finding]:
    """rtol/atol are at their defaults in the repro's comparison."""
    if not _is_fuzzer(f):
        return []
    for call in ("allclose", "assert_close", "isclose", "same"):
        if {"rtol", "atol", "tol"} & f.code.call_kwargs.get(call, set()):
            return [Finding("R12.1", "check", evidence=f.code.calls.get(call, call), source="code", state="violated",
                            reason="the repro sets its own tolerances: re-check with the defaults")]
    return [Finding("R12.1", "check", state="satisfied" if f.code.parsed else "needs_human",
                    reason="rtol/atol at their defaults")]


INDEX_COMPARE = ("argmax", "argmin", "max", "min", "topk", "sort", "argsort")


@rule("R12.2")
def r12_2_no_index_compare(f: Facts) -> list[Finding]:
    """The repro does not compare indices of max/min (ties make them differ legitimately)."""
    if not _is_fuzzer(f):
        return []
    for name in INDEX_COMPARE:
        if name in f.code.calls and (name.startswith("arg") or name in ("topk", "sort") or "indices" in f.code.calls[name]):
            return [Finding("R12.2", "check", evidence=f.code.calls[name], source="code", state="violated",
                            reason="compares indices of max/min, which ties make differ legitimately")]
    if f.has(re.compile(r"\bindices\b[^\n]{0,40}?(?:differ|mismatch)|(?:argmax|argmin)\b", I)):
        hit = f.find(re.compile(r"\bindices\b[^\n]{0,40}?(?:differ|mismatch)|(?:argmax|argmin)\b", I))
        return [Finding("R12.2", "check", evidence=hit[0], source=hit[1], state="violated",
                        reason="compares indices of max/min, which ties make differ legitimately")]
    return [Finding("R12.2", "check", state="satisfied" if f.code.parsed else "needs_human", reason="no index comparison")]


@rule("R12.3")
def r12_3_fp64_reference(f: Facts) -> list[Finding]:
    """The comparison uses torch._dynamo.utils.same with an fp64 reference."""
    if not _is_fuzzer(f):
        return []
    if "fp64_ref" in f.code.call_kwargs.get("same", set()):
        return [Finding("R12.3", "check", evidence=f.code.calls["same"], source="code", state="satisfied",
                        reason="compares with same(..., fp64_ref=...)")]
    hit = f.find(re.compile(r"fp64_ref", I))
    if hit:
        return [Finding("R12.3", "check", evidence=hit[0], source=hit[1], state="satisfied", reason="uses an fp64 reference")]
    return [Finding("R12.3", "check", state="violated", reason="no fp64 reference: re-check with torch._dynamo.utils.same(..., fp64_ref=...)")]


@rule("R12.4")
def r12_4_normal_triage(f: Facts) -> list[Finding]:
    """Criteria met and the bug looks common: triage normally."""
    if not _is_fuzzer(f):
        return []
    return [Finding("R12.4", "check", state="needs_human", reason="criteria met and common or easy? then triage normally")]


RARE_SETUP = re.compile(
    r"torch\._(?:dynamo|inductor)\.config\.\w{1,60}\s{0,2}=|emulate_precision_casts|capture_scalar_outputs|\bstride=\(|\bas_strided\b|\bINT_MIN\b|\binf\b|\bnan\b",
    I,
)


@rule("R12.5")
def r12_5_low_priority(f: Facts) -> list[Finding]:
    """A fuzzer bug that is complex and rare (non-default configs, exotic strides/values, a failed check): low priority."""
    if not _is_fuzzer(f):
        return []
    rare = f.find(RARE_SETUP)
    failed = [x for x in r12_1_default_tolerances(f) + r12_2_no_index_compare(f) if x.state == "violated"]
    if failed:
        return [Finding("R12.5", "flag", LOW, 0.6, failed[0].evidence, failed[0].source, "the fuzzer criteria fail: rare or noise")]
    if rare:
        return [Finding("R12.5", "flag", LOW, 0.5, rare[0], rare[1], "needs an unusual setup to reproduce: complex and rare")]
    return []
