"""Every branch of every manager encoding is reachable, and an encoding cut down to one branch
is caught by a witness (while a single vacuity check would pass it)."""

from __future__ import annotations

import pytest

from verikv.proofs.runner.registry import Check, Mutant
from verikv.proofs.z3 import witnesses as z3_witnesses

CHECKS = z3_witnesses.checks()
MUTANTS = z3_witnesses.mutants()


@pytest.mark.parametrize("check", CHECKS, ids=[c.name for c in CHECKS])
def test_every_branch_has_a_witness(check: Check) -> None:
    outcome = check.run()
    assert outcome.status == "proved", outcome.detail
    assert "witness:" in outcome.detail


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_a_cut_encoding_loses_a_witness(mutant: Mutant) -> None:
    assert mutant.detect()


def test_allocate_slots_covers_fit_no_fit_cache_and_hits() -> None:
    branches = set(z3_witnesses.BRANCHES["manager.allocate_slots"])
    assert {"does-not-fit", "fits-with-new-pages", "fits-and-caches", "takes-hits"} <= branches
