"""Run one check (or one mutant's detector) in a clean child process under a CPU-time budget.

Why a child process: Z3's search depends on every term its context has ever created, so a
theorem that proves in a fresh process can exhaust its resource limit in a process that built
other terms first (observed inside a pytest worker: sizing.gpu-mamba-hybrid/SIZE-FITS).
Registry entries therefore run in children of a fork server whose only state is the imported
registry (`verikv.proofs.runner._preload`): every check starts from the same Z3 state, whatever
ran before in the parent.

Why CPU time: the budget is ``RLIMIT_CPU`` on the child, and every process it starts (e.g.
CrossHair) inherits the same limit for itself. CPU seconds do not grow when other processes
load the machine, wall seconds do. A wall-clock backstop of ``WALL_FACTOR`` times the budget
(at least ``MIN_BACKSTOP`` seconds) still ends a check that hangs without using CPU. Both
count as "timeout", a failure.
"""

from __future__ import annotations

import multiprocessing
import resource
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from multiprocessing.connection import Connection
from multiprocessing.context import ForkContext, ForkServerContext
from typing import Literal

from verikv.proofs.runner.registry import Check, Mutant, Outcome, discover_checks, discover_mutants

CPU_BUDGET = 300.0   # default CPU seconds per check process (slowest measured alone: 15 s)
WALL_FACTOR = 10.0   # the wall backstop, as a multiple of the CPU budget ...
MIN_BACKSTOP = 600.0  # ... and at least this many wall seconds (a loaded machine gives a process little CPU)
_KILL_GRACE = 5      # CPU seconds between SIGXCPU (soft limit) and SIGKILL (hard limit)

Work = Callable[[], tuple[Outcome, tuple[str, ...]]]
StartMethod = Literal["forkserver", "fork"]


@dataclass(frozen=True)
class Verdict:
    """What running one entry concluded: its outcome, the checks that caught a mutant, its times."""

    outcome: Outcome
    caught_by: tuple[str, ...] = ()
    seconds: float = 0.0
    cpu_seconds: float = 0.0


@cache
def catalogue(mutants: bool) -> dict[str, Check | Mutant]:
    """The discovered mutants (or checks) by name, built once per process."""
    entries: list[Check] | list[Mutant] = discover_mutants() if mutants else discover_checks()
    return {entry.name: entry for entry in entries}


def evaluate(entry: Check | Mutant) -> tuple[Outcome, tuple[str, ...]]:
    """Run one entry in this process: a mutant passes when caught, a Z3 proof needs its vacuity check."""
    if isinstance(entry, Mutant):
        caught = tuple(entry.detect())
        return (Outcome("passed") if caught else Outcome("failed", "mutant survived every check")), caught
    outcome = entry.run()
    if outcome.ok and entry.kind.startswith("z3") and not outcome.vacuity_checked:
        return Outcome("error", "the theorem reported success without a vacuity check"), ()
    return outcome, ()


@dataclass(frozen=True)
class RegistryEntry:
    """A picklable reference to a registry entry, evaluated in the child (fork-server children get names)."""

    name: str
    mutant: bool

    def __call__(self) -> tuple[Outcome, tuple[str, ...]]:
        return evaluate(catalogue(self.mutant)[self.name])


def _cpu_seconds() -> float:
    """CPU time of this process and of every child it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _child(work: Work, cpu_budget: float, conn: Connection) -> None:
    """In the child: cap CPU time, run the work, send back (outcome, caught_by, cpu seconds)."""
    soft = max(1, int(cpu_budget + 0.5))
    resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + _KILL_GRACE))
    try:
        outcome, caught = work()
    except BaseException:
        outcome, caught = Outcome("error", traceback.format_exc()), ()
    conn.send((outcome, caught, _cpu_seconds()))
    conn.close()


def _context(method: StartMethod) -> ForkServerContext | ForkContext:
    if method == "forkserver":
        multiprocessing.set_forkserver_preload(["verikv.proofs.runner._preload"])
        return multiprocessing.get_context("forkserver")
    return multiprocessing.get_context("fork")


def run_isolated(work: Work, *, cpu_budget: float = CPU_BUDGET, method: StartMethod = "forkserver") -> Verdict:
    """Run ``work`` in a child process with ``cpu_budget`` CPU seconds; the child never outlives the call.

    ``method="forkserver"`` gives a clean child (``work`` must be picklable, e.g. a
    `RegistryEntry`); ``"fork"`` copies this process (used for checks defined on the fly).
    """
    ctx = _context(method)
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(work, cpu_budget, sender), daemon=True)
    backstop = max(cpu_budget * WALL_FACTOR, MIN_BACKSTOP)
    started = time.perf_counter()
    child.start()
    sender.close()
    try:
        if not receiver.poll(backstop):
            return Verdict(Outcome("timeout", f"no result after {backstop:g} wall seconds without using up "
                                              f"its {cpu_budget:g} CPU seconds: it hangs"),
                           (), time.perf_counter() - started)
        try:
            outcome, caught, cpu = receiver.recv()
            return Verdict(outcome, caught, time.perf_counter() - started, cpu)
        except EOFError:  # the child died before sending its result
            child.join()
        elapsed = time.perf_counter() - started
        if child.exitcode == -signal.SIGXCPU:
            return Verdict(Outcome("timeout", f"exceeded {cpu_budget:g} CPU seconds"), (), elapsed)
        if child.exitcode == -signal.SIGKILL:
            return Verdict(Outcome("timeout", f"killed: past the {cpu_budget:g} CPU-second limit, or by the system"),
                           (), elapsed)
        return Verdict(Outcome("error", f"the check's process exited with code {child.exitcode}"), (), elapsed)
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        receiver.close()
