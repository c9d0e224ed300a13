"""CacheManager against the manager spec, through the scheduler-shaped state machine.

One test per group layout (`LAYOUTS`), each `EXAMPLES` examples of up to `STEPS` rules, under
the loaded Hypothesis profile (derandomized in CI, random on a developer's machine). The machine
itself checks refinement and every invariant after every step. `test_runs_are_long_and_reach_the_paths`
shows the runs are not vacuous, on a derandomized run counted in a fresh interpreter (so it is
the same run every time): a run reaches the step limit, and prefix hits, failed allocations,
preemptions and null placeholders all occur. `test_failing_key_computation_changes_nothing`
adds the failing-key-computation rule.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from verikv.testing.adapter import KeyFailingAdapter
from verikv.testing.manager_machine import (
    LAYOUTS,
    OUTSIDE_TOKEN,
    PROMPTS,
    MachineOptions,
    ManagerMachine,
    machine_factory,
)

STEPS = 60
EXAMPLES = 200


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_cache_manager_refines_the_spec(name: str) -> None:
    run_state_machine_as_test(machine_factory(LAYOUTS[name]),  # type: ignore[arg-type]
                              settings=settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None))


class Counting(ManagerMachine):
    """The machine, counting which paths its runs reach (class-level counter, reset per test)."""

    seen: ClassVar[Counter[str]] = Counter()

    def check(self) -> None:
        super().check()
        self.steps = getattr(self, "steps", 0) + 1
        self.seen["null placeholder held"] += any(0 in pages for _, e in self.spec.entries for pages in e.pages)

    def lookup(self, rid: str, hint: Any) -> Any:
        pages, hit = super().lookup(rid, hint)
        self.seen["prefix hit"] += hit.num_tokens > 0
        return pages, hit

    def allocate(self, rid: str, *args: Any, **kwargs: Any) -> bool:
        held = self.spec.entry(rid) is not None
        done = super().allocate(rid, *args, **kwargs)
        self.seen["allocation refused"] += not done
        self.seen["held request given a DP hint"] += held and kwargs.get("hint") is not None
        self.seen["decode step under DP"] += held and self.dp is not None and done
        self.seen["held request stepped without DP arguments"] += held and kwargs.get("plain", False) and done
        return done

    def new_request(self, view: Any) -> None:
        super().new_request(view)
        self.seen["quoting prompt"] += view.tokens[-1] == OUTSIDE_TOKEN and view.tokens not in PROMPTS

    def decode_token(self, rid: str, block: int) -> None:
        super().decode_token(rid, block)
        tokens = self.view(rid).tokens
        self.seen["decoding completed a prompt's first page"] += (
            len(tokens) % 4 == 0 and tokens[-4:] in {prompt[:4] for prompt in PROMPTS})

    def preempt_request(self, rid: str) -> None:
        super().preempt_request(rid)
        self.seen["preemption"] += 1

    def bad_call(self, rid: str, case: str) -> Any:
        calls = super().bad_call(rid, case)
        self.seen[f"bad input {case}"] += calls is not None
        return calls

    def teardown(self) -> None:
        self.seen["runs"] += 1
        self.seen["longest run"] = max(self.seen["longest run"], getattr(self, "steps", 0))


def _count_paths_here(name: str, examples: int) -> Counter[str]:
    Counting.seen = Counter()
    run_state_machine_as_test(machine_factory(LAYOUTS[name], machine=Counting),  # type: ignore[arg-type]
                              settings=settings(max_examples=examples, stateful_step_count=STEPS, deadline=None,
                                                derandomize=True, database=None,
                                                suppress_health_check=list(HealthCheck)))
    return Counting.seen


def count_paths(name: str, examples: int) -> Counter[str]:
    """The paths a derandomized run of ``examples`` examples reaches, counted in a fresh
    interpreter: Hypothesis also draws from constants it collects in the modules a process has
    imported, so in a pytest worker what a derandomized run generates depends on the tests that
    ran before it there (seen in CI: a path reached alone was missed in the full suite)."""
    script = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
              f"from test_manager_stateful import _count_paths_here; "
              f"print(json.dumps(_count_paths_here({name!r}, {examples})))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise AssertionError(f"counting run failed:\n{out.stderr[-4000:]}")
    return Counter(json.loads(out.stdout.strip().splitlines()[-1]))


def test_runs_are_long_and_reach_the_paths() -> None:
    seen = count_paths("full+sliding(window<=page)", 100)
    assert seen["longest run"] >= STEPS, seen
    for path in ("prefix hit", "allocation refused", "preemption", "null placeholder held"):
        assert seen[path] > 0, seen


def test_decoded_pages_repeat_prompt_pages_with_a_short_window() -> None:
    """Decoding copies page-sized blocks, so a decoded page can equal another prompt's first
    page: the shape of eSurge's Q1 false hit (a window that fits in a page)."""
    seen = count_paths("sliding-only(window<=page)", 60)
    assert seen["decoding completed a prompt's first page"] > 0, seen


def test_bad_token_counts_are_sent_without_data_parallelism() -> None:
    """The zero / negative / too-long / lookahead cases run in a non-DP layout (they used to be
    skipped there); the DP-size case needs a DP size that divides the pool."""
    seen = count_paths("full", 40)
    for case in ("zero", "negative", "too-long", "lookahead", "dp-size"):
        assert seen[f"bad input {case}"] > 0, seen


def test_data_parallel_hybrid_reaches_hints_on_held_requests_and_decode() -> None:
    seen = count_paths("dp2+sliding(unhashed-first)", 40)
    for path in ("held request given a DP hint", "decode step under DP", "prefix hit", "null placeholder held",
                 "held request stepped without DP arguments"):
        assert seen[path] > 0, seen


def test_decode_steps_under_data_parallelism_come_without_dp_arguments_too() -> None:
    """With one group, a held request's step without DP arguments is the call verikv's decode
    fast path takes; the shard it must stay on is the one its pages are in."""
    seen = count_paths("dp2", 40)
    assert seen["held request stepped without DP arguments"] > 0, seen


def test_malformed_own_hits_are_sent() -> None:
    """The manager's own lookup result comes back with a wrong count, or with a page id removed
    from it (a shortcut for the manager's own result could skip validation)."""
    seen = count_paths("full", 100)
    for case in ("own-hit-miscounted", "own-hit-edited"):
        assert seen[f"bad input {case}"] > 0, seen


def test_prompts_quote_other_requests_from_a_page_boundary() -> None:
    """A new prompt may start with another request's page (prompt or decoded): with a window
    inside one page, how a wrongly keyed decoded page is reached (eSurge's Q1)."""
    seen = count_paths("sliding+full(window<=page)", 60)
    assert seen["quoting prompt"] > 0 and seen["decoding completed a prompt's first page"] > 0, seen


@pytest.mark.parametrize("name", ["full", "full+sliding(window>page)"])
def test_failing_key_computation_changes_nothing(name: str) -> None:
    """INV-ATOMIC across failing key computation: a hash function that raises mid-call, a
    ``lora_id`` that is not an int, a salt that cannot be encoded."""
    machine = machine_factory(LAYOUTS[name], KeyFailingAdapter, MachineOptions(key_failures=True))
    run_state_machine_as_test(machine, settings=settings(  # type: ignore[arg-type]
        max_examples=100, stateful_step_count=40, deadline=None, derandomize=True, database=None,
        phases=(Phase.explicit, Phase.generate)))
