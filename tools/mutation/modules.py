"""The core modules under mutation and the tests that must kill their mutants.

Each module has a killer set: the test files that exercise it directly (its unit tests, the
tests of the layer above it; the checks written for its survivors live in its unit-test file,
``tests/test_<module>.py``). They are a fast subset of the suite, chosen so one mutant costs seconds: mutmut
then runs, for each mutant, only the tests of that set that call the mutated function. The slow
model-based tests (``test_manager_stateful.py`` runs for minutes) and the proof items are left
out, and so are the model-checking tests of the few killer files that hold some (``SLOW``): one
of them costs more than a whole module's other killers, and mutmut runs every killer that calls
the mutated function on each surviving mutant. docs/mutation.md says what that means for the
score.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Module:
    """One core module: its file under impl/ and the test files that are its killers."""

    name: str
    killers: tuple[str, ...]

    @property
    def path(self) -> str:
        """The module's file in the staged copy (impl/ is staged as verikv/)."""
        return f"verikv/{self.name}.py"

    @property
    def kill_tests(self) -> str:
        """The module's unit-test file, where the checks written to kill its survivors go."""
        return f"tests/test_{self.name}.py"


SLOW: tuple[str, ...] = (
    "tests/test_mamba_prefix_caching.py::test_refinement_of_the_real_manager_passes_on_the_mamba_align_layout",
    "tests/test_mamba_prefix_caching.py::test_the_conformance_machine_restores_mamba_states_against_the_spec",
    "tests/test_mamba_prefix_caching.py::test_hit_safety_alone_catches_a_state_restored_at_an_unaligned_position",
    "tests/test_kv_events.py::test_bytes_equal_vllms_own_encoding",
)
"""Killer-file tests left out of every run (pytest ``--deselect``): the exhaustive refinement run
and the Hypothesis conformance machines of the Mamba layout, 20-25 s each; the comparison of the
wire encoding with vLLM's own (10 s idle, minutes on a loaded machine; it checks verikv.kv_events,
not the event records)."""


def _module(name: str, *killers: str) -> Module:
    return Module(name, tuple(f"tests/test_{k}.py" for k in killers))


MODULES: tuple[Module, ...] = (
    _module("page_table", "page_table"),
    _module("dp_sharding", "dp_sharding", "cache_manager"),
    _module("events", "events", "cache_manager", "kv_events", "lora_identity"),
    _module("free_queue", "free_queue", "page_pool", "pool_spec"),
    _module("request", "request", "hashing", "bad_input"),
    _module("hashing", "hashing", "request", "bad_input", "lora_identity"),
    _module("page_pool", "page_pool", "free_queue", "pool_spec"),
    _module("single_type_managers", "single_type_managers", "coordinators", "cache_manager",
            "mamba_prefix_caching", "external_computed_tokens", "lookup_options"),
    _module("coordinators", "coordinators", "single_type_managers", "cache_manager", "mamba_prefix_caching",
            "allocate_slots_batch", "external_computed_tokens", "lookup_options", "esurge_regressions",
            "reliability", "bad_input"),
    _module("cache_manager", "cache_manager", "bad_input", "esurge_regressions", "reliability",
            "allocate_slots_batch", "coordinators", "mamba_prefix_caching", "external_computed_tokens",
            "lookup_options", "lora_identity", "events", "sizing_planner"),
)

BY_NAME = {m.name: m for m in MODULES}
