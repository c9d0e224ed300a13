"""Element types a KV cache or a recurrent state can be sized in, and how wide they are.

Names follow vLLM's ``--kv-cache-dtype`` vocabulary; ``"auto"`` means "the model's dtype" and
is resolved by the planner. The types and their widths come from the one table in
``verikv.dtypes``: these are its types that have a vLLM KV cache name, and every spelling that
table accepts for them (``bf16``, ``fp8``, ``float8_e4m3fn``, ...) is accepted here.
``fp8_ds_mla`` is DeepSeek-V3.2's packed MLA format: 656 bytes per token (512 fp8 latent
values, 16 bytes of fp32 scales, 64 bf16 rope values), so it has no per-element width and only
the GPU MLA layout accepts it.
"""

from __future__ import annotations

from dataclasses import dataclass

from verikv import dtypes
from verikv.errors import SizingError, describe


@dataclass(frozen=True)
class KVDType:
    """One storage type: ``bits`` per element (0 for the packed ``fp8_ds_mla`` format)."""

    name: str
    bits: int

    @property
    def itemsize(self) -> int:
        """Bytes per element (``bits // 8``); 0 for the packed MLA format."""
        return self.bits // 8


FP8_DS_MLA_BYTES_PER_TOKEN = 656
"""Bytes per token and layer of the ``fp8_ds_mla`` latent: 512 fp8 + 4 fp32 scales + 64 bf16 rope."""

DTYPES: dict[str, KVDType] = {
    t.kv_cache_name: KVDType(t.kv_cache_name, t.bits) for t in dtypes.ELEMENT_TYPES.values() if t.kv_cache_name
}
"""The types sizing accepts, by vLLM KV cache name."""

ALIASES: dict[str, str] = {
    other: _t.kv_cache_name
    for other in [*dtypes.ALIASES, *dtypes.ELEMENT_TYPES]
    if (_t := dtypes.element_type(other)) is not None and _t.kv_cache_name and other != _t.kv_cache_name
}
"""Other accepted spellings of the names in ``DTYPES`` (``bf16``, ``fp8``, ``float8_e4m3fn``, ...)."""


def get_dtype(name: str) -> KVDType:
    """The dtype called ``name`` (an alias such as ``bf16`` or ``fp8`` is accepted)."""
    if not isinstance(name, str):
        raise SizingError(f"dtype must be a name, got {type(name).__name__} {describe(name)}")
    found = dtypes.element_type(name)
    if found is None or found.kv_cache_name is None:
        known = ", ".join(sorted(DTYPES) + sorted(ALIASES))
        raise SizingError(f"unknown dtype {describe(name)}; known: {known}")
    return DTYPES[found.kv_cache_name]
