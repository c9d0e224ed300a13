"""pytest plugin: verikv's registered checks and mutant detectors as pytest items.

Registered as the ``verikv`` pytest plugin (entry point ``pytest11``), inert unless asked:

- ``--verikv-proofs`` adds one item per registry check, ``verikv-proofs::<check name>``;
- ``--verikv-mutants`` adds one item per mutant, ``verikv-mutants::<mutant name>``, which
  passes when at least one check catches the mutant;
- ``--verikv-only PATTERN`` (repeatable) keeps the entries it selects: a glob on the name or
  the invariant, or a plain substring of the name / exact invariant name (``INV-ATOMIC``);
- ``--verikv-cpu-budget SECONDS``: CPU seconds per check process (default 300).

Each item runs its entry in a clean child process (`verikv.proofs.isolation`), so
``-k``, ``--junitxml``, ``-n`` (pytest-xdist) and ``--timeout`` (pytest-timeout) apply as to
any test. The item records its result in ``user_properties`` (``verikv_status``,
``verikv_detail``, ...), which `verikv prove` reads back to draw its table and JSON.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from verikv.proofs import isolation, registry
from verikv.proofs.isolation import CPU_BUDGET, RegistryEntry, StartMethod, Verdict, run_isolated

PROPERTY_PREFIX = "verikv_"
START_METHOD: StartMethod = "forkserver"  # clean children; tests of fake registries switch to "fork"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("verikv", "verikv proofs as pytest items")
    group.addoption("--verikv-proofs", action="store_true", default=False,
                    help="collect every verikv registry check as an item")
    group.addoption("--verikv-mutants", action="store_true", default=False,
                    help="collect every verikv mutant detector as an item (passes when the mutant is caught)")
    group.addoption("--verikv-only", action="append", default=[], metavar="PATTERN",
                    help="keep the checks/mutants a glob or substring of the name, or an invariant, selects")
    group.addoption("--verikv-cpu-budget", type=float, default=CPU_BUDGET, metavar="SECONDS",
                    help=f"CPU seconds per check process before it counts as a timeout (default {CPU_BUDGET:g})")


class CheckFailed(Exception):
    """A check that did not prove/pass (or a mutant that survived); carries its verdict."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.outcome.status)
        self.verdict = verdict


class EntryCollector(pytest.Collector):
    """The parent of the items: ``verikv-proofs`` or ``verikv-mutants`` (no file behind it)."""

    def collect(self) -> Iterator[pytest.Item]:  # items are created by `_entry_items`
        return iter(())


class EntryItem(pytest.Item):
    """One registry check or mutant, run in a clean child process."""

    def __init__(self, *, mutant: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mutant = mutant
        entry = isolation.catalogue(mutant)[self.name]
        self.add_marker(pytest.mark.verikv_mutant if mutant else pytest.mark.verikv_proof)
        self.user_properties.extend([(PROPERTY_PREFIX + "kind", entry.kind),
                                     (PROPERTY_PREFIX + "invariant", entry.invariant)])

    def runtest(self) -> None:
        verdict = run_isolated(RegistryEntry(self.name, self.mutant),
                               cpu_budget=self.config.option.verikv_cpu_budget, method=START_METHOD)
        outcome = verdict.outcome
        self.user_properties.extend([
            (PROPERTY_PREFIX + "status", outcome.status),
            (PROPERTY_PREFIX + "detail", outcome.detail),
            (PROPERTY_PREFIX + "vacuity_checked", outcome.vacuity_checked),
            (PROPERTY_PREFIX + "caught_by", list(verdict.caught_by)),
            (PROPERTY_PREFIX + "cpu_seconds", round(verdict.cpu_seconds, 4)),
        ])
        if not outcome.ok:
            raise CheckFailed(verdict)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, CheckFailed):
            outcome = excinfo.value.verdict.outcome
            return f"{self.name}: {outcome.status}\n{outcome.detail or '(no detail)'}"
        return str(super().repr_failure(excinfo, style=style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return Path(registry.__file__), None, f"{'mutant' if self.mutant else 'check'} {self.name}"


def _entry_items(session: pytest.Session, mutant: bool, patterns: list[str]) -> list[EntryItem]:
    group = "verikv-mutants" if mutant else "verikv-proofs"
    parent = EntryCollector.from_parent(session, name=group, nodeid=group)
    entries = list(isolation.catalogue(mutant).values())
    return [EntryItem.from_parent(parent, name=e.name, nodeid=f"{group}::{e.name}", mutant=mutant)
            for e in registry.select(entries, patterns)]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "verikv_proof: a verikv registry check (added by --verikv-proofs)")
    config.addinivalue_line("markers", "verikv_mutant: a verikv mutant detector (added by --verikv-mutants)")


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselect, so they apply to these items too
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    patterns: list[str] = config.option.verikv_only
    for mutant, wanted in ((False, config.getoption("verikv_proofs")), (True, config.getoption("verikv_mutants"))):
        if wanted:
            items.extend(_entry_items(session, mutant, patterns))
