"""Every deliberately broken cache manager is caught by the manager machine, by the expected check."""

from __future__ import annotations

import pytest

from verikv.proofs.mutants.manager import mutants
from verikv.proofs.runner.registry import Mutant, discover_mutants

MUTANTS = mutants()


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_mutant_is_caught_by_its_invariant(mutant: Mutant) -> None:
    caught_by = mutant.detect()
    assert caught_by, f"{mutant.name} survived: the machine found no counterexample"
    assert mutant.invariant in caught_by, f"{mutant.name} caught only by {caught_by}"


def test_every_manager_invariant_has_a_mutant() -> None:
    covered = {m.invariant for m in MUTANTS}
    assert {"INV-REF-COUNT", "INV-HIT-SAFE", "INV-HIT-SHAPE", "INV-ATOMIC"} <= covered


def test_mutants_are_discovered_by_the_prove_runner() -> None:
    assert {m.name for m in MUTANTS} <= {m.name for m in discover_mutants()}
