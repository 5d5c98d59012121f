"""A small learned labeler for the core components, trained on issues humans already triaged.

The approach of Mozilla's bugbug, kept explainable: one logistic regression per label over binary
features (title words, body words, and which rules fired), so every suggestion can show the features
that pushed it up. Pure Python (no numpy) to keep the rubric package dependency-free; a few hundred
to a few thousand issues train in seconds. The rules stay authoritative: the engine uses the model's
probability as one more weighed finding, never to break an invariant.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .facts import DISPATCHER, DYNAMIC, DYNAMO, INDUCTOR, Finding
from .text import Source

MODEL_FILE = Path(__file__).resolve().parent.parent / "data" / "label_model.json"
# The labels the model learns: the core components with enough examples in any PT2 history.
MODEL_LABELS = (DYNAMO, INDUCTOR, DYNAMIC, DISPATCHER)
# Which rubric rule governs each learned label: the rule id a model suggestion cites.
GOVERNING_RULE = {DYNAMO: "R1.2", INDUCTOR: "R2.2", DYNAMIC: "R1.3", DISPATCHER: "R5"}

TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,30}(?:\.[A-Za-z_][A-Za-z0-9_]{1,30}){0,3}")
STOP = frozenset(
    "the and for with this that when are not but from have has was were you can use using torch compile "
    "compiled import print def return self none true false error issue bug code run model".split()
)
MAX_TEXT = 8_000


def features(sources: list[Source], findings: Iterable[Finding]) -> dict[str, tuple[str, str]]:
    """Binary features of one issue, each mapped to (evidence text as written, source name) for display."""
    found: dict[str, tuple[str, str]] = {}
    for source in sources:
        prefix = "t:" if source.name == "title" else "b:"
        for token in set(TOKEN.findall(source.text[:MAX_TEXT])):
            word = token.lower()
            if word not in STOP:
                found.setdefault(prefix + word, (token, source.name))
    for x in findings:
        if x.kind in ("add", "route", "flag", "avoid"):
            found.setdefault(f"rule:{x.rule_id}:{x.kind}:{x.label}", (x.evidence, x.source))
    return found


@dataclass
class LabelModel:
    """Per label: a bias and sparse feature weights. predict() returns probability and top features."""

    weights: dict[str, dict[str, float]] = field(default_factory=dict)
    bias: dict[str, float] = field(default_factory=dict)
    trained_on: int = 0

    def predict(self, feats: dict[str, tuple[str, str]], top: int = 3) -> dict[str, tuple[float, list[str]]]:
        out = {}
        for label, w in self.weights.items():
            contributions = [(w[f], f) for f in feats.keys() & w.keys()]
            z = self.bias[label] + sum(c for c, _ in contributions)
            p = 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))
            out[label] = (p, [f for c, f in sorted(contributions, reverse=True)[:top] if c > 0])
        return out

    def save(self, path: Path = MODEL_FILE) -> None:
        data = {"trained_on": self.trained_on, "bias": self.bias,
                "weights": {l: {f: round(v, 4) for f, v in w.items() if abs(v) >= 1e-3} for l, w in self.weights.items()}}
        path.write_text(json.dumps(data, sort_keys=True, indent=0))

    @classmethod
    def load(cls, path: Path = MODEL_FILE) -> LabelModel | None:
        """The saved model, or None when there is none (the engine then runs on rules alone)."""
        try:
            data = json.loads(path.read_text())
            return cls(weights=data["weights"], bias=data["bias"], trained_on=data.get("trained_on", 0))
        except (OSError, ValueError, KeyError):
            return None


def train(examples: list[tuple[set[str], dict[str, bool | None]]], epochs: int = 40, rate: float = 0.2,
          l2: float = 0.01, min_df: int = 3, seed: int = 0) -> LabelModel:
    """Fit one L2-regularised logistic regression per label by SGD.

    examples: (feature names, {label: True/False/None}); None (a label hidden by truncation) leaves
    the example out for that label only. Features seen in fewer than min_df issues are dropped.
    """
    df = Counter(f for feats, _ in examples for f in feats)
    vocab = {f for f, n in df.items() if n >= min_df}
    model = LabelModel(trained_on=len(examples))
    rng = random.Random(seed)
    for label in MODEL_LABELS:
        rows = [([f for f in feats if f in vocab], answers[label]) for feats, answers in examples if answers.get(label) is not None]
        positives = sum(1 for _, y in rows if y)
        w: dict[str, float] = {}
        b = math.log((positives + 1) / (len(rows) - positives + 1)) if rows else 0.0
        for epoch in range(epochs):
            rng.shuffle(rows)
            step = rate / (1 + epoch * 0.1)
            for feats, y in rows:
                z = b + sum(w.get(f, 0.0) for f in feats)
                g = (1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))) - (1.0 if y else 0.0)
                b -= step * g
                for f in feats:
                    w[f] = w.get(f, 0.0) * (1 - step * l2) - step * g
        model.weights[label], model.bias[label] = w, b
    return model
