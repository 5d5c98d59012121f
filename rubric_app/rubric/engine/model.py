"""A small learned labeler for the core components, routes and the review flag, trained on issues humans
already triaged.

The approach of Mozilla's bugbug, kept explainable: one logistic regression per label over binary
features (words, title tags, which rules fired, what the thread reader found: features()), so every
suggestion can show the features that pushed it up. Pure Python (no numpy) to keep the rubric package
dependency-free; a few hundred to a few thousand issues train in seconds. The rules stay authoritative:
the engine uses the model's probability as one more weighed finding, never to break an invariant.
"""

from __future__ import annotations

import bisect
import heapq
import json
import math
import random
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rubric_app.rubric.reading.facts import Finding
from rubric_app.rubric.reading.text import MAX_TITLE, Source
from rubric_app.vocabulary import (
    CPU_INDUCTOR_ONCALL,
    DECOMPOSITIONS,
    DISTRIBUTED_ONCALL,
    DYNAMIC_SHAPES,
    DYNAMO,
    EXPORT_ONCALL,
    INDUCTOR,
    PT2_DISPATCHER,
    TRIAGE_REVIEW,
    Kind,
)

DATA = Path(__file__).resolve().parents[2] / "data"
# A model trained locally (train_label_model; git-ignored) wins over the one shipped in the repo.
MODEL_FILE = DATA / "label_model.json"
SHIPPED_MODEL_FILE = DATA / "label_model_pt2.json"
# The labels the model learns: the core components with enough examples in any PT2 history, the two
# redirects PT2 makes most (R2.4/R10, R6.3), oncall: distributed for visibility (R6.4: PT2 keeps the
# issue) and the review flag (R11).
COMPONENT_LABELS = (DYNAMO, INDUCTOR, DYNAMIC_SHAPES, PT2_DISPATCHER, DECOMPOSITIONS)
MODEL_LABELS = (*COMPONENT_LABELS, CPU_INDUCTOR_ONCALL, EXPORT_ONCALL, DISTRIBUTED_ONCALL, TRIAGE_REVIEW)
# Learned labels that are visibility extras, never a handoff (R6.4).
VISIBILITY_LABELS = frozenset({DISTRIBUTED_ONCALL})
# The engine's thresholds on calibrated probabilities when no fitted ones are shipped: a component is
# suggested ("possible") from `first`, a second core one from `second`, a domain label from `extra`, a
# symptom label (engine.SYMPTOMS) from `symptom`, an `oncall:` visibility label from `visibility`; a
# redirect from `route`, the review flag from `review`. "Accept" ticks module labels from `preselect`,
# oncall: labels from `preselect_route` and the review flag from `preselect_review`.
DEFAULT_THRESHOLDS = {
    "first": 0.35,
    "second": 0.6,
    "extra": 0.5,
    "symptom": 0.5,
    "preselect": 0.75,
    "route": 0.5,
    "review": 0.5,
    "visibility": 0.5,
    "preselect_route": 0.9,
    "preselect_review": 0.9,
}

# Not after "+": a build tag (`2.5.1+cpu`, `+cu121`) says what was installed, not where it fails (R2.4).
# Not after "@": who is mentioned says nothing about the bug, and the bot's "cc @..." line is written
# from the labels already applied (a model that read it would learn the answers, not the issues).
TOKEN = re.compile(r"(?<![+@\w])[A-Za-z_][A-Za-z0-9_]{2,30}(?:\.[A-Za-z_][A-Za-z0-9_]{1,30}){0,3}")
STOP = frozenset(
    "the and for with this that when are not but from have has was were you can use using torch compile "
    "compiled import print def return self none true false error issue bug code run model".split()
)
# The words the labeler reads of the description and thread together, in order: the issues it learned from
# are excerpts of at most about this much (the harvested files: 99% under 1,400 characters, long tracebacks
# cut), and a synced issue's full text would be another distribution. Its long traceback's frames, read in
# full, outvoted the words it was trained on, and every body word counted less (BODY_SCALE) than it did in
# training, so its confidence would no longer mean what the calibration measured. The rules, the thread
# reader and the similar issues read everything; their findings are features too.
LEARNED_TEXT = 1_500
# A title's bracketed tags ("[inductor]", "[dynamo][guards]", "[CPU]") are the reporter's own triage.
TITLE_TAG = re.compile(r"\[([A-Za-z][\w .+/-]{0,30})\]")
TITLE_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{1,30}")


def features(sources: list[Source], findings: Iterable[Finding], thread: Iterable = ()) -> dict[str, tuple[str, str]]:
    """Binary features of one issue, each mapped to (evidence text as written, source name) for display.

    Words of the title (`t:`) and of the title, body and comments (`b:`); a dotted name also gives its parts
    (`torch._inductor.lowering` -> `_inductor`, `lowering`), so a module path in a traceback counts
    however deep the frame; the title's tags (`tag:`) and word pairs (`t2:`); every rule finding, by
    rule (`rule:<id>:<kind>:<label>`) and by label alone (`rl:<kind>:<label>`, so rules that find the
    same label pool their evidence); checklist questions about a label (`check:<id>:<where>:<label>`: a
    repro that never ran Inductor, a comment's diagnosis). thread: the thread reader's facts (thread.ThreadFact), as
    `thread:<kind>:<label>` features.
    """
    found: dict[str, tuple[str, str]] = {}
    budget = LEARNED_TEXT
    for source in sources:
        # The title's words are the text's words too: what the issue is about, said twice.
        prefixes = ("t:", "b:") if source.name == "title" else ("b:",)
        if source.name == "title":
            text = source.text[:MAX_TITLE]
        else:
            text = source.text[:budget]
            budget -= len(text)
        # In order of appearance: a feature's evidence is where the text first says it (a set's order changes with
        # the process's hash seed, so the web and a worker showed different words for one issue).
        for token in dict.fromkeys(TOKEN.findall(text)):
            word = token.lower()
            if word in STOP:
                continue
            parts = [part for part in word.split(".") if len(part) > 2 and part not in STOP] if "." in word else []
            pieces = name_pieces(token)
            for prefix in prefixes:
                for name in (word, *parts):
                    found.setdefault(prefix + name, (token, source.name))
                for piece in pieces:
                    found.setdefault(f"{prefix}~{piece}", (token, source.name))
        if source.name == "title":
            for tag in TITLE_TAG.finditer(text):
                found.setdefault("tag:" + tag.group(1).strip().lower(), (tag.group(0), "title"))
            words = list(TITLE_WORD.finditer(text))
            for a, b in zip(words, words[1:]):
                found.setdefault(f"t2:{a.group(0).lower()}_{b.group(0).lower()}", (text[a.start() : b.end()], "title"))
    for x in findings:
        if x.kind in (Kind.ADD, Kind.ROUTE, Kind.FLAG, Kind.AVOID):
            found.setdefault(f"rule:{x.rule_id}:{x.kind}:{x.label}", (x.evidence, x.source))
            found.setdefault(f"rl:{x.kind}:{x.label}", (x.evidence, x.source))
        elif x.kind == Kind.CHECK and x.label:  # by where it was read: the repro's code or a comment's words
            found.setdefault(f"check:{x.rule_id}:{x.source.split(':')[0]}:{x.label}", (x.evidence, x.source))
    for x in thread:
        if x.kind != "transfer":
            found.setdefault(f"thread:{x.kind}:{x.label}", (x.evidence, x.source))
    return found


# The words inside an identifier: `TorchInGraphFunctionVariable` -> torch, graph, function, variable;
# `aot_eager_decomp_partition` -> aot, eager, decomp, partition. PT2's names are made of a few words, and an
# issue about a class nobody reported before still names its parts (a Dynamo `...Variable`, a
# `...SymNode`). Kept apart from the words themselves (`~` features): pooled with them, they blurred both.
CAMEL_PIECE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
NAME_SEPARATORS = re.compile(r"[._]")
# Past its first letter, a plain word has no capital or digit (nor any "_"): most tokens, answered without splitting.
COMPOUND_MARK = re.compile(r"[A-Z0-9]")


def name_pieces(token: str) -> set[str]:
    """The lower-cased words of a compound identifier (snake_case, CamelCase, dotted); none for a plain word."""
    if "_" not in token and not COMPOUND_MARK.search(token, 1):
        return set()
    pieces = set()
    for part in NAME_SEPARATORS.split(token):
        words = CAMEL_PIECE.findall(part)
        if len(words) > 1 or "_" in token:
            pieces.update(w.lower() for w in words)
    return {w for w in pieces if len(w) > 2 and w not in STOP}


# A long body (a traceback, an environment dump) has hundreds of words, each a small vote: left at full
# weight they outvote the title and the rules by sheer number. Each body word counts
# min(1, BODY_SCALE / sqrt(body words)), so a short body's words count in full; title words, tags, rules
# and thread facts always do.
BODY_SCALE = 5.0


def feature_values(feats: Iterable[str]) -> dict[str, float]:
    """Each feature's value for the regression: 1, or less for the words of a long body (BODY_SCALE)."""
    feats = list(feats)
    body = sum(1 for f in feats if f.startswith("b:"))
    scale = min(1.0, BODY_SCALE / math.sqrt(body)) if body else 1.0
    return {f: scale if f.startswith("b:") else 1.0 for f in feats}


def feature_name(feature: str) -> str:
    """A feature as a triager reads it among a suggestion's evidence: the word, `[tag]`, the rule id."""
    kind, _, rest = feature.partition(":")
    if kind == "tag":
        return f"[{rest}]"
    if kind == "t2":
        return rest.replace("_", " ", 1)
    if kind == "rule":
        return "rule " + rest.split(":", 1)[0]
    if kind == "rl":
        return "a rule's " + rest.split(":", 1)[1]
    if kind == Kind.CHECK:
        return "question " + rest.split(":", 1)[0]
    if kind == "thread":
        what, _, label = rest.partition(":")
        return f"thread: {what} {label}"
    if rest.startswith("~"):
        return f"{rest[1:]} (in a name)"
    return rest


def isotonic(points: list[tuple[float, bool]], prior: float | None = None) -> tuple[list[float], list[float]]:
    """Pool-adjacent-violators fit of P(correct | score): (scores, probabilities), non-decreasing.

    Each block's probability is smoothed towards `prior` (default: the points' overall rate) by one
    pseudo-observation, so a block of two issues never claims 0 or 1.
    """
    if not points:
        return [], []
    if prior is None:
        prior = sum(y for _, y in points) / len(points)
    by_score: dict[float, list[float]] = {}
    for x, y in points:  # equal scores are one block: the curve is a function of the score
        block = by_score.setdefault(x, [0.0, 0.0])
        block[0] += y
        block[1] += 1
    blocks: list[list[float]] = []  # [mean score, positives, count]
    for x in sorted(by_score):
        blocks.append([x, *by_score[x]])
        while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] >= blocks[-1][1] / blocks[-1][2]:
            x2, p2, n2 = blocks.pop()
            x1, p1, n1 = blocks.pop()
            blocks.append([(x1 * n1 + x2 * n2) / (n1 + n2), p1 + p2, n1 + n2])
    probabilities, floor = [], 0.0
    for b in blocks:  # the smoothing can dent monotonicity by a hair: keep it non-decreasing
        floor = max(floor, (b[1] + prior) / (b[2] + 1))
        probabilities.append(round(floor, 4))
    return [round(b[0], 4) for b in blocks], probabilities


def interpolate(curve: tuple[list[float], list[float]] | list, x: float) -> float:
    """The calibrated probability at score x: linear between the curve's points, flat beyond them."""
    xs, ys = curve
    if not xs:
        return x
    if x <= xs[0]:
        return ys[0]
    i = bisect.bisect_left(xs, x)
    if i >= len(xs):
        return ys[-1]
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1


@dataclass
class LabelModel:
    """Per label: a bias and sparse feature weights. predict() returns probability and top features."""

    weights: dict[str, dict[str, float]] = field(default_factory=dict)
    bias: dict[str, float] = field(default_factory=dict)
    trained_on: int = 0
    # Calibration curves fitted on out-of-fold scores (fitting.fit_model): key -> (scores, probabilities).
    # Keys: a model label (its raw probability), or a group of rule labels ("extra", "symptom", "route",
    # "review", "triaged", "flag", "fallback") scored by the rule's weight, or one label of the first two
    # groups with enough findings of its own ("extra:module: dtensor", scoring.rule_curve).
    calibration: dict[str, list[list[float]]] = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    # The out-of-fold figures the thresholds were chosen on (fitting.fit_model): the training pool's honest figures.
    cross_validated: dict[str, float] = field(default_factory=dict)
    _by_feature: dict[str, list[tuple[int, float]]] | None = field(default=None, repr=False, compare=False)

    def calibrated(self, key: str, score: float) -> float:
        """P(the label is right) for a raw score, or the score itself where nothing was fitted for `key`."""
        curve = self.calibration.get(key)
        return round(interpolate(curve, score), 3) if curve else score

    def predict(self, feats: dict[str, tuple[str, str]], top: int = 3) -> dict[str, tuple[float, list[str]]]:
        """{label: (raw probability, the features that pushed it up most)}: one pass over the issue's features."""
        labels = list(self.weights)
        if self._by_feature is None:
            by_feature: dict[str, list[tuple[int, float]]] = {}
            for i, label in enumerate(labels):
                for f, v in self.weights[label].items():
                    by_feature.setdefault(f, []).append((i, v))
            self._by_feature = by_feature
        # The engine's hot path: each label's sum, and only its positive contributions kept for the evidence.
        sums = [0.0] * len(labels)
        pushed: list[list[tuple[float, str]]] = [[] for _ in labels]
        for f, value in feature_values(feats).items():
            for i, v in self._by_feature.get(f, ()):
                c = v * value
                sums[i] += c
                if c > 0:
                    pushed[i].append((c, f))
        out = {}
        for i, label in enumerate(labels):
            z = self.bias[label] + sums[i]
            p = 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))
            out[label] = (p, [f for _c, f in heapq.nlargest(top, pushed[i])])
        return out

    def save(self, path: Path = MODEL_FILE) -> None:
        path.write_text(self.to_json())

    def to_json(self) -> str:
        """JSON with each feature named once: `features`, and per label its weights in that order (0 where
        the weight is under 0.02, which predict() skips). What save() writes and the database keeps."""
        kept = {l: {f: round(v, 3) for f, v in w.items() if abs(v) >= 0.02} for l, w in self.weights.items()}
        names = sorted({f for w in kept.values() for f in w})
        data = {
            "trained_on": self.trained_on,
            "bias": {l: round(b, 4) for l, b in self.bias.items()},
            "features": names,
            "weights": {l: [w.get(f, 0) for f in names] for l, w in kept.items()},
            "calibration": self.calibration,
            "thresholds": self.thresholds,
            "cross_validated": self.cross_validated,
        }
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> LabelModel:
        """The model to_json() wrote; reads the older layout ({label: {feature: weight}}) too. Raises ValueError,
        KeyError or TypeError for anything else."""
        data = json.loads(text)
        weights = data["weights"]
        if "features" in data:
            weights = {l: {f: v for f, v in zip(data["features"], values) if v} for l, values in weights.items()}
        return cls(
            weights=weights,
            bias=data["bias"],
            trained_on=data.get("trained_on", 0),
            calibration=data.get("calibration", {}),
            thresholds={**DEFAULT_THRESHOLDS, **data.get("thresholds", {})},
            cross_validated=data.get("cross_validated", {}),
        )

    @classmethod
    def load(cls, path: Path | None = None) -> LabelModel | None:
        """The saved model (default: the locally trained one, else the shipped one), or None when there
        is none (the engine then runs on rules alone)."""
        for candidate in [path] if path else [MODEL_FILE, SHIPPED_MODEL_FILE]:
            try:
                return cls.from_json(candidate.read_text())
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return None


def train(
    examples: list[tuple[set[str], dict[str, bool | None]]],
    epochs: int = 25,
    rate: float = 0.2,
    l2: float = 0.01,
    min_df: int = 2,
    seed: int = 0,
) -> LabelModel:
    """Fit one L2-regularised logistic regression per label by SGD.

    examples: (feature names, {label: True/False/None}); None (a label hidden by truncation) leaves
    the example out for that label only. Features seen in fewer than min_df issues are dropped.
    Features are numbered once and weights kept in a list: the inner loop is the training's cost. Each
    feature counts by its value (feature_values: less for the words of a long body).
    """
    df = Counter(f for feats, _ in examples for f in feats)
    names = sorted(f for f, n in df.items() if n >= min_df)
    index = {f: i for i, f in enumerate(names)}
    model = LabelModel(trained_on=len(examples))
    rng = random.Random(seed)
    valued = [feature_values(feats) for feats, _ in examples]
    for label in MODEL_LABELS:
        rows = [
            ([(index[f], v) for f, v in valued[n].items() if f in index], bool(answers[label]))
            for n, (_feats, answers) in enumerate(examples)
            if answers.get(label) is not None
        ]
        positives = sum(1 for _, y in rows if y)
        w = [0.0] * len(names)
        b = math.log((positives + 1) / (len(rows) - positives + 1)) if rows else 0.0
        for epoch in range(epochs):
            rng.shuffle(rows)
            step = rate / (1 + epoch * 0.1)
            decay = 1 - step * l2
            for feats, y in rows:
                z = b
                for j, v in feats:
                    z += w[j] * v
                g = (1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))) - (1.0 if y else 0.0)
                b -= step * g
                delta = step * g
                for j, v in feats:
                    w[j] = w[j] * decay - delta * v
        model.weights[label] = {names[j]: v for j, v in enumerate(w) if v}
        model.bias[label] = b
    return model
