"""Mamba state pages and the attention/Mamba page-size unification of hybrid models.

A Mamba layer keeps, per request, a convolution state and an SSM state (vLLM's
``MambaStateShapeCalculator``, per tensor-parallel rank):

* Mamba2: conv ``(conv_kernel - 1, (intermediate + 2 * n_groups * d_state) / tp)`` with
  ``n_groups`` replicated up to ``tp`` when it does not divide it, and ssm
  ``(num_heads / tp, head_dim, d_state)``;
* Mamba1: conv ``(conv_kernel - 1, intermediate / tp)`` and ssm ``(intermediate / tp, d_state)``.

On GPU every page of a hybrid model must have one size, because one tensor is shared by one
layer of every group. The attention block size is raised to the smallest multiple of the
kernel alignment whose page is at least the Mamba state, and the Mamba page is padded up to
the attention page exactly (vLLM ``HybridAttentionMambaModelConfig``).

The unification arithmetic runs on ints and on Z3 integers (``verikv.sizing.arith``).
"""

from __future__ import annotations

from verikv.sizing.arith import SymInt, cdiv, imax


def mamba2_state_shapes(
    intermediate_size: int, n_groups: int, d_state: int, num_heads: int, head_dim: int, conv_kernel: int, tp: int
) -> tuple[tuple[int, int], tuple[int, int, int]]:
    """Conv and SSM state shapes of one Mamba2 layer on one TP rank (inputs already validated).

    pre: intermediate_size >= 1 and n_groups >= 1 and d_state >= 1 and num_heads >= 1
    pre: head_dim >= 1 and conv_kernel >= 2 and tp >= 1
    pre: num_heads % tp == 0 and (n_groups % tp == 0 or tp % n_groups == 0)
    pre: (intermediate_size + 2 * (n_groups if n_groups % tp == 0 else tp) * d_state) % tp == 0
    post: __return__[1][0] * tp == num_heads
    """
    groups = n_groups if n_groups % tp == 0 else tp
    conv_dim = (intermediate_size + 2 * groups * d_state) // tp
    return ((conv_kernel - 1, conv_dim), (num_heads // tp, head_dim, d_state))


def mamba1_state_shapes(
    intermediate_size: int, d_state: int, conv_kernel: int, tp: int
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Conv and SSM state shapes of one Mamba1 layer on one TP rank (inputs already validated).

    pre: intermediate_size >= 1 and d_state >= 1 and conv_kernel >= 2 and tp >= 1
    pre: intermediate_size % tp == 0
    post: __return__[1][0] * tp == intermediate_size
    """
    per_rank = intermediate_size // tp
    return ((conv_kernel - 1, per_rank), (per_rank, d_state))


def unified_block_size(
    mamba_page_bytes: SymInt, attn_bytes_per_token: SymInt, alignment: SymInt, block_size: SymInt
) -> SymInt:
    """Attention block size making one attention page hold a Mamba state page.

    The smallest multiple of ``alignment`` whose page is at least ``mamba_page_bytes``, or
    ``block_size`` if that is larger (vLLM keeps a larger requested block).

    pre: mamba_page_bytes >= 1 and attn_bytes_per_token >= 1 and alignment >= 1 and block_size >= 1
    pre: block_size % alignment == 0
    post: __return__ % alignment == 0
    post: __return__ * attn_bytes_per_token >= mamba_page_bytes
    post: __return__ == block_size or (__return__ - alignment) * attn_bytes_per_token < mamba_page_bytes
    """
    needed = alignment * cdiv(mamba_page_bytes, alignment * attn_bytes_per_token)
    return imax(needed, block_size)
