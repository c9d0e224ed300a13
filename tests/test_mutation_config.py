"""The mutation tool's configuration is consistent (docs/mutation.md); the run itself is not in CI.

Every core module named in tools/mutation/modules.py exists under impl/, its killer test files
exist, the staged pyproject.toml is valid TOML with the module and its killers filled in, every
triage entry is complete, and RESULTS.md keeps the rows of the modules whose records are not in
this checkout.
"""

from __future__ import annotations

import importlib
import json
import sys
import tomllib
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "mutation"


def _load(name: str) -> ModuleType:
    """Import ``tools.mutation.<name>`` from the repository root (it is not an installed package)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(f"tools.mutation.{name}")


def test_every_core_module_and_killer_exists() -> None:
    modules = _load("modules")
    assert len(modules.MODULES) == 10
    for module in modules.MODULES:
        assert (ROOT / "impl" / f"{module.name}.py").is_file(), module.name
        for killer in module.killers:
            assert (ROOT / killer).is_file(), killer


def test_the_staged_configuration_names_the_module_and_its_killers() -> None:
    runner = _load("__main__")
    module = _load("modules").BY_NAME["page_table"]
    settings = tomllib.loads(runner.staged_pyproject(module))["tool"]["mutmut"]
    assert settings["only_mutate"] == ["verikv/page_table.py"]
    assert settings["source_paths"] == ["verikv"]
    assert "tests/test_page_table.py" in settings["pytest_add_cli_args_test_selection"]


def test_every_triage_entry_is_complete() -> None:
    entries = tomllib.loads((TOOL / "triage.toml").read_text())["survivor"]
    assert entries
    for entry in entries:
        assert set(entry) == {"function", "mutated", "verdict", "reason"}, entry
        assert entry["verdict"] == "equivalent"
        assert entry["function"].startswith("verikv.") and entry["mutated"] and entry["reason"]


def test_the_tracked_summary_reports_every_core_module() -> None:
    """RESULTS.md is tracked, the per-module records are not: it has a row for each module."""
    report = _load("report")
    rows = report.reported(TOOL / "RESULTS.md")
    assert set(rows) == set(_load("modules").BY_NAME)
    assert all(row.relevant > 0 and 0 <= row.detected <= row.relevant for row in rows.values())


def _record(module: str, verdicts: dict[str, str], undetected: dict[str, str]) -> dict[str, object]:
    counts: dict[str, int] = {}
    for verdict in verdicts.values():
        counts[verdict] = counts.get(verdict, 0) + 1
    return {"module": module, "commit": "abc1234", "uncommitted_changes": False, "killers": [],
            "counts": counts, "verdicts": verdicts, "undetected": undetected}


def test_a_report_keeps_the_rows_of_modules_without_a_record_here(tmp_path: Path) -> None:
    """A run of one module rebuilds its row; another module's row and open mutants stay as they
    were (their record is in the checkout that ran them), and the total adds up both."""
    report = _load("report")
    modules = _load("modules")
    page_table, request = modules.BY_NAME["page_table"], modules.BY_NAME["request"]
    results = tmp_path / "results"
    results.mkdir()
    out = tmp_path / "RESULTS.md"
    triage = tmp_path / "triage.toml"
    triage.write_text("")
    survivor = "verikv.request.x_f__mutmut_2"
    (results / "request.json").write_text(json.dumps(_record(
        "request", {"verikv.request.x_f__mutmut_1": "killed", survivor: "survived"},
        {survivor: "--- a\n+++ b\n-    return 1\n+    return 2\n"})))
    report.write_report(results, triage, out, [request], {"killed"})
    before = out.read_text()
    assert f"`{survivor}`" in before and "1 of 2 non-equivalent" in before

    (results / "request.json").unlink()
    (results / "page_table.json").write_text(json.dumps(_record(
        "page_table", {f"verikv.page_table.x_g__mutmut_{i}": "killed" for i in range(3)}, {})))
    report.write_report(results, triage, out, [page_table, request], {"killed"})
    after = out.read_text()
    request_row = next(line for line in before.splitlines() if line.startswith("| request |"))
    assert request_row in after.splitlines()
    assert f"`{survivor}`" in after
    assert "| page_table | `abc1234` | 3 | 3 |" in after
    assert "4 of 5 non-equivalent" in after
