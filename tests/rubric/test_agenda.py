"""The meeting agenda's grouping by R11 reason (rubric/engine/agenda.py), without Django."""

import pytest

from rubric_app.rubric.engine.agenda import agenda_group

# R11's own reason for a flaky test mentions a regression; that alone is no evidence of one.
FLAKY_REASON = "a flaky test, usually a regression: the weekly meeting decides priority"


@pytest.mark.parametrize(
    "title, body, group",
    [
        (
            "DISABLED test_comprehensive_nn_functional_conv2d_cuda (__main__.TestInductorOpInfoCUDA)",
            "Platforms: linux",
            "flaky test",
        ),
        ("Flaky test_compile_basic in CI", "It fails one run in ten.", "flaky test"),
        ("Flaky test_compile_basic since the upgrade", "This used to work in 2.5; a regression.", "regression"),
        ("DISABLED test_foo (__main__.TestCompile)", "Segmentation fault (core dumped)", "crash"),
        ("Flaky test: test_adamw_capturable fails intermittently", "Always a small numerical mismatch.", "flaky test"),
    ],
)
def test_it_files_a_flaky_test_under_regression_only_when_it_says_so(title, body, group):
    assert agenda_group(title=title, body=body, review_reasons=f"{FLAKY_REASON} {title[:20]}") == group


@pytest.mark.parametrize(
    "reason, title, group",
    [
        ("crash on inductor", "torch.compile segfaults", "crash"),
        ("silently wrong result (differs from eager, no error)", "wrong output", "silent correctness"),
        ("a regression", "worked in 2.4", "regression"),
        ("", "compile is slow on resnet", "performance"),
        ("", "an important user asks", "other"),
    ],
)
def test_it_groups_by_the_reason_r11_flagged_it_and_the_title_breaks_ties(reason, title, group):
    assert agenda_group(title=title, body="", review_reasons=reason) == group


def test_it_does_not_read_a_word_inside_another():
    # "nan" must not find "maintenance", nor "perf" "superfluous".
    assert agenda_group(title="maintenance of superfluous code", body="", review_reasons="") == "other"
