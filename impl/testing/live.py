"""Where the conformance harness prints what a user should see before a test ends.

A failing conformance run prints its first, unshrunk report as soon as it is found, then
shrinks it (`verikv.testing.conformance`). By default that text goes to standard error; verikv's
pytest plugin installs a writer that puts it on pytest's terminal, past output capture (and
none inside a pytest-xdist worker, whose output reaches no terminal).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from verikv.errors import InvalidArgumentError

Writer = Callable[[str], None]

_writer: Writer | None = None


def _checked(writer: object) -> Writer | None:
    if writer is not None and not callable(writer):
        raise InvalidArgumentError(f"a writer is a function taking the text, or None; got {type(writer).__name__}")
    return writer


def set_writer(writer: Writer | None) -> None:
    """Send live text to ``writer`` (None: back to standard error)."""
    global _writer
    _writer = _checked(writer)


@contextmanager
def writing_to(writer: Writer | None) -> Iterator[None]:
    """Send live text to ``writer`` (None: standard error) inside the block, then back to where
    it went before."""
    global _writer
    saved, _writer = _writer, _checked(writer)
    try:
        yield
    finally:
        _writer = saved


def emit(text: str) -> None:
    """Show ``text`` now."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"live text must be a str, got {type(text).__name__}")
    if _writer is not None:
        _writer(text)
        return
    print(text, file=sys.stderr, flush=True)
