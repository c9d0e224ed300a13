"""The planner's API: validation (typed errors, nothing silently clamped), does-not-fit reporting,
DP shards, the manager hand-off, presets, HF configs and the catalog."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from verikv.cache_manager import CacheManager
from verikv.cache_specs import CacheGroupsConfig, FullAttentionSpec, MambaSpec, SlidingWindowSpec
from verikv.dp_sharding import dp_shard_page_bounds
from verikv.errors import DoesNotFitError, KVCacheDoesNotFitError, SizingError
from verikv.sizing import (
    ACCELERATORS,
    AttentionLayer,
    MambaLayer,
    MLALayer,
    ModelGeometry,
    describe_accelerator,
    geometry_from_hf_config,
    get_accelerator,
    get_preset,
    plan_kv_cache,
    preset_names,
    uniform_model,
)
from verikv.sizing.catalog import GiB
from verikv.sizing.hf_config import dense_param_count
from verikv.sizing.kernels import get_kernel
from verikv.sizing.layers import layer_arrays
from verikv.sizing.presets import PRESETS

LLAMA = get_preset("llama-3-8b")


# ---- validation -------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(tp=0), "tp"),
    (dict(dp=True), "dp"),
    (dict(tp=3), "cannot be split"),
    (dict(num_devices=3, tp=2), "num_devices"),
    (dict(kv_dtype="int8"), "unknown dtype"),
    (dict(kv_dtype="fp8_ds_mla"), "does not support"),
    (dict(page_size=0), "page_size"),
    (dict(page_size=127), "multiple of 2"),
    (dict(kv_dtype="fp8", page_size=130), "multiple of 4"),
    (dict(utilization=0), "utilization"),
    (dict(utilization=1.5), "utilization"),
    (dict(utilization="lots"), "utilization"),
    (dict(utilization_of="peak"), "utilization_of"),
    (dict(max_model_len=0), "max_model_len"),
    (dict(max_model_len=8.0), "max_model_len"),
    (dict(in_use_bytes=-1), "in_use_bytes"),
    (dict(reserved_bytes=1.5), "reserved_bytes"),
    (dict(weights_bytes=-5), "weights_bytes"),
    (dict(weights_shards=3), "weights_shards"),
    (dict(max_num_seqs=2**17), "max_num_seqs"),
    (dict(kernel="flash-attn"), "gpu kernel"),
    (dict(kernel="tpu-mla"), "cannot hold"),
    (dict(kernel="nope"), "unknown kernel"),
    (dict(kernel=["tpu-rpa-v3"]), "unknown kernel"),
    (dict(max_model_len=2**31), "max_model_len"),
    (dict(memory_bytes=0), "memory_bytes"),
])
def test_bad_arguments_raise_sizing_error(kwargs, message):
    with pytest.raises(SizingError, match=message):
        plan_kv_cache(LLAMA, "tpu-v6e", **kwargs)


def test_bad_device_and_model():
    with pytest.raises(SizingError, match="unknown accelerator"):
        plan_kv_cache(LLAMA, "tpu-v99")
    with pytest.raises(SizingError, match="ModelGeometry"):
        plan_kv_cache("llama-3-8b", "tpu-v6e")  # type: ignore[arg-type]
    with pytest.raises(SizingError, match="required"):
        plan_kv_cache(uniform_model("m", 2, 1, 128), "tpu-v6e", max_model_len=128)  # no weights
    with pytest.raises(SizingError, match="required"):
        plan_kv_cache(uniform_model("m", 2, 1, 128, weights_bytes=0), "tpu-v6e")  # no context length


def test_gpu_kernel_rules():
    with pytest.raises(SizingError, match="multiple of 16"):
        plan_kv_cache(LLAMA, "h100-sxm", page_size=8)
    with pytest.raises(SizingError, match="head dim"):
        plan_kv_cache(uniform_model("hd512", 2, 1, 512, weights_bytes=0), "h100-sxm", max_model_len=64)
    with pytest.raises(SizingError, match="does not support KV dtype"):
        plan_kv_cache(LLAMA, "h100-sxm", kv_dtype="fp8_e5m2")  # FlashAttention: e4m3 only
    assert plan_kv_cache(LLAMA, "h100-sxm", kv_dtype="fp8_e5m2", kernel="flashinfer").kv_dtype == "fp8_e5m2"
    with pytest.raises(SizingError, match="does not support KV dtype"):
        plan_kv_cache(LLAMA, "a100-80", kv_dtype="fp8")
    deepseek = get_preset("deepseek-v3")
    with pytest.raises(SizingError, match="multiple of 128"):
        plan_kv_cache(deepseek, "b200", tp=8, page_size=64)  # CUTLASS MLA
    assert plan_kv_cache(deepseek, "b200", tp=8, max_model_len=8192).page_size == 128


def test_flashinfer_workspace_is_reserved():
    base = plan_kv_cache(LLAMA, "h100-sxm")
    fi = plan_kv_cache(LLAMA, "h100-sxm", kernel="flashinfer")
    assert fi.reserved_bytes == 256 * 2**20
    assert fi.budget_bytes == base.budget_bytes - 256 * 2**20


def test_geometry_validation():
    with pytest.raises(SizingError):
        AttentionLayer(0, 128)
    with pytest.raises(SizingError):
        AttentionLayer(8, 128, sliding_window=4, attention_chunk_size=8)
    with pytest.raises(SizingError):
        MLALayer(512, -1)
    with pytest.raises(SizingError):
        MambaLayer(3, 8, 8, 4)
    with pytest.raises(SizingError):
        ModelGeometry("empty", ())
    with pytest.raises(SizingError):
        ModelGeometry("mamba only", (MambaLayer(1, 64, 16, 4),))
    with pytest.raises(SizingError):
        ModelGeometry("mixed", (MLALayer(512, 64), AttentionLayer(8, 128)))
    with pytest.raises(SizingError):
        ModelGeometry("bad dtype", (AttentionLayer(8, 128),), dtype="int4")


# ---- does not fit ---------------------------------------------------------------------------

def test_does_not_fit_states_numbers_and_largest_length():
    device = describe_accelerator("small", 8 * GiB, "tpu")
    with pytest.raises(KVCacheDoesNotFitError) as info:
        plan_kv_cache(LLAMA, device, page_size=128, max_model_len=1_000_000, weights_bytes=4 * GiB)
    err = info.value
    assert isinstance(err, DoesNotFitError)
    assert err.max_model_len == 1_000_000 and err.pages_per_request == math.ceil(1_000_000 / 128)
    assert err.num_pages >= 2 and err.page_bytes == 16 * 2**20
    usable = err.num_pages - 1
    assert err.largest_max_model_len == usable * 128
    for text in (f"{err.budget_bytes:,}", str(err.largest_max_model_len), "1000000"):
        assert text in str(err)
    # the suggested length does fit, one more token does not
    plan_kv_cache(LLAMA, device, page_size=128, max_model_len=err.largest_max_model_len, weights_bytes=4 * GiB)
    with pytest.raises(KVCacheDoesNotFitError):
        plan_kv_cache(LLAMA, device, page_size=128, max_model_len=err.largest_max_model_len + 1,
                      weights_bytes=4 * GiB)


def test_does_not_fit_when_weights_exceed_memory():
    with pytest.raises(KVCacheDoesNotFitError) as info:
        plan_kv_cache(get_preset("llama-3-70b"), "tpu-v5e")
    assert info.value.largest_max_model_len == 0 and info.value.num_pages == 0
    assert info.value.budget_bytes < 0


def test_window_aware_largest_length():
    # Gemma-2: sliding groups need window pages only; the search uses the same estimate as the manager.
    device = describe_accelerator("tiny-gpu", 20 * GiB, "gpu")
    with pytest.raises(KVCacheDoesNotFitError) as info:
        plan_kv_cache(get_preset("gemma-2-9b"), device, page_size=16, max_model_len=8192)
    largest = info.value.largest_max_model_len
    assert 0 < largest < 8192
    plan_kv_cache(get_preset("gemma-2-9b"), device, page_size=16, max_model_len=largest)


# ---- DP shards --------------------------------------------------------------------------------

def test_dp_shards_equal_and_shard_local_ranges():
    plan = plan_kv_cache(LLAMA, "tpu-v6e", dp=2, page_size=128, utilization_of="free",
                         reserved_bytes=256 * 2**20)
    assert plan.pages_per_shard == 921 and plan.num_pages == 1_842
    assert plan.shard_ranges == ((0, 921), (921, 1_842))
    assert plan.usable_pages_per_shard == (920, 921)
    assert plan.buffers[0].shape[0] == 1_842 and plan.buffers[0].device_shape[0] == 921
    for shard, (start, end) in enumerate(plan.shard_ranges):
        low, high = dp_shard_page_bounds(shard, plan.pages_per_shard, plan.dp)
        assert (max(start, 1), end) == (low, high)


def test_esurge_dp_rounding_example():
    # eSurge's rounding: 921 pages over dp = 2 become 920, shard 0 keeps 459 usable
    # pages and shard 1 460. Here the budget gives 460 per shard.
    page = 16 * 2**20
    device = describe_accelerator("dp-example", 460 * page, "tpu")
    plan = plan_kv_cache(LLAMA, device, dp=2, page_size=128, utilization=1, weights_bytes=0)
    assert plan.num_pages == 920 and plan.usable_pages_per_shard == (459, 460)
    assert plan.max_concurrent_requests == 459 // 64 + 460 // 64


# ---- the manager hand-off -------------------------------------------------------------------

def test_plan_feeds_the_cache_manager():
    plan = plan_kv_cache(LLAMA, "h100-sxm", max_model_len=8192)
    config = plan.to_cache_groups_config()
    assert isinstance(config, CacheGroupsConfig) and config.num_pages == plan.num_pages
    (group,) = config.kv_cache_groups
    assert group.kv_cache_spec == FullAttentionSpec(16, 8, 128, "bfloat16", False)
    assert group.layer_names == tuple(f"layer.{i}" for i in range(32))
    manager = CacheManager.from_plan(plan, max_model_len=8192)
    assert manager.page_pool.num_pages == plan.num_pages


def test_hybrid_groups_for_the_manager():
    gemma = plan_kv_cache(get_preset("gemma-3-1b"), "tpu-v5e", max_model_len=4096)
    specs = [g.kv_cache_spec for g in gemma.to_cache_groups_config().kv_cache_groups]
    assert isinstance(specs[0], SlidingWindowSpec) and specs[0].sliding_window == 512
    assert isinstance(specs[1], FullAttentionSpec)
    bamba = plan_kv_cache(get_preset("bamba-9b-hybrid"), "h100-sxm")
    mamba = [g.kv_cache_spec for g in bamba.to_cache_groups_config().kv_cache_groups
             if isinstance(g.kv_cache_spec, MambaSpec)]
    assert mamba and all(s.page_size_bytes == 4_259_840 for s in mamba)
    CacheManager.from_plan(bamba, max_model_len=8192)


def test_dp_plan_feeds_a_sharded_manager():
    plan = plan_kv_cache(LLAMA, "tpu-v6e", dp=2, page_size=128, max_model_len=4096)
    manager = CacheManager.from_plan(plan, max_model_len=4096)
    assert manager.data_parallel_size == 2


def test_json_and_dict():
    plan = plan_kv_cache(LLAMA, "tpu-v6e", page_size=128)
    data = plan.to_dict()
    assert data["num_pages"] == 842 and data["capacity_tokens"] == 842 * 128
    assert data["groups"] == [{"kind": "full", "layers": list(range(32))}]
    assert '"num_pages": 842' in plan.to_json()


@pytest.mark.parametrize("model, device", [("llama-3-8b", "tpu-v6e"), ("gemma-3-27b", "h100"),
                                           ("deepseek-v3", "h200"), ("bamba-9b-hybrid", "h100")])
def test_layer_buffer_reads_its_page(model, device):
    """``label``, ``dtype``, ``page_bytes`` and the unpadded bytes of a buffer are its page's, in
    ``to_dict()`` as before, and read-only."""
    kwargs = {"max_model_len": 4096, "tp": 8} if model == "deepseek-v3" else {"max_model_len": 4096}
    plan = plan_kv_cache(get_preset(model), device, **kwargs)
    for buffer in plan.buffers:
        page = buffer.page
        assert (buffer.label, buffer.dtype, buffer.page_bytes) == (page.label, page.dtype, page.page_bytes)
        assert buffer.unpadded_page_bytes == buffer.unpadded_bytes == page.unpadded_bytes
        data = buffer.to_dict()
        assert (data["label"], data["dtype"], data["page_bytes"], data["unpadded_page_bytes"]) == (
            page.label, page.dtype, page.page_bytes, page.unpadded_bytes)
        assert data["bytes_per_device"] == buffer.pages_per_shard * page.page_bytes
        with pytest.raises(AttributeError):
            buffer.dtype = "float32"  # type: ignore[misc]
    assert plan.buffers[0].dtype == plan.buffers[0].page.dtype

# ---- presets, HF configs, catalog ---------------------------------------------------------------

@pytest.mark.parametrize("name, params", [
    ("llama-3-8b", 8_030_261_248),
    ("llama-3-70b", 70_553_706_496),
    ("qwen2.5-7b", 7_615_616_512),
    ("gemma-2-9b", 9_241_705_984),
])
def test_dense_param_counts_match_reference(name, params):
    config = PRESETS[name]
    assert dense_param_count(config, config["model_type"]) == params
    assert get_preset(name).weights_bytes == 2 * params


def test_presets_layer_kinds():
    kinds = {name: [layer.kind for layer in get_preset(name).layers] for name in preset_names()}
    assert kinds["gemma-2-9b"][:4] == ["sliding", "full", "sliding", "full"]
    assert kinds["gemma-3-1b"].count("full") == 4 and kinds["gemma-3-1b"][5] == "full"
    assert kinds["gemma-3-27b"].count("sliding") == 52
    assert set(kinds["deepseek-v3"]) == {"mla"} and len(kinds["deepseek-v3"]) == 61
    assert [i for i, k in enumerate(kinds["bamba-9b-hybrid"]) if k == "full"] == [9, 18, 27]
    assert set(kinds["qwen2.5-7b"]) == {"full"}  # use_sliding_window is false
    with pytest.raises(SizingError, match="unknown model preset"):
        get_preset("gpt-5")


def test_hf_config_reader():
    config = {"model_type": "mistral", "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
              "num_key_value_heads": 2, "intermediate_size": 1024, "vocab_size": 1000, "sliding_window": 256,
              "max_position_embeddings": 2048, "torch_dtype": "float16"}
    g = geometry_from_hf_config(config, name="tiny-mistral")
    assert g.dtype == "float16" and g.max_model_len == 2048
    assert all(layer == AttentionLayer(2, 64, sliding_window=256) for layer in g.layers)
    assert g.weights_bytes == 2 * dense_param_count(config, "mistral")
    unset_kv_heads = {**config, "num_key_value_heads": None}
    assert geometry_from_hf_config(unset_kv_heads, use_transformers=False).layers[0].num_kv_heads == 8
    nested = geometry_from_hf_config({"text_config": config})
    assert nested.layers == g.layers
    with pytest.raises(SizingError):
        geometry_from_hf_config({"num_hidden_layers": 2})
    with pytest.raises(SizingError):
        geometry_from_hf_config(["not", "a", "dict"])  # type: ignore[arg-type]
    unknown = geometry_from_hf_config({**config, "model_type": "somethingelse"})
    assert unknown.weights_bytes is None


def test_catalog():
    names = {a.name for a in ACCELERATORS}
    assert {"tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7", "a100-40", "a100-80", "h100-sxm", "h100-pcie",
            "h100-nvl", "h200", "b200", "gb200", "mi300x", "mi325x", "mi355x"} == names
    assert get_accelerator("V6E") is get_accelerator("tpu-v6e")
    assert get_accelerator("tpu-v7").memory_bytes == 96 * GiB
    assert get_accelerator("mi300x").memory_bytes == 205_822_885_888
    assert "not observed" in get_accelerator("mi355x").memory_source
    with pytest.raises(SizingError):
        describe_accelerator("x", 0, "tpu")
    with pytest.raises(SizingError):
        describe_accelerator("x", GiB, "npu")  # type: ignore[arg-type]
    with pytest.raises(SizingError):
        describe_accelerator("x", GiB, "gpu", attention_kernel="tpu-rpa-v3")
    custom = describe_accelerator("x", GiB, "gpu", kv_dtypes=("bf16",))
    assert custom.kv_dtypes == ("bfloat16",) and custom.memory_source.startswith("software-visible")


def test_memory_override_and_notes():
    plan = plan_kv_cache(LLAMA, "tpu-v6e", memory_bytes=40 * GiB, page_size=128)
    assert plan.memory_bytes == 40 * GiB and plan.memory_source == "given by the caller"
    tp16 = plan_kv_cache(get_preset("llama-3-70b"), "tpu-v6e", tp=16, page_size=128, max_model_len=4096)
    assert any("replicated" in n for n in tp16.notes)


# ---- property: any valid request gives a plan that fits, is maximal and splits evenly -------------

@settings(max_examples=200)
@given(
    platform=st.sampled_from(["tpu", "gpu"]),
    layers=st.integers(1, 64),
    kv_heads=st.sampled_from([1, 2, 4, 8, 16, 32]),
    head_dim=st.sampled_from([64, 80, 96, 128, 256]),
    kv_dtype=st.sampled_from(["bfloat16", "fp8_e4m3", "float32"]),
    tp=st.sampled_from([1, 2, 4, 8, 16]),
    dp=st.integers(1, 8),
    memory_gib=st.integers(1, 300),
    weights_gib=st.integers(0, 100),
    utilization=st.sampled_from(["0.5", "0.85", "0.9", "0.92", "1"]),
    rule=st.sampled_from(["total", "free"]),
    max_model_len=st.integers(1, 65_536),
)
def test_any_plan_fits_is_maximal_and_even(platform, layers, kv_heads, head_dim, kv_dtype, tp, dp, memory_gib,
                                           weights_gib, utilization, rule, max_model_len):
    model = uniform_model("m", layers, kv_heads, head_dim, weights_bytes=weights_gib * GiB)
    kernel = "tpu-rpa-v3" if platform == "tpu" else "triton"
    device = describe_accelerator("d", memory_gib * GiB, platform, attention_kernel=kernel)
    try:
        plan = plan_kv_cache(model, device, tp=tp, dp=dp, kv_dtype=kv_dtype, utilization=utilization,
                             utilization_of=rule, max_model_len=max_model_len)
    except DoesNotFitError as exc:
        assert isinstance(exc, KVCacheDoesNotFitError) and exc.largest_max_model_len < max_model_len
        return
    except SizingError:
        assert kv_heads % tp and tp % kv_heads  # the only invalid combination drawn here
        return
    page = layer_arrays(model.layers[0], get_kernel(kernel), plan.kv_dtype, "bfloat16", plan.page_size, tp)[0]
    assert plan.page_bytes_per_device == layers * page.page_bytes
    (buffer,) = plan.buffers
    width = 4 if kv_dtype == "float32" else 2 if kv_dtype == "bfloat16" else 1
    assert layers * math.prod(buffer.device_shape) * width == plan.kv_bytes_per_device <= plan.budget_bytes
    if plan.limited_by == "memory":
        assert plan.budget_bytes - plan.kv_bytes_per_device < plan.page_bytes_per_device
    else:
        assert plan.num_pages * plan.page_size <= 2**31 - 1 < (plan.num_pages + dp) * plan.page_size
    assert plan.num_pages == plan.pages_per_shard * dp and plan.shard_ranges[-1][1] == plan.num_pages
    assert plan.max_concurrent_requests >= 1


def test_workspace_option_reproduces_the_vllm_side_budget():
    """Llama-3-70B on H200, TP 4, FlashInfer: 75,953 pages with the 256 MiB workspace
    subtracted, 76,158 without it (the vLLM-side figure)."""
    memory = get_accelerator("h200").memory_bytes
    weights = 2 * 70_553_706_496 // 4               # bf16 weights split over 4 ranks
    page_id = 80 * 2 * 16 * (8 // 4) * 128 * 2      # 80 layers x K,V x 16 tokens x 2 heads x 128 x bf16
    budget = memory * 9 // 10 - weights
    model = get_preset("llama-3-70b")
    default = plan_kv_cache(model, "h200", tp=4, kernel="flashinfer")
    stated = plan_kv_cache(model, "h200", tp=4, kernel="flashinfer", workspace_bytes=0)
    assert default.num_pages == (budget - 256 * 2**20) // page_id == 75_953
    assert stated.num_pages == budget // page_id == 76_158
    assert stated.workspace_bytes == 0 and default.workspace_bytes == 256 * 2**20
