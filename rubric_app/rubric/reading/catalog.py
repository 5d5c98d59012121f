"""The label catalog and RUBRIC G7's forbidden labels."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from rubric_app.vocabulary import (
    COMPILE_TIME,
    COMPILE_UX,
    CPU_INDUCTOR_ONCALL,
    CUDA_GRAPHS,
    DDP,
    DECOMPOSITIONS,
    DETERMINISM,
    DISTRIBUTED_ONCALL,
    DTENSOR,
    DYNAMIC_SHAPES,
    DYNAMO,
    EXPORT_ONCALL,
    FLEX_ATTENTION,
    FSDP,
    FUNCTORCH,
    FX,
    HELION,
    INDUCTOR,
    MEMORY_USAGE,
    NUMERICAL_STABILITY,
    PERFORMANCE,
    PT2_DISPATCHER,
    TRIAGE_REVIEW,
)

CATALOG_FILE = Path(__file__).resolve().parents[2] / "data" / "pytorch_labels.json"

# G7: never suggested nor applied from the dashboard without a human override.
FORBIDDEN_PREFIXES = ("ciflow/", "test-config/", "release notes:", "ci-", "ci:", "sev")
FORBIDDEN_NAMES = frozenset({"merge blocking"})


def is_forbidden(name: str) -> bool:
    """True when G7 forbids the label: a CI/release prefix, `deprecated` in it, or `merge blocking`."""
    lowered = name.strip().lower()
    return lowered.startswith(FORBIDDEN_PREFIXES) or "deprecated" in lowered or lowered in FORBIDDEN_NAMES


def load_catalog(path: Path = CATALOG_FILE) -> list[dict]:
    """Return the shipped triage catalog: [{"name", "description"}], from PyTorch's label list."""
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)["labels"]


@cache
def catalog_names(path: Path = CATALOG_FILE) -> frozenset[str]:
    """Names of the shipped catalog that G7 allows (read once per process: it ships with the code)."""
    return frozenset(item["name"] for item in load_catalog(path) if not is_forbidden(item["name"]))


@cache
def known_label(name: str) -> bool:
    """Whether the shipped catalog has the label (and G7 allows it)."""
    return name in catalog_names()


def allowed_for_triage(name: str, catalog: frozenset[str] | None = None) -> bool:
    """Whether the dashboard may suggest or apply `name`: in the triage catalog (`catalog`: the triage skill's in use,
    github/skill_files.py; the shipped one when None) and not forbidden by G7."""
    return name in (catalog_names() if catalog is None else catalog) and not is_forbidden(name)


# The rule that governs each label a suggestion without a rule of its own cites: a learned labeler's (engine/model.py)
# and a neighbour vote's (likeness/neighbours.py). The one table: RUBRIC.md names the rule, the label is vocabulary's.
GOVERNING_RULE = {
    DYNAMO: "R1.2",
    INDUCTOR: "R2.2",
    DYNAMIC_SHAPES: "R1.3",
    PT2_DISPATCHER: "R5",
    DECOMPOSITIONS: "R4.1",
    FX: "R4.3",
    FUNCTORCH: "R9.1",
    HELION: "R8.1",
    FLEX_ATTENTION: "R7.1",
    DTENSOR: "R7.1",
    FSDP: "R7.1",
    DDP: "R7.1",
    CUDA_GRAPHS: "R7.3",
    DETERMINISM: "R7.2",
    COMPILE_TIME: "R7.2",
    NUMERICAL_STABILITY: "R7.2",
    COMPILE_UX: "R7.2",
    PERFORMANCE: "R7.3",
    MEMORY_USAGE: "R7.3",
    CPU_INDUCTOR_ONCALL: "R10",
    EXPORT_ONCALL: "R6.3",
    DISTRIBUTED_ONCALL: "R6.4",
    TRIAGE_REVIEW: "R11",
}


REPLIES_FILE = Path(__file__).resolve().parents[2] / "data" / "pytorch_triage_templates.json"


def load_replies(path: Path = REPLIES_FILE) -> dict[str, dict]:
    """PyTorch's standard triage replies by name: {"action", "use_when", "comment"} (redirect_to_forum, ...), and
    the dashboard's own (OWN_REPLIES)."""
    with open(path, encoding="utf-8") as fh:
        return {**json.load(fh)["templates"], **OWN_REPLIES}


# Replies of our own, where PyTorch's set has none. {version} and {summary} are filled from the runs.
OWN_REPLIES = {
    "confirm_fixed": {
        "action": "Add comment and stop",
        "use_when": "The issue's repro reproduced on an older torch build (or the reporter's) and passes on a newer "
        "one: ask the reporter to confirm before anything is closed",
        "comment": "Thanks for the report! We ran the repro from this issue in a sandbox, and it no longer fails "
        "on torch {version} ({summary}).\n\n"
        "Could you check whether it is fixed for you on torch {version} or newer (for a nightly: "
        "`pip install --pre torch --index-url https://download.pytorch.org/whl/nightly`)? If it still fails, please "
        "reply with the error and the output of `python -m torch.utils.collect_env`, and we will look again. If it "
        "is fixed, feel free to close the issue.",
    },
    # PyTorch's duplicate reply says "follow {original} for updates": wrong advice once the original is fixed.
    "duplicate_of_fixed": {
        "action": "Close as a duplicate, with a comment naming the original and the build with its fix",
        "use_when": "The issue reports the same failure as an existing issue that was closed as fixed",
        "comment": "Duplicate of {original}\n\n"
        "Thanks for the report! This looks like the same problem as {original}, which has been fixed ({summary}). "
        "Could you try {version} (for a nightly: "
        "`pip install --pre torch --index-url https://download.pytorch.org/whl/nightly`) and check whether it still "
        "fails for you? If it does, please reply here with the error and the output of "
        "`python -m torch.utils.collect_env`, and we will reopen this issue.",
    },
}


# G2's destinations: the repositories of the PyTorch organisation an issue may be transferred to,
# and the names a thread calls them by. Nothing else is a transfer target (a typo must not move an issue).
TRANSFER_REPOS = {
    "pytorch/vision": ("torchvision", "vision"),
    "pytorch/audio": ("torchaudio", "audio"),
    "pytorch/text": ("torchtext", "text"),
    "pytorch/executorch": ("executorch",),
    "pytorch/ao": ("torchao", "ao"),
    "pytorch/torchrec": ("torchrec",),
    "pytorch/torchtune": ("torchtune",),
    "pytorch/xla": ("torch_xla", "torch-xla", "torchxla", "xla"),
    "pytorch/TensorRT": ("torch_tensorrt", "torch-tensorrt", "torchtensorrt", "tensorrt"),
    "pytorch/tutorials": ("tutorials",),
}  # not Helion: its issues belong to oncall: pt2 (R8)


def transfer_repo(name: str) -> str:
    """The repository a thread's name for it means ("torchvision", "the vision repo", "pytorch/vision"),
    or "" when it names none of TRANSFER_REPOS."""
    words = name.strip().lower().removeprefix("the ").removesuffix(" repository").removesuffix(" repo").strip()
    for repo, aliases in TRANSFER_REPOS.items():
        if words == repo.lower() or words in aliases:
            return repo
    return ""
