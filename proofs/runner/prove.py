"""`verikv prove`: run the registry's checks (or mutant detectors) through pytest and report them.

The work is pytest's: the items of `verikv.proofs.pytest_plugin` run each check in a clean
child process under a CPU-time budget (`verikv.proofs.runner.isolation`), pytest-xdist runs them in
parallel (``--jobs``) and pytest writes the JUnit XML (``--junit``). This module turns the
options into one pytest run, isolated from the caller's pytest configuration (an empty
temporary root, no conftest files, no terminal output), and the results into progress, a
table, JSON and an exit status: 0 only if every selected check ends with a success status
(`verikv.proofs.runner.registry.SUCCESS`; with ``--mutants``: every mutant caught), 1 otherwise, 2 for
bad options, nothing selected or a missing ``proofs`` extra.

Only the standard library is imported at module level, so ``verikv --help`` works without the
``proofs`` extra; `run` checks for it first.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import IO, Any

from verikv.proofs.runner.isolation import CPU_BUDGET

EXTRA_MODULES = ("z3", "crosshair", "rich", "pytest", "xdist")
INSTALL_HINT = "pip install 'verikv[proofs]'"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """The options of ``verikv prove`` (also used by ``python -m verikv.proofs``)."""
    parser.add_argument("--list", action="store_true", help="list the selected checks and exit")
    parser.add_argument("--only", action="append", default=[], metavar="PATTERN",
                        help="select by exact name, by glob on the name or invariant ('pool.free/*', "
                             "'INV-HIT-*'), by substring of the name, or by invariant name (INV-ATOMIC); "
                             "repeatable")
    parser.add_argument("--mutants", action="store_true",
                        help="run every mutant's detector instead; fail if any mutant survives")
    parser.add_argument("--json", metavar="PATH", help="write results as JSON ('-' for stdout)")
    parser.add_argument("--junit", metavar="PATH", help="write results as JUnit XML")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel workers (default: CPUs)")
    parser.add_argument("--timeout", type=float, default=CPU_BUDGET, metavar="CPU_SECONDS",
                        help=f"CPU seconds per check process before it counts as a timeout (default {CPU_BUDGET:g}); "
                             "CPU time does not grow when the machine is loaded")


def missing_extra(modules: Sequence[str] = EXTRA_MODULES) -> str | None:
    """The first of ``modules`` (by default the ``proofs`` extra) that cannot be imported, or None."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            return name
    return None


def _pytest_args(args: argparse.Namespace, root: str) -> list[str]:
    """One pytest run of the selected items, blind to the caller's pytest configuration."""
    argv = ["-p", "verikv", "-p", "no:terminal", "-p", "no:cacheprovider", "--noconftest",
            "--rootdir", root, "--verikv-mutants" if args.mutants else "--verikv-proofs",
            f"--verikv-cpu-budget={args.timeout:g}", *(f"--verikv-only={p}" for p in args.only)]
    if args.jobs > 1:
        argv += ["-n", str(args.jobs)]
    if args.junit:
        argv += ["--junitxml", args.junit, "-o", "junit_suite_name=verikv-prove"]
    return [*argv, root]


def run(args: argparse.Namespace) -> int:
    """Run ``verikv prove`` with parsed options; returns the exit status."""
    if args.jobs < 1 or args.timeout <= 0:
        print("verikv prove: --jobs and --timeout must be positive", file=sys.stderr)
        return 2
    missing = missing_extra()
    if missing is not None:
        print(f"verikv prove needs the proofs extra ({missing} is missing): {INSTALL_HINT}", file=sys.stderr)
        return 2
    from verikv.proofs.runner import isolation, selection

    args.only = selection.current_patterns(
        args.only, lambda notice: print(f"verikv prove: deprecated: {notice}", file=sys.stderr))
    entries = isolation.catalogue(args.mutants)
    selected = selection.select(list(entries.values()), args.only)
    human: IO[str] = sys.stderr if args.json == "-" else sys.stdout
    if not selected:
        print(f"verikv prove: nothing selected (patterns: {', '.join(args.only) or 'none'})", file=sys.stderr)
        return 2
    if args.list:
        _print_list(selected, human, args.mutants)
        return 0
    return _prove(args, entries, [e.name for e in selected], human)


def _print_list(selected: Sequence[Any], out: IO[str], mutants: bool) -> None:
    from verikv.proofs.runner.registry import Check

    for e in selected:
        where = f"{e.transition}  {e.bound}" if isinstance(e, Check) else e.description
        print(f"{e.name}  [{e.kind}] {e.invariant}  {where}", file=out)
    print(f"{len(selected)} {'mutants' if mutants else 'checks'}", file=out)


def _console(out: IO[str]) -> tuple[Any, bool]:
    """A rich console on ``out``; on a terminal (and not in CI) it is live, else plain and unwrapped."""
    from verikv.proofs.runner.report import Console

    live = out.isatty() and os.environ.get("CI", "").lower() not in {"1", "true", "yes"}
    if live:
        return Console(file=out, highlight=False), True
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() else 10_000  # piped: as wide as the content
    return Console(file=out, highlight=False, width=width, no_color=True), False


def _prove(args: argparse.Namespace, entries: dict[str, Any], names: list[str], out: IO[str]) -> int:
    import pytest
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from verikv.proofs.runner import report

    console, live = _console(out)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="verikv-prove-") as root:
        if live:
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=console, transient=True) as progress:
                task = progress.add_task("mutants" if args.mutants else "proving", total=len(names))
                collector = report.Collector(lambda r: progress.advance(task))
                code = pytest.main(_pytest_args(args, root), plugins=[collector])
        else:
            pipe_closed = False

            def log_line(result: report.Result) -> None:
                nonlocal pipe_closed
                if not pipe_closed:
                    try:
                        print(report.progress_line(len(collector.results), len(names), result), file=out, flush=True)
                    except BrokenPipeError:  # the checks still finish; the command then ends quietly
                        pipe_closed = True

            collector = report.Collector(log_line)
            code = pytest.main(_pytest_args(args, root), plugins=[collector])
            if pipe_closed:
                raise BrokenPipeError
    total = time.perf_counter() - started
    results = [collector.results[n] for n in names if n in collector.results]
    if len(results) < len(names) or code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        print(f"verikv prove: pytest stopped with {code!r} after {len(results)}/{len(names)} checks",
              file=sys.stderr)
        return 2
    table = report.mutants_table if args.mutants else report.checks_table
    console.print(table(entries, results, console.width))
    report.print_failures(console, results)
    if args.json == "-":
        report.write_json(sys.stdout, entries, results, total)
    elif args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            report.write_json(handle, entries, results, total)
    bad = sum(not r.ok for r in results)
    noun = "mutants caught" if args.mutants else "checks ok"
    console.print(f"{len(results) - bad}/{len(results)} {noun} in {total:.1f} s ({args.jobs} workers)"
                  + (f"; FAILED: {bad}" if bad else ""), markup=False)
    return 1 if bad else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m verikv.proofs`` / the old entry point: ``verikv prove`` with ``argv``."""
    parser = argparse.ArgumentParser(prog="verikv prove",
                                     description="Run verikv's Z3 theorems and verification checks.")
    configure_parser(parser)
    return run(parser.parse_args(list(sys.argv[1:] if argv is None else argv)))
