"""pytest runs the same registry as `verikv prove`: every check must prove/pass, every spec mutant must be caught."""

from __future__ import annotations

import pytest

from verikv.proofs import z3_pool
from verikv.proofs.registry import Check, Mutant, discover_checks, discover_mutants

CHECKS = discover_checks()
SPEC_MUTANTS = [m for m in discover_mutants() if m.kind == "spec"]


@pytest.mark.parametrize("check", CHECKS, ids=[c.name for c in CHECKS])
def test_check_holds(check: Check) -> None:
    outcome = check.run()
    assert outcome.ok, f"{check.name}: {outcome.status}\n{outcome.detail}"
    if check.kind.startswith("z3"):
        assert outcome.vacuity_checked, f"{check.name} skipped its vacuity check"


@pytest.mark.parametrize("mutant", SPEC_MUTANTS, ids=[m.name for m in SPEC_MUTANTS])
def test_spec_mutant_is_caught(mutant: Mutant) -> None:
    caught = mutant.detect()
    assert caught, f"{mutant.name} survived every theorem"
    assert any(mutant.invariant in name for name in caught), f"{mutant.name} not caught by its own invariant: {caught}"


def test_every_pool_transition_invariant_pair_has_theorems() -> None:
    names = {c.name for c in CHECKS}
    for transition in z3_pool.TRANSITIONS:
        for invariant in z3_pool.POOL_INVARIANTS:
            bounded = f"{transition}/{invariant}:N=3..5"
            assert bounded in names, bounded
            if invariant not in z3_pool.COUNTING:
                assert f"{transition}/{invariant}" in names
