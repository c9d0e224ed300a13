"""``tools/mutation/RESULTS.md``: per-module counts, kill rates and the triage of every survivor.

A mutant is *detected* when a killer test failed on it (mutmut: ``killed``), or it made the tests
hang or crash (``timeout``, ``segfault``). Every other mutant (``survived``, ``no tests``: no killer
test calls the mutated function) is *undetected* and must appear in ``tools/mutation/triage.toml``:
``equivalent`` with the reason no test can tell it from the original, or it stays open (an entry
with ``verdict = "open"`` says why, e.g. the behaviour it changes is not specified; RESULTS.md
shows that reason beside the mutant). The kill rate is detected / (all mutants - equivalent ones).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.mutation.modules import Module


def load_triage(path: Path) -> list[dict[str, str]]:
    """The triage entries: ``function``, ``mutated`` (the mutated line), ``verdict``, ``reason``."""
    if not path.exists():
        return []
    entries: list[dict[str, str]] = tomllib.loads(path.read_text()).get("survivor", [])
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


TABLE_HEAD = ["| module | measured on | mutants | killed | timeout | survived | no tests | equivalent | open "
              "| kill rate (non-equivalent) |", "|---|---|---|---|---|---|---|---|---|---|"]


@dataclass(frozen=True)
class ModuleReport:
    """What RESULTS.md says about one module: its row, its open mutants, and the two counts the
    total over all modules adds up (non-equivalent mutants, detected ones)."""

    row: str
    section: list[str]
    relevant: int
    detected: int


def _measured_on(r: dict[str, Any]) -> str:
    """The "measured on" cell: the commit, and what was run again or rechecked since."""
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
    return commit


def render(r: dict[str, Any]) -> ModuleReport:
    """One module's table row and section of open mutants, from its summary."""
    row = (f"| {r['module']} | {_measured_on(r)} | {r['total']} | {r['killed']} | {r['timeout']} | {r['survived']} "
           f"| {r['no_tests']} | {r['equivalent']} | {len(r['open'])} | {100 * r['rate']:.1f} % |")
    section: list[str] = []
    if r["open"]:
        why = r["why_open"]
        section = ["", f"## {r['module']}: undetected, not triaged as equivalent ({len(r['open'])})", "",
                   *(f"- `{name}`" + (f": {why[name]}" if name in why else "") for name in r["open"])]
    return ModuleReport(row, section, r["total"] - r["equivalent"], r["detected"])


def reported(out: Path) -> dict[str, ModuleReport]:
    """The modules ``out`` reports now, read back from its table and sections. The per-module
    records stay in the checkout that ran them (they are not tracked), so a run of some modules
    keeps the other modules' rows as they are."""
    if not out.exists():
        return {}
    lines = out.read_text().splitlines()
    modules: dict[str, ModuleReport] = {}
    for line in lines:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 10 and cells[2].isdigit():
            total, killed, timeout, equivalent = (int(cells[i]) for i in (2, 3, 4, 7))
            start = f"## {cells[0]}: "
            first = next((i for i, text in enumerate(lines) if text.startswith(start)), None)
            section: list[str] = []
            if first is not None:
                end = next((i for i in range(first + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
                section = ["", *lines[first:end]]
                while section[-1] == "":
                    section.pop()
            modules[cells[0]] = ModuleReport(line, section, total - equivalent, killed + timeout)
    return modules


def write_report(results: Path, triage_path: Path, out: Path, modules: Iterable[Module],
                 detected: Collection[str]) -> None:
    """Rebuild ``out`` from the per-module records in ``results`` and the triage; a module with no
    record here keeps the row and section ``out`` already has for it."""
    triage = load_triage(triage_path)
    before = reported(out)
    reports, missing = [], []
    for module in modules:
        path = results / f"{module.name}.json"
        if path.exists():
            reports.append(render(summarize(json.loads(path.read_text()), triage, detected)))
        elif module.name in before:
            reports.append(before[module.name])
        else:
            missing.append(module.name)
    total = sum(r.relevant for r in reports)
    found = sum(r.detected for r in reports)
    lines = ["# Mutation results", "",
             "Generated by `python -m tools.mutation` (docs/mutation.md); do not edit by hand. Each run also "
             "writes its module's record (verdicts, survivors' diffs) to `tools/mutation/results/`, which is not "
             "tracked; the survivors' triage is `tools/mutation/triage.toml`.", "",
             *TABLE_HEAD, *(r.row for r in reports)]
    if reports:
        lines += ["", f"Over the measured modules: {found} of {total} non-equivalent mutants detected "
                      f"({100 * found / total:.1f} %)."]
    if missing:
        lines += ["", f"Not measured yet: {', '.join(missing)}."]
    for r in reports:
        lines += r.section
    out.write_text("\n".join(lines) + "\n")
