"""The mutation tool's configuration is consistent (docs/mutation.md); the run itself is not in CI.

Every core module named in mutation/modules.py exists under impl/, its killer test files exist,
the staged pyproject.toml is valid TOML with the module and its killers filled in, and every
triage entry is complete.
"""

from __future__ import annotations

import importlib
import sys
import tomllib
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str) -> ModuleType:
    """Import ``mutation.<name>`` from the repository root (it is not an installed package)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(f"mutation.{name}")


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
    entries = tomllib.loads((ROOT / "mutation" / "triage.toml").read_text())["survivor"]
    assert entries
    for entry in entries:
        assert set(entry) == {"function", "mutated", "verdict", "reason"}, entry
        assert entry["verdict"] == "equivalent"
        assert entry["function"].startswith("verikv.") and entry["mutated"] and entry["reason"]
