"""The Hypothesis link: PagePool driven beside the pool spec, checked after every step.

The refinement runs use the loaded Hypothesis profile (derandomized in CI, random on a
developer's machine); that runs reach the step limit is shown on a derandomized run counted in
a fresh interpreter, so it is the same run every time.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from verikv.page_pool import PagePool
from verikv.testing.pool_machine import detection_settings, find_pool_failure, make_pool_machine

STEPS = 50


def esurge_pool(num_pages: int, free_order: str) -> PagePool:
    return PagePool(num_pages, free_order=free_order)


def test_page_pool_refines_the_spec_over_long_runs() -> None:
    run_state_machine_as_test(make_pool_machine(esurge_pool), settings=settings(max_examples=500,
                                                                                stateful_step_count=STEPS))


def longest_run_here(examples: int) -> int:
    """The most checked steps one run of a derandomized ``examples``-example run takes."""
    longest = 0

    class Measured(make_pool_machine(esurge_pool)):  # type: ignore[misc]
        def teardown(self) -> None:
            nonlocal longest
            longest = max(longest, self.steps)

    run_state_machine_as_test(Measured, settings=settings(max_examples=examples, stateful_step_count=STEPS,
                                                          derandomize=True, database=None, deadline=None,
                                                          suppress_health_check=list(HealthCheck)))
    return longest


def test_runs_reach_the_step_limit() -> None:
    """In a fresh interpreter: what a derandomized run generates also depends on the constants
    Hypothesis collects from the modules a process has imported."""
    script = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
              f"from test_pool_stateful import longest_run_here; print(longest_run_here(100))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-4000:]
    assert int(out.stdout.strip().splitlines()[-1]) >= STEPS


class IdOnlyPool:
    """Another engine's pool as the machine sees it: only the id-level API and the protocol.

    Wraps a PagePool without its eSurge object methods, to show the machine needs nothing more.
    """

    def __init__(self, num_pages: int, free_order: str) -> None:
        self._pool = PagePool(num_pages, free_order=free_order)
        self.num_pages = num_pages
        self.free_order = free_order

    def ref_count(self, page_id: int) -> int:
        return self._pool.ref_count(page_id)

    def key_of(self, page_id: int) -> Hashable | None:
        return self._pool.key_of(page_id)

    def free_list_ids(self) -> list[int]:
        return self._pool.free_list_ids()

    def cached_items(self) -> list[tuple[Hashable, tuple[int, ...]]]:
        return self._pool.cached_items()

    def get_new_page_ids(self, n: int, **shard: int | None) -> list[int]:
        return self._pool.get_new_page_ids(n, **shard)

    def touch_ids(self, ids: Sequence[int]) -> None:
        self._pool.touch_ids(ids)

    def free_page_ids(self, ids: Iterable[int]) -> None:
        self._pool.free_page_ids(ids)

    def cache_page_id(self, page_id: int, key: Hashable) -> None:
        self._pool.cache_page_id(page_id, key)

    def lookup_id(self, key: Hashable, **shard: int | None) -> int | None:
        return self._pool.lookup_id(key, **shard)

    def reset_prefix_cache(self) -> bool:
        return self._pool.reset_prefix_cache()

    def get_num_free_pages(self, **shard: int | None) -> int:
        return self._pool.get_num_free_pages(**shard)

    def get_usage(self) -> float:
        return self._pool.get_usage()


def test_machine_runs_against_an_id_level_adapter() -> None:
    run_state_machine_as_test(make_pool_machine(IdOnlyPool),
                              settings=settings(max_examples=100, stateful_step_count=STEPS))


def test_detector_finds_nothing_in_the_correct_pool() -> None:
    # The mutant detectors use these settings; a clean pool must pass them, or a "detection"
    # would prove nothing.
    assert find_pool_failure(esurge_pool, detection_settings()) == []
