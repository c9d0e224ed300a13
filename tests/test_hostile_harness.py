"""The conformance harness' hostile cases (tests/hostile_harness_cases.py), each run by `hostile.run_case`."""

from __future__ import annotations

from dataclasses import fields

import pytest
from hostile import Case, run_case
from hostile_harness_cases import CASES, CONFIG_FIELDS

from verikv.testing.conformance import ConformanceConfig


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_harness_case(case: Case) -> None:
    result = run_case(case)
    assert not result.problems, f"{case.id} (expect {case.expect}, raised {result.raised}): {result.problems}"


def test_the_cases_cover_the_harness_entry_points() -> None:
    ids = {case.id.split("[")[0] for case in CASES}
    assert ids == {"harness.ConformanceConfig", "harness.check_conformance", "harness.answer"}
    assert len({case.id for case in CASES}) == len(CASES)
    assert set(CONFIG_FIELDS) == {field.name for field in fields(ConformanceConfig)}
