"""The engine's input and output, as plain frozen data."""

from __future__ import annotations

from dataclasses import dataclass, field

from rubric_app.vocabulary import DEFAULT as DEFAULT_ACCOUNTS
from rubric_app.vocabulary import PT2_ONCALL, AutomationAccounts, Route


@dataclass(frozen=True)
class CommentText:
    body: str
    author: str = ""
    github_id: int | None = None
    association: str = ""  # GitHub's author_association of the author (MEMBER, CONTRIBUTOR, NONE...), "" unknown


@dataclass(frozen=True)
class BisectionEvidence:
    """A label a finished bisection run concluded, with the rule that maps its verdict."""

    label: str
    rule_id: str
    evidence: str
    run_id: int | None = None


@dataclass(frozen=True)
class Neighbour:
    """A similar issue (rubric_app/triage/similar.py) with the labels it carries: evidence for
    similarity.similar_findings."""

    number: int
    labels: tuple[str, ...]
    similarity: float  # cosine of the two issues' term vectors, 0..1
    same_signature: bool = False  # the very same failure signature (signature.py)


@dataclass(frozen=True)
class SharedEvidence:
    """What settles a component on another open issue with the very same failure signature (signature.py): a
    backend result or a diagnosis in its thread, or its bisection's verdict. Issues sharing one failure take
    their components from the same evidence (weighing.shared_findings); evidence is the exact text on #number."""

    number: int
    label: str
    rule_id: str
    evidence: str
    reason: str = ""
    weight: float = 0.0


@dataclass(frozen=True)
class IssueText:
    number: int
    title: str
    body: str
    comments: tuple[CommentText, ...] = ()
    labels: tuple[str, ...] = ()
    bisection: tuple[BisectionEvidence, ...] = ()
    # The verdicts of the issue's finished bisection runs, newest first, whatever they concluded ("No failure
    # reproduced ...", "Cannot run here ..."): R2's checklist item reads them even where no label came of them.
    bisected: tuple[str, ...] = ()
    author: str = ""  # the reporter: the thread reader weighs others' conclusions above theirs
    neighbours: tuple[Neighbour, ...] = ()  # the most similar issues, most similar first
    shared: tuple[SharedEvidence, ...] = ()  # what settles a component on the issues sharing its failure
    # Who may speak for PyTorch's automation (rubric_app/vocabulary.py; settings.AUTOMATION_ACCOUNTS on the site).
    automation_accounts: AutomationAccounts = DEFAULT_ACCOUNTS
    # The repository's latest release ("v2.13.0"), read by the caller from GitHub; "" when unknown. G12 compares
    # the version an issue states with it and never guesses it.
    release: str = ""
    # Who added a label, where the caller knows it: ((label, login), ...), the latest `labeled` event of each (G12.2).
    labelled_by: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Suggested:
    """A label to ADD (module, route or flag) and why.

    evidence_source says where `evidence` was found: "title", "body",
    "comment:<index>", "bisection:<run id>" or "code".
    """

    label: str
    rule_id: str
    confidence: float
    evidence: str = ""
    evidence_source: str = ""
    source: str = "rule"  # rule | model | bisection
    reason: str = ""
    # confidence is a calibrated probability (engine/assess.py); `a` accepts only the pre-selected labels.
    preselected: bool = False
    # A core component suggested next to another component: the curve that scores it there (components.company).
    company: str = ""


@dataclass(frozen=True)
class Avoided:
    """A label NOT to apply, with the rule and the reason a triager would be tempted."""

    label: str
    rule_id: str
    reason: str
    evidence: str = ""
    evidence_source: str = ""


@dataclass(frozen=True)
class ChecklistItem:
    """One rubric item for this issue. state: satisfied | violated | needs_human | not_applicable."""

    rule_id: str
    text: str
    state: str
    evidence: str = ""


@dataclass
class Assessment:
    """What a careful PT2 triager would do with one issue.

    route: vocabulary.Route's PT2 (stays in oncall: pt2), CPU (the sub-queue), HANDOFF (to another oncall, named by
    the oncall: label in `add`), TRANSFER (to another repository, G2) or SKIP (G0).
    queue: the oncall: label of the queue the issue belongs in, whether or not it already carries it.
    """

    add: list[Suggested] = field(default_factory=list)
    avoid: list[Avoided] = field(default_factory=list)
    route: str = Route.PT2
    checklist: list[ChecklistItem] = field(default_factory=list)
    queue: str = PT2_ONCALL

    def labels(self) -> list[str]:
        """Every label to add, in suggestion order, without duplicates."""
        return list(dict.fromkeys(s.label for s in self.add))

    def preselected(self) -> list[str]:
        """The subset of labels() that "accept" applies: those above the calibrated threshold."""
        return list(dict.fromkeys(s.label for s in self.add if s.preselected))

    def confidence(self) -> dict[str, float]:
        """{label: calibrated probability} of every label to add."""
        out: dict[str, float] = {}
        for s in self.add:
            out.setdefault(s.label, s.confidence)
        return out

    def verdict(self) -> list[str]:
        """The labels to add plus the queue's oncall: label: what the offline output reports, so an
        issue already routed (G0, the CPU lane) still names its route."""
        return list(dict.fromkeys([*self.labels(), self.queue]))
