"""The anchors harness's own cost: its scheduler and timing proxy with no manager behind them.

A trace's CPU time in ``anchors_cpu`` is the manager's work plus the harness's: ``run_trace``'s
scheduler loop and checksums, and the ``bench.Timed`` proxy around every adapter call (two clock
reads and two dict updates per call, some 250,000 calls in the default trace). That part is the
same for every kind, so it bounds every ratio: a kind that cost nothing at all would still take
it. To measure it, one untimed run records the answers a kind gives (hits, new page ids, free page
counts), and `replay_cpu` drives ``run_trace`` through the same proxy with an adapter that only
returns those answers in order, so the scheduler takes exactly the same steps.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any


class _Recorder:
    """An adapter that forwards every call to ``inner`` and keeps the answers ``run_trace`` reads."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.answers: list[Any] = []

    def new_request(self, req_id: str, token_ids: Any, max_tokens: int = 16) -> Any:
        return self.inner.new_request(req_id, token_ids, max_tokens=max_tokens)

    def get_computed(self, req: Any) -> Any:
        return self._keep(self.inner.get_computed(req))

    def allocate(self, req: Any, num_new_tokens: int, num_hit: int = 0, hit_pages: Any = None) -> Any:
        return self._keep(self.inner.allocate(req, num_new_tokens, num_hit, hit_pages))

    def append_tokens(self, req: Any, tokens: Any) -> None:
        self.inner.append_tokens(req, tokens)

    def free(self, req: Any, preempted: bool = False) -> None:
        self.inner.free(req, preempted=preempted)

    def num_free_pages(self) -> Any:
        return self._keep(self.inner.num_free_pages())

    def _keep(self, answer: Any) -> Any:
        self.answers.append(answer)
        return answer


class _Replayer:
    """An adapter that does no work: it returns the recorded answers in the order they came."""

    def __init__(self, answers: list[Any]) -> None:
        self._next: Callable[[], Any] = iter(answers).__next__

    def new_request(self, req_id: str, token_ids: Any, max_tokens: int = 16) -> str:
        return req_id

    def get_computed(self, req: Any) -> Any:
        return self._next()

    def allocate(self, req: Any, num_new_tokens: int, num_hit: int = 0, hit_pages: Any = None) -> Any:
        return self._next()

    def append_tokens(self, req: Any, tokens: Any) -> None:
        pass

    def free(self, req: Any, preempted: bool = False) -> None:
        pass

    def num_free_pages(self) -> Any:
        return self._next()


def record_answers(adapter: Any, run_trace: Callable[..., dict[str, Any]], trace: Any, max_running: int,
                   num_pages: int) -> tuple[list[Any], dict[str, Any]]:
    """Replay ``trace`` on ``adapter`` (untimed), returning the answers it gave and the run's stats."""
    recorder = _Recorder(adapter)
    stats = run_trace(recorder, trace, max_running, num_pages)
    return recorder.answers, stats


def replay_cpu(answers: list[Any], timed: Callable[[Any], Any], run_trace: Callable[..., dict[str, Any]],
               trace: Any, max_running: int, num_pages: int, repeats: int) -> tuple[float, dict[str, Any]]:
    """Median process CPU seconds of ``run_trace`` over an adapter replaying ``answers`` behind
    the ``timed`` proxy (the harness's ``bench.Timed``), and the last replay's stats (the same
    decisions as the recorded run: its checksums must match)."""
    times, stats = [], {}
    for _ in range(repeats):
        proxy = timed(_Replayer(answers))
        gc.collect()
        start = time.process_time()
        stats = run_trace(proxy, trace, max_running, num_pages)
        times.append(time.process_time() - start)
    return statistics.median(times), stats


def same_decisions(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two runs of one trace took the same steps: equal alloc-size and page-id checksums."""
    return all(a[key] == b[key] for key in ("alloc_sizes_sha", "page_ids_sha"))


__all__ = ["record_answers", "replay_cpu", "same_decisions"]
