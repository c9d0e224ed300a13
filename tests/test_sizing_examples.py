"""Worked sizing examples (vLLM, tpu-inference and EasyDeL rules, published logs), reproduced by the planner.

Every expected number below is the worked example's; the planner computes it from the model
geometry, the device and the stated rule (per device, then times the DP size).
"""

from __future__ import annotations

import math

import pytest

from verikv.sizing import (
    AttentionLayer,
    ModelGeometry,
    describe_accelerator,
    get_preset,
    plan_kv_cache,
    uniform_model,
)
from verikv.sizing.budget import index_page_limit
from verikv.sizing.catalog import GiB, MiB
from verikv.sizing.dtypes import get_dtype
from verikv.sizing.kernels import get_kernel
from verikv.sizing.layers import layer_arrays
from verikv.sizing.tpu import auto_page_size

V6E = 33_543_694_581
V5E = 16_911_433_728
EASYDEL_MARGIN = 256 * MiB


def allocated_bytes_per_device(plan) -> int:
    """What the reported buffers really occupy on one device, from their shapes."""
    return sum(b.num_buffers * math.prod(b.device_shape)
               * (8 if b.page.dtype == "uint8" else get_dtype(b.page.dtype).bits) // 8
               for b in plan.buffers)


def check_invariants(plan) -> None:
    assert allocated_bytes_per_device(plan) == plan.kv_bytes_per_device
    assert plan.kv_bytes_per_device <= plan.budget_bytes
    assert plan.budget_bytes - plan.kv_bytes_per_device < plan.page_bytes_per_device
    assert plan.num_pages == plan.pages_per_shard * plan.dp


# ---- bytes per page and TPU page shapes -------------------------------------------------

@pytest.mark.parametrize("model, dtype, tpu_shape, gpu_page_16", [
    ("llama-3-8b", "bfloat16", (16, 8, 2, 128), 65_536),
    ("llama-3-8b", "fp8", (16, 4, 4, 128), 32_768),
    ("llama-3-70b", "bfloat16", (16, 8, 2, 128), 65_536),
    ("qwen2.5-7b", "bfloat16", (16, 4, 2, 128), 32_768),
    ("qwen2.5-7b", "fp8", (16, 2, 4, 128), 16_384),
    ("gemma-2-9b", "bfloat16", (16, 8, 2, 256), 131_072),
    ("gemma-3-27b", "bfloat16", (16, 16, 2, 128), 131_072),
    ("gemma-3-1b", "bfloat16", (16, 1, 2, 256), 16_384),
    ("gemma-3-1b", "fp8", (16, 1, 4, 256), 8_192),
])
def test_page_shapes_and_bytes(model, dtype, tpu_shape, gpu_page_16):
    geometry = get_preset(model)
    kv = get_dtype(dtype).name
    tpu = layer_arrays(geometry.layers[0], get_kernel("tpu-rpa-v3"), kv, geometry.dtype, 16, 1)[0]
    gpu = layer_arrays(geometry.layers[0], get_kernel("triton"), kv, geometry.dtype, 16, 1)[0]
    assert tpu.device_shape == (1, *tpu_shape)
    assert gpu.page_bytes == gpu_page_16
    assert tpu.page_bytes == math.prod(tpu_shape) * get_dtype(kv).itemsize


def test_gemma_3_1b_fp8_costs_bf16_bytes_on_tpu():
    # One KV head: 2 combined heads padded to the fp8 packing of 4.
    g = get_preset("gemma-3-1b")
    for ps, tpu_layer in ((16, 16_384), (64, 65_536), (128, 131_072)):
        page = layer_arrays(g.layers[0], get_kernel("tpu-rpa-v3"), "fp8_e4m3", g.dtype, ps, 1)[0]
        assert page.page_bytes == tpu_layer
        assert page.unpadded_bytes == tpu_layer // 2


def test_head_dim_64_layout():
    layer = AttentionLayer(8, 64)
    page = layer_arrays(layer, get_kernel("tpu-rpa-v3"), "bfloat16", "bfloat16", 16, 1)[0]
    assert page.device_shape == (1, 16, 4, 2, 128)
    assert page.page_bytes // 16 == 2_048 == page.unpadded_bytes // 16


def test_mla_layouts_deepseek_v3():
    layer = get_preset("deepseek-v3").layers[0]
    rows = {
        ("flashmla", "bfloat16", 64): 73_728,
        ("flashmla", "fp8_e4m3", 64): 36_864,
        ("flashmla-sparse", "fp8_ds_mla", 64): 41_984,
        ("triton-mla", "bfloat16", 1024): 1_179_648,
    }
    for (kernel, dtype, ps), expected in rows.items():
        assert layer_arrays(layer, get_kernel(kernel), dtype, "bfloat16", ps, 1)[0].page_bytes == expected
    tpu = layer_arrays(layer, get_kernel("tpu-mla"), "bfloat16", "bfloat16", 1024, 1)[0]
    assert tpu.device_shape == (1, 32, 32, 640) and tpu.page_bytes == 1_310_720
    easydel = layer_arrays(layer, get_kernel("tpu-mla-v1"), "bfloat16", "bfloat16", 1024, 1)[0]
    assert easydel.device_shape == (1, 512, 2, 640) and easydel.page_bytes == 1_310_720
    # page 16: token packing 32 doubles the page against EasyDeL's packing of 2
    assert layer_arrays(layer, get_kernel("tpu-mla"), "bfloat16", "bfloat16", 16, 1)[0].page_bytes == 40_960
    assert layer_arrays(layer, get_kernel("tpu-mla-v1"), "bfloat16", "bfloat16", 16, 1)[0].page_bytes == 20_480


# ---- tensor parallelism on TPU ----------------------------------------------------------

@pytest.mark.parametrize("tp, dtype, shard_shape, global_page, gpu_rank_page", [
    (1, "bfloat16", (16, 8, 2, 128), 65_536, 65_536),
    (8, "bfloat16", (16, 1, 2, 128), 65_536, 8_192),
    (8, "fp8_e4m3", (16, 1, 4, 128), 65_536, 4_096),
    (16, "bfloat16", (16, 1, 2, 128), 131_072, 8_192),
])
def test_tp_padding_llama_3_70b(tp, dtype, shard_shape, global_page, gpu_rank_page):
    layer = get_preset("llama-3-70b").layers[0]
    tpu = layer_arrays(layer, get_kernel("tpu-rpa-v3"), dtype, "bfloat16", 16, tp)[0]
    assert tpu.device_shape == (1, *shard_shape)
    assert math.prod(tpu.global_shape) * get_dtype(dtype).itemsize == global_page
    assert layer_arrays(layer, get_kernel("triton"), dtype, "bfloat16", 16, tp)[0].page_bytes == gpu_rank_page


# ---- vLLM rule (GPU) ----------------------------------------------------------------------

@pytest.mark.parametrize("model, device, tp, kv_dtype, kernel, blocks", [
    ("llama-3-8b", "h100-sxm", 1, "auto", None, 28_831),
    ("llama-3-8b", "h100-sxm", 1, "fp8", None, 57_663),
    ("llama-3-8b", "a100-40", 1, "auto", None, 10_582),
    ("llama-3-70b", "h100-sxm", 8, "auto", None, 89_854),
    ("llama-3-70b", "h200", 4, "auto", None, 76_158),
    ("llama-3-70b", "mi300x", 1, "auto", None, 8_417),
    ("qwen2.5-7b", "h100-sxm", 1, "auto", None, 66_805),
    ("qwen2.5-7b", "a100-40", 1, "auto", None, 25_093),
])
def test_vllm_rule_gpu(model, device, tp, kv_dtype, kernel, blocks):
    plan = plan_kv_cache(get_preset(model), device, tp=tp, kv_dtype=kv_dtype, page_size=16, max_model_len=8192,
                         kernel=kernel)
    assert plan.num_pages == blocks
    assert plan.capacity_tokens == blocks * 16
    check_invariants(plan)


# ---- tpu-inference rule ------------------------------------------------------------------

@pytest.mark.parametrize("model, device, tp, page, blocks", [
    ("llama-3-8b", "tpu-v6e", 1, 128, 842),
    ("llama-3-8b", "tpu-v5e", 4, 128, 2_671),
    ("llama-3-70b", "tpu-v6e", 8, 64, 4_787),
    ("qwen2.5-7b", "tpu-v6e", 1, 128, 2_037),
])
def test_tpu_inference_rule(model, device, tp, page, blocks):
    plan = plan_kv_cache(get_preset(model), device, tp=tp, page_size=page, max_model_len=8192)
    assert plan.num_pages == blocks
    check_invariants(plan)


# ---- EasyDeL rule (utilisation of free memory, 256 MiB margin) ----------------------------

@pytest.mark.parametrize("model, device, tp, pages, shape", [
    ("llama-3-8b", "tpu-v6e", 1, 921, (921, 128, 8, 2, 128)),
    ("llama-3-8b", "tpu-v5e", 4, 2_703, (2_703, 128, 8, 2, 128)),
    ("llama-3-70b", "tpu-v6e", 8, 2_679, (2_679, 128, 8, 2, 128)),
    ("qwen2.5-7b", "tpu-v6e", 1, 2_208, (2_208, 128, 4, 2, 128)),
])
def test_easydel_rule(model, device, tp, pages, shape):
    plan = plan_kv_cache(get_preset(model), device, tp=tp, page_size=128, max_model_len=8192,
                         utilization_of="free", reserved_bytes=EASYDEL_MARGIN)
    assert plan.num_pages == pages
    assert plan.buffers[0].shape == shape
    check_invariants(plan)


def test_easydel_llama_3_8b_2160_pages():
    # eSurge's example: 40 GiB free, utilisation 0.85 of free memory, 256 MiB margin, page 128.
    device = describe_accelerator("40gib-free", 40 * GiB, "tpu")
    plan = plan_kv_cache(get_preset("llama-3-8b"), device, page_size=128, utilization=0.85,
                         utilization_of="free", weights_bytes=0, reserved_bytes=EASYDEL_MARGIN)
    assert plan.budget_bytes == 36_238_786_560
    assert plan.page_bytes_per_device == 16_777_216
    assert plan.num_pages == 2_160 and plan.usable_pages == 2_159
    assert plan.kv_bytes_per_device == plan.budget_bytes  # exactly full
    assert plan.capacity_tokens == 276_480


def test_same_utilisation_two_rules():
    # With the same 0.9, the free-memory rule gives KV more than the total-memory rule.
    g = get_preset("llama-3-8b")
    total = plan_kv_cache(g, "tpu-v6e", page_size=128)
    free = plan_kv_cache(g, "tpu-v6e", page_size=128, utilization_of="free")
    assert total.budget_bytes == 14_128_802_626
    assert free.budget_bytes == 15_734_854_876
    assert free.num_pages > total.num_pages


# ---- the tpu-inference Gemma-3-1B log on TPU v5e -----------------------------------------

def gemma_log_plan(in_use: int):
    return plan_kv_cache(get_preset("gemma-3-1b"), "tpu-v5e", max_model_len=512, utilization=0.92,
                         weights_bytes=0, in_use_bytes=in_use)


def test_gemma_3_1b_v5e_log():
    # Log: 15.75 GiB limit, utilisation 0.92, 1.86 GiB in use, num_blocks 15,912 of (32, 1, 2, 256) bf16,
    # 509,184 tokens. The avail implied by 15,912 blocks is [13,556,514,816, 13,557,366,783] B, so
    # "in use" is any value in the interval below; both ends give exactly the logged plan.
    capped = int(V5E * 0.92)
    for in_use in (capped - 13_557_366_783, capped - 13_556_514_816):
        plan = gemma_log_plan(in_use)
        assert plan.page_size == 32
        assert plan.buffers[0].shape == (15_912, 32, 1, 2, 256)
        assert plan.buffers[0].page.dtype == "bfloat16" and len(plan.buffers[0].layers) == 26
        assert plan.page_bytes_per_device == 851_968
        assert plan.num_pages == 15_912
        assert plan.capacity_tokens == 509_184
        assert round(in_use / GiB, 2) == 1.86
        check_invariants(plan)
    assert gemma_log_plan(capped - 13_557_366_783 - 1).num_pages == 15_913
    assert gemma_log_plan(capped - 13_556_514_816 + 1).num_pages == 15_911


# ---- MLA (DeepSeek-V3) -------------------------------------------------------------------

@pytest.mark.parametrize("device, kv_dtype, kernel, blocks", [
    ("h200", "bfloat16", "flashmla", 11_389),
    ("h200", "fp8_e4m3", "flashmla", 22_779),
    ("h200", "fp8_ds_mla", "flashmla-sparse", 20_001),
    ("b200", "bfloat16", "flashmla", 19_675),
    ("mi300x", "bfloat16", "triton-mla", 22_538),
])
def test_mla_gpu_tp8(device, kv_dtype, kernel, blocks):
    plan = plan_kv_cache(get_preset("deepseek-v3"), device, tp=8, kv_dtype=kv_dtype, kernel=kernel,
                         page_size=64, max_model_len=8192)
    assert plan.num_pages == blocks
    assert any("replicated" in n for n in plan.notes)
    check_invariants(plan)


def test_mla_tpu7x_easydel_and_tpu_inference():
    g = get_preset("deepseek-v3")
    common = dict(page_size=1024, max_model_len=8192, weights_shards=16)
    easydel = dict(utilization_of="free", reserved_bytes=EASYDEL_MARGIN, kernel="tpu-mla-v1")
    replicated = plan_kv_cache(g, "tpu-v7", tp=16, **common, **easydel)
    assert replicated.budget_bytes == 54_759_108_137
    assert replicated.page_bytes_per_device == 79_953_920
    assert replicated.num_pages == 684 and replicated.capacity_tokens == 700_416
    sharded = plan_kv_cache(g, "tpu-v7", dp=16, **common, **easydel)
    assert sharded.num_pages == 10_944 and sharded.capacity_tokens == 11_206_656
    # tpu-inference's summed formula gives 10,172 blocks, rounded down to the 16 DP shards: 10,160.
    summed = plan_kv_cache(g, "tpu-v7", dp=16, **common)
    assert summed.num_pages == 10_172 // 16 * 16 == 10_160
    for plan in (replicated, sharded, summed):
        check_invariants(plan)


# ---- sliding-window models with the hybrid allocator --------------------------------------

def test_gemma_2_9b_a100_80():
    g = get_preset("gemma-2-9b")
    assert g.weights_bytes == 18_483_411_968
    plan = plan_kv_cache(g, "a100-80", page_size=16, max_model_len=8192, max_num_batched_tokens=8192)
    assert plan.num_pages == 21_371
    assert [grp.kind for grp in plan.groups] == ["sliding", "full"]
    assert plan.buffers[0].num_buffers == 21
    assert plan.pages_per_request == 1_025
    assert plan.max_concurrent_requests == 20  # 21,370 // 1,025 (concurrency 20.85)
    smaller_steps = plan_kv_cache(g, "a100-80", page_size=16, max_model_len=8192, max_num_batched_tokens=2048)
    assert smaller_steps.pages_per_request == 512 + 385
    assert smaller_steps.max_concurrent_requests == 23  # 23.8
    check_invariants(plan)


def test_gemma_3_27b_h100():
    plan = plan_kv_cache(get_preset("gemma-3-27b"), "h100-sxm", page_size=16, max_model_len=32_768,
                         max_num_batched_tokens=8192, weights_bytes=54_000_000_000)
    assert plan.budget_bytes == 22_525_181_337
    assert plan.num_pages == 17_185
    kinds = [grp.kind for grp in plan.groups]
    assert kinds.count("full") == 1 and kinds.count("sliding") == 6
    assert plan.buffers[0].num_buffers == 10
    assert plan.pages_per_request == 2_048 + 6 * 577 == 5_510
    assert plan.max_concurrent_requests == 3
    check_invariants(plan)


# ---- attention + Mamba2 hybrid -------------------------------------------------------------

def test_bamba_h100():
    plan = plan_kv_cache(get_preset("bamba-9b-hybrid"), "h100-sxm", max_model_len=8192)
    assert plan.page_size == 1_040
    assert plan.page_bytes_per_device == 3 * 4_259_840
    assert plan.num_pages == 4_457
    assert plan.pages_per_request == 18
    assert plan.max_concurrent_requests == 247
    mamba = [g.spec for g in plan.groups if g.kind == "mamba"]
    assert len(mamba) == 10
    assert mamba[0].raw_page_size_bytes == 4_246_528 and mamba[0].page_size_bytes == 4_259_840
    check_invariants(plan)


def test_bamba_fp32_ssm_state():
    base = get_preset("bamba-9b-hybrid")
    layers = tuple(
        layer if layer.kind != "mamba" else type(layer)(**{**layer.__dict__, "ssm_dtype": "float32"})
        for layer in base.layers
    )
    g = ModelGeometry(base.name, layers, base.dtype, base.weights_bytes, base.max_model_len)
    plan = plan_kv_cache(g, "h100-sxm")
    assert plan.page_size == 2_064
    assert plan.page_bytes_per_device == 3 * 8_454_144
    assert next(g.spec for g in plan.groups if g.kind == "mamba").raw_page_size_bytes == 8_440_832


# ---- page-size heuristics and index limits -------------------------------------------------

@pytest.mark.parametrize("max_model_len, max_num_seqs, page", [
    (512, 256, 32), (2_048, 256, 128), (8_192, 256, 256), (32_768, 256, 64), (131_072, 256, 256),
    (131_072, 512, 512),
])
def test_tpu_page_size_rule(max_model_len, max_num_seqs, page):
    assert auto_page_size(max_model_len, max_num_seqs, 2) == page


@pytest.mark.parametrize("page, max_pages", [
    (16, 134_217_727), (64, 33_554_431), (128, 16_777_215), (256, 8_388_607), (1_024, 2_097_151),
])
def test_int32_flat_slot_limit(page, max_pages):
    assert index_page_limit(1, page) == max_pages


def test_int32_cap_is_reported():
    # A tiny page on a big budget: the int32 flat-slot limit binds before memory does.
    device = describe_accelerator("huge", 2**50, "tpu")
    model = uniform_model("tiny", 1, 1, 128)
    plan = plan_kv_cache(model, device, page_size=2, max_model_len=16, weights_bytes=0)
    assert plan.limited_by == "int32 index"
    assert plan.num_pages * plan.page_size <= 2**31 - 1 < (plan.num_pages + 1) * plan.page_size


# ---- padded bytes: where EasyDeL's unpadded sizing overshoots its budget ----------------------

@pytest.mark.parametrize("model, tp, kv_dtype, ratio", [
    (get_preset("gemma-3-1b"), 1, "fp8", 2.0),                       # 1 KV head, fp8 packing 4
    (get_preset("llama-3-70b"), 8, "fp8", 2.0),                      # 1 KV head per shard after TP
    (uniform_model("hd96", 32, 32, 96, weights_bytes=0), 1, "auto", 4 / 3),   # head dim padded 96 -> 128
    (uniform_model("hd80", 32, 32, 80, weights_bytes=0), 1, "auto", 1.6),     # head dim padded 80 -> 128
    (uniform_model("hd64-mqa", 16, 1, 64, weights_bytes=0), 1, "auto", 2.0),  # hd64 layout, 1 head
])
def test_unpadded_sizing_would_exceed_budget(model, tp, kv_dtype, ratio):
    plan = plan_kv_cache(model, "tpu-v6e", tp=tp, kv_dtype=kv_dtype, page_size=128, max_model_len=512,
                         utilization_of="free", reserved_bytes=EASYDEL_MARGIN)
    assert plan.page_bytes_per_device == pytest.approx(ratio * plan.unpadded_page_bytes_per_device)
    easydel_pages = plan.budget_bytes // plan.unpadded_page_bytes_per_device
    assert easydel_pages * plan.page_bytes_per_device > plan.budget_bytes  # EasyDeL would overshoot
    assert allocated_bytes_per_device(plan) == plan.kv_bytes_per_device <= plan.budget_bytes
    assert any("layout padding" in n for n in plan.notes)
