"""Reading a model from disk: its ``config.json`` and the size of its weights.

``load_model(path)`` takes a checkpoint folder (or a ``config.json`` inside one) and returns
the ``ModelGeometry`` of ``hf_config``, with ``weights_bytes`` taken from the checkpoint when
it says: ``model.safetensors.index.json``'s ``metadata.total_size``, else the sum of the
tensors listed in the headers of the folder's ``*.safetensors`` files (a safetensors file
starts with an 8-byte little-endian header length and a JSON header giving each tensor's
dtype, shape and byte range). Without either, the config's own estimate (dense models) stands.

Every input is bounded: a config file over ``MAX_CONFIG_BYTES``, a header over
``MAX_HEADER_BYTES`` or JSON nested deeper than ``hf_defaults.MAX_DEPTH`` is refused with a
``SizingError``, never parsed at any cost.
"""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

from verikv.errors import SizingError
from verikv.sizing.geometry import ModelGeometry
from verikv.sizing.hf_config import geometry_from_hf_config
from verikv.sizing.hf_defaults import check_json_value

MAX_CONFIG_BYTES = 4 * 2**20
"""Largest ``config.json`` / index file read (published configs are a few KiB)."""

MAX_HEADER_BYTES = 100 * 2**20
"""Largest safetensors JSON header read (the format's own limit is 100 MB)."""

MAX_SAFETENSORS_FILES = 4096
"""Most ``*.safetensors`` files summed in one folder."""

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
        raise SizingError(f"{config_path} does not hold a JSON object")
    geometry = geometry_from_hf_config(config, name=folder.name or config_path.stem, use_transformers=use_transformers)
    weights = checkpoint_weights_bytes(folder)
    return geometry if weights is None else replace(geometry, weights_bytes=weights)


def read_json(path: Path, limit: int) -> Any:
    """The JSON value in ``path``, refusing files over ``limit`` bytes and too deep nesting."""
    try:
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except (OSError, ValueError) as exc:  # ValueError: a NUL or an unencodable character in the path
        raise SizingError(f"cannot read {str(path)!r}: {exc!r}") from exc
    if len(data) > limit:
        raise SizingError(f"{path} is larger than {limit:,} bytes")
    return _parse_json(data, str(path))


def _parse_json(data: bytes, what: str) -> Any:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting beyond the parser's stack
        raise SizingError(f"cannot read {what}: {type(exc).__name__}: {str(exc)[:200]}") from exc
    check_json_value(value, what)
    return value


def checkpoint_weights_bytes(folder: Path) -> int | None:
    """Bytes of all weights in ``folder``: the index's ``total_size``, else the safetensors headers, else ``None``."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return _index_total_size(index)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    if len(files) > MAX_SAFETENSORS_FILES:
        raise SizingError(f"{folder} holds more than {MAX_SAFETENSORS_FILES} safetensors files")
    return sum(safetensors_bytes(f) for f in files)


def _index_total_size(index: Path) -> int:
    data = read_json(index, MAX_CONFIG_BYTES * 16)
    size = data.get("metadata", {}).get("total_size") if isinstance(data, dict) else None
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise SizingError(f"{index} has no integer metadata.total_size (got {size!r})")
    return size


def safetensors_bytes(path: Path) -> int:
    """Bytes of the tensors a safetensors file lists, from its header (dtype and shape of each)."""
    try:
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) != 8:
                raise SizingError(f"{path} is not a safetensors file (shorter than 8 bytes)")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES:
                raise SizingError(f"{path}: safetensors header of {length:,} bytes exceeds {MAX_HEADER_BYTES:,}")
            header_bytes = handle.read(length)
    except OSError as exc:
        raise SizingError(f"cannot read {str(path)!r}: {exc!r}") from exc
    if len(header_bytes) != length:
        raise SizingError(f"{path}: safetensors header truncated")
    header = _parse_json(header_bytes, f"{path} header")
    if not isinstance(header, dict):
        raise SizingError(f"{path}: safetensors header is not a JSON object")
    return sum(_tensor_bytes(path, name, entry) for name, entry in header.items() if name != "__metadata__")


def _tensor_bytes(path: Path, name: str, entry: Any) -> int:
    """One tensor's bytes from dtype and shape, checked against its ``data_offsets``."""
    if not isinstance(entry, dict) or entry.get("dtype") not in _DTYPE_BITS:
        dtype = entry.get("dtype") if isinstance(entry, dict) else None
        raise SizingError(f"{path}: tensor {name!r} has no known safetensors dtype (got {dtype!r})")
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(type(d) is int and 0 <= d < 2**48 for d in shape) or len(shape) > 16:
        raise SizingError(f"{path}: tensor {name!r} has an invalid shape {shape!r}")
    elements = 1
    for dim in shape:
        elements *= dim
    size = -(-elements * _DTYPE_BITS[entry["dtype"]] // 8)
    offsets = entry.get("data_offsets")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
            and offsets[1] - offsets[0] == size):
        raise SizingError(f"{path}: tensor {name!r} data_offsets {offsets!r} do not match {size} bytes")
    return size
