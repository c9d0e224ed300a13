"""Element types a KV cache or a recurrent state can be stored in: the one table of names and widths.

Two naming styles meet here. Cache specs use NumPy / ``ml_dtypes`` names (``"float8_e4m3fn"``),
which are the canonical names of this table; the sizing planner uses vLLM's
``--kv-cache-dtype`` vocabulary (``"fp8_e4m3"``), given per type as ``kv_cache_name`` (``None``
where vLLM has no such KV cache dtype). Short and vLLM-style spellings (``bf16``, ``fp8``,
``half``) are ``ALIASES`` of canonical names. ``fp8_ds_mla`` is DeepSeek-V3.2's packed MLA format
(656 bytes per token, see ``verikv.sizing.dtypes``): it has no per-element width, so its
``bits`` is 0.

This module only answers lookups; each caller raises its own typed error (``CacheSpecError``
for specs, ``SizingError`` for sizing) for a name it does not accept.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ElementType:
    """One element type: canonical ``name``, ``bits`` per element (0: packed, no per-element
    width) and its vLLM ``--kv-cache-dtype`` name, if vLLM sizes a KV cache in it."""

    name: str
    bits: int
    kv_cache_name: str | None = None


ELEMENT_TYPES: dict[str, ElementType] = {
    t.name: t
    for t in (
        ElementType("float64", 64),
        ElementType("float32", 32, "float32"),
        ElementType("float16", 16, "float16"),
        ElementType("bfloat16", 16, "bfloat16"),
        ElementType("float8_e4m3fn", 8, "fp8_e4m3"),
        ElementType("float8_e4m3fnuz", 8),
        ElementType("float8_e4m3b11fnuz", 8),
        ElementType("float8_e4m3", 8),
        ElementType("float8_e5m2", 8, "fp8_e5m2"),
        ElementType("float8_e5m2fnuz", 8),
        ElementType("float8_e8m0fnu", 8),
        ElementType("fp8_ds_mla", 0, "fp8_ds_mla"),
        ElementType("int64", 64),
        ElementType("int32", 32),
        ElementType("int16", 16),
        ElementType("int8", 8),
        ElementType("uint64", 64),
        ElementType("uint32", 32),
        ElementType("uint16", 16),
        ElementType("uint8", 8),
        ElementType("float6_e2m3fn", 6),
        ElementType("float6_e3m2fn", 6),
        ElementType("float4_e2m1fn", 4),
        ElementType("int4", 4),
        ElementType("uint4", 4),
        ElementType("int2", 2),
        ElementType("uint2", 2),
    )
}
"""Every element type verikv knows, by canonical (NumPy / ``ml_dtypes``) name."""

ALIASES: dict[str, str] = {
    "fp32": "float32",
    "f32": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp8": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
}
"""Other accepted spellings (lowercase) of canonical names. AMD MI300/MI325 store ``fp8`` in the
FNUZ variant of e4m3; the width is the same."""


def element_type(name: str) -> ElementType | None:
    """The element type called ``name`` (case-insensitive, aliases accepted), or ``None``."""
    key = name.lower()
    return ELEMENT_TYPES.get(ALIASES.get(key, key))
