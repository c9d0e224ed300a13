"""Attention kernel families: which buffer layout each allocates and which sizes it accepts.

Facts come from the kernels' own shape functions and validators (tpu-inference / ejkernel /
EasyDeL for TPU, vLLM backends for GPU). A manager page may be a multiple of the kernel's block (vLLM maps one
manager block to several kernel blocks), so the rule kept here is "page size is a multiple of
``page_multiple``" plus, where a kernel fixes it, an exact list of allowed page sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from verikv.errors import SizingError, describe

Layout = Literal["rpa-v3", "tpu-mla", "gpu-kv-first", "gpu-page-first", "gpu-mla"]
MIB = 2**20


@dataclass(frozen=True)
class Kernel:
    """One attention kernel family.

    layout: "rpa-v3" (TPU ragged paged attention v3: K/V interleaved, packed, 128 lanes),
    "tpu-mla" (TPU latent cache, tokens packed ``token_packing`` per row, 0 = dtype packing),
    "gpu-kv-first" ``(2, pages, page, heads, dim)``, "gpu-page-first" ``(pages, 2, page, heads,
    dim)``, "gpu-mla" ``(pages, page, latent)``.
    page_multiple: the page size must be a multiple of it; 0 means "of the dtype packing"
    (32 // bits), the TPU rule. allowed_page_sizes: when set, the only page sizes accepted.
    head_dims: when set, the only head sizes accepted; else ``head_dim_multiple`` divides the
    head size and it lies in ``[head_dim_min, head_dim_max]`` (0 = no upper bound).
    flat_int32_slots: the kernel (or its cache writer) addresses ``page * page_size + offset``
    as int32, so ``num_pages * page_size`` must fit; otherwise only page ids must (int32 page
    table, int64 slot mapping as in vLLM). workspace_bytes: fixed per-device scratch the
    backend allocates besides the cache.
    """

    name: str
    platform: Literal["tpu", "gpu"]
    layout: Layout
    kv_dtypes: tuple[str, ...]
    page_multiple: int
    default_page_size: int
    allowed_page_sizes: tuple[int, ...] | None = None
    head_dims: tuple[int, ...] | None = None
    head_dim_multiple: int = 1
    head_dim_min: int = 1
    head_dim_max: int = 0
    token_packing: int = 0
    flat_int32_slots: bool = False
    workspace_bytes: int = 0
    source: str = ""

    @property
    def is_mla(self) -> bool:
        """Whether this kernel stores one latent vector per token (DeepSeek-style MLA)."""
        return self.layout in ("tpu-mla", "gpu-mla")


#: every float KV dtype; the 16-bit floats with fp8 e4m3 (most GPU backends)
_FLOATS = ("float32", "bfloat16", "float16", "fp8_e4m3", "fp8_e5m2")
_HALF_AND_FP8 = ("bfloat16", "float16", "fp8_e4m3")


def _tpu(name: str, layout: Layout, page_multiple: int, default_page_size: int, source: str, **rules: Any) -> Kernel:
    """A tpu-inference kernel: every float KV dtype, slots addressed as flat int32."""
    return Kernel(name, "tpu", layout, _FLOATS, page_multiple, default_page_size, flat_int32_slots=True,
                  source=source, **rules)


def _gpu(name: str, layout: Layout, kv_dtypes: tuple[str, ...], block: int, source: str, **rules: Any) -> Kernel:
    """A vLLM GPU backend whose kernel block is ``block`` tokens: the page size is a multiple of
    it and defaults to it."""
    return Kernel(name, "gpu", layout, kv_dtypes, block, block, source=source, **rules)


KERNELS: dict[str, Kernel] = {
    k.name: k
    for k in (
        _tpu("tpu-rpa-v3", "rpa-v3", 0, 128,
             "tpu-inference kernels/ragged_paged_attention/v3 (get_kv_cache_shape, static_validate_inputs)"),
        _tpu("tpu-mla", "tpu-mla", 1, 1024, "tpu-inference kernels/mla/v2 (MLA_KV_PACKING_SIZE default 32)",
             token_packing=32),
        _tpu("tpu-mla-v1", "tpu-mla", 1, 128,
             "tpu-inference kernels/mla/v1 and EasyDeL mla_ragged_page (packing 32 // bits)", token_packing=0),
        _gpu("flash-attn", "gpu-kv-first", _HALF_AND_FP8, 16, "vLLM v1/attention/backends/flash_attn.py",
             head_dim_multiple=8, head_dim_max=256),
        _gpu("flashinfer", "gpu-page-first", (*_HALF_AND_FP8, "fp8_e5m2"), 16,
             "vLLM v1/attention/backends/flashinfer.py (kernel blocks 16/32/64, 256 MiB workspace)",
             head_dims=(64, 128, 256), workspace_bytes=256 * MIB),
        _gpu("triton", "gpu-page-first", _FLOATS, 16, "vLLM v1/attention/backends/triton_attn.py", head_dim_min=32),
        _gpu("rocm-attn", "gpu-kv-first", _HALF_AND_FP8, 16,
             "vLLM v1/attention/backends/rocm_attn.py (kernel blocks 16/32)", head_dim_min=32, head_dim_max=256),
        _gpu("flashmla", "gpu-mla", _HALF_AND_FP8, 64, "vLLM v1/attention/backends/mla/flashmla.py (block 64)"),
        _gpu("flashmla-sparse", "gpu-mla", ("fp8_ds_mla",), 64,
             "vLLM FlashMLA sparse (fp8_ds_mla, 656 B/token, block 64)", allowed_page_sizes=(64,)),
        _gpu("cutlass-mla", "gpu-mla", _HALF_AND_FP8, 128, "vLLM platforms/cuda.py (CUTLASS MLA forces block 128)"),
        Kernel("triton-mla", "gpu", "gpu-mla", ("bfloat16", "float16"), page_multiple=1, default_page_size=16,
               source="vLLM v1/attention/backends/mla/common.py"),
    )
}


def page_size_rule(page_size: Any, multiple: Any) -> tuple[tuple[str, Any], ...]:
    """A kernel's page-size rule as ``(description, condition)`` pairs (conditions may be symbolic)."""
    return (("page size is a multiple of the kernel block / packing", page_size % multiple == 0),)


def get_kernel(name: str) -> Kernel:
    """The kernel family called ``name``."""
    if not isinstance(name, str) or name not in KERNELS:
        raise SizingError(f"unknown kernel {describe(name)}; known: {', '.join(sorted(KERNELS))}")
    return KERNELS[name]
