"""GPU buffer layouts (vLLM backends): split K/V, paired K/V and the MLA latent.

FlashAttention and the ROCm kernel allocate ``(2, pages, page, heads, dim)``; FlashInfer and
Triton ``(pages, 2, page, heads, dim)``; MLA backends ``(pages, page, kv_lora_rank + rope)``,
and the packed ``fp8_ds_mla`` format ``(pages, page, 656)`` bytes. None of them pads, so the
bytes are the product of the shape. ``heads`` is per tensor-parallel rank: a rank keeps
``kv_heads // tp`` heads, or one replicated head when ``tp > kv_heads``.

Pure integer arithmetic through ``verikv.sizing.arith`` (runs on ints and on Z3 integers).
"""

from __future__ import annotations

from verikv.sizing.arith import SymInt, cdiv, fdiv, imax


def kv_heads_per_rank(kv_heads: SymInt, tp: SymInt) -> SymInt:
    """KV heads one tensor-parallel rank stores: ``kv_heads / tp``, or 1 (replicated) when ``tp >= kv_heads``.

    The planner accepts only ``kv_heads % tp == 0`` or ``tp % kv_heads == 0`` (as vLLM and
    tpu-inference do), so the division is exact.

    pre: kv_heads >= 1 and tp >= 1
    pre: kv_heads % tp == 0 or tp % kv_heads == 0
    post: __return__ >= 1
    post: __return__ * tp >= kv_heads
    """
    return imax(fdiv(kv_heads, tp), 1)


def gpu_kv_shape(
    num_pages: SymInt, page_size: SymInt, kv_heads: SymInt, head_dim: SymInt, kv_first: bool
) -> tuple[SymInt, ...]:
    """One layer's K/V buffer.

    ``(2, pages, page, heads, dim)`` if ``kv_first`` (FlashAttention, ROCm), else
    ``(pages, 2, page, heads, dim)`` (FlashInfer, Triton).
    """
    if kv_first:
        return (2, num_pages, page_size, kv_heads, head_dim)
    return (num_pages, 2, page_size, kv_heads, head_dim)


def gpu_mla_shape(num_pages: SymInt, page_size: SymInt, latent_width: SymInt) -> tuple[SymInt, ...]:
    """One layer's MLA latent buffer ``(pages, page, width)``; width = rank + rope (elements) or 656 (bytes)."""
    return (num_pages, page_size, latent_width)


def auto_block_size(default_page_size: int, page_multiple: int) -> int:
    """vLLM's block size when none is given: the kernel's default, rounded up to its multiple.

    pre: default_page_size >= 1 and page_multiple >= 1
    post: __return__ % page_multiple == 0
    post: __return__ >= default_page_size
    """
    return cdiv(default_page_size, page_multiple) * page_multiple
