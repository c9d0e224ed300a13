"""The hostile sizing cases (``tests/hostile_sizing_cases.py``) run through the hostile harness."""

from __future__ import annotations

import pytest
from hostile import Case, run_case
from hostile_sizing_cases import CASES


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_hostile_sizing_case(case: Case) -> None:
    result = run_case(case)
    assert not result.problems, f"{case.id} (expect {case.expect}, raised {result.raised}): {result.problems}"


def test_the_cases_cover_every_kind_of_expectation() -> None:
    assert {c.expect for c in CASES} >= {"accept", "reject", "either"}
    assert sum(c.id.startswith("verikv size[folder ") for c in CASES) >= 50
