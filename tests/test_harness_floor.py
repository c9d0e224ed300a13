"""benchmarks.harness_floor and benchmarks.free_manager: replaying recorded answers (a kind's, to
the harness; verikv's manager's, to the verikv adapter) takes the harness through the same steps
(same checksums) without the manager, and a wrong answer is noticed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from benchmarks.free_manager import free_manager_cpu
from benchmarks.harness_floor import record_answers, replay_cpu, same_decisions
from verikv import CachePages

ANCHORS = Path(__file__).resolve().parents[2] / "shared" / "anchors"
pytestmark = pytest.mark.skipif(not (ANCHORS / "bench.py").exists(), reason="shared anchors harness not present")


def _load(name: str) -> ModuleType:
    """An anchors module by path (its trace.py would clash with the stdlib's)."""
    spec = importlib.util.spec_from_file_location(f"anchors_{name}", ANCHORS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look it up
    spec.loader.exec_module(module)
    return module


def _setup() -> tuple[ModuleType, ModuleType, ModuleType, list[object]]:
    trace, adapters = _load("trace"), _load("adapters")
    saved = {name: sys.modules.get(name) for name in ("trace", "adapters")}
    sys.modules.update(trace=trace, adapters=adapters)  # bench.py imports these two by name
    try:
        bench = _load("bench")
    finally:  # (the stdlib's trace module, if it was loaded, comes back)
        for name, module in saved.items():
            if module is None:
                del sys.modules[name]
            else:
                sys.modules[name] = module
    reqs = trace.make_trace(40, seed=1, prompt_range=(20, 200), output_range=(5, 40))
    return trace, adapters, bench, reqs


def test_a_replay_takes_the_recorded_steps() -> None:
    trace, adapters, bench, reqs = _setup()
    answers, recorded = record_answers(adapters.make("verikv", num_pages=64, page_size=16), trace.run_trace,
                                       reqs, 8, 64)
    assert recorded["hit_tokens"] > 0 and recorded["preemptions"] > 0  # the pool is tight: every path runs
    cpu, replayed = replay_cpu(answers, bench.Timed, trace.run_trace, reqs, 8, 64, repeats=2)
    assert cpu > 0 and same_decisions(recorded, replayed)
    assert replayed["hit_tokens"] == recorded["hit_tokens"] and replayed["steps"] == recorded["steps"]


def test_a_wrong_answer_changes_the_checksums() -> None:
    trace, adapters, bench, reqs = _setup()
    answers, recorded = record_answers(adapters.make("verikv", num_pages=64, page_size=16), trace.run_trace,
                                       reqs, 8, 64)
    j = next(i for i, a in enumerate(answers) if isinstance(a, list) and a)  # an allocation's new page ids
    answers[j] = [page + 1 for page in answers[j]]
    _, replayed = replay_cpu(answers, bench.Timed, trace.run_trace, reqs, 8, 64, repeats=1)
    assert not same_decisions(recorded, replayed)



def test_a_free_manager_replays_every_recorded_answer_and_nothing_more() -> None:
    trace, adapters, bench, reqs = _setup()
    made: list[Any] = []

    def make() -> Any:
        made.append(adapters.make("verikv", num_pages=64, page_size=16))
        return made[-1]

    cpu, recorded, replayed = free_manager_cpu(make, bench.Timed, trace.run_trace, reqs, 8, 64, repeats=2)
    assert recorded["hit_tokens"] > 0 and recorded["preemptions"] > 0  # the pool is tight: every path runs
    assert cpu > 0 and same_decisions(recorded, replayed) and replayed["steps"] == recorded["steps"]
    first, *replays = made
    assert first.m.inner.page_pool.get_num_free_pages() == 63  # the recorded run ended with every page free
    assert len(replays) == 2
    for adapter in replays:  # each replay made exactly the recorded calls: both answer streams are used up
        with pytest.raises(StopIteration):
            adapter.m._next()
        with pytest.raises(StopIteration):
            adapter.m.page_pool.get_num_free_pages()


def test_a_free_manager_replaying_a_wrong_answer_changes_the_checksums() -> None:
    trace, adapters, bench, reqs = _setup()
    made: list[Any] = []

    def make() -> Any:
        if made:  # the replay: one allocation's new page ids come back shifted by one
            answers = made[0].m.answers
            j = next(i for i, a in enumerate(answers) if isinstance(a, CachePages) and a.page_ids[0])
            answers[j] = CachePages(([page + 1 for page in answers[j].page_ids[0]],))
        made.append(adapters.make("verikv", num_pages=64, page_size=16))
        return made[-1]

    _, recorded, replayed = free_manager_cpu(make, bench.Timed, trace.run_trace, reqs, 8, 64, repeats=1)
    assert not same_decisions(recorded, replayed)
