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
from rich import console as rich_console
from rich.table import Table
from rich.text import Text

from verikv.proofs.pytest_plugin import PROPERTY_PREFIX
from verikv.proofs.runner.registry import SUCCESS, Check, Mutant

_STYLE = {**dict.fromkeys(SUCCESS, "green"), "caught": "green"}  # every success status, and a caught mutant


class Console(rich_console.Console):
    """rich's console, except that a closed pipe raises BrokenPipeError (the ``verikv`` command then
    ends quietly with status 141) instead of rich's SystemExit(1), which would read as failed checks."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


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
    props: dict[str, Any] = {key[len(PROPERTY_PREFIX):]: value for key, value in report.user_properties
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


def _status_text(status: str) -> Text:
    return Text(status, style=_STYLE.get(status, "bold red"))


_ABOUT_WIDTH = 60  # room the other columns need beside the names before "about" gets its own column


def _table(title: str, headers: Sequence[str], rows: Sequence[tuple[str, str, Text, str, str]], width: int) -> Table:
    """Rows of (name, about, result, extra, seconds); headers name the same five columns.

    Whole names always (they are pasted into --only). On a wide console every field has its
    column; on a narrow one "about" and "extra" go under the name, wrapped, and never cut it.
    Every cell is plain `Text`, so brackets in names and details are shown, never read as markup.
    """
    name_width = max([len(row[0]) for row in rows] + [len(headers[0])])
    stacked = width < name_width + _ABOUT_WIDTH
    table = Table(title=title)
    table.add_column(headers[0], min_width=name_width, overflow="fold")
    if not stacked:
        table.add_column(headers[1], overflow="fold")
    table.add_column(headers[2], no_wrap=True)
    if not stacked:
        table.add_column(headers[3], overflow="fold")
    table.add_column(headers[4], justify="right", no_wrap=True)
    for name, about, result, extra, seconds in rows:
        if stacked:
            table.add_row(Text.assemble(name, "\n", (f"  {about} · {headers[3]}: {extra}", "dim")), result,
                          Text(seconds))
        else:
            table.add_row(Text(name), Text(about), result, Text(extra), Text(seconds))
    return table


def checks_table(checks: dict[str, Check], results: Sequence[Result], width: int) -> Table:
    """name, what it proves (invariant, transition, bound), result, vacuity, seconds."""
    rows = []
    for r in results:
        c = checks[r.name]
        about = " · ".join(part for part in (c.invariant, c.transition, c.bound) if part and part != "-")
        rows.append((c.name, about, _status_text(r.status), "checked" if r.vacuity_checked else "-",
                     f"{r.seconds:.2f}"))
    return _table("verikv prove", ("name", "proves", "result", "vacuity", "seconds"), rows, width)


def mutants_table(mutants: dict[str, Mutant], results: Sequence[Result], width: int) -> Table:
    """mutant, what it breaks (kind, invariant), result, the checks that caught it, seconds."""
    rows = []
    for r in results:
        m = mutants[r.name]
        more = f" (+{len(r.caught_by) - 3})" if len(r.caught_by) > 3 else ""
        status = "caught" if r.ok else ("survived" if r.status == "failed" else r.status)
        rows.append((m.name, f"{m.kind} · {m.invariant}", _status_text(status),
                     ", ".join(r.caught_by[:3]) + more or r.detail[:60], f"{r.seconds:.2f}"))
    return _table("verikv prove --mutants", ("mutant", "breaks", "result", "caught by", "seconds"), rows, width)


def print_failures(console: Console, results: Sequence[Result]) -> None:
    """The full detail of every result that is not ok (counterexample or traceback)."""
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
