"""The int/symbolic arithmetic helpers and the layout functions on concrete values."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, strategies as st

from verikv.sizing import arith
from verikv.sizing.gpu import auto_block_size, kv_heads_per_rank
from verikv.sizing.mamba import mamba1_state_shapes, mamba2_state_shapes, unified_block_size
from verikv.sizing.tpu import auto_page_size, rpa_v3_alignment, rpa_v3_shape, tpu_mla_shape


@given(st.integers(-10**12, 10**12), st.integers(1, 10**6))
def test_division_helpers(a, b):
    assert arith.fdiv(a, b) == a // b
    assert arith.cdiv(a, b) * b >= a > (arith.cdiv(a, b) - 1) * b
    assert arith.align(a, b) % b == 0 and 0 <= arith.align(a, b) - a < b
    assert arith.imin(a, b) == min(a, b) and arith.imax(a, b) == max(a, b)


def test_ite_and_prod():
    assert arith.ite(True, 1, 2) == 1 and arith.ite(False, 1, 2) == 2
    assert arith.prod(()) == 1 and arith.prod((2, 3, 7)) == 42


def test_symbolic_value_without_backend_is_a_type_error(monkeypatch):
    monkeypatch.setattr(arith, "_backend", None)
    with pytest.raises(TypeError, match="no symbolic backend"):
        arith.fdiv(object(), 2)


def test_auto_page_size_exhaustive():
    # Every context length up to 2**17 and every supported alignment: a multiple of it, >= 16.
    for seqs in (1, 256, 2**16):
        for alignment in (1, 2, 4, 8, 32, 64):
            for mml in range(1, 2**17 + 1, 7):
                page = auto_page_size(mml, seqs, alignment)
                assert page % alignment == 0 and page >= 16


@pytest.mark.parametrize(
    "kv, hd, bits", list(itertools.product((1, 2, 3, 8, 40), (32, 64, 80, 96, 128, 192, 256), (8, 16, 32)))
)
def test_rpa_v3_shapes_meet_the_kernel_rules(kv, hd, bits):
    packing = 32 // bits
    shape = rpa_v3_shape(7, 4 * packing, kv, hd, bits)
    assert all(cond for _, cond in rpa_v3_alignment(shape, 4 * packing, kv, hd, bits))
    assert shape[0] == 7 and shape[3] == packing


def test_mla_and_gpu_helpers():
    assert tpu_mla_shape(3, 1024, 512, 64, 32) == (3, 32, 32, 640)
    assert tpu_mla_shape(3, 16, 512, 64, 2) == (3, 8, 2, 640)
    assert auto_block_size(16, 64) == 64 and auto_block_size(16, 128) == 128 and auto_block_size(16, 16) == 16
    assert [kv_heads_per_rank(8, tp) for tp in (1, 2, 8, 16)] == [8, 4, 1, 1]


def test_mamba_shapes():
    # Bamba's config defaults and a TP split
    assert mamba2_state_shapes(8192, 1, 256, 128, 64, 4, 1) == ((3, 8704), (128, 64, 256))
    assert mamba2_state_shapes(8192, 1, 256, 128, 64, 4, 2) == ((3, (8192 + 2 * 2 * 256) // 2), (64, 64, 256))
    assert mamba1_state_shapes(4096, 16, 4, 2) == ((3, 2048), (2048, 16))
    assert unified_block_size(4_246_528, 4_096, 16, 16) == 1_040
    assert unified_block_size(100, 4_096, 16, 64) == 64  # a larger requested block is kept
