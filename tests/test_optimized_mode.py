"""Nothing verikv does depends on ``python -O``: no module of the library (impl/, spec/, proofs/)
and no helper module of the tests has an ``assert`` statement, reads ``__debug__`` or reads
``sys.flags.optimize`` outside the helpers that pass the flag on to a child interpreter.

``-O`` removes ``assert`` statements and ``if __debug__:`` blocks and changes nothing else a
program can observe (docstrings stay), so with none of them the library runs the same code under
``-O``. That is why CI's ``python -O`` run covers the rejection paths (the bad-input and
hostile-input tests) rather than the whole suite again. pytest rewrites the ``assert`` statements
of test modules, so they still run under ``-O``; the tests' helper modules are not rewritten, so
they must not use ``assert`` either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = sorted(path for folder in ("impl", "spec", "proofs") for path in (ROOT / folder).rglob("*.py"))
HELPERS = sorted(path for path in (ROOT / "tests").glob("*.py")
                 if not path.name.startswith("test_") and path.name != "conftest.py")
PASSES_THE_FLAG_ON = {"hostile.py", "hostile_sizing_cases.py"}
"""Helpers that read ``sys.flags.optimize`` to start their child interpreters with the same flag."""


def debug_only_code(path: Path) -> list[str]:
    """Where ``path`` has code whose behaviour ``-O`` changes, as ``line: what``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Assert):
            found.append(f"{node.lineno}: assert")
        elif isinstance(node, ast.Name) and node.id == "__debug__":
            found.append(f"{node.lineno}: __debug__")
        elif (isinstance(node, ast.Attribute) and node.attr == "optimize" and path.name not in PASSES_THE_FLAG_ON):
            found.append(f"{node.lineno}: .optimize")
    return found


def test_the_scan_finds_what_it_looks_for(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import sys\nassert True\nif __debug__:\n    pass\nx = sys.flags.optimize\n")
    assert debug_only_code(sample) == ["2: assert", "3: __debug__", "5: .optimize"]


@pytest.mark.parametrize("path", LIBRARY + HELPERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_code_depends_on_optimized_mode(path: Path) -> None:
    assert debug_only_code(path) == []


def test_the_scan_covers_the_library() -> None:
    assert len(LIBRARY) > 50 and any(p.name == "cache_manager.py" for p in LIBRARY)
    assert any(p.name == "broken_managers.py" for p in HELPERS)
