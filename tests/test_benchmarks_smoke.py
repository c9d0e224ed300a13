"""Smoke test: the benchmark command runs end to end on tiny sizes and writes its JSON.

No timing is asserted (timings belong in benchmarks/RESULTS.md, not in the test suite); only
that every section ran and that the hash scheme never changes an allocation decision.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
    """The issue-14 sections print a cost and a floor for every operation and scheme; the peers
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
        assert {"prefix path, miss", "prefix path, hit", "allocate (no caching)", "allocate + cache", "free"} <= set(costs)
        assert all(ns > 0 for name, ns in costs.items() if not name.startswith("lookup per hit page"))
    assert {"sha256 call", "xxh3_128 call", "array('q', tokens) per token"} <= set(per_page["floors_ns"])
    assert per_page["request_ns_per_token"] > 0 and per_page["request_ratio"] > 0
    assert all("prefix hit / floor" in r for r in per_page["ratios"].values())
    decode = results["decode"]
    for scheme in ("sha256", "builtin"):
        assert decode[f"verikv {scheme}: allocate_slots per request"] > 0
    assert set(decode) >= {"vllm: allocate_slots per call", "easydel: allocate_slots per call"}
