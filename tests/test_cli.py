"""The ``verikv`` command's manners: subcommand help, version, ``python -m verikv``, pipes, a missing extra."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys

import pytest

import verikv
from verikv import cli


def _verikv(*argv: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "verikv", *argv], capture_output=True, text=True, check=False,
                          **kwargs)  # type: ignore[call-overload]


def test_help_lists_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and "prove" in out and "size" in out and "--version" in out


def test_each_subcommand_has_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["prove", "--help"])
    assert "--mutants" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["size", "--help"])
    assert "--device" in capsys.readouterr().out


def test_version_matches_the_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"verikv {verikv.__version__}"
    assert verikv.__version__ == importlib.metadata.version("verikv")


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["prove", "--no-such-option"]])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2 and "usage: verikv" in capsys.readouterr().err


def test_python_dash_m_verikv_is_the_command() -> None:
    done = _verikv("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"verikv {verikv.__version__}"


def test_size_runs_through_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["size", "--list"]) == 0
    assert "llama-3-8b" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["prove", "--list"], ["prove", "--only", "pool.cache/INV-NULL", "--jobs", "1"],
                                  ["size", "--model", "llama-3-8b", "--device", "tpu-v6e"]])
def test_a_closed_pipe_ends_quietly(argv: list[str]) -> None:
    """``verikv ... | head -0``: the reader is gone before the first line; no traceback, status 141."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "verikv", *argv], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, check=False)
    finally:
        os.close(write_end)
    assert done.returncode == 141 and "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr


def test_prove_without_the_proofs_extra_says_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "z3", None)  # `import z3` now fails as if z3-solver were not installed
    assert cli.main(["prove"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "pip install 'verikv[proofs]'" in err and "z3" in err


@pytest.mark.parametrize("argv", [
    ["size", "--model", "llama-3-8b", "--device", "h100", "--json", "a\x00b"],
    ["size", "--model", "llama-3-8b", "--device", "h100", "--json", "\ud800"],
    ["size", "--model", "\ud800/config.json", "--device", "h100"],
    ["prove", "--json", "a\x00b"],  # refused before any check is selected or run
    ["prove", "--junit", "\ud800"],
    ["size", "--max-model-len", 5],
])
def test_arguments_no_command_line_can_hold_exit_2_with_one_line(argv: list,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("verikv: argument ") and "Traceback" not in err


def test_argv_problem_names_the_argument_and_accepts_what_a_shell_passes() -> None:
    assert cli.argv_problem(["size", "--json", "plan-\udcff.json"]) is None  # an undecodable byte, as Python shows it
    assert cli.argv_problem(["size", "a\x00b"]) == "argument 2 contains a NUL character: 'a\\x00b'"
    assert "argument 1 is not encodable" in (cli.argv_problem(["\ud800"]) or "")
    assert cli.main("size") == 2  # type: ignore[arg-type]  # a str is not an argument list
