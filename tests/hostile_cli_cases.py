"""Hostile cases for the ``verikv`` command (``verikv.cli.main``): the arguments and paths of
both subcommands.

``CASES`` is a list of `hostile.Case`. A call is made in process with its output captured; a
non-zero status with exactly one line on stderr and no traceback is the command's typed
refusal (reported to the harness as an `InvalidArgumentError`); a traceback, a message of
several lines or an exception leaving ``main`` is an untyped failure. Nothing here starts a
proof run: the ``prove`` cases are refused before any check is selected, or only list them.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hostile import Case, World

from verikv.cli import main
from verikv.errors import InvalidArgumentError

_ROOT = Path(tempfile.mkdtemp(prefix="verikv-hostile-cli-"))
atexit.register(shutil.rmtree, _ROOT, True)
SIZE = ["size", "--model", "llama-3-8b", "--device", "h100", "--max-model-len", "1024"]


def _world() -> World:
    """What a command may change: the files in the cases' own folder."""
    return {"files": sorted(path.name for path in _ROOT.iterdir())}


def run_command(argv: Any) -> int:
    """``verikv.cli.main(argv)`` as a user runs it; see the module docstring for the outcomes."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(argv)
        except SystemExit as exc:  # argparse's usage errors
            status = exc.code if isinstance(exc.code, int) else 2
    lines = err.getvalue().strip().splitlines()
    if status != 0:
        if "Traceback" in err.getvalue() or len([line for line in lines if not line.startswith("usage:")]) != 1:
            raise RuntimeError(f"status {status} without a one-line message: {err.getvalue()[-300:]!r}")
        raise InvalidArgumentError(f"verikv exited {status}: {lines[-1]}")
    return status


def _case(label: str, argv: Any, expect: str) -> Case:
    return Case(f"cli.main[{label}]", _world, lambda w: run_command(argv), expect)


def cli_cases() -> list[Case]:
    json_path = str(_ROOT / "plan.json")
    cases = [
        _case("size --list", ["size", "--list"], "accept"),
        _case("size --json PATH", [*SIZE, "--json", json_path], "accept"),
        _case("size --json PATH with an undecodable byte", [*SIZE, "--json", str(_ROOT / "plan-\udcff.json")],
              "accept"),  # what Python makes of a non-UTF-8 byte in a real argument: a legal name
        _case("prove --list", ["prove", "--list", "--only", "pool.cache/INV-NULL"], "accept"),
        _case("argv a str", "size", "reject"),
        _case("argv an int", 5, "reject"),
        _case("an int argument", ["size", "--max-model-len", 5], "reject"),
        _case("no subcommand", [], "reject"),
        _case("unknown subcommand", ["frobnicate"], "reject"),
        _case("size --json in a missing folder", [*SIZE, "--json", str(_ROOT / "missing" / "plan.json")], "reject"),
        _case("size --model ''", ["size", "--model", "", "--device", "h100"], "reject"),
    ]
    bad_text = {"NUL": "a\x00b", "lone surrogate": "\ud800", "NUL path": str(_ROOT / "a\x00b.json"),
                "surrogate path": str(_ROOT / "\ud800.json")}
    for what, text in bad_text.items():
        cases += [
            _case(f"size --json {what}", [*SIZE, "--json", text], "reject"),
            _case(f"size --model {what}", ["size", "--model", text, "--device", "h100"], "reject"),
            _case(f"size --device {what}", ["size", "--model", "llama-3-8b", "--device", text], "reject"),
            _case(f"prove --json {what}", ["prove", "--json", text], "reject"),
            _case(f"prove --junit {what}", ["prove", "--junit", text], "reject"),
            _case(f"prove --only {what}", ["prove", "--only", text], "reject"),
            _case(f"subcommand {what}", [text], "reject"),
        ]
    return cases


CASES: list[Case] = cli_cases()
