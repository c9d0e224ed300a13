"""``python -m tools.mutation [MODULE ...]``: run mutmut over verikv's core modules, record the results.

Run from the repository root, with the ``dev`` (or ``mutation``) extra installed. mutmut names a
mutant after its file's path (``verikv/page_table.py`` -> ``verikv.page_table``) and activates it
only when that name equals the function's ``__module__``. The repository keeps the package in
``impl/`` (imported as ``verikv``), so each run works on a staged copy
``tools/mutation/stage/<module>/`` where ``impl/`` is laid out as ``verikv/`` (with ``spec/`` and
``proofs/`` inside it, as installed) beside ``tests/`` and ``pyproject.toml``. The staged
``pyproject.toml`` keeps the repository's ``[tool.mutmut]`` settings and adds the module to mutate
and its killer tests (``tools/mutation/modules.py``). Each run writes the module's record to
``tools/mutation/results/<module>.json`` and rebuilds ``tools/mutation/RESULTS.md``.

Options: ``--max-children N`` (default 2), ``--report`` (only rebuild ``RESULTS.md`` from the
records in this checkout), ``--changed`` (run again only the mutants of the functions changed
since the module's staged run), ``--functions`` (a subset of the module's functions),
``--recheck`` (run the current kill tests against the mutants the last run left undetected, e.g.
after writing kill tests), ``--record-staged`` (record an interrupted staged run as it stands),
``--source DIR`` (measure another checkout with this one's kill tests).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools.mutation.modules import BY_NAME, MODULES, SLOW, Module
from tools.mutation.report import load_triage, triage_of, write_report

REPO = Path(__file__).resolve().parents[2]
HERE = REPO / "tools" / "mutation"
STAGE = HERE / "stage"
RESULTS = HERE / "results"

# mutmut's own verdicts for a mutant's exit code (mutmut.stats.status_by_exit_code), grouped.
DETECTED = {"killed", "timeout", "segfault", "caught by type check"}

RECHECK_TIMEOUT = 300
"""Seconds one recheck run of a kill-test file may take (it takes about one on an idle machine)."""


def stage(module: Module, source: Path) -> Path:
    """A fresh staged copy of ``source`` (a checkout of the repository) for ``module``'s run.

    This repository's unit-test file of the module (where its kill tests live) is laid over the
    source's, so another checkout (e.g. a newer main) is measured with the checks written here.
    """
    root = STAGE / module.name
    if root.exists():
        shutil.rmtree(root)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(source / "impl", root / "verikv", ignore=ignore)
    shutil.copytree(source / "spec", root / "verikv" / "spec", ignore=ignore)
    shutil.copytree(source / "proofs", root / "verikv" / "proofs", ignore=ignore)
    shutil.copytree(source / "tests", root / "tests", ignore=ignore)
    shutil.copy2(REPO / module.kill_tests, root / module.kill_tests)
    (root / "pyproject.toml").write_text(staged_pyproject(module))
    return root


def staged_meta(module: Module) -> Path:
    """mutmut's metadata of ``module``'s staged run (hashes and verdicts per mutant); the staged
    runs stay in the checkout that made them, so ``--changed`` and ``--recheck`` need one here."""
    meta = STAGE / module.name / "mutants" / f"{module.path}.meta"
    if not meta.exists():
        raise SystemExit(f"{module.name}: no staged run in {STAGE / module.name}; run the module first")
    return meta


def record_path(module: Module) -> Path:
    """Where ``module``'s record of its last run is kept (not tracked)."""
    return RESULTS / f"{module.name}.json"


def recorded(module: Module) -> dict[str, Any]:
    """``module``'s record in ``tools/mutation/results/`` (written by its last run in this checkout)."""
    path = record_path(module)
    if not path.exists():
        raise SystemExit(f"{module.name}: no record in {RESULTS}; run the module first")
    record: dict[str, Any] = json.loads(path.read_text())
    return record


def restage(module: Module, source: Path) -> Path:
    """Refresh the code and tests of ``module``'s staged copy from ``source`` in place, keeping
    mutmut's verdicts in ``mutants/``: the next ``mutmut run`` there regenerates the mutants,
    compares each function's hash with the one recorded and runs again only the mutants of the
    functions whose source changed (and of new functions); the others keep their verdicts.
    Files are copied with a new mtime (mutmut regenerates a mutated file only when its source
    is newer), and the recorded map from tests to the functions they call is dropped, so mutmut
    collects it again for the new code (its incremental update only looks at new tests).
    """
    staged_meta(module)  # there is a staged run to refresh
    root = STAGE / module.name
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for sub, target in (("impl", root / "verikv"), ("spec", root / "verikv" / "spec"),
                        ("proofs", root / "verikv" / "proofs"), ("tests", root / "tests")):
        if target.exists():
            for old in target.rglob("*.py"):  # files deleted since are removed, the rest rewritten
                old.unlink()
        shutil.copytree(source / sub, target, ignore=ignore, copy_function=shutil.copyfile, dirs_exist_ok=True)
    shutil.copyfile(REPO / module.kill_tests, root / module.kill_tests)
    (root / "pyproject.toml").write_text(staged_pyproject(module))
    (root / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    return root


def killers(module: Module) -> list[str]:
    """The module's killer test files that exist here (its unit-test file first)."""
    return [k for k in dict.fromkeys((module.kill_tests, *module.killers)) if (REPO / k).exists()]


def staged_pyproject(module: Module) -> str:
    """The repository's pyproject.toml with its ``[tool.mutmut]`` table completed for ``module``."""
    text = (REPO / "pyproject.toml").read_text()
    settings = tomllib.loads(text)["tool"]["mutmut"]
    settings["only_mutate"] = [module.path]
    settings["pytest_add_cli_args_test_selection"] = [*killers(module), *(f"--deselect={test}" for test in SLOW)]
    table = "\n".join(f"{key} = {json.dumps(value)}" for key, value in settings.items())
    without = re.sub(r"^\[tool\.mutmut\]\n(?:(?!\[).*\n?)*", "", text, flags=re.MULTILINE)
    return f"{without}\n[tool.mutmut]\n{table}\n"


def run_mutmut(root: Path, max_children: int, functions: Sequence[str] = ()) -> None:
    """mutmut over the staged copy; its verdicts stay in ``root/mutants``. ``functions``: if
    given, only the mutants whose names match one of these globs are run."""
    subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children), *functions],
                   cwd=root, check=True)


def verdicts(root: Path, module: Module) -> dict[str, str]:
    """mutant name -> mutmut's verdict, read from the run's metadata."""
    from mutmut.stats import status_by_exit_code

    meta = json.loads((root / "mutants" / f"{module.path}.meta").read_text())
    return {name: status_by_exit_code[code] for name, code in sorted(meta["exit_code_by_key"].items())
            if code is not None}  # None: not run (outside the --functions subset)


def diffs_of(root: Path, module: Module, names: list[str]) -> dict[str, str]:
    """Each mutant's diff against the original, as ``mutmut show`` prints it (read in-process: fast)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    with contextlib.chdir(root):
        return {name: get_diff_for_mutant(name, path=Path(module.path)) for name in names}


def measured_commit(source: Path = REPO) -> dict[str, object]:
    """The commit the staged code came from, and whether impl/, spec/ or tests/ differed from it
    (plus this branch's commit when the code came from another checkout)."""
    def git(*args: str, where: Path = source) -> str:
        return subprocess.run(["git", *args], cwd=where, check=True, capture_output=True, text=True).stdout.strip()

    changed = git("status", "--porcelain", "--", "impl", "spec", "tests")
    record: dict[str, object] = {"commit": git("rev-parse", "--short", "HEAD"), "uncommitted_changes": bool(changed)}
    if source.resolve() != REPO.resolve():
        record["kill_tests_from"] = git("rev-parse", "--short", "HEAD", where=REPO)
    return record


def measure(module: Module, max_children: int, source: Path = REPO, functions: Sequence[str] = ()) -> None:
    """Run ``module``'s mutants (only those of ``functions``, if given) and record verdicts,
    counts and every undetected mutant's diff."""
    origin = measured_commit(source)
    root = stage(module, source)
    run_mutmut(root, max_children, [f"verikv.{module.name}.{f}__mutmut_*" for f in functions])
    write_record(root, module, origin, functions)


def measure_changed(module: Module, max_children: int, source: Path = REPO) -> None:
    """Run again, on ``source``'s code, the mutants of the functions changed since the module's
    recorded run (see `restage`), and record them in place of that run's verdicts for those
    functions; the other functions keep the recorded verdicts (with their rechecks)."""
    old_hashes = json.loads(staged_meta(module).read_text())["hash_by_function_name"]
    now = measured_commit(source)
    root = restage(module, source)
    run_mutmut(root, max_children)
    record_changed(root, module, old_hashes, now)


def record_changed(root: Path, module: Module, old_hashes: dict[str, str], now: dict[str, object]) -> None:
    """Merge the verdicts of the functions whose hash differs from ``old_hashes`` (as the run
    staged in ``root`` found them) into the module's recorded results."""
    record = recorded(module)
    new_hashes = json.loads((root / "mutants" / f"{module.path}.meta").read_text())["hash_by_function_name"]
    changed = sorted(f for f, h in new_hashes.items() if old_hashes.get(f) != h)
    if not changed:  # the record stands as it is (its row keeps the commit of its last change)
        print(f"{module.name}: no function changed since the staged run; its record is unchanged")
        return

    def function_of(name: str) -> str:
        return name.rpartition(".")[2].rpartition("__mutmut_")[0]

    fresh = verdicts(root, module)
    merged = {name: verdict for name, verdict in record["verdicts"].items()
              if function_of(name) in new_hashes and function_of(name) not in changed}
    merged.update({name: verdict for name, verdict in fresh.items() if function_of(name) in changed})
    rerun = [name for name in merged if function_of(name) in changed]
    undetected = {name: diff for name, diff in record["undetected"].items() if name in merged and name not in rerun}
    undetected.update(diffs_of(root, module, [n for n in rerun if merged[n] not in DETECTED]))
    counts: dict[str, int] = {}
    for verdict in merged.values():
        counts[verdict] = counts.get(verdict, 0) + 1
    record.update(verdicts=dict(sorted(merged.items())), undetected=dict(sorted(undetected.items())), counts=counts,
                  killers=killers(module), changed_rerun_on={**now, "functions": changed, "mutants": len(rerun)})
    record_path(module).write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")


def write_record(root: Path, module: Module, origin: dict[str, object], functions: Sequence[str] = ()) -> None:
    """Record the verdicts of the run staged in ``root``, with every undetected mutant's diff.
    Mutants the run has not reached (an interrupted run, read with ``--record-staged``) are
    counted as ``not_run`` and RESULTS.md marks the row as a partial run."""
    by_name = verdicts(root, module)
    undetected = diffs_of(root, module, [name for name, verdict in by_name.items() if verdict not in DETECTED])
    counts: dict[str, int] = {}
    for verdict in by_name.values():
        counts[verdict] = counts.get(verdict, 0) + 1
    meta = json.loads((root / "mutants" / f"{module.path}.meta").read_text())
    not_run = 0 if functions else sum(code is None for code in meta["exit_code_by_key"].values())
    RESULTS.mkdir(exist_ok=True)
    record = {"module": module.name, **origin, **({"functions": list(functions)} if functions else {}),
              **({"not_run": not_run} if not_run else {}),
              "killers": killers(module), "counts": counts,
              "verdicts": by_name, "undetected": undetected}
    record_path(module).write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")


def recheck(module: Module) -> None:
    """Run the module's kill tests against each mutant its last run left undetected.

    After new kill tests are written, this confirms them without regenerating every mutant:
    the current kill-test file is copied into the run's staged mutants, and each undetected
    mutant is activated (``MUTANT_UNDER_TEST``) for one pytest run of that file, stopping at the
    first failure, one mutant at a time. The other killers already passed on these mutants, so
    only the new checks can change a verdict. The code under test is still that of the run.
    As mutmut does, each run is a fork of one process that has imported the staged code and the
    kill tests once (a cold start per mutant costs more than most of the runs).
    """
    record = recorded(module)
    mutants = staged_meta(module).parent
    shutil.copy2(REPO / module.kill_tests, mutants / module.kill_tests)
    settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]
    args = ["-x", "-q", "-p", "no:randomly", *settings["pytest_add_cli_args"], module.kill_tests]
    triage = load_triage(HERE / "triage.toml")
    candidates = [name for name, diff in record["undetected"].items() if triage_of(name, diff, triage) is None]
    with contextlib.chdir(mutants):
        sys.path.insert(0, str(mutants))
        os.environ.pop("MUTANT_UNDER_TEST", None)
        import pytest

        pytest.main(["--collect-only", "-q", *args[4:]])  # imports the staged code and the tests once
        for name in candidates:
            verdict = _forked_run(name, args)
            if verdict in DETECTED:
                record["verdicts"][name] = verdict
                del record["undetected"][name]
    counts: dict[str, int] = {}
    for verdict in record["verdicts"].values():
        counts[verdict] = counts.get(verdict, 0) + 1
    record.update(counts=counts, killers=killers(module), rechecked=measured_commit())
    record_path(module).write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")


def _forked_run(name: str, args: list[str]) -> str:
    """mutmut's verdict for one pytest run of ``args`` in a fork with mutant ``name`` active
    ("timeout" when it runs longer than `RECHECK_TIMEOUT` seconds: the mutant made it hang)."""
    import time

    from mutmut.stats import status_by_exit_code

    pid = os.fork()
    if pid == 0:  # the child: activate the mutant, run the kill tests, report pytest's exit code
        os.environ["MUTANT_UNDER_TEST"] = name
        import pytest

        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
            code = int(pytest.main(args))
        os._exit(code)
    deadline = time.monotonic() + RECHECK_TIMEOUT
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status_by_exit_code[os.waitstatus_to_exitcode(status)]
        time.sleep(0.2)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return "timeout"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.mutation", description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", metavar="MODULE",
                        help=f"core modules to run (default: all): {', '.join(BY_NAME)}")
    parser.add_argument("--max-children", type=int, default=2, help="mutants run at once (default 2)")
    parser.add_argument("--report", action="store_true", help="only rebuild RESULTS.md from recorded results")
    parser.add_argument("--source", type=Path, default=REPO,
                        help="measure another checkout of the repository (default: this one), with these kill tests")
    parser.add_argument("--recheck", action="store_true",
                        help="run the current killers against the undetected mutants of the last run only")
    parser.add_argument("--record-staged", type=str, default=None, metavar="COMMIT",
                        help="only record the verdicts of the module's staged run as they stand (an interrupted or "
                             "resumed mutmut run), stating COMMIT as the commit its code and tests came from")
    parser.add_argument("--changed", action="store_true",
                        help="refresh the module's staged run with this checkout's code and tests and run again only "
                             "the mutants of the functions changed since (the others keep their verdicts)")
    parser.add_argument("--functions", nargs="+", default=(), metavar="NAME",
                        help="measure only these functions (mutmut's mangled names, globs allowed, "
                             "e.g. 'x_cdiv' or 'xǁKVCacheManagerǁ*'); recorded in the results")
    args = parser.parse_args(argv)
    unknown = [name for name in args.modules if name not in BY_NAME]
    if unknown:
        parser.error(f"not a core module: {', '.join(unknown)}")
    if not args.report:
        for name in args.modules or list(BY_NAME):
            if args.record_staged:
                write_record(STAGE / name, BY_NAME[name], {"commit": args.record_staged, "uncommitted_changes": False})
            elif args.changed:
                measure_changed(BY_NAME[name], args.max_children, args.source)
            elif args.recheck:
                recheck(BY_NAME[name])
            else:
                measure(BY_NAME[name], args.max_children, args.source, args.functions)
    write_report(RESULTS, HERE / "triage.toml", HERE / "RESULTS.md", MODULES, DETECTED)
    return 0


if __name__ == "__main__":
    sys.exit(main())
