"""Element types a KV cache or a recurrent state can be stored in, and how wide they are.

Names follow vLLM's ``--kv-cache-dtype`` vocabulary; ``"auto"`` means "the model's dtype" and
is resolved by the planner. ``fp8`` is an alias of ``fp8_e4m3`` (AMD MI300/MI325 store the FNUZ
variant of it; the width is the same). ``fp8_ds_mla`` is DeepSeek-V3.2's packed MLA format:
656 bytes per token (512 fp8 latent values, 16 bytes of fp32 scales, 64 bf16 rope values), so
it has no per-element width and only the GPU MLA layout accepts it.
"""

from __future__ import annotations

from dataclasses import dataclass

from verikv.errors import SizingError


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
    d.name: d
    for d in (
        KVDType("float32", 32),
        KVDType("bfloat16", 16),
        KVDType("float16", 16),
        KVDType("fp8_e4m3", 8),
        KVDType("fp8_e5m2", 8),
        KVDType("fp8_ds_mla", 0),
    )
}

ALIASES: dict[str, str] = {
    "fp32": "float32",
    "f32": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp8": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
}


def get_dtype(name: str) -> KVDType:
    """The dtype called ``name`` (an alias such as ``bf16`` or ``fp8`` is accepted)."""
    if not isinstance(name, str):
        raise SizingError(f"dtype must be a name, got {type(name).__name__} {name!r}")
    key = ALIASES.get(name.lower(), name.lower())
    if key not in DTYPES:
        known = ", ".join(sorted(DTYPES) + sorted(ALIASES))
        raise SizingError(f"unknown dtype {name!r}; known: {known}")
    return DTYPES[key]
