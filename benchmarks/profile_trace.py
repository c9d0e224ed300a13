"""cProfile of one anchors trace replay for verikv kinds (where a trace's time goes, per function).

Drives the manager exactly as ``benchmarks/anchors_cpu.py`` does (the anchors harness's own
trace, scheduler and adapter; nothing copied), once per kind, under `cProfile`, and prints the
top functions by internal time and by cumulative time. Run it with the anchors venv::

    /path/to/anchors-venv/bin/python benchmarks/profile_trace.py --anchors /path/to/anchors \\
        --profile long --kinds verikv:sha256,verikv:builtin [--top 30] [--sort tottime]

Profiling inflates the cost of Python calls, so read the figures as shares, not as times.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import sys
import time
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--anchors", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "anchors")
    p.add_argument("--kinds", default="verikv:sha256,verikv:builtin")
    p.add_argument("--profile", help="a preset workload of the harness (e.g. long)")
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--sort", default="tottime,cumulative", help="pstats sort keys, one table each (comma-separated)")
    a = p.parse_args(argv)
    sys.path.insert(0, str(a.anchors))
    from trace import PROFILES, make_trace, run_trace  # type: ignore[attr-defined]

    import adapters  # type: ignore[import-not-found]

    trace_kw: dict[str, Any] = {}
    num_pages, max_running, max_model_len, requests = 2048, 64, 8192, a.requests
    if a.profile:
        preset = PROFILES[a.profile]
        trace_kw, max_model_len = preset["trace"], preset["max_model_len"]
        num_pages, max_running = preset["num_pages"], preset["max_running"]
        if requests == p.get_default("requests"):
            requests = preset["requests"]
    trace = make_trace(requests, a.seed, **trace_kw)
    for kind in a.kinds.split(","):
        adapters.load(kind)
        ad = adapters.make(kind, num_pages, 16, max_model_len=max_model_len)
        gc.collect()
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
        run_trace(ad, trace, max_running, num_pages)
        profiler.disable()
        print(f"==== {kind} (profile={a.profile or 'default'}, requests={requests}) ====")
        stats = pstats.Stats(profiler)
        for key in a.sort.split(","):
            stats.sort_stats(key).print_stats(a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
