"""The conformance harness' hostile cases (``tests/hostile_harness_cases.py``, run with every other
cases module by ``tests/test_hostile_inputs.py``) cover what they claim to."""

from __future__ import annotations

from dataclasses import fields

from hostile_harness_cases import CASES, CONFIG_FIELDS

from verikv.testing.conformance import ConformanceConfig


def test_the_cases_cover_the_harness_entry_points() -> None:
    ids = {case.id.split("[")[0] for case in CASES}
    assert ids == {"harness.ConformanceConfig", "harness.check_conformance", "harness.answer",
                   "testing.live.set_writer", "testing.live.emit", "testing.live.writing_to",
                   "testing.manager_machine.StepDraw"}
    assert len({case.id for case in CASES}) == len(CASES)
    assert set(CONFIG_FIELDS) == {field.name for field in fields(ConformanceConfig)}
    assert {case.expect for case in CASES} == {"accept", "reject", "either"}
