"""Sizing inputs: every hostile input gets a typed error, and none is a hang.

Each input is refused by a bound checked before any work scales with it (``verikv.sizing.bounds``,
the utilisation text rule, the config layer bound), so these calls return at once; the tests
state the bound each one hits, not a time limit.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from verikv.errors import DoesNotFitError, SizingError
from verikv.sizing import MambaLayer, ModelGeometry, get_preset, plan_kv_cache, uniform_model
from verikv.sizing.bounds import MAX_BYTES, MAX_DP, MAX_MODEL_LAYERS, MAX_PAGE_SIZE, MAX_TP
from verikv.sizing.budget import utilization_fraction
from verikv.sizing.checkpoint import load_model
from verikv.sizing.hf_config import geometry_from_hf_config
from verikv.sizing.units import UnitError, parse_bytes, parse_count

LLAMA = get_preset("llama-3-8b")


@pytest.mark.parametrize("kwargs, message", [
    (dict(utilization="1/0"), "divides by zero"),
    (dict(utilization="1e999999999"), "decimal in"),  # not expanded into a 10**(10**9) fraction
    (dict(utilization="9" * 100), "longer than"),
    (dict(utilization=float("nan")), "decimal in"),
    (dict(utilization=float("inf")), "decimal in"),
    (dict(utilization=[0.9]), "must be a number"),
    (dict(utilization="1.5"), r"\(0, 1\]"),
    (dict(dp=2**30), f"dp must be <= {MAX_DP}"),
    (dict(tp=2**20), f"tp must be <= {MAX_TP}"),
    (dict(memory_bytes=10**100), f"memory_bytes must be <= {MAX_BYTES}"),
    (dict(weights_bytes=2**61), "weights_bytes must be <="),
    (dict(in_use_bytes=2**61), "in_use_bytes must be <="),
    (dict(reserved_bytes=2**61), "reserved_bytes must be <="),
    (dict(workspace_bytes=-1), "workspace_bytes must be >= 0"),
    (dict(kv_cache_bytes=0), "kv_cache_bytes must be >= 1"),
    (dict(page_size=2**40), f"page_size must be <= {MAX_PAGE_SIZE}"),
    (dict(max_num_batched_tokens=2**40), "max_num_batched_tokens must be <="),
    (dict(max_model_len=2**40), "max_model_len must be <="),
])
def test_plan_inputs_are_bounded(kwargs, message):
    with pytest.raises(SizingError, match=message):
        plan_kv_cache(LLAMA, "h100-sxm", **kwargs)


def test_utilisation_forms():
    assert utilization_fraction("0.9") == utilization_fraction(0.9) == utilization_fraction("9/10") == Fraction(9, 10)
    assert utilization_fraction("9e-1") == Fraction(9, 10)
    assert utilization_fraction(Fraction(1, 3)) == Fraction(1, 3)
    with pytest.raises(SizingError):
        utilization_fraction("1e-9999")  # four exponent digits: refused, not computed
    with pytest.raises(SizingError):
        utilization_fraction(True)


@pytest.mark.parametrize("name", [["x"], None, 5, b"llama-3-8b", "x" * 10_000])
def test_get_preset_rejects_non_names(name):
    with pytest.raises(SizingError):
        get_preset(name)  # type: ignore[arg-type]


@pytest.mark.parametrize("count", [2**63, 10**7])
def test_huge_layer_counts(count):
    with pytest.raises(SizingError, match="num_hidden_layers"):
        geometry_from_hf_config({"model_type": "llama", "num_hidden_layers": count, "num_attention_heads": 8,
                                 "hidden_size": 512})
    with pytest.raises(SizingError, match=f"num_layers must be <= {MAX_MODEL_LAYERS}"):
        uniform_model("m", count, 8, 128)
    with pytest.raises(SizingError, match=f"at most {MAX_MODEL_LAYERS} layers"):
        ModelGeometry("m", [LLAMA.layers[0]] * (MAX_MODEL_LAYERS + 1))


def test_largest_allowed_inputs_are_answered():
    """At the bounds the planner still answers (here: does not fit, with the numbers)."""
    big = uniform_model("m", MAX_MODEL_LAYERS, 8, 128, weights_bytes=0, max_model_len=4096)
    with pytest.raises(DoesNotFitError):
        plan_kv_cache(big, "h100-sxm", dp=MAX_DP)


def test_mamba_version_must_be_an_int():
    with pytest.raises(SizingError, match="Mamba version must be an integer"):
        MambaLayer(1.0, 8, 8, 4)  # type: ignore[arg-type]
    with pytest.raises(SizingError):
        MambaLayer(3, 8, 8, 4)
    assert MambaLayer(1, 8, 8, 4).version == 1


@pytest.mark.parametrize("text", ["", "k", "1.5K", "1.0001k", "1e9", "-1", "0x10", "1" * 21, "1 2", "10 GiBs",
                                  "\u0661\u0662", "\uff11\uff12", "1_000", " 12", "12 ", "12\n", "80 GiB", "+12",
                                  "\u0968k", "1.\u0665k"])
def test_unit_parsing_refuses(text):
    with pytest.raises(UnitError):
        parse_bytes(text)
    with pytest.raises(UnitError):
        parse_count(text)


def test_unit_parsing_values():
    assert parse_count("32k") == 32_000 and parse_count("32K") == 32_768 and parse_count("25.6k") == 25_600
    assert parse_count("1t") == 10**12 and parse_count("1T") == 2**40
    assert parse_bytes("80GiB") == 80 * 2**30 and parse_bytes("80GB") == 80 * 10**9
    assert parse_bytes("1.5KiB") == 1536 and parse_bytes("2kB") == parse_bytes("2KB") == 2000
    assert parse_bytes("512B") == 512 and parse_bytes("3M") == 3 * 2**20 and parse_bytes("3m") == 3 * 10**6


@pytest.mark.parametrize("config", [
    {"model_type": "qwen2", "num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 64,
     "use_sliding_window": np.array([1, 2])},  # truth value would raise
    {"model_type": "llama", "num_hidden_layers": np.float64(2.0), "num_attention_heads": 2, "hidden_size": 64},
    {"model_type": "mistral", "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8,
     "hidden_size": 1024, "head_dim": 128, "sliding_window": np.float64(1.0)},
    {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 64,
     "max_position_embeddings": np.array(4096)},  # a 0-d array is an array, not a number
    {1: 2},
    {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 64,
     "id2label": {(0, 1): "a"}},  # a key JSON cannot write
    {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 64,
     "id2label": {1: "a", "1": "b"}},  # two keys reading "1"
    {"model_type": "llama", "layer_types": [[1], "full_attention"], "num_hidden_layers": 2,
     "num_attention_heads": 2, "hidden_size": 64},
    ["model_type", "llama"],
])
def test_non_json_configs_get_typed_errors(config):
    before = repr(config)
    for reader in (False, None):
        with pytest.raises(SizingError):
            geometry_from_hf_config(config, use_transformers=reader)  # type: ignore[arg-type]
    assert repr(config) == before


def test_sliding_window_numpy_float_is_a_sizing_error():
    """A NumPy float where an integer is read is refused like a Python float, by both readers."""
    config = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8,
              "hidden_size": 1024, "head_dim": 128, "sliding_window": np.float64(1.0)}
    for reader in (False, None):
        with pytest.raises(SizingError, match="sliding_window"):
            geometry_from_hf_config(config, use_transformers=reader)
    assert config["sliding_window"] == 1.0 and type(config["sliding_window"]) is np.float64


def test_numpy_integers_and_nested_int_keys_are_read_as_json():
    """NumPy integers read as ints and a nested dict's int keys as strings, as ``json.dumps`` writes them."""
    base = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 1024,
            "max_position_embeddings": 4096}
    numpy_config = {**base, "num_hidden_layers": np.int64(2), "num_key_value_heads": np.int32(4),
                    "id2label": {0: "LABEL_0", 1: "LABEL_1"}, "rope_theta": np.float32(10000.0)}
    for reader in (False, None):
        expected = geometry_from_hf_config({**base, "num_key_value_heads": 4}, use_transformers=reader)
        got = geometry_from_hf_config(numpy_config, use_transformers=reader)
        assert got == expected and got.layers[0].num_kv_heads == 4 and len(got.layers) == 2


def test_non_json_values_are_bounded():
    with pytest.raises(SizingError, match="values"):
        geometry_from_hf_config({"model_type": "llama", "extra": [0] * (2**20 + 1)})


def test_describe_accelerator_refuses_non_lists_of_dtypes():
    from verikv.sizing import describe_accelerator

    for kv_dtypes in (0, "bfloat16", (), [1], ("nope",), np.array(["bfloat16"])):
        with pytest.raises(SizingError):
            describe_accelerator("d", 2**34, "gpu", kv_dtypes=kv_dtypes)  # type: ignore[arg-type]
    for bad in (dict(name=""), dict(name=5), dict(memory_bytes=2**61), dict(attention_kernel=0)):
        with pytest.raises(SizingError):
            describe_accelerator(**{"name": "d", "memory_bytes": 2**34, "platform": "gpu", **bad})  # type: ignore[arg-type]
    assert describe_accelerator("d", 2**34, "gpu", kv_dtypes=["bf16", "bfloat16"]).kv_dtypes == ("bfloat16",)


@pytest.mark.parametrize("text", ["\u0660.\u0669", " 0.9", "0.9 ", "9 / 10", "0_9", "\uff10.9"])
def test_utilisation_text_is_ascii_without_spaces(text):
    with pytest.raises(SizingError):
        utilization_fraction(text)


@pytest.mark.parametrize("path", [None, 5, ["x"], "\ud800", "a\x00b", "/nonexistent/config.json"])
def test_load_model_paths_get_typed_errors(path):
    with pytest.raises(SizingError):
        load_model(path)  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs", [dict(kv_dtype=np.array([1, 2])), dict(utilization_of=np.array([1, 2])),
                                    dict(kv_dtype=None), dict(utilization_of=["total"])])
def test_non_string_names_get_typed_errors(kwargs):
    with pytest.raises(SizingError):
        plan_kv_cache(LLAMA, "h100-sxm", **kwargs)


@pytest.mark.parametrize("key, value", [("hybrid_override_pattern", "M" * 100_000),
                                        ("layer_types", ["full_attention"] * 100_000)])
def test_per_layer_lists_are_bounded(key, value):
    for reader in (False, None):
        with pytest.raises(SizingError, match=f"{key} lists 100,000 layers"):
            geometry_from_hf_config({"model_type": "nemotron_h", key: value}, use_transformers=reader)
