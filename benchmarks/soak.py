"""Soak run: a long random scheduler loop on one `verikv.CacheManager`, watching for drift.

``python -m benchmarks.soak [--steps N] [--window W] [--num-pages P] [--seed S] [--check-every K]``
(from the checkout root). Each step is one scheduler action chosen at random: admit a new request
(prefix lookup, then `allocate_slots` for the uncached rest; some prompts share a system prefix,
some carry a ``cache_salt``), decode one token for a running request, preempt one (free, progress
reset, keys kept), resume a preempted one, finish one (free and `free_page_hashes`), or drop the
keys of a preempted one. Output per window of W steps: the Python heap (tracemalloc, current and
peak), CPU µs per step (process time: other load on the machine does not count), requests in
flight, pages in use, keys kept. A leak shows as a heap that climbs from window to window at the
same load; a slowdown as µs per step that climbs.

This is a benchmark, not a test: nothing is asserted about time. ``run_soak`` also returns the
per-window numbers, and checks the spec invariants every ``check_every`` steps (a failure raises).
The smoke test in tests/test_benchmarks_smoke.py runs it for a few hundred steps.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import tracemalloc
from dataclasses import asdict, dataclass

import numpy as np

from verikv import CacheGroupSpec, CacheManager, FullAttentionSpec, Request, RequestStatus
from verikv.spec.abstraction import abstract_manager
from verikv.spec.invariants import violated_manager_invariants

PAGE_SIZE = 16
MAX_MODEL_LEN = 4096
SYSTEM_PROMPTS = 4


@dataclass
class Window:
    """Numbers for one window of steps (heap in KiB, time in µs per step)."""

    end_step: int
    heap_kib: float
    heap_peak_kib: float
    us_per_step: float
    running: int
    preempted: int
    pages_in_use: int
    requests_with_keys: int


class Soak:
    """The scheduler state: running and preempted requests over one manager."""

    def __init__(self, num_pages: int, seed: int) -> None:
        group = CacheGroupSpec(FullAttentionSpec(page_size=PAGE_SIZE, num_kv_heads=1, head_size=64,
                                                 dtype=np.float16, use_mla=False))
        self.m = CacheManager(num_pages, [group], MAX_MODEL_LEN, hash_seed=seed)
        self.rng = random.Random(seed)
        self.prefixes = [[self.rng.randrange(32000) for _ in range(self.rng.randrange(32, 256))]
                         for _ in range(SYSTEM_PROMPTS)]
        self.running: dict[str, Request] = {}
        self.preempted: dict[str, Request] = {}
        self.next_id = 0
        self.lookups = self.allocations = self.failed_allocations = 0

    def step(self) -> None:
        """One random scheduler action (weights favour decoding, as a real engine does)."""
        action = self.rng.choices(
            (self.admit, self.decode, self.preempt, self.resume, self.finish, self.forget),
            weights=(3, 10, 1, 2, 2, 1))[0]
        action()

    def _new_request(self) -> Request:
        rng = self.rng
        prompt = list(rng.choice(self.prefixes)) if rng.random() < 0.6 else []
        prompt += [rng.randrange(32000) for _ in range(rng.randrange(1, 512))]
        salt = rng.choice((None, None, None, "tenant-a", "tenant-b"))
        self.next_id += 1
        return Request(f"r{self.next_id}", prompt[: MAX_MODEL_LEN - 64], cache_salt=salt)

    def _place(self, req: Request) -> bool:
        """Prefix lookup, then allocate the rest of the prompt; True when it fits."""
        hits, n = self.m.get_computed_pages(req)
        self.lookups += 1
        self.allocations += 1
        if self.m.allocate_slots(req, req.num_tokens - n, n, hits) is None:
            self.failed_allocations += 1
            return False
        req.num_computed_tokens = req.num_tokens
        req.status = RequestStatus.RUNNING
        return True

    def admit(self) -> None:
        req = self._new_request()
        if self._place(req):
            self.running[req.request_id] = req
        else:
            self.m.free_page_hashes(req)

    def decode(self) -> None:
        if not self.running:
            return
        req = self.running[self.rng.choice(list(self.running))]
        if req.num_tokens >= MAX_MODEL_LEN - 1:
            self.finish(req)
            return
        self.allocations += 1
        if self.m.allocate_slots(req, 1) is None:
            self.failed_allocations += 1
            self.preempt(req)
            return
        req.append_output_token_ids(self.rng.randrange(32000))
        req.num_computed_tokens = req.num_tokens

    def preempt(self, req: Request | None = None) -> None:
        if req is None:
            if not self.running:
                return
            req = self.running[self.rng.choice(list(self.running))]
        self.m.free(req)
        req.num_computed_tokens = 0
        req.status = RequestStatus.PREEMPTED
        del self.running[req.request_id]
        self.preempted[req.request_id] = req

    def resume(self) -> None:
        if not self.preempted:
            return
        rid = self.rng.choice(list(self.preempted))
        if self._place(self.preempted[rid]):
            self.running[rid] = self.preempted.pop(rid)

    def finish(self, req: Request | None = None) -> None:
        if req is None:
            if not self.running:
                return
            req = self.running[self.rng.choice(list(self.running))]
        self.m.free(req)
        self.m.free_page_hashes(req)
        req.status = RequestStatus.FINISHED_STOPPED
        del self.running[req.request_id]

    def forget(self) -> None:
        """Abort a preempted request: its keys are dropped, it never comes back."""
        if not self.preempted:
            return
        req = self.preempted.pop(self.rng.choice(list(self.preempted)))
        self.m.free_page_hashes(req)
        req.status = RequestStatus.FINISHED_ABORTED

    def check(self) -> None:
        """The spec invariants of the manager, and the scheduler's view agreeing with it."""
        broken = violated_manager_invariants(abstract_manager(self.m))
        if broken:
            raise AssertionError(f"invariants broken: {broken}")
        if set(self.m.request_ids()) != set(self.running):
            raise AssertionError("the manager's held requests differ from the running set")

    def pages_in_use(self) -> int:
        return self.m.num_pages - 1 - self.m.page_pool.get_num_free_pages()


def run_soak(steps: int, window: int, num_pages: int = 4096, seed: int = 0,
             check_every: int = 0) -> tuple[list[Window], Soak]:
    """Run ``steps`` steps; one `Window` per ``window`` steps. ``check_every`` > 0 checks the
    invariants that often (the check is O(pages) and is not timed)."""
    soak = Soak(num_pages, seed)
    windows: list[Window] = []
    tracemalloc.start()
    try:
        elapsed = 0.0
        for i in range(1, steps + 1):
            start = time.process_time()
            soak.step()
            elapsed += time.process_time() - start
            if check_every and i % check_every == 0:
                soak.check()
            if i % window == 0:
                current, peak = tracemalloc.get_traced_memory()
                tracemalloc.reset_peak()
                windows.append(Window(i, current / 1024, peak / 1024, elapsed / window * 1e6,
                                      len(soak.running), len(soak.preempted), soak.pages_in_use(),
                                      len(soak.m.hashed_request_ids())))
                elapsed = 0.0
    finally:
        tracemalloc.stop()
    return windows, soak


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--window", type=int, default=10_000)
    p.add_argument("--num-pages", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check-every", type=int, default=0, help="check the invariants every K steps (0: at the end)")
    p.add_argument("--json", action="store_true", help="print the windows as JSON")
    a = p.parse_args(argv)
    windows, soak = run_soak(a.steps, a.window, a.num_pages, a.seed, a.check_every)
    soak.check()
    if a.json:
        print(json.dumps([asdict(w) for w in windows], indent=1))
        return 0
    print(f"soak: {a.steps} steps, {a.num_pages} pages, seed {a.seed}; {soak.lookups} lookups, "
          f"{soak.allocations} allocations ({soak.failed_allocations} did not fit); invariants hold at the end")
    print(f"{'step':>8} {'heap KiB':>9} {'peak KiB':>9} {'cpu us/step':>12} {'running':>8} {'preempted':>9} "
          f"{'pages':>6} {'keyed':>6}")
    for w in windows:
        print(f"{w.end_step:>8} {w.heap_kib:>9.0f} {w.heap_peak_kib:>9.0f} {w.us_per_step:>12.1f} {w.running:>8} "
              f"{w.preempted:>9} {w.pages_in_use:>6} {w.requests_with_keys:>6}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
