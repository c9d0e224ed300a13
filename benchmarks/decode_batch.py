"""The batched decode step: 1,024 running requests each decode one token per step.

Prompts are 64-79 tokens, staggered so that each step 1/16 of the requests crosses a page
boundary (needs one more page) and the rest fit in the pages they hold. Each measurement builds
the running set (untimed), then times `STEPS` decode steps; after each step the scheduler's
bookkeeping (``num_computed_tokens += 1``, one sampled token appended) runs untimed. Reported:
µs per request per step, median over ``--repeats``, for

- verikv, one `allocate_slots(request, 1)` per request (the baseline, per hash scheme);
- verikv, one `allocate_slots_batch(requests, [1] * n)` per step, when the manager has it
  (target: <= 0.5 µs per request); skipped otherwise;
- vLLM's and EasyDeL's `allocate_slots(request, 1)` per call, from the anchors venv (skipped
  elsewhere).

    python -m benchmarks.decode_batch [--running 1024] [--steps 16] [--repeats 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from benchmarks.measure import clock_ns, use_clock
from benchmarks.peers import DEFAULT_ANCHORS, load_adapters
from benchmarks.report import print_table
from benchmarks.workload import make_manager

PAGE_SIZE = 16
BASE_PROMPT = 64
TARGET_US = 0.5
SCHEMES = ("sha256", "builtin")


@dataclass
class Running:
    """A set of running requests and how to decode them: `allocate(request, 1)` is the timed
    call (None: it did not fit); `advance(request)` is the scheduler's untimed bookkeeping."""

    requests: list[Any]
    allocate: Callable[[Any, int], object]
    advance: Callable[[Any], None]
    manager: Any


def prompts(num_running: int) -> list[list[int]]:
    """Prompt `i` has ``BASE_PROMPT + i % 16`` tokens: one request in 16 crosses a page boundary
    at every step."""
    rng = np.random.default_rng(3)
    return [rng.integers(0, 32000, size=BASE_PROMPT + i % PAGE_SIZE).tolist() for i in range(num_running)]


def pool_pages(num_running: int, steps: int) -> int:
    """Enough pages that no step ever fails: the longest request's pages, for every request."""
    longest = BASE_PROMPT + PAGE_SIZE + steps + 1
    return num_running * (-(-longest // PAGE_SIZE)) + 1


def verikv_running(scheme: str, num_running: int, steps: int) -> Running:
    """`num_running` prefilled requests in a `verikv.CacheManager`, one token sampled each."""
    from verikv.request import Request

    manager = make_manager(pool_pages(num_running, steps), hash_scheme=scheme)

    def advance(req: Any) -> None:
        req.num_computed_tokens += 1
        req.append_output_token_ids(7)

    requests = []
    for i, tokens in enumerate(prompts(num_running)):
        req = Request(f"decode-{i}", tokens)
        if manager.allocate_slots(req, len(tokens)) is None:
            raise RuntimeError("the pool is too small for the running set")
        req.num_computed_tokens = len(tokens)
        req.append_output_token_ids(7)
        requests.append(req)
    return Running(requests, manager.allocate_slots, advance, manager)


def peer_running(adapters: ModuleType, kind: str, num_running: int, steps: int) -> Running:
    """The same running set in a peer's manager, through the anchors adapter (prefill and
    bookkeeping as the harness does them); the timed call is the manager's own `allocate_slots`."""
    ad = adapters.make(kind, pool_pages(num_running, steps), PAGE_SIZE)

    def advance(req: Any) -> None:
        req.num_computed_tokens += 1
        ad.append_tokens(req, [7])

    requests = []
    for i, tokens in enumerate(prompts(num_running)):
        req = ad.new_request(f"decode-{i}", tokens, max_tokens=steps + 2)
        if ad.allocate(req, len(tokens)) is None:
            raise RuntimeError("the pool is too small for the running set")
        ad.append_tokens(req, [7])
        requests.append(req)
    return Running(requests, ad.m.allocate_slots, advance, ad.m)


def per_call_us(running: Running, steps: int) -> float:
    """µs per request per step with one `allocate(request, 1)` call per request."""
    allocate, requests, spent = running.allocate, running.requests, 0
    for _ in range(steps):
        t = clock_ns()
        results = [allocate(req, 1) for req in requests]
        spent += clock_ns() - t
        if None in results:
            raise RuntimeError("a decode step did not fit")
        for req in requests:
            running.advance(req)
    return spent / 1e3 / (steps * len(requests))


def batch_us(running: Running, steps: int) -> float:
    """µs per request per step with one `allocate_slots_batch(requests, [1] * n)` per step."""
    batch, requests, spent = running.manager.allocate_slots_batch, running.requests, 0
    ones = [1] * len(requests)
    for _ in range(steps):
        t = clock_ns()
        results = batch(requests, ones)
        spent += clock_ns() - t
        if None in results:  # one result per request; None: that request did not fit
            raise RuntimeError("a decode step did not fit")
        for req in requests:
            running.advance(req)
    return spent / 1e3 / (steps * len(requests))


def median_over(build: Callable[[], Running], run: Callable[[Running, int], float], steps: int, repeats: int) -> float:
    """Median over `repeats` of `run` on a freshly built running set (the build is untimed)."""
    samples = []
    for _ in range(repeats):
        running = build()
        gc.collect()
        samples.append(run(running, steps))
    return float(np.median(samples))


def measure(num_running: int, steps: int, repeats: int, anchors: Path | None) -> dict[str, float | None]:
    """µs per request per decode step of each variant; None for a variant that is skipped."""
    out: dict[str, float | None] = {}
    for scheme in SCHEMES:
        def build(s: str = scheme) -> Running:
            return verikv_running(s, num_running, steps)

        out[f"verikv {scheme}: allocate_slots per request"] = median_over(build, per_call_us, steps, repeats)
        has_batch = hasattr(build().manager, "allocate_slots_batch")
        out[f"verikv {scheme}: allocate_slots_batch per request"] = (
            median_over(build, batch_us, steps, repeats) if has_batch else None)
    adapters = load_adapters(anchors, ("easydel", "vllm")) if anchors is not None else None
    for kind in ("vllm", "easydel"):
        def build_peer(k: str = kind) -> Running:
            return peer_running(adapters, k, num_running, steps)  # type: ignore[arg-type]

        out[f"{kind}: allocate_slots per call"] = (
            None if adapters is None else median_over(build_peer, per_call_us, steps, repeats))
    return out


def print_results(results: dict[str, float | None], num_running: int, steps: int) -> None:
    vllm = results.get("vllm: allocate_slots per call")
    rows = []
    for name, us in results.items():
        if us is None:
            rows.append([name, "skipped", "-", "-"])
            continue
        target = f"<= {TARGET_US:g}" if "batch" in name else "-"
        rows.append([name, f"{us:.2f}", target, "-" if vllm is None else f"{vllm / us:.1f}x"])
    print_table(f"decode step: {num_running:,} running requests, 1/16 crossing a page boundary per step, "
                f"{steps} steps; µs per request, medians", ["", "µs / request", "target", "vLLM / this"], rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.decode_batch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--running", type=int, default=1024)
    p.add_argument("--steps", type=int, default=16, help="decode steps per measurement (16: each request crosses once)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--clock", default="wall", choices=("cpu", "wall"), help="wall: time.perf_counter_ns")
    p.add_argument("--anchors", type=Path, default=DEFAULT_ANCHORS, help="the anchors harness (for vLLM and EasyDeL)")
    p.add_argument("--json", type=Path)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    use_clock(a.clock)
    results = measure(a.running, a.steps, a.repeats, a.anchors)
    print_results(results, a.running, a.steps)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
