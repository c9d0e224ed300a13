"""Cache specs: eSurge's formulas and names, config readers, budget estimate, group split, bad input."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from verikv.cache_specs import (
    MAX_CONFIG_DIM,
    MAX_CONFIG_LAYERS,
    AttentionSpec,
    CacheGroupsConfig,
    CacheGroupSpec,
    CacheSpec,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    RuntimePageBudgetEstimate,
    SlidingWindowSpec,
    create_kv_cache_specs_from_config,
    dtype_size_bytes,
    estimate_runtime_page_budget,
    split_cache_groups,
)
from verikv.errors import CacheSpecError, DoesNotFitError, InvalidArgumentError


def full(ps: int = 16, heads: int = 8, dim: int = 128, dtype: object = np.float16, **kw: Any) -> FullAttentionSpec:
    return FullAttentionSpec(page_size=ps, num_kv_heads=heads, head_size=dim, dtype=dtype, use_mla=False, **kw)


def sliding(ps: int = 16, window: int = 64, heads: int = 2, dim: int = 32) -> SlidingWindowSpec:
    return SlidingWindowSpec(ps, heads, dim, "float16", False, window)


def chunked(ps: int = 16, chunk: int = 64, heads: int = 2, dim: int = 32) -> ChunkedLocalAttentionSpec:
    return ChunkedLocalAttentionSpec(ps, heads, dim, "float16", False, chunk)


# --- formulas ---------------------------------------------------------------------------------


def test_benchmark_harness_constructor_call() -> None:
    spec = FullAttentionSpec(page_size=16, num_kv_heads=8, head_size=128, dtype=np.float16, use_mla=False)
    assert spec.page_size_bytes == 2 * 16 * 8 * 128 * 2
    assert spec.type_id == "full_attention_16_65536"
    assert spec.dtype == np.dtype(np.float16)


def test_mla_stores_one_latent_per_token() -> None:
    spec = FullAttentionSpec(16, 1, 576, "bfloat16", True)
    assert spec.page_size_bytes == 16 * 576 * 2


def test_full_attention_memory_is_one_page_per_page_size_tokens() -> None:
    spec = full()
    assert spec.max_memory_usage_bytes(100) == 7 * spec.page_size_bytes
    assert spec.max_memory_usage_bytes(max_model_len=112, max_num_batched_tokens=8) == 7 * spec.page_size_bytes


def test_sliding_window_memory_adds_one_page_and_caps_at_model_len() -> None:
    spec = sliding(ps=16, window=64)
    # min(63 + 16, 128) = 79 tokens -> 5 pages, + 1
    assert spec.max_memory_usage_bytes(128, 16) == 6 * spec.page_size_bytes
    # capped by the model length: min(63 + 100, 40) = 40 -> 3 pages, + 1
    assert spec.max_memory_usage_bytes(40, 100) == 4 * spec.page_size_bytes
    # no batch limit: the worst case of a whole request in one step
    assert spec.max_memory_usage_bytes(128) == (8 + 1) * spec.page_size_bytes
    assert spec.type_id == f"sliding_window_64_16_{spec.page_size_bytes}"


def test_chunked_memory_is_chunk_plus_batch_capped_at_model_len() -> None:
    spec = chunked(ps=16, chunk=64)
    assert spec.max_memory_usage_bytes(1000, 16) == 5 * spec.page_size_bytes
    assert spec.max_memory_usage_bytes(50, 16) == 4 * spec.page_size_bytes
    assert spec.type_id == f"local_attention_64_16_{spec.page_size_bytes}"


def test_mamba_page_holds_all_state_tensors_once() -> None:
    spec = MambaSpec(page_size=16, shapes=((4, 8), (3,)), dtype=np.float32)
    assert spec.num_elements == 35
    assert spec.page_size_bytes == 140
    assert spec.max_memory_usage_bytes(10_000, 512) == 140
    assert spec.max_memory_usage_bytes() == 140
    assert spec.type_id == "mamba_((4, 8), (3,))_float32"
    padded = MambaSpec(16, [[4, 8], [3]], "float32", page_size_padded=256)  # type: ignore[arg-type]  # lists are accepted at run time
    assert padded.shapes == ((4, 8), (3,))
    assert padded.page_size_bytes == 256 and padded.raw_page_size_bytes == 140


@pytest.mark.parametrize(
    "dtype, size",
    [
        (np.float32, 4),
        ("float16", 2),
        (np.dtype("float16"), 2),
        ("bfloat16", 2),
        ("bf16", 2),
        ("float8_e4m3fn", 1),
        ("float8_e5m2", 1),
        ("int8", 1),
        (np.uint8, 1),
        ("f4", 4),
        (float, 8),
    ],
)
def test_dtype_sizes(dtype: object, size: int) -> None:
    assert dtype_size_bytes(dtype) == size
    assert full(dtype=dtype).page_size_bytes == 2 * 16 * 8 * 128 * size


def test_dtype_is_canonical_so_equal_specs_compare_equal() -> None:
    a, b = full(dtype=np.float16), full(dtype="fp16")
    assert a == b and hash(a) == hash(b)
    assert full(dtype="BF16").dtype == "bfloat16"
    assert full(dtype="bfloat16").type_id == full(dtype=np.float16).type_id


def test_specs_and_sizing_share_one_dtype_table() -> None:
    """verikv.dtypes is the one table: every name sizing accepts has the same width in a spec."""
    from verikv.dtypes import element_type
    from verikv.sizing.dtypes import ALIASES, DTYPES, get_dtype

    for name in [*DTYPES, *ALIASES]:
        kv, element = get_dtype(name), element_type(name)
        assert element is not None and element.bits == kv.bits
        if kv.bits:
            assert dtype_size_bytes(name) == kv.itemsize
        else:
            with pytest.raises(CacheSpecError):
                dtype_size_bytes(name)
    assert full(dtype="fp8").dtype == full(dtype="fp8_e4m3").dtype == "float8_e4m3fn"


def test_ml_dtypes_style_type_is_known_by_its_name() -> None:
    bfloat16 = type("bfloat16", (), {})
    assert dtype_size_bytes(bfloat16) == 2


def test_specs_are_frozen_and_normalise_numpy_ints() -> None:
    spec = full(ps=np.int64(32))  # type: ignore[arg-type]  # numpy integers are accepted at run time
    assert type(spec.page_size) is int and spec.page_size == 32
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.page_size = 8  # type: ignore[misc]


# --- merge ------------------------------------------------------------------------------------


def test_merge_same_type_returns_equal_spec() -> None:
    assert CacheSpec.merge([sliding(), sliding()]) == sliding()
    assert SlidingWindowSpec.merge([sliding()]) == sliding()


def test_full_merge_unifies_recorded_windows() -> None:
    merged = FullAttentionSpec.merge([full(), full(sliding_window=128), full(sliding_window=128)])
    assert merged.sliding_window == 128 and merged.attention_chunk_size is None
    merged = FullAttentionSpec.merge([full(attention_chunk_size=256), full()])
    assert merged.attention_chunk_size == 256


# --- cache groups and the budget estimate ------------------------------------------------------


def test_cache_groups_config_is_plain() -> None:
    groups = [CacheGroupSpec(full(), ["layer.0", "layer.1"])]  # type: ignore[arg-type]  # lists are accepted at run time
    config = CacheGroupsConfig(num_pages=100, kv_cache_groups=groups)  # type: ignore[arg-type]  # lists are accepted at run time
    assert config.num_pages == 100
    assert config.kv_cache_groups == (CacheGroupSpec(full(), ("layer.0", "layer.1")),)
    assert CacheGroupSpec(full()).layer_names is None


def esurge_budget_groups() -> list[CacheGroupSpec]:
    return [CacheGroupSpec(SlidingWindowSpec(16, 2, 32, "float16", False, 64)), CacheGroupSpec(full(heads=1, dim=64))]


def test_window_aware_runtime_estimate_counts_hybrid_group_pages() -> None:
    estimate = estimate_runtime_page_budget(
        num_pages=57, kv_cache_groups=esurge_budget_groups(), max_model_len=128, max_num_batched_tokens=16
    )
    assert estimate == RuntimePageBudgetEstimate(
        pages_per_request=14, max_num_seqs=4, usable_pages=56, per_group_pages=(6, 8)
    )


def test_estimate_counts_each_dp_shard_separately() -> None:
    kwargs: dict[str, Any] = dict(kv_cache_groups=esurge_budget_groups(), max_model_len=128, max_num_batched_tokens=16)
    # 57 = 3 x 19: shard 0 has 18 usable pages, shards 1 and 2 have 19; one request each.
    assert estimate_runtime_page_budget(num_pages=57, data_parallel_size=3, **kwargs).max_num_seqs == 3
    # 57 pages do not split over 2 shards: the whole pool is counted (4 requests).
    assert estimate_runtime_page_budget(num_pages=57, data_parallel_size=2, **kwargs).max_num_seqs == 4
    # 58 = 2 x 29: 28 // 14 + 29 // 14 = 4.
    assert estimate_runtime_page_budget(num_pages=58, data_parallel_size=2, **kwargs).max_num_seqs == 4


def test_estimate_without_groups_and_with_mamba() -> None:
    empty = estimate_runtime_page_budget(num_pages=9, kv_cache_groups=[], max_model_len=64, max_num_batched_tokens=8)
    assert empty == RuntimePageBudgetEstimate(0, 8, 8, ())
    mamba = CacheGroupSpec(MambaSpec(16, ((2, 2),), "float32"))
    estimate = estimate_runtime_page_budget(
        num_pages=9, kv_cache_groups=[mamba], max_model_len=64, max_num_batched_tokens=8
    )
    assert estimate.per_group_pages == (1,) and estimate.max_num_seqs == 8


def test_estimate_raises_when_no_request_fits() -> None:
    with pytest.raises(DoesNotFitError, match="needs 8 pages"):
        estimate_runtime_page_budget(
            num_pages=8, kv_cache_groups=[CacheGroupSpec(full())], max_model_len=128, max_num_batched_tokens=16
        )


# --- split for the coordinators ------------------------------------------------------------------


def test_split_puts_full_classes_first_and_merges_full_geometries() -> None:
    groups = [
        CacheGroupSpec(sliding(window=64)),
        CacheGroupSpec(full(heads=4)),
        CacheGroupSpec(full(heads=6)),
        CacheGroupSpec(sliding(window=128)),
        CacheGroupSpec(sliding(window=64, heads=4)),
    ]
    split = split_cache_groups(groups)
    assert [(c.kind, c.group_ids) for c in split] == [
        ("full_attention", (1, 2)),
        ("sliding_window", (0, 4)),
        ("sliding_window", (3,)),
    ]
    assert split[0].is_full_attention and not split[1].is_full_attention
    assert split[2].spec == sliding(window=128)


def test_split_accepts_page_sizes_that_are_multiples_of_the_smallest() -> None:
    split = split_cache_groups([CacheGroupSpec(full(ps=32)), CacheGroupSpec(chunked(ps=16))])
    assert [(c.kind, c.page_size) for c in split] == [("full_attention", 32), ("chunked_local_attention", 16)]
    assert split_cache_groups([]) == ()


def test_split_exempts_mamba_from_the_page_size_rule() -> None:
    groups = [CacheGroupSpec(MambaSpec(1000, ((4,),), "float32")), CacheGroupSpec(full(ps=16))]
    assert [(c.kind, c.group_ids) for c in split_cache_groups(groups)] == [("full_attention", (1,)), ("mamba", (0,))]


def test_split_page_size_error_names_the_right_direction() -> None:
    groups = [CacheGroupSpec(full(ps=32)), CacheGroupSpec(sliding(ps=48))]
    with pytest.raises(CacheSpecError,
                       match=r"page size 48 of cache group 1 is not a multiple of the smallest page size 32"):
        split_cache_groups(groups)


# --- config readers ---------------------------------------------------------------------------


def kinds_of(groups: list[CacheGroupSpec]) -> list[tuple[str, tuple[str, ...] | None]]:
    return [(type(g.kv_cache_spec).__name__, g.layer_names) for g in groups]


def attention(group: CacheGroupSpec) -> AttentionSpec:
    """The group's spec, checked to be an attention spec (the fields these tests read)."""
    spec = group.kv_cache_spec
    assert isinstance(spec, AttentionSpec), spec
    return spec


def test_no_layer_information_gives_one_unnamed_full_group() -> None:
    groups = create_kv_cache_specs_from_config({}, 16, 8, 128, "bfloat16")
    assert groups == [CacheGroupSpec(FullAttentionSpec(16, 8, 128, "bfloat16", False))]


def test_gemma3_like_layer_types_and_window() -> None:
    layer_types = ["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] * 2
    config = SimpleNamespace(layer_types=layer_types, sliding_window=512, num_hidden_layers=8)
    groups = create_kv_cache_specs_from_config(config, 16, 4, 256, np.float32)
    assert kinds_of(groups) == [
        ("SlidingWindowSpec", ("layer.0", "layer.1", "layer.2", "layer.3", "layer.4", "layer.6", "layer.7")),
        ("FullAttentionSpec", ("layer.5",)),
    ]
    assert groups[0].kv_cache_spec == SlidingWindowSpec(16, 4, 256, np.float32, False, 512)


def test_sliding_window_pattern_marks_every_nth_layer_full() -> None:
    config = {"sliding_window": 1024, "sliding_window_pattern": 3, "num_hidden_layers": 6}
    groups = create_kv_cache_specs_from_config(config, 16, 4, 64, "float16")
    assert kinds_of(groups) == [
        ("SlidingWindowSpec", ("layer.0", "layer.1", "layer.3", "layer.4")),
        ("FullAttentionSpec", ("layer.2", "layer.5")),
    ]


def test_gemma4_like_global_head_dim_and_global_heads() -> None:
    config = {
        "text_config": {
            "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
            "sliding_window": 512,
            "head_dim": 32,
            "global_head_dim": 64,
            "num_key_value_heads": 4,
            "attention_k_eq_v": True,
            "num_global_key_value_heads": 2,
        }
    }
    groups = create_kv_cache_specs_from_config(config, 16, 8, 64, "bfloat16")
    sliding_spec, full_spec = (attention(g) for g in groups)
    assert (type(sliding_spec), sliding_spec.num_kv_heads, sliding_spec.head_size) == (SlidingWindowSpec, 4, 32)
    assert (type(full_spec), full_spec.num_kv_heads, full_spec.head_size) == (FullAttentionSpec, 2, 64)


def test_openelm_per_layer_kv_heads() -> None:
    config = SimpleNamespace(num_kv_heads=[4, 4, 6, 6, 8], head_dim=64, num_hidden_layers=5)
    groups = create_kv_cache_specs_from_config(config, 16, 1, 1, "float16")
    assert [attention(g).num_kv_heads for g in groups] == [4, 6, 8]
    assert [g.layer_names for g in groups] == [("layer.0", "layer.1"), ("layer.2", "layer.3"), ("layer.4",)]
    assert len({g.kv_cache_spec.type_id for g in groups}) == 3
    assert len(split_cache_groups(groups)) == 1


def test_recurrent_layers_get_no_group_and_chunked_layers_get_chunk_specs() -> None:
    config = {
        "layer_types": ["linear_attention", "chunked_attention", "full_attention", "mamba"],
        "attention_chunk_size": [None, 8192, None, None],
    }
    groups = create_kv_cache_specs_from_config(config, 16, 8, 128, "float16")
    assert kinds_of(groups) == [("ChunkedLocalAttentionSpec", ("layer.1",)), ("FullAttentionSpec", ("layer.2",))]
    chunked = groups[0].kv_cache_spec
    assert isinstance(chunked, ChunkedLocalAttentionSpec) and chunked.attention_chunk_size == 8192


def test_per_layer_window_list_and_uniform_scalars() -> None:
    groups = create_kv_cache_specs_from_config({"sliding_window": [None, 128, None]}, 16, 2, 64, "float16")
    assert kinds_of(groups) == [("FullAttentionSpec", ("layer.0", "layer.2")), ("SlidingWindowSpec", ("layer.1",))]
    mistral = create_kv_cache_specs_from_config({"sliding_window": 4096, "num_hidden_layers": 2}, 16, 8, 128, "bf16")
    assert kinds_of(mistral) == [("SlidingWindowSpec", ("layer.0", "layer.1"))]
    qwen2 = {"sliding_window": 4096, "use_sliding_window": False, "num_hidden_layers": 2}
    assert kinds_of(create_kv_cache_specs_from_config(qwen2, 16, 8, 128, "bf16")) == [
        ("FullAttentionSpec", ("layer.0", "layer.1"))
    ]


def test_mla_uses_arguments_and_sliding_layers_drop_mla() -> None:
    config = {"layer_types": ["full_attention", "sliding_attention"], "sliding_window": 64, "num_key_value_heads": 128}
    groups = create_kv_cache_specs_from_config(config, 16, 1, 576, "bfloat16", use_mla=True)
    full_spec, sliding_spec = (attention(g) for g in groups)
    assert (full_spec.num_kv_heads, full_spec.head_size, full_spec.use_mla) == (1, 576, True)
    assert sliding_spec.use_mla is False


# --- bad input ------------------------------------------------------------------------------------

# (ill-typed arguments are the point here: their lines carry `type: ignore[arg-type]`)
BAD_INPUTS = [
    ("zero_page_size", lambda: full(ps=0), CacheSpecError),
    ("negative_heads", lambda: full(heads=-1), CacheSpecError),
    ("bool_head_size", lambda: full(dim=True), CacheSpecError),
    ("float_page_size", lambda: full(ps=16.0), CacheSpecError),  # type: ignore[arg-type]
    ("int_use_mla", lambda: FullAttentionSpec(16, 8, 128, "float16", 1), CacheSpecError),  # type: ignore[arg-type]
    ("unknown_dtype", lambda: full(dtype="float128x"), CacheSpecError),
    ("sub_byte_dtype", lambda: full(dtype="int4"), CacheSpecError),
    ("fp4_dtype", lambda: full(dtype="float4_e2m1fn"), CacheSpecError),
    ("bool_dtype", lambda: full(dtype=np.bool_), CacheSpecError),
    ("none_dtype", lambda: full(dtype=None), CacheSpecError),
    ("complex_dtype", lambda: full(dtype=np.complex64), CacheSpecError),
    ("full_window_and_chunk", lambda: full(sliding_window=8, attention_chunk_size=8), CacheSpecError),
    ("full_zero_window", lambda: full(sliding_window=0), CacheSpecError),
    ("sliding_with_mla", lambda: SlidingWindowSpec(16, 1, 64, "float16", True, 64), CacheSpecError),
    ("sliding_zero_window", lambda: sliding(window=0), CacheSpecError),
    ("chunk_negative", lambda: chunked(chunk=-8), CacheSpecError),
    ("mamba_padded_too_small", lambda: MambaSpec(16, ((4, 8),), "float32", page_size_padded=127), CacheSpecError),
    ("mamba_empty_shapes", lambda: MambaSpec(16, (), "float32"), CacheSpecError),
    ("mamba_zero_dim", lambda: MambaSpec(16, ((4, 0),), "float32"), CacheSpecError),
    ("mamba_string_shapes", lambda: MambaSpec(16, "44", "float32"), CacheSpecError),  # type: ignore[arg-type]
    ("group_not_a_spec", lambda: CacheGroupSpec("full"), CacheSpecError),  # type: ignore[arg-type]
    ("group_bad_layer_names", lambda: CacheGroupSpec(full(), [1, 2]), CacheSpecError),  # type: ignore[arg-type]
    ("groups_config_zero_pages", lambda: CacheGroupsConfig(0, []), CacheSpecError),  # type: ignore[arg-type]
    ("groups_config_not_groups", lambda: CacheGroupsConfig(10, [full()]), CacheSpecError),  # type: ignore[arg-type]
    ("merge_empty", lambda: CacheSpec.merge([]), CacheSpecError),
    ("merge_different_types", lambda: CacheSpec.merge([full(), sliding()]), CacheSpecError),
    ("merge_different_windows", lambda: FullAttentionSpec.merge([full(sliding_window=8), full(sliding_window=16)]),
     CacheSpecError),
    ("merge_wrong_class", lambda: SlidingWindowSpec.merge([full()]), CacheSpecError),
    ("memory_without_model_len", lambda: full().max_memory_usage_bytes(), InvalidArgumentError),
    ("memory_zero_batch", lambda: sliding().max_memory_usage_bytes(128, 0), InvalidArgumentError),
    ("estimate_zero_pages", lambda: estimate_runtime_page_budget(
        num_pages=0, kv_cache_groups=[], max_model_len=8, max_num_batched_tokens=8), InvalidArgumentError),
    ("estimate_zero_model_len", lambda: estimate_runtime_page_budget(
        num_pages=9, kv_cache_groups=[], max_model_len=0, max_num_batched_tokens=8), InvalidArgumentError),
    ("estimate_negative_batch", lambda: estimate_runtime_page_budget(
        num_pages=9, kv_cache_groups=[], max_model_len=8, max_num_batched_tokens=-1), InvalidArgumentError),
    ("estimate_zero_dp", lambda: estimate_runtime_page_budget(
        num_pages=9, kv_cache_groups=[], max_model_len=8, max_num_batched_tokens=8, data_parallel_size=0),
     InvalidArgumentError),
    ("estimate_specs_not_groups", lambda: estimate_runtime_page_budget(
        num_pages=9, kv_cache_groups=[full()], max_model_len=8, max_num_batched_tokens=8), CacheSpecError),  # type: ignore[list-item]
    ("config_none", lambda: create_kv_cache_specs_from_config(None, 16, 8, 128, "float16"), CacheSpecError),
    ("config_unknown_layer_type", lambda: create_kv_cache_specs_from_config(
        {"layer_types": ["banana"]}, 16, 8, 128, "float16"), CacheSpecError),
    ("config_sliding_without_window", lambda: create_kv_cache_specs_from_config(
        {"layer_types": ["sliding_attention"]}, 16, 8, 128, "float16"), CacheSpecError),
    ("config_chunked_without_chunk", lambda: create_kv_cache_specs_from_config(
        {"layer_types": ["chunked_attention"]}, 16, 8, 128, "float16"), CacheSpecError),
    ("config_layer_count_mismatch", lambda: create_kv_cache_specs_from_config(
        {"layer_types": ["full_attention"] * 3, "num_hidden_layers": 4}, 16, 8, 128, "float16"), CacheSpecError),
    ("config_window_and_chunk_same_layer", lambda: create_kv_cache_specs_from_config(
        {"sliding_window": [8, None], "attention_chunk_size": [8, None]}, 16, 8, 128, "float16"), CacheSpecError),
    ("config_bad_heads_list_entry", lambda: create_kv_cache_specs_from_config(
        {"num_kv_heads": [4, 0]}, 16, 8, 128, "float16"), CacheSpecError),
    ("config_unhashable_window", lambda: create_kv_cache_specs_from_config(
        {"layer_types": ["sliding_attention"], "sliding_window": [[4]]}, 16, 8, 128, "float16"), CacheSpecError),
    ("config_zero_page_size", lambda: create_kv_cache_specs_from_config({}, 0, 8, 128, "float16"), CacheSpecError),
    ("config_int_use_mla", lambda: create_kv_cache_specs_from_config({}, 16, 8, 128, "float16", 0), CacheSpecError),  # type: ignore[arg-type]
    ("split_not_groups", lambda: split_cache_groups([sliding()]), CacheSpecError),  # type: ignore[list-item]
]


@pytest.mark.parametrize("call, error", [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_cache_specs(call, error: type[Exception]) -> None:
    with pytest.raises(error):
        call()


def test_bad_merge_leaves_inputs_unchanged() -> None:
    specs = [full(sliding_window=8), full(sliding_window=16)]
    before = list(specs)
    with pytest.raises(CacheSpecError):
        FullAttentionSpec.merge(specs)
    assert specs == before


# --- hostile spec arguments ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.int64(3), np.float64(2.0), 2, [np.float16], None, True])
def test_dtype_values_that_are_not_types_are_rejected(dtype: object) -> None:
    with pytest.raises(CacheSpecError):
        FullAttentionSpec(page_size=4, num_kv_heads=1, head_size=8, dtype=dtype, use_mla=False)


@pytest.mark.parametrize("config", [[1, 2], np.array([1]), (), 3, np.bool_(True)])
def test_configs_that_are_not_mappings_or_objects_are_rejected(config: object) -> None:
    with pytest.raises(CacheSpecError):
        create_kv_cache_specs_from_config(config, 4, 1, 8, "float16")


def test_config_attribute_that_raises_is_a_spec_error() -> None:
    class Exploding:
        @property
        def num_hidden_layers(self) -> int:
            raise RuntimeError("boom")

    with pytest.raises(CacheSpecError):
        create_kv_cache_specs_from_config(Exploding(), 4, 1, 8, "float16")


def test_deeply_nested_argument_gets_a_typed_error() -> None:
    value: list = [1]
    for _ in range(5000):
        value = [value]
    with pytest.raises(CacheSpecError):
        FullAttentionSpec(page_size=value, num_kv_heads=1, head_size=8, dtype="float16", use_mla=False)  # type: ignore[arg-type]


# ---- the config reader's bounds: answered at once, before any per-layer work ----------------------

@pytest.mark.parametrize("layers", [10**7, 2**31, 2**63, MAX_CONFIG_LAYERS + 1])
def test_config_layer_counts_are_bounded(layers: int) -> None:
    """(10**7 layers used to take 45 s and 1.1 GB, 2**31 raised MemoryError, 2**63 OverflowError.)"""
    config = {"num_hidden_layers": layers}
    with pytest.raises(CacheSpecError, match=f"num_hidden_layers must be <= {MAX_CONFIG_LAYERS}"):
        create_kv_cache_specs_from_config(config, 16, 8, 128, "bfloat16")
    assert config == {"num_hidden_layers": layers}
    with pytest.raises(CacheSpecError, match="num_hidden_layers"):
        create_kv_cache_specs_from_config(SimpleNamespace(num_hidden_layers=layers), 16, 8, 128, "bfloat16")


def test_config_largest_layer_count_is_read() -> None:
    groups = create_kv_cache_specs_from_config({"num_hidden_layers": MAX_CONFIG_LAYERS}, 16, 8, 128, "bfloat16")
    assert len(groups) == 1 and len(groups[0].layer_names or ()) == MAX_CONFIG_LAYERS


@pytest.mark.parametrize("key", ["layer_types", "sliding_window", "num_key_value_heads", "head_dim"])
def test_config_per_layer_lists_are_bounded(key: str) -> None:
    with pytest.raises(CacheSpecError, match=f"{key} lists {MAX_CONFIG_LAYERS + 1:,} layers"):
        create_kv_cache_specs_from_config({key: [1] * (MAX_CONFIG_LAYERS + 1)}, 16, 8, 128, "bfloat16")


@pytest.mark.parametrize("config, args, named", [
    ({"num_hidden_layers": 2, "num_key_value_heads": 2**40}, {}, "num_kv_heads of layer 0"),
    ({"num_hidden_layers": 2, "head_dim": [128, 2**63]}, {}, "head_size of layer 1"),
    ({"num_hidden_layers": 2, "sliding_window": 2**31}, {}, "sliding_window of layer 0"),
    ({"num_hidden_layers": 2, "attention_chunk_size": 2**63}, {}, "attention_chunk_size of layer 0"),
    ({"num_hidden_layers": 2}, {"num_kv_heads": MAX_CONFIG_DIM + 1}, "num_kv_heads"),
    ({"num_hidden_layers": 2}, {"head_size": 10**100}, "head_size"),
    ({"num_hidden_layers": 2, "sliding_window_pattern": 2**63, "sliding_window": 8}, {}, "sliding_window_pattern"),
])
def test_config_sizes_are_bounded(config: dict[str, Any], args: dict[str, int], named: str) -> None:
    sizes = {"num_kv_heads": 8, "head_size": 128, **args}
    with pytest.raises(CacheSpecError, match=f"{named} must be <="):
        create_kv_cache_specs_from_config(config, 16, sizes["num_kv_heads"], sizes["head_size"], "bfloat16")


def test_config_numpy_values() -> None:
    """NumPy integers read as ints; a NumPy float is refused where an integer is read; NumPy
    booleans read as flags (``np.bool_(False)`` is false, not merely "not False")."""
    groups = create_kv_cache_specs_from_config({"num_hidden_layers": np.int64(2), "sliding_window": np.int32(8)},
                                               16, 8, 128, "bfloat16")
    assert [g.kv_cache_spec.sliding_window for g in groups] == [8]  # type: ignore[attr-defined]
    with pytest.raises(CacheSpecError, match="sliding_window of layer 0 must be an integer"):
        create_kv_cache_specs_from_config({"num_hidden_layers": 2, "sliding_window": np.float64(1.0)},
                                          16, 8, 128, "bfloat16")
    off = {"num_hidden_layers": 2, "sliding_window": 8, "use_sliding_window": np.bool_(False)}
    assert type(create_kv_cache_specs_from_config(off, 16, 8, 128, "bfloat16")[0].kv_cache_spec) is FullAttentionSpec
    with pytest.raises(CacheSpecError, match="use_sliding_window must be a bool"):
        create_kv_cache_specs_from_config({**off, "use_sliding_window": np.array([1, 2])}, 16, 8, 128, "bfloat16")
