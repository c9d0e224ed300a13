"""Process CPU time per kind of call in runs of an anchors workload, per peer (medians).

The anchors harness times every call with the wall clock, which on a shared machine counts
other jobs. This driver runs the harness's own trace and scheduler (imported from
the anchors harness given by ``--anchors``; nothing is copied) through a wrapper that reads ``time.process_time_ns``
around the calls that are few and long: request creation, prefix lookups, prefill allocations
(more than one token, or with hit pages) and frees. Decode allocations and appends are not
wrapped: one CPU-clock read costs about as much as a decode call, so their time, with the
harness's own, is reported as the rest of the run. Run it with the anchors venv::

    python -m benchmarks.call_kinds --profile long --kinds easydel,vllm,verikv:sha256,verikv:builtin --repeats 3
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks.peers import DEFAULT_ANCHORS, load_adapters
from benchmarks.report import print_table

KINDS = ("new_request", "lookup", "prefill allocate", "free")


class CallKinds:
    """An anchors adapter whose few, long calls accumulate CPU nanoseconds per kind."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.ns = dict.fromkeys(KINDS, 0)
        self.calls = dict.fromkeys(KINDS, 0)

    def _timed(self, kind: str, fn: Any, *args: Any) -> Any:
        t = time.process_time_ns()
        out = fn(*args)
        self.ns[kind] += time.process_time_ns() - t
        self.calls[kind] += 1
        return out

    def new_request(self, req_id: str, tokens: Any, max_tokens: int = 16) -> Any:
        return self._timed("new_request", self.inner.new_request, req_id, tokens, max_tokens)

    def get_computed(self, req: Any) -> Any:
        return self._timed("lookup", self.inner.get_computed, req)

    def allocate(self, req: Any, num_new_tokens: int, num_hit: int = 0, hit_pages: Any = None) -> Any:
        if num_new_tokens == 1 and not num_hit:  # a decode step: untimed (see the module doc)
            return self.inner.allocate(req, num_new_tokens, num_hit, hit_pages)
        return self._timed("prefill allocate", self.inner.allocate, req, num_new_tokens, num_hit, hit_pages)

    def free(self, req: Any, preempted: bool = False) -> Any:
        return self._timed("free", self.inner.free, req, preempted)

    def __getattr__(self, name: str) -> Any:  # append_tokens, usage, num_free_pages: untimed
        return getattr(self.inner, name)


def run_kind(adapters: ModuleType, workload: ModuleType, kind: str, profile: str | None) -> dict[str, float]:
    """One run of the workload on `kind`: CPU s and calls per call kind, the rest, the whole run."""
    preset: dict[str, Any] = workload.PROFILES[profile] if profile else {
        "trace": {}, "requests": 1000, "num_pages": 2048, "max_running": 64, "max_model_len": 8192}
    trace = workload.make_trace(preset["requests"], 0, **preset["trace"])
    adapter = CallKinds(adapters.make(kind, preset["num_pages"], 16, max_model_len=preset["max_model_len"]))
    gc.collect()
    t = time.process_time_ns()
    workload.run_trace(adapter, trace, preset["max_running"], preset["num_pages"])
    total = time.process_time_ns() - t
    out: dict[str, float] = {}
    for k, ns in adapter.ns.items():
        out[f"{k}: CPU s"] = ns / 1e9
        out[f"{k}: calls"] = adapter.calls[k]
    out["rest (decode allocates, appends, harness): CPU s"] = (total - sum(adapter.ns.values())) / 1e9
    out["whole run: CPU s"] = total / 1e9
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.call_kinds", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--anchors", type=Path, default=DEFAULT_ANCHORS)
    p.add_argument("--kinds", default="easydel,vllm,verikv:sha256,verikv:builtin")
    p.add_argument("--profile", help="a preset workload of the harness (e.g. long); default: its default trace")
    p.add_argument("--repeats", type=int, default=3, help="runs per kind (medians are printed)")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    kinds = a.kinds.split(",")
    adapters = load_adapters(a.anchors, tuple(k for k in ("easydel", "vllm") if k in kinds))
    if adapters is None:
        print("the anchors harness or a peer is not importable in this interpreter", file=sys.stderr)
        return 1
    import trace as workload  # the harness's trace.py (its directory is first on sys.path now)

    runs: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    for r in range(a.repeats):  # the order alternates, so a change of load hits every kind alike
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            runs[kind].append(run_kind(adapters, workload, kind, a.profile))
    results = {k: {name: statistics.median(run[name] for run in rs) for name in rs[0]} for k, rs in runs.items()}
    rows = [[name, *(f"{results[k][name]:,.0f}" if name.endswith("calls") else f"{results[k][name]:.3f}"
                     for k in kinds)] for name in results[kinds[0]]]
    print_table(f"CPU s per kind of call, median of {a.repeats} runs ({a.profile or 'default'} workload)",
                ["", *kinds], rows)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
