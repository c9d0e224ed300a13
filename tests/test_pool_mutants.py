"""Every deliberately broken pool is caught by the pool state machine, by the expected check."""

from __future__ import annotations

import pytest

from verikv.proofs.mutants.pool import mutants
from verikv.proofs.runner.registry import discover_mutants
from verikv.spec.invariants import POOL_INVARIANTS

MUTANTS = mutants()


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_mutant_is_caught_by_its_invariant(mutant) -> None:
    caught_by = mutant.detect()
    assert caught_by, f"{mutant.name} survived: Hypothesis found no counterexample"
    assert mutant.invariant in caught_by, f"{mutant.name} caught only by {caught_by}"


def test_every_pool_invariant_has_a_mutant() -> None:
    covered = {m.invariant for m in MUTANTS}
    assert set(POOL_INVARIANTS) | {"INV-ATOMIC"} <= covered


def test_mutants_are_discovered_by_the_prove_runner() -> None:
    names = {m.name for m in discover_mutants()}
    assert {m.name for m in MUTANTS} <= names
