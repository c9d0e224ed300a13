"""Run verikv's benchmark suite: ``python -m benchmarks [--quick] [--json PATH]`` (from the checkout root).

Sections (``--sections``, default all):
  trace    the chat-serving trace through `verikv.CacheManager`, once per hash scheme, schemes
           alternating order between repeats; medians of wall time and µs per call, checksums
  hashing  pages hashed per second per scheme
  micro    µs per call of queue / pool / manager operations at each ``--micro-pages`` size
  scaling  build time and Python heap (tracemalloc) of a CacheManager per ``--scale-pages`` size
  perpage  ns per page of a long prompt's keys, prefix walk, allocation and free per scheme, and ns
           per token of Request creation, each beside its floor (benchmarks/per_page.py)
  decode   µs per request of a decode step over ``--decode-running`` requests, per call and batched
           when the manager has it, beside vLLM and EasyDeL (benchmarks/decode_batch.py)
``--profile`` runs the trace once more under cProfile and prints the top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import decode_batch, micro, per_page
from benchmarks.measure import build_cost, use_clock
from benchmarks.peers import DEFAULT_ANCHORS
from benchmarks.report import print_table
from benchmarks.workload import WorkloadConfig, generate_workload, make_manager, replay

SECTIONS = ("trace", "hashing", "micro", "scaling", "perpage", "decode")
SCHEMES = ("sha256", "xxh3_128", "builtin")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset of " + ",".join(SECTIONS))
    p.add_argument("--schemes", default=",".join(SCHEMES), help="hash schemes for the trace and hashing sections")
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--num-pages", type=int, default=2048, help="pool size for the trace (2048: preemptions happen)")
    p.add_argument("--max-running", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--free-order", default="esurge", choices=("esurge", "unhashed-first"))
    p.add_argument("--repeats", type=int, default=3, help="repeats per measurement (medians are reported)")
    p.add_argument("--clock", default="cpu", choices=("cpu", "wall"),
                   help="clock of the micro-benchmarks and hashing rates (the trace reports both)")
    p.add_argument("--micro-repeats", type=int, default=15, help="timed batches per micro-benchmark")
    p.add_argument("--micro-pages", default="10000,1000000", help="pool sizes for the micro-benchmarks")
    p.add_argument("--scale-pages", default="10000,100000,1000000", help="pool sizes for the build run")
    p.add_argument("--per-page-pages", default="870,6000", help="prompt sizes (pages) of the perpage section")
    p.add_argument("--decode-running", type=int, default=1024, help="running requests of the decode section")
    p.add_argument("--anchors", type=Path, default=DEFAULT_ANCHORS,
                   help="the anchors harness: EasyDeL and vLLM for perpage and decode, when importable")
    p.add_argument("--quick", action="store_true", help="tiny sizes, one repeat: checks that everything runs")
    p.add_argument("--profile", action="store_true", help="profile one trace run (first scheme) with cProfile")
    p.add_argument("--json", type=Path, help="write every result here")
    a = p.parse_args(argv)
    if a.quick:
        a.requests, a.num_pages, a.repeats, a.micro_repeats = 30, 512, 1, 1
        a.micro_pages, a.scale_pages = "10000,20000", "1000,20000"
        a.per_page_pages, a.decode_running = "20", 64
    a.sections = [s for s in a.sections.split(",") if s]
    a.schemes = [s for s in a.schemes.split(",") if s]
    unknown = set(a.sections) - set(SECTIONS)
    if unknown:
        p.error(f"unknown sections {sorted(unknown)}")
    return a


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"python": platform.python_version(), "implementation": platform.python_implementation(),
            "cpu": cpu, "nproc": os.cpu_count(), "numpy": np.__version__, "platform": platform.platform(),
            "loadavg_at_start": os.getloadavg()}


def run_trace(a: argparse.Namespace) -> dict[str, Any]:
    """The trace once per scheme per repeat (order alternating), medians per scheme."""
    trace = generate_workload(WorkloadConfig(num_requests=a.requests, seed=a.seed))
    print(f"trace: {len(trace)} requests, {sum(len(r.prompt) for r in trace)} prompt + "
          f"{sum(len(r.output) for r in trace)} output tokens; {a.num_pages} pages, max {a.max_running} running")
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in a.schemes}
    for r in range(a.repeats):
        for scheme in a.schemes if r % 2 == 0 else a.schemes[::-1]:
            manager = make_manager(a.num_pages, hash_scheme=scheme, free_order=a.free_order)
            runs[scheme].append(replay(trace, manager, a.max_running).as_dict())
    summary: dict[str, dict[str, Any]] = {}
    for scheme, rs in runs.items():
        med: dict[str, Any] = {k: float(np.median([x[k] for x in rs])) for k, v in rs[0].items()
                               if not isinstance(v, str)}
        for k in ("alloc_sizes_sha", "page_ids_sha"):
            values = {x[k] for x in rs}
            med[k] = rs[0][k] if len(values) == 1 else "differs between repeats: " + ",".join(sorted(values))
        summary[scheme] = med
    rows = [("wall time (s)", "wall_s", "{:.3f}"), ("CPU time (s)", "cpu_s", "{:.3f}")]
    for call in ("lookup", "allocate", "free", "append", "new_request"):
        rows += [(f"{call} calls", f"calls_{call}", "{:,.0f}"), (f"µs / {call}", f"us_{call}", "{:.2f}")]
    rows += [("pages hashed", "pages_hashed", "{:,.0f}"), ("CPU s in hashing", "hashing_cpu_s", "{:.3f}")]
    rows += [(label, key, "{:,.0f}") for label, key in (
        ("preemptions", "preemptions"), ("failed allocations", "failed_allocations"),
        ("prefix-hit tokens", "hit_tokens"), ("prefilled tokens", "prefill_tokens"),
        ("peak pages used", "peak_pages_used"), ("steps", "steps"))]
    rows += [("alloc-size checksum", "alloc_sizes_sha", "{}"), ("page-id checksum", "page_ids_sha", "{}")]
    print_table(f"trace, median of {a.repeats} (free_order={a.free_order})", ["", *a.schemes],
                [[label, *(fmt.format(summary[s][key]) for s in a.schemes)] for label, key, fmt in rows])
    same = len({(s["alloc_sizes_sha"], s["page_ids_sha"], s["hit_tokens"]) for s in summary.values()}) == 1
    print(f"all schemes made the same decisions: {same}")
    return {"runs": runs, "summary": summary, "same_decisions_across_schemes": same}


def run_hashing(a: argparse.Namespace) -> dict[str, Any]:
    rates = micro.hashing_rates(a.schemes, a.micro_repeats)
    print_table(f"hashing: pages (16 tokens) per {a.clock} second",
                ["scheme", "prompt chain", "decode (extend)", "bare digest"],
                [[s, f"{r['pages_per_s_chain']:,.0f}", f"{r['pages_per_s_decode']:,.0f}",
                  f"{r['pages_per_s_raw_digest']:,.0f}"] for s, r in rates.items()])
    return rates


def run_micro(a: argparse.Namespace) -> dict[str, Any]:
    sizes = _ints(a.micro_pages)
    r = a.micro_repeats
    rounds = max(1, r // 3)  # sizes alternate round by round, so load changes hit them alike
    per_round: dict[int, list[dict[str, float]]] = {n: [] for n in sizes}
    for i in range(rounds):
        for n in sizes if i % 2 == 0 else sizes[::-1]:
            per_round[n].append({**micro.queue_costs(n, 3), **micro.pool_costs(n, 3), **micro.manager_costs(n, 1)})
    results = {n: {k: float(np.median([x[k] for x in rs])) for k in rs[0]} for n, rs in per_round.items()}
    names = list(results[sizes[0]])
    header = ["operation", *(f"µs @ {n:,} pages" for n in sizes)]
    if len(sizes) > 1:
        header.append(f"ratio {sizes[-1]:,} / {sizes[0]:,}")
    rows = []
    for name in names:
        row = [name, *(f"{results[n][name]:.2f}" for n in sizes)]
        if len(sizes) > 1:
            row.append(f"{results[sizes[-1]][name] / results[sizes[0]][name]:.2f}")
        rows.append(row)
    print_table(f"micro-benchmarks: {a.clock} µs per call, median of {rounds} rounds alternating the pool sizes "
                "(each: median of 3 batches; manager: one batch of 100 requests)", header, rows)
    return {str(n): r for n, r in results.items()}


def run_scaling(a: argparse.Namespace) -> dict[str, Any]:
    out = {}
    for n in _ints(a.scale_pages):
        out[str(n)] = build_cost(partial(make_manager, n), a.repeats)
    print_table(f"CacheManager build (median of {a.repeats}), tracemalloc heap",
                ["pages", "build (s)", "heap (MiB)", "peak heap (MiB)"],
                [[f"{int(n):,}", f"{r['build_s']:.3f}", f"{r['heap_mib']:.1f}", f"{r['heap_peak_mib']:.1f}"]
                 for n, r in out.items()])
    return out


def run_per_page(a: argparse.Namespace) -> dict[str, Any]:
    results = per_page.measure(_ints(a.per_page_pages), a.schemes, max(a.repeats, 3), a.anchors)
    per_page.print_results(results, a.schemes)
    return results


def run_decode(a: argparse.Namespace) -> dict[str, Any]:
    results = decode_batch.measure(a.decode_running, decode_batch.PAGE_SIZE, a.repeats, a.anchors)
    decode_batch.print_results(results, a.decode_running, decode_batch.PAGE_SIZE)
    return results


def profile_trace(a: argparse.Namespace) -> None:
    """One trace run under cProfile; prints the 30 functions with the most own time."""
    trace = generate_workload(WorkloadConfig(num_requests=a.requests, seed=a.seed))
    manager = make_manager(a.num_pages, hash_scheme=a.schemes[0], free_order=a.free_order)
    prof = cProfile.Profile()
    prof.runcall(replay, trace, manager, a.max_running)
    pstats.Stats(prof).sort_stats("tottime").print_stats(30)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    use_clock(a.clock)
    results: dict[str, Any] = {"machine": machine(), "args": {k: str(v) for k, v in vars(a).items()},
                               "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    runners = {"trace": run_trace, "hashing": run_hashing, "micro": run_micro, "scaling": run_scaling,
               "perpage": run_per_page, "decode": run_decode}
    for section in a.sections:
        results[section] = runners[section](a)
    if a.profile:
        profile_trace(a)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(results, indent=1))
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
