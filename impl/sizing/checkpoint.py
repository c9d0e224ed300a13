"""Reading a model from disk: its ``config.json`` and the size of its weights.

``load_model(path)`` takes a checkpoint folder (or a ``config.json`` inside one) and returns
the ``ModelGeometry`` of ``hf_config``, with ``weights_bytes`` taken from the checkpoint when
it says: ``model.safetensors.index.json``'s ``metadata.total_size``, else the sum of the
tensors listed in the headers of the folder's ``*.safetensors`` files (a safetensors file
starts with an 8-byte little-endian header length and a JSON header giving each tensor's
dtype, shape and byte range). Without either, the config's own estimate (dense models) stands,
and ``weights_source`` says which of the three it is.

Files are opened as ``verikv.sizing.files`` describes (regular files only, never blocking),
and every input is bounded: a config file over ``MAX_CONFIG_BYTES``, an index over
``MAX_INDEX_BYTES``, a safetensors header over ``MAX_HEADER_BYTES`` or longer than its file,
or a folder with more than ``MAX_SAFETENSORS_FILES`` safetensors files is refused with a
``SizingError``, never read at any cost. A file that exists but cannot be used (an index
whose ``metadata`` is not an object, a header whose byte ranges run past its file) is refused
too: the weights are never guessed around it.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

from verikv.errors import SizingError
from verikv.sizing.bounds import MAX_BYTES
from verikv.sizing.files import file_size, open_regular_file, read_bounded, shown
from verikv.sizing.geometry import ModelGeometry
from verikv.sizing.hf_config import geometry_from_hf_config

MAX_CONFIG_BYTES = 4 * 2**20
"""Largest ``config.json`` read (published configs are a few KiB)."""

MAX_INDEX_BYTES = 64 * 2**20
"""Largest ``model.safetensors.index.json`` read (the largest published ones are a few MiB)."""

MAX_HEADER_BYTES = 100_000_000
"""Largest safetensors JSON header read: the format's own limit (100 MB)."""

MAX_SAFETENSORS_FILES = 4096
"""Most ``*.safetensors`` files summed in one folder."""

INDEX_NAME = "model.safetensors.index.json"

_DTYPE_BITS = {"F64": 64, "F32": 32, "F16": 16, "BF16": 16, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8,
               "I64": 64, "I32": 32, "I16": 16, "I8": 8, "U64": 64, "U32": 32, "U16": 16, "U8": 8, "BOOL": 8,
               "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}
"""Bits per element of the safetensors dtypes."""


def load_model(spec: str | Path, *, use_transformers: bool | None = None) -> ModelGeometry:
    """The geometry of the checkpoint at ``spec`` (a folder or its ``config.json``), weights from its files."""
    if not isinstance(spec, (str, Path)):
        raise SizingError(f"a checkpoint path must be a str or Path, got {type(spec).__name__}")
    try:
        path = Path(spec)
        is_dir = path.is_dir()
    except (OSError, ValueError) as exc:  # e.g. an embedded NUL or a lone surrogate
        raise SizingError(f"invalid checkpoint path {str(spec)[:80]!r}: {exc}") from exc
    return _load(path, is_dir, use_transformers)


def _load(path: Path, is_dir: bool, use_transformers: bool | None) -> ModelGeometry:
    folder = path if is_dir else path.parent
    config_path = path / "config.json" if is_dir else path
    config = read_json(config_path, MAX_CONFIG_BYTES)
    if not isinstance(config, dict):
        raise SizingError(f"{shown(config_path)} does not hold a JSON object")
    geometry = geometry_from_hf_config(config, name=folder.name or config_path.stem, use_transformers=use_transformers)
    found = checkpoint_weights(folder)
    if found is None:
        return geometry
    weights, source = found
    return replace(geometry, weights_bytes=weights, weights_source=source)


def read_json(path: Path, limit: int) -> Any:
    """The JSON value in the regular file ``path``, refusing files over ``limit`` bytes."""
    return _parse_json(read_bounded(path, limit), shown(path))


def _parse_json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting beyond the parser's stack
        raise SizingError(f"cannot read {what}: {type(exc).__name__}: {str(exc)[:200]}") from exc


def checkpoint_weights_bytes(folder: Path) -> int | None:
    """Bytes of all weights in ``folder``: the index's ``total_size``, else the safetensors headers, else ``None``."""
    found = checkpoint_weights(folder)
    return None if found is None else found[0]


def checkpoint_weights(folder: Path) -> tuple[int, str] | None:
    """``(bytes, source)`` of the weights in ``folder`` (source ``"checkpoint index"`` or
    ``"safetensors headers"``), or ``None`` when the folder has neither an index nor safetensors files.

    An index, once present under its name, is the answer or the error: a broken one is never
    skipped in favour of the headers.
    """
    index = folder / INDEX_NAME
    if os.path.lexists(index):
        return _index_total_size(index), "checkpoint index"
    files = _safetensors_files(folder)
    if not files:
        return None
    return sum(safetensors_bytes(f) for f in files), "safetensors headers"


def _safetensors_files(folder: Path) -> list[Path]:
    """The folder's ``*.safetensors`` names, sorted; refused beyond ``MAX_SAFETENSORS_FILES``."""
    names: list[str] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.endswith(".safetensors"):
                    names.append(entry.name)
                    if len(names) > MAX_SAFETENSORS_FILES:
                        raise SizingError(f"{shown(folder)} holds more than {MAX_SAFETENSORS_FILES} safetensors files")
    except (OSError, ValueError) as exc:
        raise SizingError(f"cannot list {shown(folder)}: {exc}") from exc
    return [folder / name for name in sorted(names)]


def _index_total_size(index: Path) -> int:
    data = read_json(index, MAX_INDEX_BYTES)
    metadata = data.get("metadata") if isinstance(data, dict) else None
    if not isinstance(metadata, dict):
        raise SizingError(f"{shown(index)} has no \"metadata\" object (got {_type_of(metadata)})")
    size = metadata.get("total_size")
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_BYTES:
        raise SizingError(f"{shown(index)}: metadata.total_size must be an integer in [0, {MAX_BYTES}], "
                          f"got {_type_of(size)}")
    return size


def _type_of(value: object) -> str:
    """A JSON value named by its type, with its value when short (never a whole document)."""
    text = repr(value)
    return f"{type(value).__name__} {text}" if len(text) <= 40 else type(value).__name__


def safetensors_bytes(path: Path) -> int:
    """Bytes of the tensors a safetensors file lists, from its header (dtype and shape of each)."""
    with open_regular_file(path) as handle:
        try:
            size = file_size(handle)
            prefix = handle.read(8)
            if len(prefix) != 8:
                raise SizingError(f"{shown(path)} is not a safetensors file (shorter than 8 bytes)")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES:
                raise SizingError(f"{shown(path)}: safetensors header of {length:,} bytes exceeds {MAX_HEADER_BYTES:,}")
            if 8 + length > size:
                raise SizingError(f"{shown(path)}: safetensors header of {length:,} bytes is longer than the file")
            header_bytes = handle.read(length)
        except OSError as exc:
            raise SizingError(f"cannot read {shown(path)}: {exc}") from exc
    if len(header_bytes) != length:
        raise SizingError(f"{shown(path)}: safetensors header truncated")
    header = _parse_json(header_bytes, f"{shown(path)} header")
    if not isinstance(header, dict):
        raise SizingError(f"{shown(path)}: safetensors header is not a JSON object")
    data_bytes = size - 8 - length
    return sum(_tensor_bytes(path, name, entry, data_bytes) for name, entry in header.items()
               if name != "__metadata__")


def _tensor_bytes(path: Path, name: str, entry: Any, data_bytes: int) -> int:
    """One tensor's bytes from dtype and shape, checked against its ``data_offsets`` and the file."""
    dtype = entry.get("dtype") if isinstance(entry, dict) else None
    if not isinstance(dtype, str) or dtype not in _DTYPE_BITS:
        raise SizingError(f"{shown(path)}: tensor {name[:80]!r} has no known safetensors dtype "
                          f"(got {_type_of(dtype)})")
    shape = entry.get("shape")
    if not isinstance(shape, list) or len(shape) > 16 or not all(type(d) is int and 0 <= d < 2**48 for d in shape):
        raise SizingError(f"{shown(path)}: tensor {name[:80]!r} has an invalid shape ({_type_of(shape)})")
    elements = 1
    for dim in shape:
        elements *= dim
    size = -(-elements * _DTYPE_BITS[dtype] // 8)
    offsets = entry.get("data_offsets")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
            and 0 <= offsets[0] and offsets[1] - offsets[0] == size and offsets[1] <= data_bytes):
        raise SizingError(f"{shown(path)}: tensor {name[:80]!r} data_offsets {_type_of(offsets)} do not hold "
                          f"{size} bytes inside the file's {data_bytes:,} data bytes")
    return size
