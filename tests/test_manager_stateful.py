"""CacheManager against the manager spec, through the scheduler-shaped state machine.

One test per group layout (`LAYOUTS`), each 400 examples of up to 60 steps, at least 200 of them 50+ steps long (the initialize step
included), derandomized under the ``ci`` profile. `test_runs_are_long_and_reach_the_paths`
shows the runs are not vacuous: many reach the step limit (Hypothesis also tries short
programs first, so not all do), and prefix hits, failed allocations, preemptions and null
placeholders all occur.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from verikv.testing.manager_machine import LAYOUTS, manager_machine

STEPS = 60
EXAMPLES = 400
LONG_RUNS = 200  # issue 3: at least 200 runs of 50+ steps per layout


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_cache_manager_refines_the_spec(name: str) -> None:
    long_runs = 0

    class Counted(manager_machine(LAYOUTS[name])):  # type: ignore[misc, valid-type]
        def check(self) -> None:
            super().check()
            self.steps = getattr(self, "steps", 0) + 1

        def teardown(self) -> None:
            nonlocal long_runs
            long_runs += getattr(self, "steps", 0) >= 50
            super().teardown()

    run_state_machine_as_test(Counted, settings=settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None))
    assert long_runs >= LONG_RUNS, f"{name}: only {long_runs} runs reached 50 steps"


def test_runs_are_long_and_reach_the_paths() -> None:
    seen: Counter[str] = Counter()
    base = manager_machine(LAYOUTS["full+sliding(window<=page)"])

    class Counting(base):  # type: ignore[misc, valid-type]
        def check(self) -> None:
            super().check()
            self.steps = getattr(self, "steps", 0) + 1
            seen["null placeholder held"] += any(0 in pages for _, e in self.spec.entries for pages in e.pages)

        def lookup(self, rid: str, hint: Any) -> Any:
            pages, hit = super().lookup(rid, hint)
            seen["prefix hit"] += hit.num_tokens > 0
            return pages, hit

        def allocate(self, *args: Any, **kwargs: Any) -> bool:
            done = super().allocate(*args, **kwargs)
            seen["allocation refused"] += not done
            return done

        def preempt_request(self, rid: str) -> None:
            super().preempt_request(rid)
            seen["preemption"] += 1

        def teardown(self) -> None:
            seen["runs"] += 1
            seen["runs of 50+ steps"] += getattr(self, "steps", 0) >= 50
            seen["longest run"] = max(seen["longest run"], getattr(self, "steps", 0))

    run_state_machine_as_test(Counting, settings=settings(max_examples=60, stateful_step_count=STEPS,
                                                          deadline=None, derandomize=True, database=None))
    assert seen["longest run"] == STEPS and seen["runs of 50+ steps"] >= seen["runs"] // 3, seen
    for path in ("prefix hit", "allocation refused", "preemption", "null placeholder held"):
        assert seen[path] > 0, seen
