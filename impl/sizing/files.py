"""Opening a model's files safely: regular files only, never blocking, never read past a limit.

A checkpoint folder is user input, and a name such as ``config.json`` can be a FIFO (opening
it for reading waits for a writer forever), a device, a directory or a symlink loop. Every
file the sizing reads goes through ``open_regular_file``:

* symlinks are followed (a checkpoint laid out by a hub cache is made of links to blobs), but a
  loop, a dangling link or a target that is not a regular file is refused;
* the name is checked with ``stat`` before it is opened, then opened with ``O_NONBLOCK`` (so a
  FIFO swapped in between cannot block the open) and checked again with ``fstat``, so what is
  read is the regular file that was checked;
* ``read_bounded`` refuses a file larger than the caller's limit before reading it.

Every refusal is a ``SizingError`` naming the file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from verikv.errors import SizingError

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
"""Read-only, without waiting for a FIFO's writer or adopting a terminal (flags absent on a
platform are left out)."""


def shown(path: Path) -> str:
    """The path for a message: quoted, at most 200 characters, printable whatever it holds."""
    text = repr(str(path))
    return text if len(text) <= 200 else text[:197] + "..."


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def _refuse_irregular(path: Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise SizingError(f"{shown(path)} is {_kind(mode)}; only regular files (or symlinks to them) are read")


def open_regular_file(path: Path) -> BinaryIO:
    """``path`` opened for binary reading, if it is (or links to) a regular file; else ``SizingError``."""
    try:
        _refuse_irregular(path, os.stat(path).st_mode)
        fd = os.open(path, _OPEN_FLAGS)
    except (OSError, ValueError) as exc:  # ValueError: a NUL or an unencodable character in the path
        raise SizingError(f"cannot read {shown(path)}: {exc}") from exc
    try:
        _refuse_irregular(path, os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def file_size(handle: BinaryIO) -> int:
    """Bytes in the open regular file ``handle``."""
    return os.fstat(handle.fileno()).st_size


def read_bounded(path: Path, limit: int) -> bytes:
    """All bytes of the regular file ``path``, refusing a file over ``limit`` bytes unread."""
    with open_regular_file(path) as handle:
        try:
            if file_size(handle) > limit:
                raise SizingError(f"{shown(path)} is larger than {limit:,} bytes")
            data = handle.read(limit + 1)  # (the file may have grown since fstat)
        except OSError as exc:
            raise SizingError(f"cannot read {shown(path)}: {exc}") from exc
    if len(data) > limit:
        raise SizingError(f"{shown(path)} is larger than {limit:,} bytes")
    return data
