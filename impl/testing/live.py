"""Where the conformance harness prints what a user should see before a test ends.

A failing conformance run prints its first, unshrunk report as soon as it is found, then
shrinks it (`verikv.testing.conformance`). By default that text goes to standard error; verikv's
pytest plugin installs a writer that puts it on pytest's terminal, past output capture (and
none inside a pytest-xdist worker, whose output reaches no terminal). Standard library only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Writer = Callable[[str], None]

_writer: Writer | None = None


def set_writer(writer: Writer | None) -> None:
    """Send live text to ``writer`` (None: back to standard error)."""
    global _writer
    _writer = writer


@contextmanager
def writing_to(writer: Writer) -> Iterator[None]:
    """Send live text to ``writer`` inside the block, then back to where it went before."""
    global _writer
    saved, _writer = _writer, writer
    try:
        yield
    finally:
        _writer = saved


def emit(text: str) -> None:
    """Show ``text`` now."""
    if _writer is not None:
        _writer(text)
        return
    print(text, file=sys.stderr, flush=True)
