"""The neighbours' vote as a finding source of the rubric engine (rubric/likeness/neighbours.py), pure Python."""

from __future__ import annotations

from rubric_app.rubric.engine.assess import evaluate
from rubric_app.rubric.likeness.neighbours import MemoryIndex, similar_findings, terms_of
from rubric_app.rubric.reading.types import IssueText, Neighbour

DYNAMIC = "module: dynamic shapes"


def _issue(*neighbours: Neighbour, body: str = "Compiling the model fails on the second call.") -> IssueText:
    return IssueText(7, "Fails on the second call", body, neighbours=neighbours)


def _voters(*labels: tuple[str, ...], similarity: float = 0.3) -> list[Neighbour]:
    return [Neighbour(100 + i, tuple(names), similarity) for i, names in enumerate(labels)]


def test_it_suggests_what_most_of_the_similar_triaged_issues_carry_citing_the_governing_rule():
    voters = _voters((DYNAMIC,), (DYNAMIC,), (DYNAMIC, "module: dynamo"), (DYNAMIC,), ("module: inductor",))

    (finding,) = similar_findings(_issue(*voters))

    assert (finding.label, finding.rule_id, finding.kind, finding.origin) == (DYNAMIC, "R1.3", "add", "similar")
    assert finding.reason == "4 of the 5 most similar triaged issues are module: dynamic shapes"
    assert finding.evidence == "#100 #101 #102 #103" and finding.source == "similar"


def test_it_ignores_weak_neighbours_untriaged_ones_and_labels_the_rubric_does_not_govern():
    assert similar_findings(_issue(*_voters((DYNAMIC,), (DYNAMIC,), (DYNAMIC,), similarity=0.05))) == []
    untriaged = _voters((), (), ("triaged",), ("oncall: pt2",), (DYNAMIC,), (DYNAMIC,))
    assert similar_findings(_issue(*untriaged)) == []  # two of the triaged ones: not a majority of 3
    assert (
        similar_findings(
            _issue(
                *_voters(
                    ("module: tests",),
                )
                * 5
            )
        )
        == []
    )


def test_it_takes_a_triaged_twin_with_the_same_failure_signature_alone():
    twin = Neighbour(55, ("module: inductor",), 0.7, same_signature=True)

    (finding,) = similar_findings(_issue(twin))

    assert (
        finding.label == "module: inductor"
        and finding.reason == "#55 has the same failure signature and is module: inductor"
    )


def test_it_weighs_the_vote_like_any_finding_and_shows_it_as_a_suggestion():
    voters = _voters(*[(DYNAMIC,)] * 5)

    plain = evaluate(_issue(), use_model=False)
    voted = evaluate(_issue(*voters), use_model=False)

    assert DYNAMIC not in plain.labels() and DYNAMIC in voted.labels()
    suggestion = next(s for s in voted.add if s.label == DYNAMIC)
    assert suggestion.source == "similar" and suggestion.rule_id == "R1.3" and suggestion.evidence_source == "similar"
    # The fallback component (G4) is not needed any more: the vote gave one.
    assert "module: compile ux" not in voted.labels()


def test_it_ranks_by_the_cosine_of_the_vectors():
    index = MemoryIndex()
    texts = {
        1: "Guard failure on a SymInt when the batch size changes",
        2: "SymInt guard fails after a batch size change",
        3: "Triton kernel compile error for fp8 matmul",
    }
    for number, title in texts.items():
        index.add(number, terms_of(IssueText(number, title, "")))

    near = index.neighbours(1, limit=2)

    assert [n for n, _ in near][0] == 2 and near[0][1] > 0.3
    assert all(score < near[0][1] for n, score in near[1:])
