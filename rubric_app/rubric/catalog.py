"""The label catalog and RUBRIC G7's forbidden labels."""

from __future__ import annotations

import json
from pathlib import Path

CATALOG_FILE = Path(__file__).resolve().parent.parent / "data" / "pytorch_labels.json"

# G7: never suggested nor applied from the dashboard without a human override.
FORBIDDEN_PREFIXES = ("ciflow/", "test-config/", "release notes:", "ci-", "ci:", "sev")
FORBIDDEN_NAMES = frozenset({"merge blocking"})


def is_forbidden(name: str) -> bool:
    """True when G7 forbids the label: a CI/release prefix, `deprecated` in it, or `merge blocking`."""
    lowered = name.strip().lower()
    return (
        lowered.startswith(FORBIDDEN_PREFIXES)
        or "deprecated" in lowered
        or lowered in FORBIDDEN_NAMES
    )


def load_catalog(path: Path = CATALOG_FILE) -> list[dict]:
    """Return the shipped triage catalog: [{"name", "description"}], from PyTorch's label list."""
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)["labels"]


def catalog_names(path: Path = CATALOG_FILE) -> frozenset[str]:
    """Names of the shipped catalog that G7 allows."""
    return frozenset(item["name"] for item in load_catalog(path) if not is_forbidden(item["name"]))
