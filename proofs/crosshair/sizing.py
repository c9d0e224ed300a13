"""CrossHair checks of the PEP 316 contracts on the pure sizing functions.

One ``crosshair check`` run over the sizing modules through the shared runner
(`verikv.proofs.crosshair.common`). Every condition must be "Confirmed over all paths" (the
sizing code is loop-free integer arithmetic, which CrossHair proves): a counterexample is
"failed", a condition left unconfirmed within the budget is "unknown" (a failure), and fewer
verdicts than the modules declare conditions (a function CrossHair silently skipped: an
unsupported parameter type, a contract it could not parse) is "error".
"""

from __future__ import annotations

from verikv.proofs.crosshair.common import Budget, run_check
from verikv.proofs.runner.registry import Check, Outcome

MODULES = ("verikv.sizing.budget", "verikv.sizing.tpu", "verikv.sizing.gpu", "verikv.sizing.mamba")
BUDGET = Budget(per_condition=10)  # search each condition to exhaustion; every one confirms in well under 1 s


def run_crosshair(module_names: tuple[str, ...]) -> Outcome:
    """Check every contract of the modules in one CrossHair run; "confirmed" only if all are confirmed."""
    return run_check(list(module_names), BUDGET, require_confirmed=True)


def checks() -> list[Check]:
    """One CrossHair check over every sizing module (one interpreter start instead of four)."""
    return [Check("crosshair:verikv.sizing", "crosshair", "SIZING-CONTRACTS", "-",
                  f"all paths (PEP 316 pre-conditions) of {', '.join(MODULES)}", lambda: run_crosshair(MODULES))]
