"""pytest runs the same registry as `verikv prove`: every check must prove/pass, every spec mutant must be caught.

The checks run through the real runner in a fresh interpreter, as a user's CI runs them: Z3's
search depends on the terms already created in its context, so a theorem that proves in 0.4 s
in a clean process can exhaust its limits inside a pytest worker that has built thousands of
terms for other tests (observed: sizing.gpu-mamba-hybrid/SIZE-FITS).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from verikv.proofs import z3_pool
from verikv.proofs.registry import Mutant, discover_checks, discover_mutants

CHECKS = discover_checks()
SPEC_MUTANTS = [m for m in discover_mutants() if m.kind == "spec"]


def test_every_check_holds(tmp_path: Path) -> None:
    report = tmp_path / "prove.json"
    flags = ["-O"] * sys.flags.optimize
    run = subprocess.run([sys.executable, *flags, "-m", "verikv.proofs", "--json", str(report)],
                         capture_output=True, text=True, check=False)
    results = {r["name"]: r for r in json.loads(report.read_text(encoding="utf-8"))["results"]}
    assert set(results) == {c.name for c in CHECKS}, "the runner did not run every registered check"
    failed = [f"{n}: {r['status']} {r['detail']}" for n, r in results.items() if not r["ok"]]
    assert not failed and run.returncode == 0, "\n".join(failed) or run.stdout[-2000:]
    skipped_vacuity = [c.name for c in CHECKS if c.kind.startswith("z3") and not results[c.name]["vacuity_checked"]]
    assert not skipped_vacuity, f"theorems without a vacuity check: {skipped_vacuity}"


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
