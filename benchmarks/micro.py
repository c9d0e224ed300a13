"""Micro-benchmarks: µs per call of queue, pool, hashing and manager operations, pages hashed per
second per scheme, and the pool-size scaling run (build time, Python heap, per-call costs).

Every benchmark builds its state outside the timed region, times a batch of calls, and reports
the median per-call time over `repeats` batches. A batch that changes state (allocate, free)
is paired with the operation that undoes it, each timed separately, so every batch starts
from the same state.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import xxhash

from benchmarks.measure import clock_ns, median_split_us, median_us_per_call
from benchmarks.workload import make_manager

PAGE_SIZE = 16
BATCH = 200  # calls per timed batch
PAGES_PER_CALL = 16  # pages per allocate/free call in the queue and pool benchmarks
T = TypeVar("T")


def _paired(items: Sequence[T], first: Callable[[T], object], second: Callable[[T], object],
            names: tuple[str, str]) -> Callable[[], dict[str, tuple[int, int]]]:
    """A phases() function: `first(item)` for every item, then `second(item)` for every item."""
    clock = clock_ns

    def phases() -> dict[str, tuple[int, int]]:
        t0 = clock()
        for item in items:
            first(item)
        t1 = clock()
        for item in items:
            second(item)
        t2 = clock()
        return {names[0]: (t1 - t0, len(items)), names[1]: (t2 - t1, len(items))}

    return phases


def _calls(items: Sequence[T], fn: Callable[[T], object]) -> Callable[[], int]:
    """A batch function for `median_us_per_call`: `fn(item)` for every item."""

    def batch() -> int:
        for item in items:
            fn(item)
        return len(items)

    return batch


def queue_costs(num_pages: int, repeats: int) -> dict[str, float]:
    """`FreeCachePageQueue`: pop 16 ids from the head / append them at the tail; remove one id
    from the middle / append it back."""
    from verikv.free_queue import FreeCachePageQueue, PageRecords

    records = PageRecords.for_pool(num_pages)
    queue = FreeCachePageQueue.for_range(records, 1, num_pages, lambda pid: None)  # type: ignore[arg-type,return-value]
    popped: list[list[int]] = []
    out = median_split_us(_paired(range(BATCH), lambda _: popped.append(queue.popleft_ids(PAGES_PER_CALL)),
                                  lambda _: queue.append_ids(popped.pop()),
                                  ("queue.popleft_ids(16)", "queue.append_ids(16)")), repeats)
    middle = list(range(num_pages // 2, num_pages // 2 + BATCH))
    out.update(median_split_us(_paired(middle, queue.remove_id, lambda pid: queue.append_ids([pid]),
                                       ("queue.remove_id", "queue.append_ids(1)")), repeats))
    return out


def pool_costs(num_pages: int, repeats: int) -> dict[str, float]:
    """`PagePool` id-level API: allocate / free 16 pages; look up a cached key; touch a cached
    free page (a revived hit) / free it again."""
    from verikv.hashing import PageHash, PageHashWithGroupId
    from verikv.page_pool import PagePool

    pool = PagePool(num_pages)
    held: list[list[int]] = []
    out = median_split_us(_paired(range(BATCH), lambda _: held.append(pool.get_new_page_ids(PAGES_PER_CALL)),
                                  lambda _: pool.free_page_ids(held.pop()),
                                  ("pool.get_new_page_ids(16)", "pool.free_page_ids(16)")), repeats)
    ids = pool.get_new_page_ids(BATCH)  # cached, then freed: evictable pages that still hit
    keys = [PageHashWithGroupId(PageHash(i, tuple(range(PAGE_SIZE))), 0) for i in range(BATCH)]
    for pid, key in zip(ids, keys):
        pool.cache_page_id(pid, key)
    pool.free_page_ids(ids)
    out["pool.lookup_id (hit)"] = median_us_per_call(_calls(keys, pool.lookup_id), repeats)
    out.update(median_split_us(_paired(ids, lambda pid: pool.touch_ids([pid]), lambda pid: pool.free_page_ids([pid]),
                                       ("pool.touch_ids(1 evictable)", "pool.free_page_ids(1)")), repeats))
    return out


def _raw_digest(scheme: str) -> Callable[[Any], object]:
    """The bare primitive behind a scheme, applied to one page's packed tokens (a floor): bytes,
    or for ``builtin`` the page's token tuple."""
    if scheme == "sha256":
        return lambda data: hashlib.sha256(data).digest()
    if scheme == "xxh3_128":
        return xxhash.xxh3_128_intdigest
    return hash


def _decode_hashing_us(hasher: Any, tokens: list[int]) -> float:
    """µs per page of `PageHasher.extend` when a request grows token by token (only the
    hashing is timed; it runs each time a page fills)."""
    from verikv.request import Request

    growing = Request("hash-bench-decode", tokens[:PAGE_SIZE - 1])
    keys: list[Any] = []
    spent = 0
    for tok in tokens[PAGE_SIZE - 1:]:
        growing.append_output_token_ids(tok)
        if growing.num_tokens % PAGE_SIZE == 0:
            t = clock_ns()
            hasher.extend(growing, PAGE_SIZE, keys)
            spent += clock_ns() - t
    return spent / 1e3 / len(keys)


def hashing_rates(schemes: Sequence[str], repeats: int, num_pages: int = 128) -> dict[str, dict[str, float]]:
    """Pages hashed per second by `PageHasher.hash_request` (a chain of `num_pages` full pages,
    as when a prompt is first looked up) and by `extend` after each decode step (one page each
    time it fills), next to the bare digest of the same bytes."""
    from verikv.hashing import PageHasher
    from verikv.request import Request

    tokens = np.random.default_rng(1).integers(0, 32000, size=num_pages * PAGE_SIZE).tolist()
    request = Request("hash-bench", tokens)
    pages = [np.array(tokens[i * PAGE_SIZE:(i + 1) * PAGE_SIZE], dtype="<i8").tobytes() for i in range(num_pages)]
    out: dict[str, dict[str, float]] = {}
    for scheme in schemes:
        hasher = PageHasher(scheme, seed=0)
        # (mypy cannot infer a lambda with default arguments, python/mypy#12557: hence the ignores)
        chain_us = median_us_per_call(lambda hasher=hasher: len(hasher.hash_request(request, PAGE_SIZE)),  # type: ignore[misc]
                                      repeats)
        extend_us = float(np.median([_decode_hashing_us(hasher, tokens) for _ in range(repeats)]))
        raw = _raw_digest(scheme if isinstance(scheme, str) else "builtin")
        raw_input = ([tuple(tokens[i * PAGE_SIZE:(i + 1) * PAGE_SIZE]) for i in range(num_pages)]
                     if scheme == "builtin" else pages)
        raw_us = median_us_per_call(_calls(raw_input, raw), repeats)
        out[scheme] = {"pages_per_s_chain": 1e6 / chain_us, "pages_per_s_decode": 1e6 / extend_us,
                       "pages_per_s_raw_digest": 1e6 / raw_us, "us_per_page_chain": chain_us}
    return out


def manager_costs(num_pages: int, repeats: int, batch: int = 100, prompt_pages: int = 64) -> dict[str, float]:
    """`CacheManager` through its eSurge API, on `batch` requests of `prompt_pages` pages + 1
    token, each phase timed over the whole batch: lookup (a miss; later a hit, each hashing a new
    request's prompt), allocate_slots for the prefill (all pages new; later all but one hit),
    one decode step that needs no new page, free. Median over `repeats` rounds."""
    from verikv.request import Request

    rng = np.random.default_rng(2)
    prompts = [rng.integers(0, 32000, size=prompt_pages * PAGE_SIZE + 1).tolist() for _ in range(batch)]
    samples: dict[str, list[float]] = {}

    def phase(name: str, step: Callable[[Any], object], requests: list[Any]) -> list[object]:
        t = clock_ns()
        out = [step(req) for req in requests]
        samples.setdefault(name, []).append((clock_ns() - t) / 1e3 / len(requests))
        return out

    def prefill(item: tuple[Any, tuple[Any, int]]) -> object:
        req, (pages, n_hit) = item
        return manager.allocate_slots(req, req.num_tokens - n_hit, n_hit, pages)

    for _ in range(repeats):
        manager = make_manager(num_pages)
        for label in ("miss", "hit"):  # the second round finds the first round's pages cached
            requests = [Request(f"{label}-{i}", p) for i, p in enumerate(prompts)]
            found = phase(f"manager.get_computed_pages ({label})", manager.get_computed_pages, requests)
            phase(f"manager.allocate_slots (prefill, {label})", prefill, list(zip(requests, found)))
            for req in requests:
                req.num_computed_tokens = req.num_tokens
                req.append_output_token_ids(7)
            phase("manager.allocate_slots (decode, no new page)",
                  lambda req, manager=manager: manager.allocate_slots(req, 1), requests)  # type: ignore[misc]
            phase(f"manager.free ({prompt_pages + 1} pages)", manager.free, requests)
            for req in requests:
                manager.free_page_hashes(req)
    return {name: float(np.median(v)) for name, v in samples.items()}
