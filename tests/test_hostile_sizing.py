"""The hostile sizing cases (``tests/hostile_sizing_cases.py``, run with every other cases module
by ``tests/test_hostile_inputs.py``) cover what they claim to."""

from __future__ import annotations

from hostile_sizing_cases import CASES


def test_the_cases_cover_every_kind_of_expectation() -> None:
    assert {c.expect for c in CASES} >= {"accept", "reject", "either"}
    assert sum(c.id.startswith("verikv size[folder ") for c in CASES) >= 50
