"""The Hypothesis link: PagePool driven beside the pool spec, checked after every step."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Sequence

from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from verikv.page_pool import PagePool
from verikv.testing.pool_machine import detection_settings, find_pool_failure, make_pool_machine

STEPS = 50


def esurge_pool(num_pages: int, free_order: str) -> PagePool:
    return PagePool(num_pages, free_order=free_order)


def test_page_pool_refines_the_spec_over_long_runs() -> None:
    lengths: Counter[int] = Counter()

    class Counted(make_pool_machine(esurge_pool)):  # type: ignore[misc]
        def teardown(self) -> None:
            lengths[self.steps] += 1

    run_state_machine_as_test(Counted, settings=settings(max_examples=500, stateful_step_count=STEPS))
    long_runs = sum(count for steps, count in lengths.items() if steps >= STEPS)
    # Hypothesis ends a few runs early; the acceptance criterion is 200 runs of 50+ steps.
    assert long_runs >= 200, sorted(lengths.items())


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
