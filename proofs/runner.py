"""`verikv prove`: run every discovered check (or mutant detector) in parallel and report.

Each check runs in its own child process (forked where the platform allows, so the parent's
loaded solver library is shared), at most ``--jobs`` at a time, and is killed when it exceeds
``--timeout``: a killed check is reported as "timeout", which is a failure like "unknown",
"vacuous" and "error". Progress is a live bar on a terminal and one plain line per finished
check otherwise (CI logs). The exit status is 0 only if every selected check is proved/passed
(with ``--mutants``: only if every mutant is caught by at least one check).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import multiprocessing
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from verikv.proofs.registry import Check, Mutant, Outcome, discover_checks, discover_mutants

DEFAULT_TIMEOUT = 90.0
_STYLE = {"proved": "green", "passed": "green", "caught": "green"}


@dataclass(frozen=True)
class Result:
    """One finished job: the check's (or mutant's) name, its outcome and its wall time."""

    name: str
    outcome: Outcome
    seconds: float
    caught_by: tuple[str, ...] = ()


# --- child side -------------------------------------------------------------------------

_CATALOGUE: dict[bool, dict[str, Any]] = {}


def _catalogue(mutants: bool) -> dict[str, Any]:
    """The discovered mutants (or checks) by name; built once per process, inherited by forks."""
    if mutants not in _CATALOGUE:
        items: list[Check] | list[Mutant] = discover_mutants() if mutants else discover_checks()
        _CATALOGUE[mutants] = {item.name: item for item in items}
    return _CATALOGUE[mutants]


def _child(name: str, mutants: bool, conn: Connection) -> None:
    """Run one check (or one mutant's detector) and send back (status, detail, vacuity, caught)."""
    try:
        item = _catalogue(mutants)[name]
        if isinstance(item, Mutant):
            caught = tuple(item.detect())
            conn.send(("passed" if caught else "failed", "" if caught else "mutant survived every check",
                       False, caught))
        else:
            outcome = item.run()
            conn.send((outcome.status, outcome.detail, outcome.vacuity_checked, ()))
    except BaseException:  # noqa: BLE001 - a crashing check is reported, never lost
        conn.send(("error", traceback.format_exc(), False, ()))
    finally:
        conn.close()


# --- parent side ------------------------------------------------------------------------

def _context() -> multiprocessing.context.BaseContext:
    """Fork on Linux (cheap, shares loaded libraries); spawn elsewhere."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if sys.platform.startswith("linux") and "fork" in methods
                                       else "spawn")


def run_parallel(names: Sequence[str], *, mutants: bool, jobs: int, timeout: float,
                 on_done: Callable[[Result], None]) -> list[Result]:
    """Run the named checks (or mutants) in child processes, ``jobs`` at a time, each with ``timeout``.

    Results come back in ``names`` order; ``on_done`` is called as each one finishes.
    """
    ctx = _context()
    pending = list(names)
    running: dict[str, tuple[Any, Connection, float]] = {}
    done: dict[str, Result] = {}
    while pending or running:
        while pending and len(running) < jobs:
            name = pending.pop(0)
            parent_end, child_end = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(name, mutants, child_end), daemon=True)
            proc.start()
            child_end.close()
            running[name] = (proc, parent_end, time.perf_counter())
        ready = wait([conn for _, conn, _ in running.values()], timeout=0.05)
        now = time.perf_counter()
        for name, (proc, conn, started) in list(running.items()):
            result = None
            if conn in ready:
                try:
                    status, detail, vacuity, caught = conn.recv()
                    result = Result(name, Outcome(status, detail, vacuity), now - started, caught)
                except EOFError:
                    result = Result(name, Outcome("error", f"worker exited with code {proc.exitcode}"),
                                    now - started)
            elif now - started > timeout:
                proc.kill()
                result = Result(name, Outcome("timeout", f"killed after {timeout:g} s"), now - started)
            if result is not None:
                proc.join()
                conn.close()
                del running[name]
                done[name] = result
                on_done(result)
    return [done[name] for name in names]


def select(names: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """Names matching any pattern: a glob if it has wildcard characters, else a substring."""
    if not patterns:
        return list(names)

    def matches(name: str, pattern: str) -> bool:
        if any(ch in pattern for ch in "*?["):
            return fnmatch.fnmatchcase(name, pattern)
        return pattern in name

    return [n for n in names if any(matches(n, p) for p in patterns)]


def _status_text(status: str) -> str:
    return f"[{_STYLE.get(status, 'bold red')}]{status}[/]"


def _checks_table(checks: dict[str, Check], results: Sequence[Result]) -> Table:
    table = Table(title="verikv prove")
    for column in ("name", "invariant", "transition", "bound", "result", "vacuity", "seconds"):
        table.add_column(column, justify="right" if column == "seconds" else "left")
    for r in results:
        c = checks[r.name]
        table.add_row(c.name, c.invariant, c.transition, c.bound, _status_text(r.outcome.status),
                      "checked" if r.outcome.vacuity_checked else "-", f"{r.seconds:.2f}")
    return table


def _mutants_table(mutants: dict[str, Mutant], results: Sequence[Result]) -> Table:
    table = Table(title="verikv prove --mutants")
    for column in ("mutant", "kind", "invariant", "result", "caught by", "seconds"):
        table.add_column(column, justify="right" if column == "seconds" else "left")
    for r in results:
        m = mutants[r.name]
        caught = ", ".join(r.caught_by[:3]) + (f" (+{len(r.caught_by) - 3})" if len(r.caught_by) > 3 else "")
        status = "caught" if r.outcome.ok else ("survived" if r.outcome.status == "failed" else r.outcome.status)
        table.add_row(m.name, m.kind, m.invariant, _status_text(status), caught or r.outcome.detail[:60],
                      f"{r.seconds:.2f}")
    return table


def write_json(path: str, items: dict[str, Any], results: Sequence[Result], total: float) -> None:
    """The results as JSON: a summary and one record per check (or mutant)."""
    records = []
    for r in results:
        item = items[r.name]
        record = {"name": r.name, "kind": item.kind, "invariant": item.invariant,
                  "status": r.outcome.status, "ok": r.outcome.ok, "seconds": round(r.seconds, 4),
                  "detail": r.outcome.detail}
        if isinstance(item, Check):
            record.update(transition=item.transition, bound=item.bound,
                          vacuity_checked=r.outcome.vacuity_checked)
        else:
            record.update(description=item.description, caught_by=list(r.caught_by))
        records.append(record)
    summary = {"total": len(results), "ok": sum(r.outcome.ok for r in results),
               "failed": sum(not r.outcome.ok for r in results), "seconds": round(total, 3)}
    Path(path).write_text(json.dumps({"summary": summary, "results": records}, indent=2) + "\n")


def write_junit(path: str, items: dict[str, Any], results: Sequence[Result], total: float) -> None:
    """The results as JUnit XML, one testcase per check (or mutant), for CI dashboards."""
    suite = ElementTree.Element("testsuite", name="verikv-prove", tests=str(len(results)),
                                failures=str(sum(not r.outcome.ok for r in results)), time=f"{total:.3f}")
    for r in results:
        case = ElementTree.SubElement(suite, "testcase", classname=f"verikv.{items[r.name].kind}",
                                      name=r.name, time=f"{r.seconds:.3f}")
        if not r.outcome.ok:
            failure = ElementTree.SubElement(case, "failure", message=r.outcome.status)
            failure.text = r.outcome.detail
    ElementTree.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="verikv prove",
                                     description="Run verikv's Z3 theorems and verification checks.")
    parser.add_argument("--list", action="store_true", help="list the selected checks and exit")
    parser.add_argument("--only", action="append", default=[], metavar="PATTERN",
                        help="select names by glob or substring (repeatable)")
    parser.add_argument("--mutants", action="store_true",
                        help="run every mutant's detector instead; fail if any mutant survives")
    parser.add_argument("--json", metavar="PATH", help="write results as JSON")
    parser.add_argument("--junit", metavar="PATH", help="write results as JUnit XML")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel workers")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds per check before it counts as a timeout (default {DEFAULT_TIMEOUT:g})")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``verikv prove``; returns the process exit status (0 = everything ok)."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.jobs < 1 or args.timeout <= 0:
        print("verikv prove: --jobs and --timeout must be positive", file=sys.stderr)
        return 2
    terminal = sys.stdout.isatty() and os.environ.get("CI", "").lower() not in {"1", "true", "yes"}
    console = Console(highlight=False, width=None if terminal else 200)
    items = _catalogue(args.mutants)
    names = select(list(items), args.only)
    if not names:
        console.print(f"verikv prove: nothing selected (patterns: {args.only or 'none'})")
        return 2
    if args.list:
        for name in names:
            item = items[name]
            where = f"{item.transition}  {item.bound}" if isinstance(item, Check) else item.description
            console.print(f"{name}  [{item.kind}] {item.invariant}  {where}", markup=False)
        console.print(f"{len(names)} {'mutants' if args.mutants else 'checks'}")
        return 0
    _warm_up()
    started = time.perf_counter()
    width = len(str(len(names)))
    finished = 0

    def log_line(result: Result) -> None:
        nonlocal finished
        finished += 1
        console.print(f"[{finished:>{width}}/{len(names)}] {result.outcome.status:<8} "
                      f"{result.seconds:7.2f}s  {result.name}", markup=False)

    def run(on_done: Callable[[Result], None]) -> list[Result]:
        return run_parallel(names, mutants=args.mutants, jobs=args.jobs, timeout=args.timeout,
                            on_done=on_done)

    if terminal:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=True) as progress:
            task = progress.add_task("proving" if not args.mutants else "mutants", total=len(names))
            results = run(lambda r: progress.advance(task))
    else:
        results = run(log_line)
    total = time.perf_counter() - started
    console.print(_mutants_table(items, results) if args.mutants else _checks_table(items, results))
    for r in results:
        if not r.outcome.ok:
            console.rule(f"{r.name}: {r.outcome.status}")
            console.print(r.outcome.detail or "(no detail)", markup=False)
    if args.json:
        write_json(args.json, items, results, total)
    if args.junit:
        write_junit(args.junit, items, results, total)
    bad = [r for r in results if not r.outcome.ok]
    noun = "mutants caught" if args.mutants else "checks ok"
    console.print(f"{len(results) - len(bad)}/{len(results)} {noun} in {total:.1f} s "
                  f"({args.jobs} workers)" + (f"; FAILED: {len(bad)}" if bad else ""), markup=False)
    return 1 if bad else 0


def _warm_up() -> None:
    """Load the solver library once in the parent so forked workers share it instead of re-importing."""
    import z3  # noqa: F401  (imported for its side effect)
