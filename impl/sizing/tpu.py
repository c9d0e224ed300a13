"""TPU buffer layouts: ragged paged attention v3 and the MLA latent cache.

RPA v3 stores K and V of a token in one buffer, interleaved per head (K0, V0, K1, V1, ...),
in a 5-D array ``(pages, page_size, groups, packing, lanes)``: ``packing = 32 // bits`` values
share one 32-bit word, the combined head axis ``2 * kv_heads`` is padded to a multiple of the
packing, and the head dim is padded to the 128 lanes of a vector register. A head dim of 64
takes the special layout where K and V of one head sit side by side in the 128 lanes, so only
``kv_heads`` rows are needed. The MLA cache has no head axis: tokens are packed ``p`` per row
(p = 32 in tpu-inference's MLA v2 kernel, 32 // bits in MLA v1 and EasyDeL) and the latent and
rope parts are each padded to 128 lanes.

Every function here is pure integer arithmetic through ``verikv.sizing.arith``, so the same
code runs on ints for planning and on Z3 integers for the sizing theorems. Inputs are assumed
validated (the planner does that); the ``post:`` lines are checked by CrossHair.
"""

from __future__ import annotations

from typing import Any

from verikv.sizing.arith import SymInt, align, cdiv, fdiv, ite, prod

LANES = 128


def packing(bits: SymInt) -> SymInt:
    """How many values of ``bits`` bits share one 32-bit word (bf16: 2, fp8: 4, f32: 1).

    pre: bits in (8, 16, 32)
    post: __return__ * bits == 32
    """
    return fdiv(32, bits)


def rpa_v3_shape(
    num_pages: SymInt, page_size: SymInt, kv_heads: SymInt, head_dim: SymInt, bits: SymInt
) -> tuple[SymInt, ...]:
    """Shape of one layer's RPA v3 buffer holding ``kv_heads`` KV heads (per device).

    pre: num_pages >= 0 and page_size >= 1 and kv_heads >= 1 and head_dim >= 1
    pre: bits in (8, 16, 32)
    post: __return__[4] % 128 == 0
    post: __return__[2] * __return__[3] >= (kv_heads if head_dim == 64 else 2 * kv_heads)
    post: (__return__[2] - 1) * __return__[3] < (kv_heads if head_dim == 64 else 2 * kv_heads)
    """
    p = packing(bits)
    hd64 = head_dim == 64
    groups = ite(hd64, cdiv(kv_heads, p), cdiv(2 * kv_heads, p))
    lanes = ite(hd64, LANES, align(head_dim, LANES))
    return (num_pages, page_size, groups, p, lanes)


def rpa_v3_alignment(
    shape: tuple[SymInt, ...], page_size: SymInt, kv_heads: SymInt, head_dim: SymInt, bits: SymInt
) -> tuple[tuple[str, Any], ...]:
    """The conditions RPA v3 puts on a buffer shape, as ``(description, condition)`` pairs.

    These restate the kernel's validator: packing axis = 32 // bits, page size
    a multiple of the packing, lanes a multiple of 128 covering the head dim (both K and V for
    head dim 64), and enough combined rows for every K and V head.
    """
    p = fdiv(32, bits)
    hd64 = head_dim == 64
    return (
        ("packing axis is 32 // bits", shape[3] == p),
        ("page size is a multiple of the packing", page_size % p == 0),
        ("lanes are a multiple of 128", shape[4] % LANES == 0),
        ("lanes hold the head dim (K and V of a head for head dim 64)",
         ite(hd64, shape[4] >= 2 * head_dim, shape[4] >= head_dim)),
        ("rows hold every K and V head", shape[2] * shape[3] >= ite(hd64, kv_heads, 2 * kv_heads)),
        ("one row is whole 32-bit words", shape[3] * bits == 32),
    )


def tpu_mla_token_packing(kernel_token_packing: int, bits: int) -> int:
    """Tokens per row of the MLA cache: the kernel's fixed value, or ``32 // bits`` when it has none (0).

    pre: kernel_token_packing >= 0
    pre: bits in (8, 16, 32)
    post: __return__ >= 1
    """
    return ite(kernel_token_packing > 0, kernel_token_packing, packing(bits))


def tpu_mla_shape(
    num_pages: SymInt, page_size: SymInt, kv_lora_rank: SymInt, rope_dim: SymInt, token_packing: SymInt
) -> tuple[SymInt, ...]:
    """Shape of one layer's MLA latent buffer: ``(pages, rows, token_packing, lanes)``.

    pre: num_pages >= 0 and page_size >= 1 and kv_lora_rank >= 1 and rope_dim >= 0 and token_packing >= 1
    post: __return__[3] % 128 == 0
    post: __return__[3] >= kv_lora_rank + rope_dim
    post: __return__[1] * __return__[2] >= page_size
    post: (__return__[1] - 1) * __return__[2] < page_size
    """
    rows = cdiv(page_size, token_packing)
    lanes = align(kv_lora_rank, LANES) + align(rope_dim, LANES)
    return (num_pages, rows, token_packing, lanes)


def buffer_bytes(shape: tuple[SymInt, ...], bits: SymInt) -> SymInt:
    """Bytes of a dense buffer of ``shape`` whose elements are ``bits`` wide (8, 16 or 32): no hidden padding.

    The TPU layouts above already carry their padding in the shape (checked against a real
    v5e log), so the product is what is allocated.
    """
    return prod(shape) * fdiv(bits, 8)


def auto_page_size(max_model_len: int, max_num_seqs: int, alignment: int) -> int:
    """tpu-inference's page-size choice, rounded up to ``alignment`` (the kernel's packing rule).

    Up to 8K context: ``next_pow2(max_model_len) // 16`` within [16, 256]; beyond: 16. Never
    below the page size that keeps one sequence's page-table row within its share of half of
    the 1 MiB SMEM: ``next_pow2(cdiv(max_model_len, 2**20 // 2 // max_num_seqs // 4))``.
    Needs ``max_num_seqs <= 2**16`` (the planner checks it). The result is a multiple of
    ``alignment`` and at least 16 (tested exhaustively over the supported range in
    tests/test_sizing_layouts.py; the power-of-two step is beyond CrossHair's exhaustive mode).
    """
    if max_model_len > 8192:
        heuristic = 16
    else:
        heuristic = min(max(_next_pow2(max_model_len) // 16, 16), 256)
    pages_per_seq = 2**20 // 2 // max_num_seqs // 4
    smem_min = _next_pow2(cdiv(max_model_len, pages_per_seq))
    return align(max(heuristic, smem_min), alignment)


def _next_pow2(n: int) -> int:
    """Smallest power of two >= n (n >= 1)."""
    return 1 << (n - 1).bit_length()
