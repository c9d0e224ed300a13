"""The proofs as pytest items: every registry check is collected once; spec mutants are caught.

The checks themselves run in ``verikv prove`` (or as the items ``verikv-proofs::<name>`` that
``--verikv-proofs`` adds), each in a clean child process: Z3's search depends on the terms
already created in its context, so a theorem that proves in 0.4 s in a clean process can exhaust
its limits inside a pytest worker that has built thousands of terms for other tests (observed:
sizing.gpu-mamba-hybrid/SIZE-FITS).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from verikv.proofs.runner.registry import Mutant, discover_checks, discover_mutants
from verikv.proofs.z3 import pool as z3_pool

CHECKS = discover_checks()
SPEC_MUTANTS = [m for m in discover_mutants() if m.kind == "spec"]


def _collected(*options: str) -> list[str]:
    """Node ids pytest collects with ``options`` and no test files (a fresh interpreter)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "--noconftest", *options, "--rootdir", ".", "--ignore-glob", "*"],
                          capture_output=True, text=True, check=False)
    return [line for line in done.stdout.splitlines() if line.startswith("verikv-")]


def test_every_check_is_one_item_named_by_the_check() -> None:
    assert _collected("--verikv-proofs") == [f"verikv-proofs::{c.name}" for c in CHECKS]


def test_only_selects_by_invariant_and_mutants_are_items_too() -> None:
    items = _collected("--verikv-proofs", "--verikv-mutants", "--verikv-only", "INV-ATOMIC")
    expected = [f"verikv-proofs::{c.name}" for c in CHECKS if c.invariant == "INV-ATOMIC" or "INV-ATOMIC" in c.name]
    expected += [f"verikv-mutants::{m.name}" for m in discover_mutants()
                 if m.invariant == "INV-ATOMIC" or "INV-ATOMIC" in m.name]
    assert items == expected and any(i.startswith("verikv-mutants::") for i in items)


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
