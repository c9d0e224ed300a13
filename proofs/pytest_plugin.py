"""pytest plugin: verikv's registered checks and mutant detectors as pytest items, and readable
conformance failures.

Registered as the ``verikv`` pytest plugin (entry point ``pytest11``). Its items are inert
unless asked:

- ``--verikv-proofs`` adds one item per registry check, ``verikv-proofs::<check name>``;
- ``--verikv-mutants`` adds one item per mutant, ``verikv-mutants::<mutant name>``, which
  passes when at least one check catches the mutant;
- ``--verikv-only PATTERN`` (repeatable) keeps the entries it selects (`verikv.proofs.runner.selection`):
  an exact name, a glob on the name or the invariant, a plain substring of the name, or an
  invariant name (``INV-ATOMIC``);
- ``--verikv-cpu-budget SECONDS``: CPU seconds per check process (default 300).

Without the ``proofs`` extra, asking for the items is a one-line usage error with the install
hint. Each item runs its entry in a clean child process (`verikv.proofs.runner.isolation`), so ``-k``,
``--junitxml``, ``-n`` (pytest-xdist) and ``--timeout`` (pytest-timeout) apply as to any test.
The item records its result in ``user_properties`` (``verikv_status``, ``verikv_detail``, ...),
which `verikv prove` reads back to draw its table and JSON.

For every test, a failed check or a conformance failure (`verikv.testing.conformance`) is
shown once: its report in the failure section, its first line in the short summary. The
conformance harness prints a failure's first, unshrunk report while it shrinks; the plugin
sends that text to the terminal past pytest's output capture.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from verikv.proofs.runner import isolation, registry, selection
from verikv.proofs.runner.isolation import CPU_BUDGET, RegistryEntry, StartMethod, Verdict, run_isolated
from verikv.proofs.runner.prove import INSTALL_HINT, missing_extra

PROPERTY_PREFIX = "verikv_"
START_METHOD: StartMethod = "forkserver"  # clean children; tests of fake registries switch to "fork"
CHECK_MODULES = ("z3", "crosshair")
"""What the checks themselves import from the ``proofs`` extra (pytest is already running)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("verikv", "verikv proofs as pytest items")
    group.addoption("--verikv-proofs", action="store_true", default=False,
                    help="collect every verikv registry check as an item")
    group.addoption("--verikv-mutants", action="store_true", default=False,
                    help="collect every verikv mutant detector as an item (passes when the mutant is caught)")
    group.addoption("--verikv-only", action="append", default=[], metavar="PATTERN",
                    help="keep the checks/mutants an exact name, a glob or substring of the name, "
                         "or an invariant selects")
    group.addoption("--verikv-cpu-budget", type=float, default=CPU_BUDGET, metavar="SECONDS",
                    help=f"CPU seconds per check process before it counts as a timeout (default {CPU_BUDGET:g})")


class CheckFailed(Exception):
    """A check that did not end ok (or a mutant that survived); carries its verdict. Its
    message is the report: ``<name>: <status>`` and the detail."""

    def __init__(self, name: str, verdict: Verdict) -> None:
        outcome = verdict.outcome
        super().__init__(f"{name}: {outcome.status}\n{outcome.detail or '(no detail)'}")
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
            raise CheckFailed(self.name, verdict)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CheckFailed):  # the report alone, not the plugin's traceback
            return super().repr_failure(excinfo, style="value")
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return Path(registry.__file__), None, f"{'mutant' if self.mutant else 'check'} {self.name}"


def _entry_items(session: pytest.Session, mutant: bool, patterns: list[str]) -> list[EntryItem]:
    """The selected entries as items, reported to pytest as collected (so the counts include them)."""
    group = "verikv-mutants" if mutant else "verikv-proofs"
    parent = EntryCollector.from_parent(session, name=group, nodeid=group)
    entries = list(isolation.catalogue(mutant).values())
    items = [EntryItem.from_parent(parent, name=e.name, nodeid=f"{group}::{e.name}", mutant=mutant)
             for e in selection.select(entries, patterns)]
    collected: list[pytest.Item | pytest.Collector] = [*items]
    session.ihook.pytest_collectreport(report=pytest.CollectReport(group, "passed", None, collected))
    return items


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "verikv_proof: a verikv registry check (added by --verikv-proofs)")
    config.addinivalue_line("markers", "verikv_mutant: a verikv mutant detector (added by --verikv-mutants)")
    if config.getoption("verikv_proofs") or config.getoption("verikv_mutants"):
        missing = missing_extra(CHECK_MODULES)
        if missing is not None:
            raise pytest.UsageError(f"--verikv-proofs and --verikv-mutants need the proofs extra "
                                    f"({missing} is missing): {INSTALL_HINT}")
    _set_live_writer(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    from verikv.testing import live

    live.set_writer(None)


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselect, so they apply to these items too
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = [mutant for mutant, asked in ((False, config.getoption("verikv_proofs")),
                                           (True, config.getoption("verikv_mutants"))) if asked]
    if not wanted:
        return
    patterns = selection.current_patterns(
        config.option.verikv_only, lambda notice: warnings.warn(notice, DeprecationWarning, stacklevel=2))
    for mutant in wanted:
        items.extend(_entry_items(session, mutant, patterns))


def _one_report(error: BaseException) -> bool:
    """Whether ``error``'s message is a whole report (a failed check, a conformance failure)."""
    conformance = sys.modules.get("verikv.testing.conformance")
    return isinstance(error, CheckFailed) or (conformance is not None
                                              and isinstance(error, conformance.ConformanceError))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """The short summary of a report-carrying failure is the report's first line: pytest prints
    the whole message there on CI, which would show every report twice."""
    report = yield
    crash = getattr(report.longrepr, "reprcrash", None)
    if call.excinfo is not None and crash is not None and _one_report(call.excinfo.value):
        crash.message = str(call.excinfo.value).splitlines()[0]
    return report


def _set_live_writer(config: pytest.Config) -> None:
    """Route the conformance harness' live reports to the terminal, past output capture. Where
    pytest has no terminal (an xdist worker, ``-p no:terminal``) they are dropped: the failure's
    own report still follows."""
    from verikv.testing import live

    if hasattr(config, "workerinput"):  # an xdist worker: its output reaches no terminal
        live.set_writer(lambda text: None)
        return

    def write(text: str) -> None:
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        capture = config.pluginmanager.get_plugin("capturemanager")
        if terminal is None or capture is None:
            return
        with capture.global_and_fixture_disabled():
            terminal.write_line("")
            for line in text.splitlines():
                terminal.write_line(line)

    live.set_writer(write)
