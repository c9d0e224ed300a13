"""The fixed point of the hit rules is the longest common hit and EAGLE drops once (exhaustive,
bounded), and the checks catch a one-pass combination and a double EAGLE drop."""

from __future__ import annotations

import pytest

from verikv.proofs.refinement import hit_rules as hit_rule_checks
from verikv.proofs.runner.registry import Check, Mutant

CHECKS = hit_rule_checks.checks()
MUTANTS = hit_rule_checks.mutants()


@pytest.mark.parametrize("check", CHECKS, ids=[c.name for c in CHECKS])
def test_the_spec_combination_is_the_longest_common_hit(check: Check) -> None:
    outcome = check.run()
    assert outcome.status == "passed", outcome.detail


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_a_broken_combination_is_caught(mutant: Mutant) -> None:
    assert mutant.detect() == [f"{CHECKS[1 if 'eagle' in mutant.name else 0].name}: LONGEST-COMMON-HIT"]
