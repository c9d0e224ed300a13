"""CrossHair checks of the PEP 316 contracts on the pure sizing functions.

The check runs ``python -m crosshair check <modules> --report_all`` in a subprocess of the same
interpreter. It passes only when CrossHair reports "Confirmed over all paths" for every
``post:`` condition, and for exactly as many conditions as the modules' docstrings declare,
so a function CrossHair silently skipped (an unsupported parameter type,
a contract it could not parse) is a failure, not a pass. A counterexample is "failed"; a
condition whose paths were not all explored within the budget is "unknown" (also a failure).
"""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
from types import ModuleType

from verikv.proofs.registry import Check, Outcome

MODULES = ("verikv.sizing.budget", "verikv.sizing.tpu", "verikv.sizing.gpu", "verikv.sizing.mamba")
PER_CONDITION_TIMEOUT = 10  # CPU seconds per condition; every condition here confirms in well under 1 s
_CONFIRMED = "info: Confirmed over all paths."


def declared_conditions(module: ModuleType) -> int:
    """How many ``post:`` conditions the module's own functions declare."""
    count = 0
    for _, function in inspect.getmembers(module, inspect.isfunction):
        if function.__module__ == module.__name__ and function.__doc__:
            count += sum(1 for line in function.__doc__.splitlines() if re.match(r"\s*post(\[.*\])?:", line))
    return count


def run_crosshair(module_names: tuple[str, ...]) -> Outcome:
    """Check every contract of the modules in one CrossHair run and judge its report."""
    expected = sum(declared_conditions(importlib.import_module(name)) for name in module_names)
    if expected == 0:
        return Outcome("vacuous", f"{', '.join(module_names)} declare no post-conditions")
    command = [sys.executable, "-m", "crosshair", "check", *module_names, "--report_all", "--analysis_kind=PEP316",
               f"--per_condition_timeout={PER_CONDITION_TIMEOUT}"]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in completed.stdout.splitlines() + completed.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if ": error:" in line]
    confirmed = sum(1 for line in lines if line.endswith(_CONFIRMED))
    report = "\n".join(lines[-20:])
    if errors or completed.returncode == 1:
        return Outcome("failed", "\n".join(errors) or report)
    if completed.returncode != 0:
        return Outcome("error", f"crosshair exited {completed.returncode}\n{report}")
    if confirmed != expected:
        return Outcome("unknown", f"{confirmed} of {expected} conditions confirmed over all paths\n{report}")
    return Outcome("passed", f"{confirmed} conditions confirmed over all paths", vacuity_checked=True)


def checks() -> list[Check]:
    """One CrossHair check over every sizing module (one interpreter start instead of four)."""
    return [Check("crosshair:verikv.sizing", "crosshair", "SIZING-CONTRACTS", "-",
                  f"all paths (PEP 316 pre-conditions) of {', '.join(MODULES)}", lambda: run_crosshair(MODULES))]
