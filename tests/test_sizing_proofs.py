"""The sizing theorems, CrossHair checks and mutants as `verikv prove` runs them."""

from __future__ import annotations

import sys
import textwrap

import pytest

from verikv.proofs.crosshair import sizing as crosshair_sizing
from verikv.proofs.runner.registry import discover_checks, discover_mutants
from verikv.proofs.z3 import sizing as sizing_theorems
from verikv.sizing import arith, budget

THEOREMS = sizing_theorems.checks()
CROSSHAIR = crosshair_sizing.checks()
MUTANTS = sizing_theorems.mutants()


def test_registered_with_the_runner():
    """Registered theorems are run by tests/test_proofs.py (proved, vacuity checked), like `verikv prove`."""
    names = {c.name for c in discover_checks()}
    assert {c.name for c in THEOREMS + CROSSHAIR} <= names
    assert {m.name for m in MUTANTS} <= {m.name for m in discover_mutants()}
    z3_checks = [c for c in THEOREMS if c.kind == "z3-sizing"]
    assert {c.invariant for c in z3_checks} == {"SIZE-FITS", "SIZE-MAXIMAL", "SIZE-INT32", "SIZE-ALIGNED",
                                                "SIZE-DP-EQUAL"}
    assert all(c.transition == "-" and c.bound for c in THEOREMS)


@pytest.mark.parametrize("check", CROSSHAIR, ids=lambda c: c.name)
def test_crosshair_confirms_every_contract(check):
    outcome = check.run()
    assert outcome.status == "confirmed", outcome.detail


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_is_caught(mutant):
    caught = mutant.detect()
    assert caught, f"{mutant.name} survived"
    assert all(mutant.invariant in name or name.endswith(":grid") for name in caught)


def test_mutants_leave_the_code_intact():
    from verikv.sizing import mamba, tpu
    from verikv.sizing.layers import PageArray

    modules = (budget, tpu, mamba)
    before = [dict(vars(m)) for m in modules] + [dict(vars(PageArray))]
    for mutant in MUTANTS:
        if mutant.name in ("sizing:lanes-unpadded", "sizing:size-from-unpadded"):
            mutant.detect()
    assert [dict(vars(m)) for m in modules] + [dict(vars(PageArray))] == before


def test_symbolic_calls_run_the_real_functions():
    import z3

    b = z3.Int("b")
    expr = budget.memory_page_limit(b, 7)
    solver = z3.Solver()
    solver.add(b == 50, expr != 7)
    assert solver.check() == z3.unsat
    assert arith.fdiv(50, 7) == 7


def test_crosshair_check_reports_a_broken_contract(tmp_path, monkeypatch):
    module = tmp_path / "broken_sizing.py"
    module.write_text(textwrap.dedent('''
        def pages(budget: int, page_bytes: int) -> int:
            """
            pre: page_bytes >= 1
            post: __return__ * page_bytes <= max(budget, 0)
            """
            return max(budget, 0) // page_bytes + 1
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + ":" + ":".join(sys.path))
    outcome = crosshair_sizing.run_crosshair(("broken_sizing",))
    assert outcome.status == "failed" and "pages(" in outcome.detail


def test_crosshair_check_counts_unconfirmed_conditions(tmp_path, monkeypatch):
    module = tmp_path / "untyped_sizing.py"
    module.write_text(textwrap.dedent('''
        def pages(budget, page_bytes):
            """
            pre: page_bytes >= 1
            post: __return__ >= 0
            """
            return max(budget, 0) // page_bytes
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + ":" + ":".join(sys.path))
    outcome = crosshair_sizing.run_crosshair(("untyped_sizing",))
    assert outcome.status != "no-counterexample"
