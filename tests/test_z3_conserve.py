"""The unbounded counting theorems of `verikv.proofs.z3.conserve`: they prove for every pool size,
every way the held set moves is reachable, and the broken relations are refuted."""

from __future__ import annotations

import pytest

from verikv.proofs.runner.registry import discover_checks
from verikv.proofs.z3 import conserve as z3_conserve
from verikv.proofs.z3.common import Theorem

THEOREMS = z3_conserve.theorems()
REGISTERED = {check.name: check for check in discover_checks()}
BRANCHES = [(t, b) for t, branches in z3_conserve.BRANCHES.items() for b in branches]


@pytest.mark.parametrize("theorem", THEOREMS, ids=lambda t: t.name)
def test_counting_invariant_is_an_unbounded_registry_check(theorem: Theorem) -> None:
    """Proving is the registry item's job (``verikv-proofs::<name>``, in a clean process: Z3's
    search depends on the terms a long-lived pytest worker already created, and
    ``pool.free/INV-CONSERVE`` timed out in one such worker under ``python -O`` while it proves in
    about a second in a clean process)."""
    assert not theorem.bounded and theorem.name.endswith(("/INV-CONSERVE", "/INV-USAGE"))
    check = REGISTERED[theorem.name]
    assert check.kind == "z3" and check.bound.startswith("unbounded")


@pytest.mark.parametrize(("transition", "branch"), BRANCHES, ids=[b for _, b in BRANCHES])
def test_every_move_of_the_held_set_is_reachable(transition: str, branch: str) -> None:
    assert z3_conserve.witness(transition, branch).status == "proved"


@pytest.mark.parametrize("mutant", z3_conserve.mutants(), ids=lambda m: m.name)
def test_broken_relation_is_refuted(mutant: object) -> None:
    caught = mutant.detect()  # type: ignore[attr-defined]
    assert caught and all(mutant.invariant in name for name in caught), caught  # type: ignore[attr-defined]


def test_every_pool_transition_has_both_counting_theorems() -> None:
    names = {t.name for t in THEOREMS}
    for transition in ("pool.init", "pool.allocate", "pool.touch", "pool.free", "pool.cache",
                       "pool.reset_prefix_cache", "pool.lookup"):
        assert {f"{transition}/INV-CONSERVE", f"{transition}/INV-USAGE"} <= names
