"""README.md stays true: every Python block runs, and its scheduler loop is the one docs/scheduler.md explains."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


README_BLOCKS = python_blocks(ROOT / "README.md")


@pytest.mark.parametrize("index", range(len(README_BLOCKS)))
def test_readme_block_runs(index: int) -> None:
    exec(compile(README_BLOCKS[index], f"README.md block {index}", "exec"), {"__name__": "readme"})


def test_readme_loop_is_the_documented_one() -> None:
    assert len(README_BLOCKS) == 2
    assert README_BLOCKS[1] == python_blocks(ROOT / "docs" / "scheduler.md")[0]


def test_quick_start_runs_the_ci_commands() -> None:
    """The README's two quick-start commands are the ones .ci/run executes (the same strict editable install)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    install = '-e ".[dev]" --config-settings editable_mode=strict'
    assert f"pip install {install} && verikv prove" in readme and install in ci and "verikv prove" in ci
    assert "python -m pytest -q -n 2" in readme and "python -m pytest -q -n 2" in ci
