"""What a verikv run of an anchors trace costs when the page manager itself does no work.

`benchmarks.harness_floor` measures the harness alone. This measures one layer more: the anchors'
own verikv adapter, with its real `verikv.Request` objects (created with every token checked,
``num_computed_tokens`` advanced on each allocation, sampled tokens appended, the ids read from
the returned `CachePages`), over a stand-in manager that returns, in order, the answers the real
manager gave in a recorded run of the same trace. No page key is computed and no page is looked
up, taken, registered or freed. Whatever the manager does, a run cannot cost less than this, so
a peer's time divided by it is the highest ratio any verikv manager behind that adapter could
reach in the same sitting.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any


class _RecordingPool:
    """The real pool, keeping each free-page count the adapter reads."""

    def __init__(self, inner: Any, counts: list[int]) -> None:
        self.inner, self.counts = inner, counts

    def get_num_free_pages(self) -> int:
        count: int = self.inner.get_num_free_pages()
        self.counts.append(count)
        return count


class _RecordingManager:
    """The real manager, keeping the answer of each call the adapter makes."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.answers: list[Any] = []
        self.free_counts: list[int] = []
        self.page_pool = _RecordingPool(inner.page_pool, self.free_counts)

    def get_computed_pages(self, request: Any) -> Any:
        return self._keep(self.inner.get_computed_pages(request))

    def allocate_slots(self, request: Any, num_new_tokens: int, num_computed_tokens: int = 0,
                       new_computed_pages: Any = None) -> Any:
        return self._keep(self.inner.allocate_slots(request, num_new_tokens, num_computed_tokens, new_computed_pages))

    def free(self, request: Any) -> None:
        self._keep(self.inner.free(request))

    def free_page_hashes(self, request: Any) -> None:
        self._keep(self.inner.free_page_hashes(request))

    def _keep(self, answer: Any) -> Any:
        self.answers.append(answer)
        return answer


class _ReplayingPool:
    """A pool that only returns the recorded free-page counts in order."""

    def __init__(self, counts: list[int]) -> None:
        self.get_num_free_pages: Callable[[], int] = iter(counts).__next__


class _ReplayingManager:
    """A manager that does no work: it returns the recorded answers in the order they came."""

    def __init__(self, answers: list[Any], free_counts: list[int]) -> None:
        self._next: Callable[[], Any] = iter(answers).__next__
        self.page_pool = _ReplayingPool(free_counts)

    def get_computed_pages(self, request: Any) -> Any:
        return self._next()

    def allocate_slots(self, request: Any, num_new_tokens: int, num_computed_tokens: int = 0,
                       new_computed_pages: Any = None) -> Any:
        return self._next()

    def free(self, request: Any) -> None:
        self._next()

    def free_page_hashes(self, request: Any) -> None:
        self._next()


def free_manager_cpu(make_adapter: Callable[[], Any], timed: Callable[[Any], Any],
                     run_trace: Callable[..., dict[str, Any]], trace: Any, max_running: int, num_pages: int,
                     repeats: int) -> tuple[float, dict[str, Any], dict[str, Any]]:
    """Median process CPU seconds of ``run_trace`` through the ``timed`` proxy (the harness's
    ``bench.Timed``) over adapters from ``make_adapter`` (a verikv adapter: the manager is its
    ``m``) whose manager replays a recorded run's answers; with the recorded run's stats and the
    last replay's (the same decisions: their checksums must match)."""
    adapter = make_adapter()
    recorder = adapter.m = _RecordingManager(adapter.m)
    recorded = run_trace(adapter, trace, max_running, num_pages)
    times, replayed = [], {}
    for _ in range(repeats):
        adapter = make_adapter()
        adapter.m = _ReplayingManager(recorder.answers, recorder.free_counts)
        proxy = timed(adapter)
        gc.collect()
        start = time.process_time()
        replayed = run_trace(proxy, trace, max_running, num_pages)
        times.append(time.process_time() - start)
    return statistics.median(times), recorded, replayed


__all__ = ["free_manager_cpu"]
