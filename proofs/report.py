"""What `verikv prove` shows and writes: progress, the results table, failure details, JSON.

Results come from the pytest reports of the `verikv.proofs.pytest_plugin` items (their
``user_properties``); `Collector` is the pytest plugin object that gathers them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

import pytest
from rich.console import Console
from rich.table import Table

from verikv.proofs.pytest_plugin import PROPERTY_PREFIX
from verikv.proofs.registry import SUCCESS, Check, Mutant

_STYLE = {"proved": "green", "passed": "green", "caught": "green"}


@dataclass(frozen=True)
class Result:
    """One finished check or mutant detector, as its pytest report tells it."""

    name: str
    status: str
    detail: str
    seconds: float
    cpu_seconds: float = 0.0
    vacuity_checked: bool = False
    caught_by: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status in SUCCESS


def result_from_report(report: pytest.TestReport) -> Result:
    """A report's result: the item's recorded verdict, or "error" when the item never recorded one
    (it crashed, or pytest-timeout stopped it)."""
    props = {key[len(PROPERTY_PREFIX):]: value for key, value in report.user_properties
             if key.startswith(PROPERTY_PREFIX)}
    name = report.nodeid.split("::", 1)[-1]
    if "status" not in props:
        return Result(name, "error", report.longreprtext or f"no result ({report.when} {report.outcome})",
                      report.duration)
    return Result(name, str(props["status"]), str(props["detail"]), report.duration,
                  float(props["cpu_seconds"]), bool(props["vacuity_checked"]), tuple(props["caught_by"]))


class Collector:
    """pytest plugin object: keeps one `Result` per item and calls ``on_result`` as each arrives."""

    def __init__(self, on_result: Callable[[Result], None]) -> None:
        self.results: dict[str, Result] = {}
        self._on_result = on_result

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        final = report.when == "call" or (report.failed and report.when != "teardown")
        if not final or report.nodeid.split("::", 1)[-1] in self.results:
            return
        result = result_from_report(report)
        self.results[result.name] = result
        self._on_result(result)


def progress_line(done: int, total: int, result: Result) -> str:
    """One plain line per finished check, for logs: ``[ 3/41] proved      0.84s  name``."""
    width = len(str(total))
    return f"[{done:>{width}}/{total}] {result.status:<8} {result.seconds:7.2f}s  {result.name}"


def _status_text(status: str) -> str:
    return f"[{_STYLE.get(status, 'bold red')}]{status}[/]"


def _table(title: str, columns: Sequence[str], name_width: int) -> Table:
    """A table whose first column always shows whole names (they are pasted into --only); others wrap."""
    table = Table(title=title)
    table.add_column(columns[0], no_wrap=True, min_width=name_width)
    for column in columns[1:]:
        table.add_column(column, justify="right" if column == "seconds" else "left",
                         no_wrap=column in {"result", "seconds"}, overflow="fold")
    return table


def checks_table(checks: dict[str, Check], results: Sequence[Result]) -> Table:
    table = _table("verikv prove", ("name", "invariant", "transition", "bound", "result", "vacuity", "seconds"),
                   max((len(r.name) for r in results), default=4))
    for r in results:
        c = checks[r.name]
        table.add_row(c.name, c.invariant, c.transition, c.bound, _status_text(r.status),
                      "checked" if r.vacuity_checked else "-", f"{r.seconds:.2f}")
    return table


def mutants_table(mutants: dict[str, Mutant], results: Sequence[Result]) -> Table:
    table = _table("verikv prove --mutants", ("mutant", "kind", "invariant", "result", "caught by", "seconds"),
                   max((len(r.name) for r in results), default=6))
    for r in results:
        m = mutants[r.name]
        more = f" (+{len(r.caught_by) - 3})" if len(r.caught_by) > 3 else ""
        status = "caught" if r.ok else ("survived" if r.status == "failed" else r.status)
        table.add_row(m.name, m.kind, m.invariant, _status_text(status),
                      ", ".join(r.caught_by[:3]) + more or r.detail[:60], f"{r.seconds:.2f}")
    return table


def print_failures(console: Console, results: Sequence[Result]) -> None:
    """The full detail of every result that is not proved/passed (counterexample or traceback)."""
    for r in results:
        if not r.ok:
            console.print(f"\n--- {r.name}: {r.status}", markup=False, highlight=False)
            console.print(r.detail or "(no detail)", markup=False, highlight=False, soft_wrap=True)


def write_json(out: IO[str], entries: dict[str, Any], results: Sequence[Result], total: float) -> None:
    """The results as JSON: a summary and one record per check (or mutant)."""
    records = []
    for r in results:
        entry = entries[r.name]
        record: dict[str, Any] = {"name": r.name, "kind": entry.kind, "invariant": entry.invariant,
                                  "status": r.status, "ok": r.ok, "seconds": round(r.seconds, 4),
                                  "cpu_seconds": round(r.cpu_seconds, 4), "detail": r.detail}
        if isinstance(entry, Check):
            record.update(transition=entry.transition, bound=entry.bound, vacuity_checked=r.vacuity_checked)
        else:
            record.update(description=entry.description, caught_by=list(r.caught_by))
        records.append(record)
    summary = {"total": len(results), "ok": sum(r.ok for r in results),
               "failed": sum(not r.ok for r in results), "seconds": round(total, 3)}
    out.write(json.dumps({"summary": summary, "results": records}, indent=2) + "\n")
