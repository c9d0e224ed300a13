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
