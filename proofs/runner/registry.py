"""The registry of checks and mutants that `verikv prove` runs.

A *provider* is any module in the ``verikv.proofs`` package that defines ``checks()`` (an
iterable of `Check`) and/or ``mutants()`` (an iterable of `Mutant`). Discovery imports every
module of the package, so adding a provider needs no edit here.

Names are the project's thread: a theorem is ``<transition>/<INVARIANT>``, with a
``:N=3..8`` suffix for bounded runs; other checks use ``<kind>:<target>``.
"""

from __future__ import annotations

import fnmatch
import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Literal, TypeVar

Status = Literal["proved", "confirmed", "passed", "no-counterexample", "failed", "unknown", "vacuous", "timeout",
                 "error"]
"""``proved``: a Z3 theorem (unbounded, or for every case of its stated bound); ``confirmed``:
CrossHair confirmed every condition over all paths, reasoning symbolically; ``passed``: a
check that enumerated everything its bound states (exhaustive refinement, encoding checks, a
CrossHair driver that enumerates its domain and runs the code concretely: bounded-exhaustive);
``no-counterexample``: a bounded search found none (CrossHair within its budget, seeded random
walks): not a proof. Every other status is a failure."""
SUCCESS: frozenset[str] = frozenset({"proved", "confirmed", "passed", "no-counterexample"})


@dataclass(frozen=True)
class Outcome:
    """What one check concluded. ``detail`` holds a readable counterexample on failure."""

    status: Status
    detail: str = ""
    vacuity_checked: bool = False

    @property
    def ok(self) -> bool:
        return self.status in SUCCESS


@dataclass(frozen=True)
class Check:
    """One runnable proof obligation or verification check.

    kind: "z3" (spec theorem), "z3-sizing" (theorem on impl sizing code), "crosshair",
    "diffbehavior", ... ; invariant: the INV-* name or a sizing property name;
    transition: e.g. "pool.free", "manager.allocate_slots", or "-"; bound: "unbounded" or a
    stated bound such as "N=3..8"; run: does the work, never raises for a failed proof
    (returns an Outcome instead).
    """

    name: str
    kind: str
    invariant: str
    transition: str
    bound: str
    run: Callable[[], Outcome] = field(compare=False, repr=False)


@dataclass(frozen=True)
class Mutant:
    """A deliberately broken spec or implementation and the means to show it is caught.

    kind: "spec" (Z3), "impl" (Hypothesis / CrossHair); invariant: the INV-* name it breaks;
    detect: runs the relevant checks against the mutant and returns the names of the checks
    that failed (empty = the mutant survived, which is a defect of the check suite).
    """

    name: str
    kind: str
    invariant: str
    description: str
    detect: Callable[[], list[str]] = field(compare=False, repr=False)


def _provider_modules() -> list[ModuleType]:
    package = importlib.import_module("verikv.proofs")
    modules = []
    for info in sorted(pkgutil.walk_packages(package.__path__, "verikv.proofs."), key=lambda i: i.name):
        if info.name.rsplit(".", 1)[-1].startswith("_"):
            continue
        modules.append(importlib.import_module(info.name))
    return modules


def _discover(attribute: str) -> dict[str, Check | Mutant]:
    """Collect what every provider's ``checks()`` or ``mutants()`` yields, keyed by unique name."""
    found: dict[str, Check | Mutant] = {}
    for module in _provider_modules():
        provider = getattr(module, attribute, None)
        if provider is None:
            continue
        for item in provider():
            if item.name in found:
                raise RuntimeError(f"duplicate {attribute[:-1]} name {item.name!r} in {module.__name__}")
            found[item.name] = item
    return found


def discover_checks() -> list[Check]:
    """Every Check of every provider, sorted by name; duplicate names are an error."""
    found = _discover("checks")
    return [found[name] for name in sorted(found)]  # type: ignore[misc]


def discover_mutants() -> list[Mutant]:
    """Every Mutant of every provider, sorted by name; duplicate names are an error."""
    found = _discover("mutants")
    return [found[name] for name in sorted(found)]  # type: ignore[misc]


Entry = TypeVar("Entry", bound=Check | Mutant)


def matches(entry: Check | Mutant, pattern: str) -> bool:
    """Whether ``pattern`` selects ``entry`` (``verikv prove --only``, ``pytest --verikv-only``).

    A pattern with wildcards (``*?[``) is a glob on the name or on the invariant
    (``'pool.free/*'``, ``'INV-HIT-*'``); a plain one is a substring of the name or exactly the
    invariant, so ``INV-ATOMIC`` also selects the checks and mutants about INV-ATOMIC whose
    names do not contain it.
    """
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(entry.name, pattern) or fnmatch.fnmatchcase(entry.invariant, pattern)
    return pattern in entry.name or pattern == entry.invariant


def select(entries: Sequence[Entry], patterns: Sequence[str]) -> list[Entry]:
    """The entries any pattern selects, in order; every entry when there are no patterns."""
    return [e for e in entries if not patterns or any(matches(e, p) for p in patterns)]
