"""G4, decided once (rubric/reading/flow.py): what the engine, the form, a decision and the page's warning all ask."""

import pytest

from rubric_app.rubric.reading.flow import breaks_g4, change_breaks_g4, ends_with_component

PT2, TRIAGED, DYNAMO = "oncall: pt2", "triaged", "module: dynamo"


@pytest.mark.parametrize(
    ("labels", "broken"),
    [
        ({PT2, TRIAGED}, True),  # ended without a component
        ({PT2, TRIAGED, DYNAMO}, False),
        ({PT2}, False),  # not ended: work to do, not a violation
        ({"oncall: export", TRIAGED}, False),  # another queue's issue (G0)
        ({PT2, TRIAGED, "module: compile ux"}, False),  # the fallback counts (G4)
    ],
)
def test_it_breaks_g4_only_when_a_pt2_issue_ends_without_a_module_label(labels, broken):
    assert breaks_g4(labels) is broken


def test_it_blames_only_the_change_that_makes_it_so():
    assert change_breaks_g4({PT2}, add={TRIAGED}, remove=set())
    assert not change_breaks_g4({PT2}, add={TRIAGED, DYNAMO}, remove=set())
    assert change_breaks_g4({PT2, TRIAGED, DYNAMO}, add=set(), remove={DYNAMO})  # the last module label goes
    assert not change_breaks_g4({PT2, TRIAGED, DYNAMO, "module: inductor"}, add=set(), remove={DYNAMO})
    # Triaged that way before (by hand on GitHub): another change is not refused for it.
    assert not change_breaks_g4({PT2, TRIAGED}, add={"needs reproduction"}, remove=set())


def test_it_counts_any_module_label_as_a_component():
    assert ends_with_component(["oncall: pt2", "module: dynamic shapes"])
    assert not ends_with_component(["oncall: pt2", "triaged", "dynamo-functorch"])
