"""Side-by-side trace run against the anchors peers, reporting process CPU time as well as wall time.

The anchors harness (a separate checkout whose ``bench.py`` runs the published EasyDeL and vLLM
managers beside verikv on one trace; pass its folder with ``--anchors``) times wall clock only.
On a shared machine wall time also counts the time other processes hold the CPU, so this driver
imports the harness's own modules (its trace, scheduler, adapters and timing
proxy; nothing is copied) and records ``time.process_time`` around the same ``run_trace`` call,
alternating the order of the kinds between repeats as ``bench.py`` does. It also measures the
harness alone (`benchmarks.harness_floor`: its scheduler and timing proxy replaying a verikv
kind's answers), the CPU time every kind pays besides its adapter and manager, and prints each
ratio with that part subtracted as well; and verikv with a free manager (`benchmarks.free_manager`:
the harness, the verikv adapter and its `verikv.Request` objects, over a manager replaying
recorded answers), which bounds each ratio a verikv manager could reach. Run it with the
anchors venv, where the peers are installed::

    /path/to/anchors-venv/bin/python benchmarks/anchors_cpu.py --anchors /path/to/anchors \\
        --kinds easydel,vllm,verikv:sha256,verikv:builtin --repeats 3 --json out.json
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__:  # python -m benchmarks.anchors_cpu
    from benchmarks.free_manager import free_manager_cpu
    from benchmarks.harness_floor import record_answers, replay_cpu, same_decisions
else:  # run as a script, as documented: its own directory is on sys.path
    from free_manager import free_manager_cpu  # type: ignore[import-not-found,no-redef]
    from harness_floor import record_answers, replay_cpu, same_decisions  # type: ignore[import-not-found,no-redef]

# per workload, (numerator, denominator, target): the speed targets as ratios of trace times
# (docs/performance.md, "Targets")
TARGETS = {
    "default": (("vllm", "verikv:sha256", 2.0), ("easydel", "verikv:sha256", 1.2), ("easydel", "verikv:builtin", 2.3)),
    "long": (("vllm", "verikv:sha256", 3.0), ("easydel", "verikv:builtin", 4.0)),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--anchors", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "anchors")
    p.add_argument("--kinds", default="easydel,vllm,verikv:sha256,verikv:builtin")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--num-pages", type=int, default=2048)
    p.add_argument("--max-running", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", help="a preset workload of the harness (e.g. long); its pool and scheduler "
                   "settings replace the defaults of --requests, --num-pages and --max-running")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    sys.path.insert(0, str(a.anchors))
    # the anchors harness's modules, importable only once its path is known (so mypy cannot see
    # them; its trace.py even shadows the stdlib module of that name)
    from trace import PROFILES, make_trace, run_trace  # type: ignore[attr-defined]

    import adapters  # type: ignore[import-not-found]
    import bench  # type: ignore[import-not-found]

    trace_kw: dict[str, Any] = {}
    max_model_len = 8192  # the harness's default
    if a.profile:
        preset = PROFILES[a.profile]
        trace_kw, max_model_len = preset["trace"], preset["max_model_len"]
        for key in ("requests", "num_pages", "max_running"):
            if getattr(a, key) == p.get_default(key):
                setattr(a, key, preset[key])
    kinds = a.kinds.split(",")
    for kind in kinds:
        adapters.load(kind)
    trace = make_trace(a.requests, a.seed, **trace_kw)
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for r in range(a.repeats):
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            timed = bench.Timed(adapters.make(kind, a.num_pages, 16, max_model_len=max_model_len))
            gc.collect()
            wall, cpu = time.perf_counter(), time.process_time()
            stats = run_trace(timed, trace, a.max_running, a.num_pages)
            stats.update(cpu_s=time.process_time() - cpu, wall_s=time.perf_counter() - wall)
            runs[kind].append(stats)
    floor = _harness_floor(kinds, adapters, bench, run_trace, trace, a, max_model_len)
    idle = _free_manager_floor(kinds, adapters, bench, run_trace, trace, a, max_model_len)
    summary = {k: {"cpu_s": statistics.median(x["cpu_s"] for x in rs),
                   "wall_s": statistics.median(x["wall_s"] for x in rs),
                   "hit_tokens": rs[0]["hit_tokens"], "alloc_sizes_sha": rs[0]["alloc_sizes_sha"],
                   "page_ids_sha": rs[0]["page_ids_sha"]} for k, rs in runs.items()}
    print(f"median of {a.repeats} (profile={a.profile or 'default'}, pages={a.num_pages}, requests={a.requests}, "
          f"max_running={a.max_running}, seed={a.seed})")
    print(f"{'kind':16s} {'CPU s':>8s} {'wall s':>8s} {'hit tokens':>11s}  alloc-size sha    page-id sha")
    for kind, s in summary.items():
        print(f"{kind:16s} {s['cpu_s']:8.3f} {s['wall_s']:8.3f} {s['hit_tokens']:11,d}  "
              f"{s['alloc_sizes_sha']}  {s['page_ids_sha']}")
    if floor is not None:
        print(f"{'harness alone':16s} {floor['cpu_s']:8.3f}  (its scheduler and timing proxy replaying "
              f"{floor['kind']}'s answers: the part of every kind's CPU time spent outside its adapter and manager)")
    if idle is not None:
        print(f"{'free manager':16s} {idle['cpu_s']:8.3f}  (the harness, the verikv adapter and its Request objects "
              f"over a manager replaying {idle['kind']}'s answers: no key, lookup, allocation or free)")
    ratios = []
    for peer, ours, target in TARGETS[a.profile or "default"]:
        if peer in summary and ours in summary:
            cpu = summary[peer]["cpu_s"] / summary[ours]["cpu_s"]
            wall = summary[peer]["wall_s"] / summary[ours]["wall_s"]
            ratios.append({"peer": peer, "ours": ours, "target": target, "cpu_ratio": cpu, "wall_ratio": wall})
            net = ""
            if floor is not None:
                alone = (summary[peer]["cpu_s"] - floor["cpu_s"]) / (summary[ours]["cpu_s"] - floor["cpu_s"])
                net = f"; adapters and managers alone (harness subtracted) {alone:.2f}x"
            if idle is not None:
                net += f"; with a free manager {summary[peer]['cpu_s'] / idle['cpu_s']:.2f}x at most"
            print(f"{peer} / {ours}: CPU {cpu:.2f}x, wall {wall:.2f}x (target {target}x: "
                  f"{'met' if cpu >= target else 'missed'} on CPU){net}")
    if a.json:
        a.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "runs": runs,
                                      "summary": summary, "ratios": ratios, "harness_floor": floor,
                                      "free_manager": idle}, indent=1))
    return 0


def _harness_floor(kinds: list[str], adapters: Any, bench: Any, run_trace: Any, trace: Any, a: argparse.Namespace,
                   max_model_len: int) -> dict[str, Any] | None:
    """The harness's own CPU time (`benchmarks.harness_floor`), replaying the answers of the first
    verikv kind; None without one."""
    kind = _first_verikv(kinds)
    if kind is None:
        return None
    recorded = adapters.make(kind, a.num_pages, 16, max_model_len=max_model_len)
    answers, stats = record_answers(recorded, run_trace, trace, a.max_running, a.num_pages)
    cpu, replayed = replay_cpu(answers, bench.Timed, run_trace, trace, a.max_running, a.num_pages, a.repeats)
    if not same_decisions(stats, replayed):
        raise RuntimeError("the replay took other steps than the recorded run")
    return {"kind": kind, "cpu_s": cpu}


def _free_manager_floor(kinds: list[str], adapters: Any, bench: Any, run_trace: Any, trace: Any,
                        a: argparse.Namespace, max_model_len: int) -> dict[str, Any] | None:
    """The CPU time of the first verikv kind's run with a manager that does no work
    (`benchmarks.free_manager`); None without a verikv kind."""
    kind = _first_verikv(kinds)
    if kind is None:
        return None
    cpu, recorded, replayed = free_manager_cpu(
        lambda: adapters.make(kind, a.num_pages, 16, max_model_len=max_model_len), bench.Timed, run_trace,
        trace, a.max_running, a.num_pages, a.repeats)
    if not same_decisions(recorded, replayed):
        raise RuntimeError("the free manager's replay took other steps than the recorded run")
    return {"kind": kind, "cpu_s": cpu}


def _first_verikv(kinds: list[str]) -> str | None:
    """The first verikv kind of the run (the floors are measured with it), if any."""
    return next((k for k in kinds if k.startswith("verikv")), None)


if __name__ == "__main__":
    sys.exit(main())
