"""The public API is a contract: the live surface must equal the checked-in snapshot (tests/public_api.txt).

An intended change: regenerate with ``python tests/api_snapshot.py --update``, review the diff,
add a changelog bullet, and keep a removed or renamed name working for one minor version
(``verikv._deprecation``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from api_snapshot import (
    SNAPSHOT,
    UPDATE_COMMAND,
    Surface,
    difference,
    overdue_deprecations,
    public_modules,
    snapshot_text,
)

import verikv
from verikv.cache_manager import CacheManager
from verikv.sizing.planner import LayerBuffer

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def live() -> str:
    """The live surface, computed once: the tests below change one thing and compare with it."""
    return snapshot_text()


def test_the_public_api_matches_the_snapshot(live: str) -> None:
    diff = difference(SNAPSHOT.read_text(encoding="utf-8"), live)
    if diff:
        pytest.fail(f"verikv's public API differs from {SNAPSHOT.name} ('-' snapshot, '+' live):\n{diff}\n"
                    f"If the change is intended: {UPDATE_COMMAND}, review the diff, add a changelog bullet, and keep "
                    "removed or renamed names working with a DeprecationWarning (verikv._deprecation).",
                    pytrace=False)


def test_a_removed_property_is_a_difference(live: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(LayerBuffer, "bytes_per_device")
    diff = difference(live, snapshot_text())
    removed = [line for line in diff.splitlines() if line.startswith("-verikv")]
    assert removed == ["-verikv.sizing.planner.LayerBuffer.bytes_per_device: property: int"]


def test_a_changed_signature_is_a_difference(live: str, monkeypatch: pytest.MonkeyPatch) -> None:

    def free(self, request: object, force: bool = False) -> None:  # type: ignore[no-untyped-def]
        """A stand-in with one more parameter."""

    monkeypatch.setattr(CacheManager, "free", free)
    changed = [line for line in difference(live, snapshot_text()).splitlines() if line.startswith(("-v", "+v"))]
    assert changed == ["-verikv.cache_manager.CacheManager.free: method(self, request: Request) -> None",
                       "+verikv.cache_manager.CacheManager.free: method(self, request: object, force: bool = False)"
                       " -> None"]


def test_a_removed_top_level_export_is_a_difference(live: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verikv, "__all__", [name for name in verikv.__all__ if name != "PagePool"])
    removed = [line for line in difference(live, snapshot_text()).splitlines() if line.startswith("-v")]
    assert removed == ["-verikv.PagePool: alias of verikv.page_pool.PagePool"]


class _Record:
    """A record type defined outside the public modules, as a public function might return it."""

    tokens: int

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens
        self.label = "x"

    @property
    def doubled(self) -> int:
        return 2 * self.tokens


_Record.__module__ = "verikv._internal"


def test_a_returned_record_type_is_listed_with_its_attributes() -> None:
    def make() -> _Record:
        return _Record(1)

    make.__annotations__["return"] = _Record  # resolved, as a public module's annotation would be
    surface = Surface()
    surface.add_callable("verikv.example.make", "function", make)
    lines = surface.finish()
    assert "verikv._internal._Record: returned by a public callable" in lines
    assert "verikv._internal._Record.doubled: property: int" in lines
    assert "verikv._internal._Record.tokens: instance attribute: int" in lines
    assert "verikv._internal._Record.label: instance attribute" in lines


def test_public_modules_follow_the_stated_rule() -> None:
    modules = public_modules()
    assert {"verikv", "verikv.errors", "verikv.sizing", "verikv.spec", "verikv.spec.pool",
            "verikv.testing.conformance", "verikv.kv_events", "verikv.page_table"} <= set(modules)
    assert not [name for name in modules if name.startswith("verikv.proofs") or name.endswith(".cli")
                or any(part.startswith("_") for part in name.split("."))]


def test_the_command_checks_and_is_independent_of_hash_seeds() -> None:
    """``python tests/api_snapshot.py`` compares; another hash seed gives the same text (sets are sorted)."""
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    done = subprocess.run([sys.executable, str(HERE / "api_snapshot.py")], capture_output=True, text=True,
                          env=env, check=False, timeout=600)
    assert (done.returncode, done.stdout) == (0, "the public API matches the snapshot\n"), done.stdout + done.stderr


def test_no_deprecated_name_outlives_its_removal_version() -> None:
    """The release that reaches a deprecated name's removal version removes it (and its snapshot line)."""
    line = "verikv.x.old: function(); deprecated: old is deprecated since verikv 0.1.0 and will be removed in 0.2.0"
    assert overdue_deprecations(line, "0.1.5") == []
    assert overdue_deprecations(line, "0.2.0") == [line]
    assert overdue_deprecations(SNAPSHOT.read_text(encoding="utf-8"), verikv.__version__) == []
