"""RUBRIC.md as code, part 3: what PyTorch's triage skill added in its late-2026 version (R5.1, G9-G13).

Same shape as rules/general.py: one function per rule id, registered with @rule, returning Findings. R5.1 and G12
also need the engine's decisions (the chosen dispatcher suggestion, the route), so the engine calls
dispatcher_layer() and the G12 gate itself; bot_breaches() serves the bot review (G13).

G12 compares the torch version an issue states with the repository's latest release, which the caller
passes in (IssueText.release): never guessed, and unknown means never.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rubric_app.rubric.likeness.signature import signature_of
from rubric_app.rubric.reading.facts import Facts, Finding, I, rule
from rubric_app.rubric.reading.thread import conclusion
from rubric_app.rubric.reading.types import ChecklistItem
from rubric_app.rubric.rules.domain import COMPILE_NOT_INVOLVED
from rubric_app.rubric.rules.general import COMPILE_USE, thread_facts
from rubric_app.rubric.rules.review import FUZZER, HARD_CRASH, REGRESSION_SAID
from rubric_app.vocabulary import (
    AOTDISPATCH,
    AUTOGRAD,
    BOT_TRIAGE_BLOCKED,
    CUSTOM_OPERATORS,
    DISTRIBUTED_ONCALL,
    DISTRIBUTED_SUBQUEUES,
    DOCS,
    EDGE_CASES,
    ENHANCEMENT,
    FAKE_TENSOR,
    FEATURE,
    FUNCTION_REQUEST,
    FUNCTIONALIZATION,
    FUZZER_TOPIC,
    HAS_WORKAROUND,
    HIGH_PRIORITY,
    HUMAN_ONLY,
    MODULE_CRASH,
    MODULE_REGRESSION,
    MODULE_TESTS,
    NEEDS_REPRODUCTION,
    NUMERICAL_STABILITY,
    PERFORMANCE,
    PT2_DISPATCHER,
    RELENG_ONCALL,
    WINDOWS,
    Kind,
)

# --- G9. No self-contained reproduction ---------------------------------------------------------

# G9.1: the repro depends on a file the reporter must send, so nobody can run it as posted.
EXTERNAL_FILE = re.compile(
    r"\b[\w-]{1,80}\.(?:pt|pth|pkl|ckpt|safetensors|onnx|bin|zip)\b(?!\w)"
    r"|drive\.google\.com|dropbox\.com|onedrive\.live\.com|1drv\.ms|mega\.nz|wetransfer\.com"
    r"|huggingface\.co/[\w.-]{1,60}/[\w.-]{1,60}/(?:resolve|blob)/",
    I,
)
LOADS_FILE = re.compile(
    r"torch\.load\(|from_pretrained\(|load_state_dict\(|onnx\.load\(|pickle\.load\(|\bdownload\b", I
)
# An attachment: GitHub's upload link, or an archive the reporter says they attached.
ATTACHED = re.compile(
    r"github\.com/user-attachments/files/\d{1,12}/[\w.-]{1,120}"
    r"|\battach(?:ed|ment)\b[^\n]{0,80}?\.(?:zip|tar\.gz|tgz|7z|rar)\b",
    I,
)
# G9.2: what reproducing needs besides a script.
GPU_MODEL = re.compile(
    r"\b(?:H100|H200|H20|A100|A800|A10G?|A6000|L4|L40S?|V100|T4|B200|GB200|MI\d{3}X?"
    r"|RTX ?(?:PRO ?)?\d{4}(?: ?Ti)?|GTX ?\d{3,4}(?: ?Ti)?|Jetson (?:Orin|Xavier|Nano)\w{0,10})\b"
)
PRIVATE_SETUP = re.compile(
    r"\b(?:can(?:no|')t|unable to|not able to|not allowed to) (?:share|provide|release|publish|post)"
    r" (?:the |our |my |a )?(?:model|code|checkpoint|weights|dataset|data|repro\w{0,9})\b"
    r"|\b(?:internal|proprietary|private|confidential|in-house) (?:model|checkpoint|dataset|codebase|code|framework"
    r"|training (?:code|setup|pipeline))\b",
    I,
)
UPGRADE_BROKE = re.compile(
    r"\b(?:after|since|when I|when we|once I|once we) upgrad\w{1,4}|\bupgrading (?:torch|pytorch|to)\b"
    r"|\bbroke (?:after|since|when) (?:the |an |I |we )?upgrad\w{1,4}",
    I,
)
INFRASTRUCTURE = re.compile(
    r"\b(?:our|my|the) (?:training (?:job|setup|pipeline|script|run)|cluster|slurm (?:job|cluster))\b"
    r"|\bmulti-?node\b|\b\d{1,4} (?:nodes|hosts)\b|--nnodes|\bslurm\b|\bkubernetes\b|\bmegatron\b",
    I,
)
# A script someone can run: a code block that compiles or calls torch.
RUNNABLE = re.compile(r"\bimport torch\b|\btorch\.\w{1,40}\(", I)

G9_REASON = "reproducing needs {}: ask for a self-contained reproduction, not triaged yet"
# G9 from a finished bisection: the posted repro imports a package the runner lacks, or is a snippet (NameError,
# SyntaxError), so it never reached the compiler (bisection/verdict.py).
BISECTION_NEED = "what the posted repro lacks (the bisection could not run it as posted)"


def g9_need(x: Finding) -> str:
    """What a G9 finding says reproducing needs (G9_REASON's blank): "a file to download", ..."""
    return x.reason.split(":")[0].removeprefix("reproducing needs ")


def _runnable_script(f: Facts) -> bool:
    """The issue (body or comments) holds a code block that runs torch: a script, not a description."""
    return bool(f.code.parsed) and f.has(RUNNABLE, "text")


@rule("G9.1")
def g9_1_download(f: Facts) -> list[Finding]:
    """Reproducing needs a file to download (an attachment, a Drive link, Hub model files): ask for a
    self-contained reproduction."""
    # LOADS_FILE first: its literals let the prefilter skip most issues before the costlier scan.
    hit = (f.has(LOADS_FILE, "text") and f.find(EXTERNAL_FILE, "text")) or f.find(ATTACHED, "text")
    if not hit:
        return []
    return [Finding("G9.1", Kind.FLAG, NEEDS_REPRODUCTION, 0.7, hit[0], hit[1], G9_REASON.format("a file to download"))]


@rule("G9.2")
def g9_2_no_script(f: Facts) -> list[Finding]:
    """A specific GPU, a model or dataset that cannot be run in a few lines, an upgrade that broke it, a training
    setup or a cluster, and no script that runs on its own: ask for one."""
    if g9_1_download(f) or _runnable_script(f):
        return []
    for pattern, what in (
        (PRIVATE_SETUP, "a model, checkpoint or dataset nobody else has"),
        (INFRASTRUCTURE, "a training setup or a cluster"),
        (UPGRADE_BROKE, "an upgrade that broke it, and no minimal script"),
        (GPU_MODEL, "a specific GPU, and no script"),
    ):
        # The report's own words: a comment's H100 (the Repro Agent's run, a maintainer's machine) is no need of it.
        hit = f.find(pattern, "title") or f.find(pattern, "text")
        if hit and hit[1] in ("title", "body"):
            return [Finding("G9.2", Kind.FLAG, NEEDS_REPRODUCTION, 0.6, hit[0], hit[1], G9_REASON.format(what))]
    return []


def reproduction_reply(replies) -> str:
    """G9's reply: the catalog's `request_self_contained_reproduction`, or `needs_reproduction` where it has none."""
    return (
        "request_self_contained_reproduction"
        if "request_self_contained_reproduction" in replies
        else ("needs_reproduction")
    )


# --- G10. Edge cases and numerical accuracy --------------------------------------------------------

EXTREME = re.compile(
    r"torch\.finfo\([\w.]{1,40}\)\.(?:max|min)\b|\bfinfo\.(?:max|min)\b|\biinfo\([\w.]{1,40}\)\.(?:max|min)\b"
    r"|\b(?:extreme|extremal|very large|very small|huge|tiny|maximum representable) (?:values?|inputs?|numbers?"
    r"|magnitudes?|scales?)\b"
    r"|\b(?:3\.40282\d{0,4}e\+?38|65504(?:\.0)?|1\.7976931\d{0,6}e\+?308)\b"
    r"|\bnear (?:the )?(?:dtype(?:'s)? |float(?:16|32|64)? |fp16 |fp32 )?(?:max(?:imum)?|min(?:imum)?|limits?)\b"
    r"|\b(?:dtype|float16|float32|float64|fp16|fp32|bf16|bfloat16) (?:limits?|max(?:imum)?|min(?:imum)?)\b",
    I,
)
# NaN or Inf as a result, not a name: `equal_nan`, `nan_to_num`, `torch.isnan` or a tolerance mention no NaN (G8).
NAN_RESULT = re.compile(
    r"\b(?:returns?|returned|produces?|produced|gives?|gave|outputs?|results? in|becomes?|get|gets|got"
    r"|overflows? to|yields?)\s{1,3}(?:a |an |all |only )?`?(?:-?inf|nan|NaNs?|infs?|infinity)`?(?![\w(])",
    I,
)
CPU_GPU_NUMERICS = re.compile(
    r"\b(?:cpu and (?:gpu|cuda)|(?:gpu|cuda) and cpu|cpu vs\.? (?:gpu|cuda)|(?:gpu|cuda) vs\.? cpu)"
    r" (?:results?|outputs?|values?) (?:differ|are different|don't match|do not match|mismatch)"
    r"\w{0,3} (?:slightly|by (?:about |~)?\d)",
    I,
)
DTYPE_PRECISION = re.compile(
    r"\b(?:fp32|float32)\b[^\n]{0,30}?\b(?:vs\.?|versus|compared (?:to|with))\s{1,3}`?(?:fp16|float16|bf16|bfloat16"
    r"|half)\b|\b(?:fp16|float16|bf16|bfloat16|half)\b[^\n]{0,30}?\b(?:vs\.?|versus|compared (?:to|with))\s{1,3}"
    r"`?(?:fp32|float32)\b",
    I,
)
# A test failing on its tolerance is module: tests, not module: numerical-stability (G10, G8).
TOLERANCE_FAILURE = re.compile(
    r"Mismatched elements: \d|Greatest (?:absolute|relative) difference|Tensor-likes are not close", I
)
TEST_CONTEXT = re.compile(
    r"^\s{0,4}(?:DISABLED )?test_\w{2,80}|\bpython(?:3)? test/[\w/]{1,120}\.py|\bpytest test/[\w/]{1,120}"
    r"|\btest/(?:inductor|dynamo|functorch|export)/test_\w{1,80}\.py",
    I,
)


def _edge_case(f: Facts) -> tuple[str, str, str, float] | None:
    """(evidence, source, what, weight) of an edge case or numerical-accuracy report (G10), or None."""
    for pattern, what, title_w, text_w in (
        (EXTREME, "values at the dtype's limits", 0.8, 0.7),
        (CPU_GPU_NUMERICS, "CPU and GPU results that differ in precision", 0.7, 0.6),
        (DTYPE_PRECISION, "precision differences between dtypes", 0.7, 0.6),
    ):
        hit = f.find(pattern, "title") or f.find(pattern, "text")
        if hit:
            return hit[0], hit[1], what, title_w if hit[1] == "title" else text_w
    nan = f.find(NAN_RESULT)
    if nan and (f.has(re.compile(r"\b(?:large|extreme|huge|max|min|overflow\w{0,3})\b", I)) or f.has(FUZZER)):
        return nan[0], nan[1], "NaN or Inf from valid but extreme inputs", 0.6
    return None


@rule("G10")
def g10_edge_cases(f: Facts) -> list[Finding]:
    """Edge cases and numerical accuracy: module: edge cases (+ topic: fuzzer), the numerical_accuracy reply;
    a test failing on its tolerance is module: tests, not module: numerical-stability."""
    found: list[Finding] = []
    tolerance = f.find(TOLERANCE_FAILURE) if f.has(TEST_CONTEXT) else None
    if tolerance:
        found.append(
            Finding(
                "G10",
                Kind.AVOID,
                NUMERICAL_STABILITY,
                evidence=tolerance[0],
                source=tolerance[1],
                reason="a test failing on its tolerance: module: tests, not numerical stability",
            )
        )
    edge = _edge_case(f)
    if edge is None:
        return found
    evidence, source, what, weight = edge
    found.append(Finding("G10", Kind.ADD, EDGE_CASES, weight, evidence, source, f"an edge case: {what}"))
    fuzzer = f.find(FUZZER)
    if fuzzer and FUZZER_TOPIC not in f.labels:
        found.append(Finding("G10", Kind.ADD, FUZZER_TOPIC, weight, fuzzer[0], fuzzer[1], "a fuzzer made the input"))
    found.append(
        Finding(
            "G10",
            Kind.CHECK,
            EDGE_CASES,
            evidence=evidence,
            source=source,
            state="needs_human",
            reason=f"An edge case ({what}): reply numerical_accuracy; where the documentation says the result is "
            "expected, close with it.",
        )
    )
    return found


# --- G11. Labels triagers often miss ---------------------------------------------------------------

WINDOWS_TEXT = re.compile(
    r"\bonly on windows\b|\bwindows[- ]only\b|\bon windows\b|\bwin(?:32|_amd64)\b|\bwindows (?:10|11|server)\b", I
)
WINDOWS_TITLE = re.compile(r"\bwindows\b|\bwin(?:32|64|_amd64)\b|\bmsvc\b", I)
SLOW = re.compile(
    r"\bslow(?:er|down|s down)?\b|\bperf(?:ormance)? (?:regression|issue|bug|drop)|\bthroughput\b"
    r"|\boptimi[sz]ation (?:request|opportunity)|\bsuboptimal\b|\bcould be faster\b",
    I,
)
TEST_TITLE = re.compile(
    r"^\s{0,4}(?:DISABLED )?test_\w{2,80}|\[tests?\]|\btest_\w{3,80} (?:fails|is failing|failed|broken|flaky)\b", I
)
WRONG_GRADIENT = re.compile(
    r"\b(?:wrong|incorrect|inconsistent) (?:gradients?|grads?|backward|derivatives?)\b"
    r"|\bgrad(?:ient)?s? (?:is|are) (?:wrong|incorrect|nan|none|zero)\b"
    r"|\bbackward (?:pass )?(?:is wrong|gives wrong|returns wrong|produces wrong)",
    I,
)
WORKAROUND = re.compile(r"\bwork-?arounds?\b[^\n]{0,200}|\bworks around\b[^\n]{0,200}", I)
# A workaround that is the bug's mirror image: not using what is broken (G11: no `has workaround`).
MIRROR_WORKAROUND = re.compile(
    r"\.contiguous\(\)|\bwithout (?:torch\.)?compil\w{1,4}|\bdisabl\w{1,4} (?:torch\.)?compil\w{1,4}"
    r"|torch\._dynamo\.disable|backend\s{0,2}=\s{0,2}['\"]eager['\"]|\beager mode\b"
    r"|\bnot (?:use|using) (?:torch\.)?compile"
    r"|\brun(?:ning)? (?:it )?in eager\b",
    I,
)
REAL_WORKAROUND = re.compile(
    r"torch\._(?:dynamo|inductor|functorch)\.config\.\w{1,60}\s{0,2}=|\bpip install [\w-]{1,40}==[\w.]{1,20}"
    r"|\bgc\.collect\(\)|\bsynchronize\(\)|\binstead of\b|\bdowngrad\w{1,4} to\b|\bTORCH\w{0,20}_\w{1,40}=\w",
    I,
)
COMMONLY_MISSED = "commonly missed"


def _missed(label: str, hit: tuple[str, str], reason: str, weight: float = 0.0) -> list[Finding]:
    """A G11 check (and an ADD with `weight`, when the evidence names the label outright)."""
    check = Finding(
        "G11", Kind.CHECK, label, evidence=hit[0], source=hit[1], state="needs_human", reason=f"{reason}: {label}?"
    )
    return [check] + ([Finding("G11", Kind.ADD, label, weight, hit[0], hit[1], reason)] if weight else [])


@rule("G11")
def g11_commonly_missed(f: Facts) -> list[Finding]:
    """Each label triagers often miss, checked on every issue: module: crash, performance, windows, regression,
    tests, autograd (R3.3 still holds under compile), and has workaround only for a real one."""
    found: list[Finding] = []
    crash = f.find(HARD_CRASH, "title") or f.find(HARD_CRASH, "text")
    if crash:
        found += _missed(MODULE_CRASH, crash, "a hard crash", 0.8 if crash[1] == "title" else 0.7)
    slow = f.find(SLOW, "title")
    if slow:  # R7.2 suggests it from the words it knows: the check makes sure nobody misses it
        found += _missed(PERFORMANCE, slow, "a slowdown or an optimization request")
    windows = f.find(WINDOWS_TITLE, "title") or f.find(WINDOWS_TEXT, "text")
    if windows:
        found += _missed(WINDOWS, windows, "on Windows", 0.7 if windows[1] == "title" else 0.0)
    regression = f.find(REGRESSION_SAID, "title") or f.find(REGRESSION_SAID, "text")
    if regression:
        found += _missed(
            MODULE_REGRESSION, regression, "worked before, broken now", 0.7 if regression[1] == "title" else 0.6
        )
    test = f.find(TEST_TITLE, "title")
    if test:
        found += _missed(MODULE_TESTS, test, "a test failing, not the feature", 0.7)
    gradient = f.find(WRONG_GRADIENT)
    if gradient and f.has(COMPILE_USE) and not f.has(COMPILE_NOT_INVOLVED):
        found.append(
            Finding(
                "G11",
                Kind.CHECK,
                AUTOGRAD,
                evidence=gradient[0],
                source=gradient[1],
                state="needs_human",
                reason="A wrong gradient under compile: only if eager's is wrong too is it module: autograd (R3.3)",
            )
        )
    elif gradient:
        found += _missed(AUTOGRAD, gradient, "a wrong gradient in eager, next to the op's label", 0.7)
    return found + _workaround(f)


def _workaround(f: Facts) -> list[Finding]:
    """`has workaround` only for a workaround that is neither obvious nor the bug's mirror image (G11)."""
    said = f.find(WORKAROUND, "text")
    if not said:
        return []
    mirror = MIRROR_WORKAROUND.search(said[0])
    if mirror:
        return [
            Finding(
                "G11",
                Kind.AVOID,
                HAS_WORKAROUND,
                evidence=mirror.group(0),
                source=said[1],
                reason="the workaround is the bug's mirror image, not one (G11)",
            )
        ]
    real = REAL_WORKAROUND.search(said[0])
    if real:
        return _missed(HAS_WORKAROUND, (real.group(0), said[1]), "a workaround that is not obvious", 0.6)
    return _missed(HAS_WORKAROUND, said, "a workaround is mentioned: neither obvious nor the mirror image")


# --- R5.1. The dispatcher's layer ------------------------------------------------------------------

# How evidence names each layer, most specific first: a custom op's fake implementation is its registration's
# business, FakeTensor's own code is FakeTensor's, and "input mutation" is AOTAutograd's runtime wrappers.
LAYER_WORDS = (
    (
        CUSTOM_OPERATORS,
        re.compile(
            r"\btorch\.library\.\w{1,30}|\bcustom[ _-]?op(?:erator)?s?\b|\bregister_fake\b|@custom_op\b"
            r"|\bno fake impl\w{0,12}|\babstract impl\w{0,12}|\bcrossref\b|torch/_library/|torch/library\.py",
            I,
        ),
    ),
    (
        FUNCTIONALIZATION,
        re.compile(r"\bfunctionali[sz]\w{1,10}|\bFunctionalTensor\w{0,10}|functional_tensor\.py", I),
    ),
    (
        FAKE_TENSOR,
        re.compile(
            r"\bFakeTensor\w{0,12}|\bfake[ _]tensors?\b|fake_tensor\.py|fake_impls\.py|fake_utils\.py"
            r"|\bmeta (?:kernel|function|impl\w{0,12})s?\b",
            I,
        ),
    ),
    (
        AOTDISPATCH,
        re.compile(
            r"\baot[_ ]?autograd\b|\bAOTAutograd\w{0,10}|\baot[_ ]?dispatch\w{0,3}|_aot_autograd/|runtime_wrappers"
            r"|\bpartitioner\b|min_cut_rematerialization\w{0,10}|synthetic[ _]base|\binput mutations?\b"
            r"|\bview_replay\b",
            I,
        ),
    ),
)
# The frames a layer's code is in (signature.py's innermost PT2 frame).
LAYER_FRAMES = (
    (CUSTOM_OPERATORS, ("torch/_library/", "torch/_custom_op")),
    (FUNCTIONALIZATION, ("torch/_subclasses/functional_tensor.py",)),
    (FAKE_TENSOR, ("torch/_subclasses/fake_tensor.py", "torch/_subclasses/fake_impls.py", "torch/_subclasses/fake_")),
    (AOTDISPATCH, ("torch/_functorch/_aot_autograd/", "torch/_functorch/aot_autograd.py", "torch/_functorch/partit")),
)


def layer_of(text: str) -> tuple[str, str] | None:
    """(layer label, the words that name it) for the first layer `text` names (LAYER_WORDS order), or None."""
    for label, pattern in LAYER_WORDS:
        match = pattern.search(text)
        if match:
            return label, match.group(0)
    return None


@dataclass(frozen=True)
class Layer:
    """R5.1's answer: the layer label, the evidence that names it, where it was read and how."""

    label: str
    evidence: str
    source: str
    how: str


def dispatcher_layer(f: Facts, findings: list[Finding]) -> Layer | None:
    """The layer of a dispatcher bug, from the best evidence there is (R5.1): the thread's diagnosis, then the
    innermost failing frame, then a bisection verdict, then the title, then the rule that found the umbrella.
    None when nothing names one: the checklist asks."""
    last = conclusion(thread_facts(f))
    if last is not None and last.label == PT2_DISPATCHER and (named := layer_of(last.evidence)):
        return Layer(named[0], last.evidence, last.source, "the thread's diagnosis")
    diagnosed = [
        x for x in findings if x.rule_id == "R2" and x.label == PT2_DISPATCHER and x.kind in (Kind.CHECK, Kind.ADD)
    ]
    for x in reversed(diagnosed):
        if named := layer_of(x.evidence):
            return Layer(named[0], x.evidence, x.source, "the thread's diagnosis")
    signature = signature_of(f.issue)
    if signature is not None and signature.frames:
        innermost = signature.frames[0]
        for label, paths in LAYER_FRAMES:
            if innermost.startswith(paths):
                return Layer(label, innermost, signature.source, "the failing frame")
    for x in findings:
        if x.source.startswith("bisection") and x.label == PT2_DISPATCHER and (named := layer_of(x.evidence)):
            return Layer(named[0], x.evidence, x.source, "the bisection's verdict")
    if named := layer_of(f.sources[0].text):
        return Layer(named[0], named[1], "title", "the title")
    for x in findings:
        if x.origin == "rule" and x.label == PT2_DISPATCHER and x.kind == Kind.ADD and (named := layer_of(x.evidence)):
            return Layer(named[0], x.evidence, x.source, x.reason)
    return None


# --- G12. release triage -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TorchVersion:
    """A torch version as written ("2.13.0+cu128", "2.14.0.dev20260101", "2.13.0rc1")."""

    text: str
    major: int
    minor: int
    patch: int | None
    pre: str  # "", "rc1", "a0", ".dev20260101": not a release
    local: str  # "+cu128", "+cpu", "+gitabc123"

    @property
    def minor_key(self) -> tuple[int, int]:
        return (self.major, self.minor)

    @property
    def kind(self) -> str:
        """ "release", "nightly", "release candidate" or "source build"."""
        pre = self.pre.lower()
        if "dev" in pre:
            return "nightly"
        if pre.startswith(("rc", "b", "c")) or (pre.startswith("a") and pre != "a0"):
            return "release candidate"
        if pre == "a0" or self.local.lower().startswith("+git"):
            return "source build"
        return "release"


_VERSION = r"v?(\d{1,2})\.(\d{1,3})(?:\.(\d{1,3}))?((?:\.?(?:dev|rc|a|b|c)\d{0,12})?)((?:\+[\w.]{1,40})?)"
VERSION_TEXT = re.compile(rf"^{_VERSION}$", I)


def parse_version(text: str) -> TorchVersion | None:
    """A version string as pip and collect_env write it, or None when it is not one."""
    match = VERSION_TEXT.match(text.strip().strip("'\"`,;"))
    if not match:
        return None
    major, minor, patch, pre, local = match.groups()
    return TorchVersion(text.strip().strip("'\"`,;"), int(major), int(minor), int(patch) if patch else None, pre, local)


def parse_release(tag: str) -> TorchVersion | None:
    """The repository's release tag ("v2.13.0") as a version; None when it is no released version (G12: then the
    last good one stays)."""
    version = parse_version(tag or "")
    return version if version is not None and version.kind == "release" and not version.local else None


# Where an issue states the torch version it failed on: collect_env's line, a pip list or install line, prose.
ENV_VERSION = re.compile(rf"PyTorch version:[ \t]{{0,8}}({_VERSION[2:]})|(?<![\w-])torch==({_VERSION[2:]})", I)
PIP_VERSION = re.compile(rf"\bpip3? install [^\n]{{0,120}}?(?<![\w-])torch==({_VERSION[2:]})", I)
PROSE_VERSION = re.compile(
    r"\b(?:torch|pytorch)(?:\.__version__)?(?: version)?[ \t]{0,3}(?:==|=|:|is)?[ \t]{0,3}['\"`]?"
    r"(v?\d{1,2}\.\d{1,3}(?:\.\d{1,3})?(?:\.?(?:dev|rc|a|b|c)\d{0,12})?(?:\+[\w.]{1,40})?)",
    I,
)
# "works on 2.13.0", "fixed in 2.13": a version the reporter says it does not fail on.
NOT_FAILING_ON = re.compile(r"\b(?:works?|worked|fixed|passes|passed|fine|ok)\b[^\n.]{0,30}$", I)
# Never release triage: a feature request, an enhancement or documentation (PyTorch's issue forms name them).
NOT_A_BUG_LABELS = (FEATURE, ENHANCEMENT, FUNCTION_REQUEST, DOCS)
NOT_A_BUG = re.compile(
    r"### 🚀 The feature|### 📚 The doc issue|\[feature(?: request)?\]|\bfeature request\b|\[rfc\]|\[docs?\]"
    r"|\bdocumentation (?:is (?:wrong|missing|unclear)|issue|bug)\b",
    I,
)


@dataclass(frozen=True)
class ReleaseGate:
    """G12's answer: `gate` is "G12.1", "G12.2" or "" (no release triage), `evidence` the gate's text (or why not)."""

    gate: str
    evidence: str
    source: str = ""


def stated_version(f: Facts, latest: TorchVersion) -> tuple[TorchVersion, str, str] | None:
    """(version, the words that state it, source) of the torch version the issue states it failed on, or None.

    The environment report's torch line says what it ran on; else a `pip install torch==` line; else the prose,
    where a version the reporter says works (or was fixed in) is not the one it failed on, and one that is not a
    release (nightly, candidate, source build) is kept, since G12 must then say no."""
    env = f.find_environment(ENV_VERSION)
    if env and (version := parse_version(_version_group(ENV_VERSION, env[0]))):
        return version, env[0], env[1]
    pip = f.find(PIP_VERSION, "text")
    if pip and (version := parse_version(_version_group(PIP_VERSION, pip[0]))):
        return version, pip[0], pip[1]
    said: list[tuple[TorchVersion, str, str]] = []
    for source in f.sources:
        for match in PROSE_VERSION.finditer(source.text):
            version = parse_version(match.group(1))
            if version is None or NOT_FAILING_ON.search(source.text[max(match.start() - 40, 0) : match.start()]):
                continue
            said.append((version, match.group(0), source.name))
    if not said:
        return None
    for item in said:  # a nightly or candidate named anywhere: it was seen off a release
        if item[0].kind != "release":
            return item
    newest = max(said, key=lambda item: item[0].minor_key)
    return next((item for item in said if item[0].minor_key == latest.minor_key), newest)


def _version_group(pattern: re.Pattern[str], text: str) -> str:
    match = pattern.search(text)
    return next((g for g in match.groups() if g and "." in g), "") if match else ""


def release_gate(f: Facts) -> ReleaseGate:
    """G12: `release triage` through gate G12.1 (the stated version is the latest released minor) or G12.2 (a human
    labelled it `high priority`), never when the latest release is unknown, never for a feature, an enhancement or
    documentation. The evidence says which gate, or why none holds."""
    latest = parse_release(f.issue.release)
    if latest is None:
        return ReleaseGate("", "the latest release is unknown: never guessed")
    not_a_bug = next((l for l in NOT_A_BUG_LABELS if l in f.labels), "") or (f.find(NOT_A_BUG) or ("",))[0]
    if not_a_bug:
        return ReleaseGate("", f"a feature request, an enhancement or documentation ({not_a_bug}): never")
    if HIGH_PRIORITY in f.labels:
        actor = dict(f.issue.labelled_by).get(HIGH_PRIORITY, "")
        if actor.endswith("[bot]"):
            return ReleaseGate("", f"high priority was added by @{actor}, not by a human")
        who = f", added by @{actor}" if actor else " (a human's label: the bot never adds it)"
        return ReleaseGate("G12.2", f"high priority{who}", "labels")
    stated = stated_version(f, latest)
    if stated is None:
        return ReleaseGate("", f"no torch version stated; the latest release is {f.issue.release}")
    version, words, source = stated
    if version.kind != "release":
        return ReleaseGate("", f"states {version.text}: a {version.kind}, not a release", source)
    if version.minor_key < latest.minor_key:
        return ReleaseGate(
            "", f"states {version.text}, older than the latest minor {latest.major}.{latest.minor}", source
        )
    if version.minor_key > latest.minor_key:
        return ReleaseGate("", f"states {version.text}, newer than the latest release {f.issue.release}", source)
    # The gate's words are the evidence (not a quote of the text): its source is the release it compares with.
    return ReleaseGate("G12.1", f"states {version.text}; the latest release is {f.issue.release}", "release")


# --- G13. What the bot may not do, and a human may -----------------------------------------------------


@rule("G13")
def g13_blocked(f: Facts) -> list[Finding]:
    """The triage bot's run was stopped before it could finish (`bot-triage-blocked`): a human must pick it up."""
    if BOT_TRIAGE_BLOCKED not in f.labels:
        return []
    return [
        Finding(
            "G13",
            Kind.CHECK,
            evidence=BOT_TRIAGE_BLOCKED,
            source="labels",
            state="needs_human",
            reason="PyTorch's triage bot was stopped before it could finish: triage it by hand (its labels may be "
            "partial).",
        )
    ]


def never_applied(label: str) -> str:
    """Why G13 keeps `label` out of what the dashboard suggests ("" when it does not): `oncall: releng` is never a
    redirect, a distributed sub-queue is the distributed team's own triage's to pick."""
    if label == RELENG_ONCALL:
        return "never a redirect: use module: ci (G13)"
    if label in DISTRIBUTED_SUBQUEUES:
        return f"the distributed team's own triage picks the sub-queue: {DISTRIBUTED_ONCALL} (G13)"
    return ""


def bot_breaches(added: list[str], removed: list[str]) -> list[ChecklistItem]:
    """What PyTorch's triage bot did that it may not (G13), from the labels it added and removed on one issue:
    a human-only label, a label taken away, a sub-queue or `oncall: releng`."""
    items = [
        ChecklistItem("G13", f"The bot added {name}: only a human adds it, after reading the issue.", "violated", name)
        for name in added
        if name in HUMAN_ONLY
    ]
    items += [
        ChecklistItem("G13", f"The bot added {name}: {why}", "violated", name)
        for name in added
        if (why := never_applied(name))
    ]
    items += [
        ChecklistItem("G13", f"The bot removed {name}: it only adds labels.", "violated", name) for name in removed
    ]
    return items
