"""Fixtures of the rubric's tests."""

from __future__ import annotations

import pytest


@pytest.fixture(params=[False, True], ids=["rules", "shipped model"])
def use_model(request) -> bool:
    """Each test twice: by the rules alone, then with the shipped learned labeler."""
    return request.param
