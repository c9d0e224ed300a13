"""Shared CrossHair runner: invoke ``crosshair check``, parse its report, map it to an `Outcome`.

CrossHair runs in a child process on this interpreter (``sys.executable -m crosshair check``)
with an explicit `Budget` and ``--report_all``, so every condition gets a verdict line:

- "confirmed" only when every condition is "Confirmed over all paths" (never "proved": that is
  reserved for Z3 theorems) and the target reasons symbolically about the code it checks;
- "passed" instead for a target that enumerates a finite domain (``enumerated``): it realises its
  inputs by branching, then runs the code under test concretely (`untraced`), so "every path"
  means every input of that domain, run one by one: bounded-exhaustive testing, stated as such
  with the domain in the detail;
- "no-counterexample" when nothing was refuted but some condition ran out of budget ("Not
  confirmed": bounded; the detail states the `Budget`, the bound column the input domain of the
  target), or "unknown" (a failure) instead when the caller requires confirmation;
- "failed" with CrossHair's counterexample lines when a condition is refuted or raises;
- "vacuous" when CrossHair cannot meet a precondition;
- "error" when it prints fewer verdicts than the targets declare conditions (something was
  silently skipped, e.g. an unsupported parameter type), when a target declares none, or when
  CrossHair cannot run; "timeout" past ``timeout`` seconds (the child is killed).

Exit code 0 alone is never taken as a result. With ``plugin=True`` the child also execs
``_plugin.py`` (`verikv.proofs.crosshair._plugin`) (``--extra_plugin``), which installs the state factories of
`verikv.proofs.crosshair.targets` (and a mutant named by ``env``).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import inspect
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verikv.proofs.runner.registry import Outcome

PLUGIN = Path(__file__).with_name("_plugin.py")

_VERDICT = re.compile(r"^(?P<file>.+?):(?P<line>\d+): (?P<level>info|error): (?P<text>.*)$")
_SECTION = re.compile(r"^\s*(pre|post|inv)(\[[^\]]*\])?:(.*)$")


@dataclass(frozen=True)
class Budget:
    """CrossHair's search budget for one run (explicit: the default is too weak).

    ``per_condition``: ``--per_condition_timeout``, CPU seconds per condition (always set: a
    cap); ``iterations``: ``--max_uninteresting_iterations`` (consecutive paths without new
    coverage before a condition is given up), None to search until exhaustion or the cap;
    ``per_path``: ``--per_path_timeout`` in CPU seconds, None for CrossHair's default
    (the square root of ``per_condition``).
    """

    per_condition: float
    iterations: int | None = None
    per_path: float | None = None

    def args(self) -> list[str]:
        out = [f"--per_condition_timeout={self.per_condition:g}"]
        if self.iterations is not None:
            out.append(f"--max_uninteresting_iterations={self.iterations}")
        if self.per_path is not None:
            out.append(f"--per_path_timeout={self.per_path:g}")
        return out

    def describe(self) -> str:
        search = "until exhausted" if self.iterations is None else f"{self.iterations} uninteresting iterations"
        return f"{search}, <= {self.per_condition:g} CPU s/condition"


@dataclass(frozen=True)
class Verdict:
    """One condition's line from ``crosshair check --report_all``."""

    file: str
    line: int
    level: str
    text: str

    @property
    def confirmed(self) -> bool:
        return self.level == "info" and self.text.startswith("Confirmed over all paths")

    @property
    def bounded(self) -> bool:
        return self.level == "info" and self.text.startswith("Not confirmed")

    @property
    def unsatisfiable(self) -> bool:
        return self.level == "info" and self.text.startswith("Unable to meet precondition")


def untraced() -> contextlib.AbstractContextManager[Any]:
    """Run the rest of a driver concretely, once its symbolic inputs are realised by branching:
    faster, and code CrossHair cannot trace (numpy-backed state) runs as it is (outside
    CrossHair: nothing to do)."""
    from crosshair import tracers

    return tracers.NoTracing() if tracers.is_tracing() else contextlib.nullcontext()


def _die_with_parent() -> None:
    """In the child: get SIGKILL when the parent dies (a killed check must not leave CrossHair running)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _run(args: Sequence[str], timeout: float | None,
         env: Mapping[str, str] | None) -> subprocess.CompletedProcess[str] | None:
    """``python -m crosshair ARGS`` on this interpreter; None when it exceeds ``timeout`` wall seconds.

    No wall limit by default: the `Budget` bounds CrossHair's CPU time, and ``verikv prove`` has its
    own per-check timeout (it kills the worker, and `_die_with_parent` takes CrossHair with it).
    """
    try:
        return subprocess.run([sys.executable, "-m", "crosshair", *args], capture_output=True, text=True,
                              timeout=timeout, preexec_fn=_die_with_parent, check=False,
                              env={**os.environ, **env} if env else None)
    except subprocess.TimeoutExpired:
        return None


def _resolve(target: str) -> Callable[..., object]:
    """The function or method a dotted ``module.[Class.]name`` target names."""
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj  # type: ignore[return-value]
    raise ValueError(f"cannot resolve CrossHair target {target!r}")


def _condition_lines(doc: str | None, sections: tuple[str, ...]) -> int:
    """How many conditions (one per line) the PEP 316 ``sections`` of ``doc`` hold."""
    count = 0
    block: int | None = None  # indent of a bare ``post:`` header whose conditions follow, indented
    for raw in (doc or "").splitlines():
        if not raw.strip():
            continue
        indent = len(raw) - len(raw.lstrip())
        if block is not None and indent > block:
            count += 1
            continue
        block = None
        match = _SECTION.match(raw)
        if match and match.group(1) in sections:
            if match.group(3).strip():
                count += 1
            else:
                block = indent
    return count


def declared_conditions(target: str) -> set[str]:
    """The conditions ``check --report_all`` must give a verdict for on ``target``: for a function or
    method, its ``post`` lines and its class's ``inv`` lines (CrossHair reports an invariant once,
    whichever methods it checked it on); for a module, its own functions' ``post`` lines."""
    def posts(name: str, fn: object) -> set[str]:
        return {f"{name}:post:{i}" for i in range(_condition_lines(inspect.getdoc(fn), ("post",)))}

    try:
        module = importlib.import_module(target)
    except ModuleNotFoundError:
        module = None
    if module is not None:
        return set().union(*(posts(f"{target}.{name}", fn)
                             for name, fn in inspect.getmembers(module, inspect.isfunction)
                             if fn.__module__ == target))
    found = posts(target, _resolve(target))
    try:
        owner = _resolve(target.rsplit(".", 1)[0])
    except (ValueError, AttributeError):
        return found
    if inspect.isclass(owner):
        for cls in owner.__mro__:
            count = _condition_lines(inspect.cleandoc(cls.__dict__.get("__doc__") or ""), ("inv",))
            found |= {f"{cls.__module__}.{cls.__qualname__}:inv:{i}" for i in range(count)}
    return found


def parse_check(stdout: str) -> list[Verdict]:
    """The verdict lines of ``crosshair check --report_all`` output."""
    verdicts = []
    for line in stdout.splitlines():
        match = _VERDICT.match(line)
        if match:
            verdicts.append(Verdict(match["file"], int(match["line"]), match["level"], match["text"]))
    return verdicts


def check_outcome(verdicts: Sequence[Verdict], expected: int, returncode: int, stderr: str,
                  require_confirmed: bool = False, budget: Budget | None = None) -> Outcome:
    """Map parsed verdicts (the exit code only as a cross-check) to an `Outcome` (module docstring)."""
    failures = [v for v in verdicts if v.level == "error"]
    if failures:
        return Outcome("failed", "\n".join(f"{Path(v.file).name}:{v.line}: {v.text}" for v in failures))
    if returncode != 0:
        return Outcome("error", f"crosshair exited {returncode} without a counterexample:\n{stderr[-2000:]}")
    unsat = [v for v in verdicts if v.unsatisfiable]
    if unsat:
        return Outcome("vacuous", "\n".join(f"{Path(v.file).name}:{v.line}: {v.text}" for v in unsat))
    if expected == 0 or len(verdicts) < expected:
        return Outcome("error", f"crosshair reported {len(verdicts)} verdicts for {expected} declared conditions "
                                f"(nothing to check, or some were not analysed):\n{stderr[-2000:]}")
    bounded = [v for v in verdicts if not v.confirmed]
    if not bounded:
        return Outcome("confirmed", f"{len(verdicts)}/{len(verdicts)} conditions confirmed over all paths",
                       vacuity_checked=True)
    lines = ", ".join(str(v.line) for v in bounded)
    summary = (f"{len(verdicts) - len(bounded)}/{len(verdicts)} conditions confirmed over all paths; "
               f"not confirmed within the budget: lines {lines}")
    if require_confirmed:
        return Outcome("unknown", summary, vacuity_checked=True)
    within = "" if budget is None else f" ({budget.describe()})"
    return Outcome("no-counterexample", f"no counterexample within the budget{within}; {summary}",
                   vacuity_checked=True)


def run_check(targets: Sequence[str], budget: Budget, *, plugin: bool = False, require_confirmed: bool = False,
              env: Mapping[str, str] | None = None, timeout: float | None = None,
              enumerated: str | None = None) -> Outcome:
    """``crosshair check --report_all --analysis_kind=PEP316`` over ``targets`` with ``budget``.
    ``enumerated``: the finite domain a target enumerates and runs concretely (module docstring)."""
    expected = len(set().union(*(declared_conditions(t) for t in targets)))
    extra = ["--extra_plugin", str(PLUGIN)] if plugin else []
    done = _run(["check", *targets, "--report_all", "--analysis_kind=PEP316", *budget.args(), *extra], timeout, env)
    if done is None:
        return Outcome("timeout", f"crosshair check did not finish within {timeout:g} s")
    outcome = check_outcome(parse_check(done.stdout), expected, done.returncode, done.stderr, require_confirmed,
                            budget)
    return bounded_exhaustive(outcome, enumerated) if enumerated else outcome


def bounded_exhaustive(outcome: Outcome, domain: str) -> Outcome:
    """A "confirmed" outcome of a target that enumerates ``domain`` and runs the code concretely,
    reported for what it is: "passed", bounded-exhaustive over that domain (other outcomes stay)."""
    if outcome.status != "confirmed":
        return outcome
    return Outcome("passed", f"bounded-exhaustive over {domain}: every input enumerated by CrossHair's branching "
                             f"and run concretely, not symbolically ({outcome.detail})", vacuity_checked=True)
