"""Smoke test: the benchmark command runs end to end on tiny sizes and writes its JSON.

No timing is asserted (timings belong in benchmarks/RESULTS.md, not in the test suite); only
that every section ran and that the hash scheme never changes an allocation decision.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def test_benchmark_command_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    results = json.loads(out.read_text())
    assert {"trace", "hashing", "micro", "scaling", "machine"} <= set(results)
    trace = results["trace"]
    assert set(trace["summary"]) == {"sha256", "xxh3_128", "builtin"}
    assert trace["same_decisions_across_schemes"] is True
    for summary in trace["summary"].values():
        assert summary["calls_allocate"] > 0 and summary["calls_lookup"] > 0
    assert all(rate["pages_per_s_chain"] > 0 for rate in results["hashing"].values())
    assert set(results["scaling"]) == {"1000", "20000"}


def test_per_page_and_decode_sections_quick_run(tmp_path: Path) -> None:
    """The perpage and decode sections print a cost and a floor for every operation and scheme; the peers
    are skipped (None) when the anchors venv is not this interpreter."""
    out = tmp_path / "perpage.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--sections", "perpage,decode", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    results = json.loads(out.read_text())
    per_page = results["perpage"]["20"]
    assert set(per_page["ns_per_page"]) == {"sha256", "xxh3_128", "builtin"}
    for costs in per_page["ns_per_page"].values():
        assert {"prefix path, miss", "prefix path, hit", "allocate (no caching)", "allocate + cache",
                "free"} <= set(costs)
        assert all(ns > 0 for name, ns in costs.items() if not name.startswith("lookup per hit page"))
    assert {"sha256 call", "xxh3_128 call", "array('q', tokens) per token"} <= set(per_page["floors_ns"])
    assert per_page["request_ns_per_token"] > 0 and per_page["request_ratio"] > 0
    assert all("prefix hit / floor" in r for r in per_page["ratios"].values())
    decode = results["decode"]
    for scheme in ("sha256", "builtin"):
        assert decode[f"verikv {scheme}: allocate_slots per request"] > 0
    assert set(decode) >= {"vllm: allocate_slots per call", "easydel: allocate_slots per call"}


class _BatchByCalls:
    """A stand-in for a manager that has `allocate_slots_batch`: single calls in order."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager

    def allocate_slots_batch(self, requests: list[Any], num_new_tokens: list[int]) -> list[Any]:
        return [self.manager.allocate_slots(r, n) for r, n in zip(requests, num_new_tokens)]


def test_decode_scaffold_drives_batched_and_single_calls_alike() -> None:
    """The batched variant runs the same workload as the per-call one: after the same steps,
    every request holds the same pages (the stand-in batches by single calls)."""
    from benchmarks import decode_batch

    single = decode_batch.verikv_running("builtin", 32, 16)
    batched = decode_batch.verikv_running("builtin", 32, 16)
    real = batched.manager
    batched.manager = _BatchByCalls(real)
    assert decode_batch.per_call_us(single, 16) > 0
    assert decode_batch.batch_us(batched, 16) > 0
    pages = [single.manager.get_page_ids(r.request_id) for r in single.requests]
    assert pages == [real.get_page_ids(r.request_id) for r in batched.requests]
    # 16 one-token steps from a 64-79-token prompt: every request crossed one page boundary
    assert [len(p[0]) for p in pages] == [-(-len(prompt) // 16) + 1 for prompt in decode_batch.prompts(32)]
