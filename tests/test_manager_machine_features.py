"""The scheduler-shaped machine with named LoRA adapters, KV events and the sliding-window skip option.

The machine draws named LoRA identities (the adapter ``sql`` at one of two paths) beside
adapter ids; the events machine of `verikv.proofs.refinement.events` judges every call's KV
events (EVENTS-PER-CALL, INV-EVENTS-REPLAY) on a manager built with events on; the layout
``full+sliding(skip-unreachable)`` runs the manager with ``skip_unreachable_sliding_pages``.
Each feature is shown to matter: a manager broken in it fails the machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

import verikv.hashing as hashing
from verikv.proofs.refinement import events as events_refinement
from verikv.proofs.refinement.lora_keys import _key_ignores_path
from verikv.spec import events as spec_events, manager as spec
from verikv.testing.adapter import CacheManagerAdapter, build_cache_manager
from verikv.testing.manager_machine import LAYOUTS, ManagerMachine, find_manager_failure, machine_factory

SKIP_LAYOUT = "full+sliding(skip-unreachable)"
EVENT_LAYOUTS = ("full+sliding(window<=page)", "full+mamba(align)", SKIP_LAYOUT)
EventMachine: type[ManagerMachine] = events_refinement.machine_class()


class CountingEventMachine(EventMachine):  # type: ignore[misc,valid-type]
    """The events machine, counting what its runs reach (class-level counter, reset per test)."""

    seen: ClassVar[Counter[str]] = Counter()

    def lookup(self, rid: str, hint: Any) -> Any:
        pages, hit = super().lookup(rid, hint)
        self.seen["named LoRA prefix hit"] += hit.num_tokens > 0 and self.view(rid).lora_name is not None
        return pages, hit

    def new_request(self, view: spec.RequestView) -> None:
        super().new_request(view)
        self.seen[f"lora path {view.lora_path}"] += 1

    def check_events(self) -> None:
        pending = spec_events.call_events(self.call_pre, self.spec, self.call_new, self.call_reset)
        for event in pending:
            self.seen[type(event).__name__] += 1
        super().check_events()


def ci_settings(examples: int, steps: int) -> settings:
    """The derandomized ``ci`` profile with a modest budget."""
    return settings(settings.get_profile("ci"), max_examples=examples, stateful_step_count=steps)


@pytest.mark.parametrize("name", EVENT_LAYOUTS)
def test_events_and_named_lora_refine_the_spec(name: str) -> None:
    """Every call's KV events equal the spec's batch and replay to the cached keys, while
    requests use named adapters re-pointed at other weights; the paths are reached."""
    CountingEventMachine.seen = Counter()
    factory = machine_factory(LAYOUTS[name], lambda config: CacheManagerAdapter(config, events_refinement.make_manager),
                              machine=CountingEventMachine)
    run_state_machine_as_test(factory, settings=ci_settings(150, 50))  # type: ignore[arg-type]
    seen = CountingEventMachine.seen
    paths = ["lora path /adapters/sql-v1", "lora path /adapters/sql-v2", "Stored", "Removed"]
    if name != "full+mamba(align)":  # a Mamba-align hit needs a cached state page at the hit's end: rare
        paths.append("named LoRA prefix hit")
    for path in paths:
        assert seen[path] > 0, seen


def lora_path_failures_here() -> list[str]:
    """`find_manager_failure` on the ``full`` layout with keys that leave a named adapter's path out."""
    original = hashing._lora_key
    hashing._lora_key = _key_ignores_path(original)  # type: ignore[assignment]  # a planted bug
    try:
        return find_manager_failure(build_cache_manager, LAYOUTS["full"])
    finally:
        hashing._lora_key = original


def test_machine_catches_a_lora_key_without_the_path() -> None:
    """A manager whose keys leave a named adapter's path out serves KV of the old weights after
    the name is re-pointed: the machine sees the hit the spec does not give. The derandomized
    search runs in a fresh interpreter: Hypothesis also draws from constants it collects in the
    modules a process has imported, so in a pytest worker what it generates depends on the tests
    that ran before (after the Mamba mutant tests, this search once found nothing)."""
    script = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
              "from test_manager_machine_features import lora_path_failures_here; "
              "print(json.dumps(lora_path_failures_here()))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=900)
    if out.returncode != 0:
        raise AssertionError(f"the detection run failed:\n{out.stderr[-4000:]}")
    names = json.loads(out.stdout.strip().splitlines()[-1])
    assert "REFINEMENT" in names, names


def test_machine_catches_a_dropped_kv_removal() -> None:
    """A manager whose event log forgets evictions fails INV-EVENTS-REPLAY in the machine."""
    def make_manager(config: spec.ManagerConfig) -> Any:
        manager = events_refinement.make_manager(config)
        events_refinement.drop_removed(manager)
        return manager
    names = find_manager_failure(make_manager, LAYOUTS["full+sliding(window<=page)"], machine=EventMachine)
    assert "INV-EVENTS-REPLAY" in names, names


def test_machine_catches_a_manager_ignoring_the_skip_option() -> None:
    """A manager that allocates every sliding-window page although the configuration skips the
    unreachable ones departs from the spec's page tables."""
    names = find_manager_failure(
        lambda config: build_cache_manager(replace(config, skip_unreachable_sliding_pages=False)),
        LAYOUTS[SKIP_LAYOUT])
    assert "REFINEMENT" in names, names
