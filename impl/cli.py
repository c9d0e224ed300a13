"""The ``verikv`` command (also ``python -m verikv``): ``verikv prove`` and ``verikv size``.

Each subcommand's module is imported only when that subcommand runs, so ``verikv --help``
and ``verikv --version`` need no optional dependency. A closed pipe (``verikv prove | head``)
ends the command quietly. An argument no shell could pass (`argv_problem`: not a str, a NUL
character, a lone surrogate) ends it with status 2 and a one-line message, before any work.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from verikv import __version__
from verikv.errors import describe

Handler = Callable[[argparse.Namespace], int]


def _prove(args: argparse.Namespace) -> int:
    from verikv.proofs.runner import prove as runner

    return runner.run(args)


def _size(args: argparse.Namespace) -> int:
    from verikv.sizing import cli as sizing_cli

    return sizing_cli.run(args)


def build_parser() -> argparse.ArgumentParser:
    """``verikv`` with one subparser per command; ``verikv COMMAND --help`` documents each."""
    from verikv.proofs.runner import prove as runner  # standard library only at import time
    from verikv.sizing import cli as sizing_cli  # no optional dependency (transformers loads lazily)

    parser = argparse.ArgumentParser(
        prog="verikv", description="A verified paged KV-cache page manager: run its proofs, size a device buffer.")
    parser.add_argument("--version", action="version", version=f"verikv {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    prove = commands.add_parser(
        "prove", help="run every Z3 theorem and verification check (needs the proofs extra)",
        description="Run verikv's Z3 theorems and verification checks; exit 0 only if all hold.")
    runner.configure_parser(prove)
    prove.set_defaults(handler=_prove)
    size = commands.add_parser(
        "size", help="size a paged KV cache for a model on an accelerator",
        description="Size a paged KV cache: exact per-layer buffers and page count for a model on an accelerator.")
    sizing_cli.configure_parser(size)
    size.set_defaults(handler=_size)
    return parser


def quiet_broken_pipe() -> int:
    """The reader went away: send the rest of our output nowhere and exit like a piped Unix tool."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:  # so the interpreter's final flush of stdout does not fail again
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (captured): nothing to redirect
        pass
    finally:
        os.close(devnull)
    return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by a closed pipe


def argv_problem(argv: Sequence[object]) -> str | None:
    """What makes ``argv`` impossible as a command line, or None: each argument must be a str
    that the operating system could have passed, so a path argument can be opened at all (no
    NUL character; encodable to the file system's bytes, which a lone surrogate outside
    Python's ``surrogateescape`` range is not)."""
    for position, arg in enumerate(argv, 1):
        if type(arg) is not str:
            return f"argument {position} is not a str: {describe(arg)}"
        if "\x00" in arg:
            return f"argument {position} contains a NUL character: {describe(arg)}"
        try:
            os.fsencode(arg)
        except UnicodeError:
            return f"argument {position} is not encodable as a file name: {describe(arg)}"
    return None


def command_line(argv: object, prog: str) -> list[str] | None:
    """The arguments of a command (``sys.argv[1:]`` when ``argv`` is None), or None after
    printing one line naming what no command line can hold (`argv_problem`); the caller then
    exits with status 2 before any work."""
    if argv is not None and (isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence)):
        print(f"{prog}: argv must be a list of str, got {describe(argv)}", file=sys.stderr)
        return None
    arguments = list(sys.argv[1:] if argv is None else argv)
    problem = argv_problem(arguments)
    if problem is not None:
        print(f"{prog}: {problem}", file=sys.stderr)
        return None
    return arguments


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``verikv`` command; returns the exit status (2 for an argument no
    command line can hold, see `argv_problem`; argparse's usage errors exit with 2)."""
    arguments = command_line(argv, "verikv")
    if arguments is None:
        return 2
    parser = build_parser()
    args = parser.parse_args(arguments)
    handler: Handler = args.handler
    try:
        status = handler(args)
        sys.stdout.flush()
    except BrokenPipeError:
        return quiet_broken_pipe()
    return status


if __name__ == "__main__":
    sys.exit(main())
