"""``mutation/RESULTS.md``: per-module counts, kill rates and the triage of every survivor.

A mutant is *detected* when a killer test failed on it (mutmut: ``killed``), or it made the tests
hang or crash (``timeout``, ``segfault``). Every other mutant (``survived``, ``no tests``: no killer
test calls the mutated function) is *undetected* and must appear in ``mutation/triage.toml``:
``equivalent`` with the reason no test can tell it from the original, or it stays open (an entry
with ``verdict = "open"`` says why, e.g. the behaviour it changes is not specified; RESULTS.md
shows that reason beside the mutant). The kill rate is detected / (all mutants - equivalent ones).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from mutation.modules import Module


def load_triage(path: Path) -> list[dict[str, str]]:
    """The triage entries: ``function``, ``mutated`` (the mutated line), ``verdict``, ``reason``."""
    if not path.exists():
        return []
    entries: list[dict[str, str]] = tomllib.loads(path.read_text())["survivor"]
    return entries


def code_of(line: str) -> str:
    """A source line without its trailing comment and surrounding blanks (comments may change
    while the code, and so the mutant, stays the same)."""
    return line.split("  #")[0].strip()


def added_lines(diff: str) -> list[str]:
    """The code of the lines a mutant's diff adds."""
    return [code_of(line[1:]) for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]


def triage_of(name: str, diff: str, triage: list[dict[str, str]]) -> dict[str, str] | None:
    """The entry for mutant ``name``: same function, and its diff adds exactly the entry's line."""
    function = name.partition("__mutmut_")[0]
    added = added_lines(diff)
    for entry in triage:
        if entry["function"] == function and added == [code_of(entry["mutated"])]:
            return entry
    return None


def summarize(record: dict[str, Any], triage: list[dict[str, str]], detected: Collection[str]) -> dict[str, Any]:
    """Counts of one module's run, with the equivalent and still-open survivors."""
    verdicts: dict[str, str] = record["verdicts"]
    undetected = [name for name, verdict in verdicts.items() if verdict not in detected]
    entries = {name: triage_of(name, record["undetected"][name], triage) for name in undetected}
    equivalent = [name for name, entry in entries.items() if entry is not None and entry["verdict"] == "equivalent"]
    found = sum(1 for verdict in verdicts.values() if verdict in detected)
    relevant = len(verdicts) - len(equivalent)
    return {
        "module": record["module"], "commit": record["commit"], "dirty": record["uncommitted_changes"],
        "rechecked": record.get("rechecked"), "kill_tests_from": record.get("kill_tests_from"),
        "changed_rerun_on": record.get("changed_rerun_on"),
        "functions": record.get("functions"), "not_run": record.get("not_run", 0),
        "total": len(verdicts), "killed": record["counts"].get("killed", 0),
        "timeout": record["counts"].get("timeout", 0) + record["counts"].get("segfault", 0),
        "survived": record["counts"].get("survived", 0), "no_tests": record["counts"].get("no tests", 0),
        "equivalent": len(equivalent), "open": [n for n in undetected if n not in equivalent],
        "why_open": {n: e["reason"] for n, e in entries.items() if e is not None and e["verdict"] == "open"},
        "detected": found, "rate": found / relevant if relevant else 1.0,
    }


def _table(rows: Iterable[dict[str, Any]]) -> list[str]:
    lines = ["| module | measured on | mutants | killed | timeout | survived | no tests | equivalent | open "
             "| kill rate (non-equivalent) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        commit = f"`{r['commit']}`" + (" + uncommitted tests" if r["dirty"] else "")
        if r["kill_tests_from"]:
            commit += f" with the kill tests of `{r['kill_tests_from']}`"
        if r["changed_rerun_on"]:
            again = r["changed_rerun_on"]
            functions = len(again["functions"])
            dirty = " + uncommitted changes" if again["uncommitted_changes"] else ""
            commit += (f"; the {again['mutants']} mutants of the {functions} function{'s' * (functions != 1)} "
                       f"changed since re-run on `{again['commit']}`{dirty}")
        if r["functions"]:
            commit += ", only the functions " + ", ".join(f"`{f}`" for f in r["functions"])
        if r["not_run"]:
            commit += (f"; **partial run**: {r['total']} of {r['total'] + r['not_run']} mutants run (mutmut runs the "
                       "cheapest first), the rest not run")
        if r["rechecked"]:
            dirty = " + uncommitted changes" if r["rechecked"]["uncommitted_changes"] else ""
            commit += f"; survivors rechecked with the kill tests of `{r['rechecked']['commit']}`{dirty}"
        lines.append(f"| {r['module']} | {commit} | {r['total']} | {r['killed']} | {r['timeout']} | {r['survived']} "
                     f"| {r['no_tests']} | {r['equivalent']} | {len(r['open'])} | {100 * r['rate']:.1f} % |")
    return lines


def write_report(results: Path, triage_path: Path, out: Path, modules: Iterable[Module],
                 detected: Collection[str]) -> None:
    """Rebuild ``out`` from the recorded per-module results and the triage."""
    triage = load_triage(triage_path)
    rows, missing = [], []
    for module in modules:
        path = results / f"{module.name}.json"
        if path.exists():
            rows.append(summarize(json.loads(path.read_text()), triage, detected))
        else:
            missing.append(module.name)
    total = sum(r["total"] - r["equivalent"] for r in rows)
    found = sum(r["detected"] for r in rows)
    lines = ["# Mutation results", "",
             "Generated by `python -m mutation` (docs/mutation.md); do not edit by hand. Survivors' diffs are in "
             "`mutation/results/<module>.json`, their triage in `mutation/triage.toml`.", ""]
    lines += _table(rows)
    if rows:
        lines += ["", f"Over the measured modules: {found} of {total} non-equivalent mutants detected "
                      f"({100 * found / total:.1f} %)."]
    if missing:
        lines += ["", f"Not measured yet: {', '.join(missing)}."]
    for r in rows:
        if r["open"]:
            lines += ["", f"## {r['module']}: undetected, not triaged as equivalent ({len(r['open'])})", ""]
            why = r["why_open"]
            lines += [f"- `{name}`" + (f": {why[name]}" if name in why else "") for name in r["open"]]
    out.write_text("\n".join(lines) + "\n")
