"""Measuring helpers: medians of repeated timings, build time and traced Python heap.

Micro-benchmarks read `clock_ns`, process CPU time by default: on a shared machine, wall time
also counts the time other processes hold the CPU, while CPU time stays put. `use_clock("wall")`
switches to `time.perf_counter_ns`.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

CLOCKS: dict[str, Callable[[], int]] = {"cpu": time.process_time_ns, "wall": time.perf_counter_ns}
_clock: list[Callable[[], int]] = [time.process_time_ns]


def use_clock(name: str) -> None:
    """Make `clock_ns` read the named clock ("cpu" or "wall")."""
    _clock[0] = CLOCKS[name]


def clock_ns() -> int:
    """The current reading of the selected clock, in nanoseconds."""
    return _clock[0]()


def median_us_per_call(run_batch: Callable[[], int], repeats: int) -> float:
    """Median over `repeats` of (time of one `run_batch()`) / (number of calls it reports), in µs.

    `run_batch` performs a batch of calls (its own setup must be excluded by the caller, e.g. by
    returning a prepared closure) and returns how many calls it made.
    """
    samples = []
    for _ in range(repeats):
        gc.collect()
        t = clock_ns()
        n = run_batch()
        samples.append((clock_ns() - t) / 1e3 / max(n, 1))
    return float(np.median(samples))


def median_split_us(phases: Callable[[], dict[str, tuple[int, int]]], repeats: int) -> dict[str, float]:
    """Median per-call µs for each named phase of a benchmark that times its own phases.

    `phases()` runs once and returns ``{name: (total_ns, calls)}``; it is called `repeats` times.
    """
    samples: dict[str, list[float]] = {}
    for _ in range(repeats):
        gc.collect()
        for name, (ns, calls) in phases().items():
            samples.setdefault(name, []).append(ns / 1e3 / max(calls, 1))
    return {name: float(np.median(v)) for name, v in samples.items()}


def build_cost(factory: Callable[[], Any], repeats: int) -> dict[str, float]:
    """Median wall time of `factory()` (cyclic GC enabled, as a real process runs it), plus the
    Python heap it leaves allocated and the peak while building, both traced with tracemalloc."""
    times = []
    for _ in range(repeats):
        gc.collect()
        t = time.perf_counter()
        obj = factory()
        times.append(time.perf_counter() - t)
        del obj
    gc.collect()
    tracemalloc.start()
    obj = factory()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del obj
    return {"build_s": float(np.median(times)), "heap_mib": current / 2**20, "heap_peak_mib": peak / 2**20}
