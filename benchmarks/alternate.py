"""Two verikv builds side by side on the anchors workloads, alternated, reported as ratios.

Each round runs `benchmarks/anchors_cpu.py` (every peer in one process, process CPU time) once
for each build, the builds' order swapping from one round to the next, so both see the same
load on a shared machine. A build is a folder put first on ``PYTHONPATH`` (a ``pip install
--target`` of a checkout: the baseline), or ``-`` for the verikv the anchors venv imports
itself (``pip install -e .`` of this checkout: the candidate). Printed per build: the median and
range over the rounds of each verikv kind's ratio to each peer (a peer's CPU time over verikv's:
higher is faster), and the candidate's median against the baseline's. Run it with the anchors
venv::

    pip install --no-deps --target build/baseline-site /path/to/baseline/checkout
    /path/to/anchors-venv/bin/python -m benchmarks.alternate --baseline build/baseline-site \\
        --anchors ../shared/anchors --profile long --rounds 4 --json alternate-long.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.peers import DEFAULT_ANCHORS

KINDS = "easydel,vllm,verikv:sha256,verikv:builtin"
PEERS = ("vllm", "easydel")


def run_once(build: str, args: argparse.Namespace) -> dict[str, float]:
    """CPU seconds per kind of one `anchors_cpu` run with ``build`` first on the path."""
    env = dict(os.environ)
    if build != "-":
        env["PYTHONPATH"] = build + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        cmd = [sys.executable, str(Path(__file__).with_name("anchors_cpu.py")), "--anchors", str(args.anchors),
               "--kinds", args.kinds, "--repeats", "1", "--json", str(out)]
        if args.profile != "default":
            cmd += ["--profile", args.profile]
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        summary: dict[str, Any] = json.loads(out.read_text())["summary"]
    return {kind: float(s["cpu_s"]) for kind, s in summary.items()}


def ratios(cpu: dict[str, float]) -> dict[str, float]:
    """``peer / verikv kind`` for every pair present."""
    return {f"{peer} / {kind}": cpu[peer] / cpu[kind]
            for peer in PEERS if peer in cpu for kind in cpu if kind.startswith("verikv")}


def _range(values: list[float]) -> str:
    return f"[{min(values):.2f}-{max(values):.2f}]"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", required=True, help="the baseline build's folder (a pip --target install)")
    p.add_argument("--candidate", default="-", help="the candidate build's folder; '-': the venv's own verikv")
    p.add_argument("--anchors", type=Path, default=DEFAULT_ANCHORS)
    p.add_argument("--profile", default="default", help="default, or a preset of the harness (e.g. long)")
    p.add_argument("--kinds", default=KINDS)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    builds = {"baseline": a.baseline, "candidate": a.candidate}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in builds}
    for r in range(a.rounds):
        for name in (list(builds) if r % 2 == 0 else list(builds)[::-1]):
            runs[name].append(run_once(builds[name], a))
            print(f"round {r + 1} {name}: " + ", ".join(f"{k} {v:.3f} s" for k, v in runs[name][-1].items()),
                  flush=True)
    table = {name: {pair: [ratios(cpu)[pair] for cpu in rs] for pair in ratios(rs[0])} for name, rs in runs.items()}
    print(f"\n{a.profile} profile, {a.rounds} alternated rounds: CPU-time ratios, median [min-max]")
    for pair in table["baseline"]:
        base, cand = (statistics.median(table[n][pair]) for n in ("baseline", "candidate"))
        print(f"{pair:28s} baseline {base:5.2f}x {_range(table['baseline'][pair])}"
              f"  candidate {cand:5.2f}x {_range(table['candidate'][pair])}  candidate/baseline {cand / base:.3f}")
    if a.json:
        a.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "runs": runs,
                                      "ratios": table}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
