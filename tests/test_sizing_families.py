"""Every model family sized from its public ``config.json`` (trimmed), or refused.

Fixtures: ``tests/fixtures/configs/<model>/config.json``, written from the published configs
(only the fields that matter kept; fields a published config omits are omitted here too, so
the class defaults must be applied). Each case states, computed by hand below and not by
verikv: the layer kinds, KV bytes per token per layer, the Mamba state bytes per layer, and the
page count on one 80 GiB H100 for a checkpoint whose ``model.safetensors.index.json`` says
16 GB of weights (so no ``weights_bytes`` is passed). Every case runs through both readers:
verikv's built-in defaults and, when installed, transformers.

Budget (vLLM rule, utilisation 0.9): floor(85,899,345,920 * 9 / 10) - 16,000,000,000
= 77,309,411,328 - 16,000,000,000 = 61,309,411,328 B.
GPU (flash-attn, FlashMLA for MLA): pages of 16 tokens (64 for FlashMLA); a page id costs
``group_size`` pages, ``group_size`` being the smallest layer-kind count (or the largest, when
under 1.5x the smallest); for hybrids the block grows to the smallest multiple of 16 tokens
whose attention page holds one Mamba state.
"""

from __future__ import annotations

import json
import shutil
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from verikv.errors import SizingError, VeriKVError
from verikv.sizing import plan_kv_cache
from verikv.sizing.checkpoint import (
    MAX_CONFIG_BYTES,
    MAX_HEADER_BYTES,
    checkpoint_weights_bytes,
    load_model,
    safetensors_bytes,
)
from verikv.sizing.cli import main
from verikv.sizing.geometry import AttentionLayer, MambaLayer, MLALayer
from verikv.sizing.hf_config import geometry_from_hf_config
from verikv.sizing.hf_defaults import FAMILY_DEFAULTS, MAX_DEPTH, transformers_available
from verikv.sizing.kernels import get_kernel
from verikv.sizing.layers import layer_arrays

FIXTURES = Path(__file__).parent / "fixtures" / "configs"
GiB = 2**30
MEMORY = 80 * GiB
WEIGHTS = 16_000_000_000
BUDGET = 85_899_345_920 * 9 // 10 - WEIGHTS
assert BUDGET == 61_309_411_328

READERS = [pytest.param(False, id="builtin")]
if transformers_available():
    READERS.append(pytest.param(None, id="transformers"))  # falls back to builtin for types it lacks (kimi_k2)


@dataclass(frozen=True)
class Family:
    """What one fixture must size to (all by hand)."""

    model: str
    kinds: dict[str, int]                   # layer records per kind
    kv_bytes_per_token: int                 # per attention layer, bf16, tp 1
    page_id_bytes: int                      # bytes one page id costs on one device
    num_pages: int                          # BUDGET // page_id_bytes
    full_layers: tuple[int, ...] | None = None
    mamba_state_bytes: int = 0              # conv + ssm per Mamba layer
    page_size: int = 16
    extra: dict[str, object] = field(default_factory=dict)


def _kv(heads: int, head_dim: int) -> int:
    return 2 * heads * head_dim * 2  # K and V, bf16


FAMILIES = [
    # 32 full layers, 8 KV heads x 128: 4,096 B per token per layer; page id 32 x 16 x 4,096
    Family("llama-3.1-8b", {"full": 32}, 4096, 32 * 16 * 4096, BUDGET // (32 * 16 * 4096)),
    # RoPE layers chunked (8,192), every 4th layer (3, 7, ..., 47) full: 36 + 12; group size 12
    Family("llama-4-scout", {"chunked": 36, "full": 12}, 4096, 12 * 16 * 4096, BUDGET // (12 * 16 * 4096),
           full_layers=tuple(range(3, 48, 4)), extra={"attention_chunk_size": 8192}),
    # sliding_window 4096 on all 32 layers: one kind, group size 32
    Family("mistral-7b-v0.1", {"sliding": 32}, 4096, 32 * 16 * 4096, BUDGET // (32 * 16 * 4096),
           extra={"sliding_window": 4096}),
    Family("mixtral-8x7b", {"full": 32}, 4096, 32 * 16 * 4096, BUDGET // (32 * 16 * 4096)),
    # use_sliding_window false: all full; 4 KV heads x 128 = 2,048 B per token
    Family("qwen2.5-7b", {"full": 28}, 2048, 28 * 16 * 2048, BUDGET // (28 * 16 * 2048)),
    Family("qwen3-8b", {"full": 36}, 4096, 36 * 16 * 4096, BUDGET // (36 * 16 * 4096)),
    Family("qwen3-30b-a3b", {"full": 48}, 2048, 48 * 16 * 2048, BUDGET // (48 * 16 * 2048)),
    # even layers sliding (4,096), odd full; 8 x 256 = 8,192 B per token; 21 / 21: group size 21
    Family("gemma-2-9b", {"sliding": 21, "full": 21}, 8192, 21 * 16 * 8192, BUDGET // (21 * 16 * 8192),
           full_layers=tuple(range(1, 42, 2))),
    # head_dim default 256 (not 3840 / 16 = 240); pattern 6: layers 5, 11, ..., 47 full (5:1)
    Family("gemma-3-12b", {"sliding": 40, "full": 8}, _kv(8, 256), 8 * 16 * 8192, BUDGET // (8 * 16 * 8192),
           full_layers=tuple(range(5, 48, 6)), extra={"sliding_window": 1024, "head_dim": 256}),
    # alternating sliding (128) / full, 8 x 64 = 2,048 B per token; group size 12
    Family("gpt-oss-20b", {"sliding": 12, "full": 12}, _kv(8, 64), 12 * 16 * 2048, BUDGET // (12 * 16 * 2048),
           full_layers=tuple(range(1, 24, 2)), extra={"sliding_window": 128}),
    # 3 sliding : 1 full, head_dim 12288 / 96 = 128; 48 + 16, group size 16
    Family("command-a", {"sliding": 48, "full": 16}, 4096, 16 * 16 * 4096, BUDGET // (16 * 16 * 4096),
           full_layers=tuple(range(3, 64, 4))),
    # MLA latent 512 + rope 64 = 576 bf16 = 1,152 B per token; FlashMLA pages of 64 tokens
    Family("deepseek-v2-lite", {"mla": 27}, 1152, 27 * 64 * 1152, BUDGET // (27 * 64 * 1152), page_size=64),
    Family("deepseek-v3", {"mla": 61}, 1152, 61 * 64 * 1152, BUDGET // (61 * 64 * 1152), page_size=64),
    Family("kimi-k2", {"mla": 61}, 1152, 61 * 64 * 1152, BUDGET // (61 * 64 * 1152), page_size=64),
    # sliding_window 2047 on every layer, 32 KV heads x 96 = 12,288 B per token
    Family("phi-3-mini-4k", {"sliding": 32}, _kv(32, 96), 32 * 16 * 12288, BUDGET // (32 * 16 * 12288),
           extra={"sliding_window": 2047}),
    Family("phi-4", {"full": 40}, _kv(10, 128), 40 * 16 * 5120, BUDGET // (40 * 16 * 5120)),
    # attention where i % 8 == 4: 4 of 32. Mamba1 state: conv 3 x 8,192 x 2 = 49,152,
    # ssm 8,192 x 16 x 2 = 262,144: 311,296 B = 76 tokens of 4,096 B -> block 80 (multiple of 16);
    # page 80 x 4,096 = 327,680; group size 4
    Family("jamba-v0.1", {"full": 4, "mamba": 28}, 4096, 4 * 327_680, BUDGET // (4 * 327_680),
           full_layers=(4, 12, 20, 28), mamba_state_bytes=3 * 8192 * 2 + 8192 * 16 * 2, page_size=80),
    # Mamba2: conv 3 x (8,192 + 2 x 1 x 256) x 2 = 52,224, ssm 128 x 64 x 256 x 2 = 4,194,304;
    # 4,246,528 B = 1,036.75 tokens -> block 1,040; page 4,259,840; group size 3
    Family("bamba-9b", {"full": 3, "mamba": 29}, 4096, 3 * 1040 * 4096, BUDGET // (3 * 1040 * 4096),
           full_layers=(9, 18, 27), mamba_state_bytes=3 * 8704 * 2 + 128 * 64 * 256 * 2, page_size=1040),
    # pattern: 24 M, 4 *, 24 - (no cache): records are the 28 cached blocks. SSM state in float32
    # (the config class's mamba_ssm_cache_dtype): conv 3 x (8,192 + 2 x 8 x 128) x 2 = 61,440,
    # ssm 128 x 64 x 128 x 4 = 4,194,304; 4,255,744 B = 1,039 tokens -> block 1,040; group size 4
    Family("nemotron-h-8b", {"full": 4, "mamba": 24}, 4096, 4 * 1040 * 4096, BUDGET // (4 * 1040 * 4096),
           full_layers=(4, 10, 16, 22), mamba_state_bytes=3 * 10240 * 2 + 128 * 64 * 128 * 4, page_size=1040),
    # conv 3 x (8,192 + 2 x 128) x 2 = 50,688, ssm 128 x 64 x 128 x 2 = 2,097,152: 2,147,840 B =
    # 524.4 tokens -> block 528; page 528 x 4,096 = 2,162,688; group size 4
    Family("granite-4.0-h-small", {"full": 4, "mamba": 36}, 4096, 4 * 528 * 4096, BUDGET // (4 * 528 * 4096),
           full_layers=(5, 15, 25, 35), mamba_state_bytes=3 * 8448 * 2 + 128 * 64 * 128 * 2, page_size=528),
    # attention (2 KV heads x 128 = 1,024 B per token) and Mamba2 in every layer: records 2i and 2i+1.
    # conv 3 x (3,072 + 2 x 256) x 2 = 21,504, ssm 24 x 128 x 256 x 2 = 1,572,864: 1,594,368 B =
    # 1,557 tokens -> block 1,568; page 1,568 x 1,024 = 1,605,632; 44 / 44: group size 44
    Family("falcon-h1-7b", {"full": 44, "mamba": 44}, _kv(2, 128), 44 * 1568 * 1024, BUDGET // (44 * 1568 * 1024),
           full_layers=tuple(range(0, 88, 2)), mamba_state_bytes=3 * 3584 * 2 + 24 * 128 * 256 * 2, page_size=1568),
]


def _checkpoint(tmp_path: Path, model: str) -> Path:
    """The fixture as a checkpoint folder whose index states 16 GB of weights."""
    folder = tmp_path / model
    folder.mkdir()
    shutil.copy(FIXTURES / model / "config.json", folder / "config.json")
    index = {"metadata": {"total_size": WEIGHTS}, "weight_map": {"lm_head.weight": "model-00001.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def test_every_fixture_has_a_case():
    cases = {f.model for f in FAMILIES} | {"qwen3-next-80b-a3b", "gemma-2-9b-published"}
    assert cases == {p.name for p in FIXTURES.iterdir()}


@pytest.mark.parametrize("use_transformers", READERS)
@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.model)
def test_family_layers_bytes_and_pages(family, use_transformers, tmp_path):
    model = load_model(_checkpoint(tmp_path, family.model), use_transformers=use_transformers)
    assert model.weights_bytes == WEIGHTS  # from the index, no --weights-bytes
    assert dict(Counter(layer.kind for layer in model.layers)) == family.kinds
    if family.full_layers is not None:
        assert tuple(i for i, layer in enumerate(model.layers) if layer.kind == "full") == family.full_layers
    flash = get_kernel("flashmla" if "mla" in family.kinds else "flash-attn")
    cached = [layer for layer in model.layers if not isinstance(layer, MambaLayer)]
    per_token = {layer_arrays(layer, flash, "bfloat16", "bfloat16", 1, 1)[0].page_bytes for layer in cached}
    assert per_token == {family.kv_bytes_per_token}
    for layer in model.layers:
        if isinstance(layer, AttentionLayer):
            for key in ("sliding_window", "attention_chunk_size", "head_dim"):
                if key in family.extra and (key == "head_dim" or layer.kind != "full"):
                    assert getattr(layer, key) == family.extra[key]
    states = {sum(a.page_bytes for a in layer_arrays(layer, flash, "bfloat16", "bfloat16", 16, 1))
              for layer in model.layers if isinstance(layer, MambaLayer)}
    assert states == ({family.mamba_state_bytes} if family.mamba_state_bytes else set())
    plan = plan_kv_cache(model, "h100-sxm", memory_bytes=MEMORY, max_model_len=8192)
    assert plan.budget_bytes == BUDGET
    assert plan.page_size == family.page_size
    assert plan.page_bytes_per_device == family.page_id_bytes
    assert plan.num_pages == family.num_pages


PUBLISHED_GEMMA_2 = FIXTURES / "gemma-2-9b-published"
"""Gemma-2-9B's ``config.json`` as published, every field kept: it states ``sliding_window_size``
(an older transformers name) beside ``sliding_window``, equal."""


def _is_published_gemma_2_9b(model: Any) -> None:
    kinds = [layer.kind for layer in model.layers]
    assert Counter(kinds) == {"sliding": 21, "full": 21} and kinds[:4] == ["sliding", "full", "sliding", "full"]
    assert {layer.sliding_window for layer in model.layers if layer.kind == "sliding"} == {4096}
    assert {(layer.num_kv_heads, layer.head_dim) for layer in model.layers} == {(8, 256)}


@pytest.mark.parametrize("use_transformers", READERS)
def test_published_gemma_2_9b_is_sized(use_transformers, capsys):
    config = json.loads((PUBLISHED_GEMMA_2 / "config.json").read_text())
    assert config["sliding_window_size"] == config["sliding_window"] == 4096
    model = load_model(PUBLISHED_GEMMA_2, use_transformers=use_transformers)
    _is_published_gemma_2_9b(model)
    assert model.weights_source == "dense estimate"  # a config-only folder
    plan = plan_kv_cache(model, "h100-sxm", memory_bytes=MEMORY, kv_dtype="bfloat16", weights_bytes=WEIGHTS)
    assert plan.budget_bytes == BUDGET
    assert plan.page_bytes_per_device == 21 * 16 * 8192 and plan.num_pages == BUDGET // (21 * 16 * 8192)
    reader = "builtin" if use_transformers is False else "auto"
    assert main(["--model", str(PUBLISHED_GEMMA_2), "--device", "h200", "--kv-dtype", "bf16",
                 "--config-reader", reader]) == 0
    assert "21 sliding (window 4,096), 21 full; head dim 256" in capsys.readouterr().out


@pytest.mark.parametrize("use_transformers", READERS)
def test_conflicting_aliases_are_refused_naming_both(use_transformers):
    config = json.loads((PUBLISHED_GEMMA_2 / "config.json").read_text())
    config["sliding_window_size"] = 2048
    with pytest.raises(SizingError, match="sliding_window_size = 2048 and sliding_window = 4096 disagree"):
        geometry_from_hf_config(config, use_transformers=use_transformers)
    del config["sliding_window"]  # the older name alone is read
    windows = {layer.sliding_window for layer in geometry_from_hf_config(config, use_transformers=use_transformers)
               .layers if layer.kind == "sliding"}
    assert windows == {2048}


@pytest.mark.parametrize("use_transformers", READERS)
def test_gemma_3_pattern_alias(use_transformers):
    text = json.loads((FIXTURES / "gemma-3-12b" / "config.json").read_text())["text_config"]
    pattern = text.pop("sliding_window_pattern", None)
    renamed = {**text, "_sliding_window_pattern": 4}
    full = [i for i, layer in enumerate(geometry_from_hf_config(renamed, use_transformers=use_transformers).layers)
            if layer.kind == "full"]
    assert full == list(range(3, 48, 4))
    with pytest.raises(SizingError, match="_sliding_window_pattern = 4 and sliding_window_pattern = 6 disagree"):
        geometry_from_hf_config({**renamed, "sliding_window_pattern": 6}, use_transformers=use_transformers)
    assert pattern in (None, 6)


@pytest.mark.skipif(not transformers_available(), reason="transformers is not installed")
def test_pretrained_config_objects_and_their_dicts():
    """A transformers config object (built offline) and its ``to_dict()`` read like its config.json."""
    from transformers import Gemma2Config, LlamaConfig

    llama = LlamaConfig(num_hidden_layers=4, hidden_size=512, num_attention_heads=8, num_key_value_heads=2,
                        intermediate_size=1024, vocab_size=1000, max_position_embeddings=4096,
                        id2label={0: "NEG", 1: "POS"})
    as_dict = llama.to_dict()
    assert as_dict["id2label"] == {0: "NEG", 1: "POS"}  # int keys, irrelevant to the KV layout
    from_object = geometry_from_hf_config(llama)
    assert from_object == geometry_from_hf_config(as_dict)
    assert [(layer.kind, layer.num_kv_heads, layer.head_dim) for layer in from_object.layers] == [("full", 2, 64)] * 4
    plan = plan_kv_cache(llama, "h100-sxm", max_model_len=4096)
    assert plan == plan_kv_cache(from_object, "h100-sxm", max_model_len=4096)
    assert as_dict == llama.to_dict()  # read, never changed

    published = json.loads((PUBLISHED_GEMMA_2 / "config.json").read_text())
    gemma = Gemma2Config.from_dict(published)
    _is_published_gemma_2_9b(geometry_from_hf_config(gemma))
    _is_published_gemma_2_9b(geometry_from_hf_config(gemma.to_dict(), use_transformers=False))


class _Failing:
    def to_dict(self) -> dict[str, Any]:
        raise RuntimeError("boom")


class _NotADict:
    def to_dict(self) -> list[int]:
        return [1]


@pytest.mark.parametrize("config", [_Failing(), _NotADict(), object(), 5])
def test_objects_that_are_not_configs_are_refused(config):
    with pytest.raises(SizingError, match=r"config|to_dict"):
        geometry_from_hf_config(config)
    with pytest.raises(SizingError):
        plan_kv_cache(config, "h100-sxm")


@pytest.mark.parametrize("use_transformers", READERS)
def test_qwen3_next_linear_attention_is_refused(use_transformers):
    config = json.loads((FIXTURES / "qwen3-next-80b-a3b" / "config.json").read_text())
    with pytest.raises(SizingError, match=r"linear_attention.*cannot express"):
        geometry_from_hf_config(config, use_transformers=use_transformers)


def test_gemma_3_without_defaults_would_be_wrong():
    """The fixture states neither head_dim nor vocab_size: the class defaults (256) must apply."""
    text = json.loads((FIXTURES / "gemma-3-12b" / "config.json").read_text())["text_config"]
    assert "head_dim" not in text and text["hidden_size"] // text["num_attention_heads"] == 240


@pytest.mark.parametrize("use_transformers", READERS)
@pytest.mark.parametrize("config, fields", [
    ({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256,
      "layer_types": ["full_attention", "mamba"]}, "(mamba|linear_attention)"),  # transformers 5 renames mamba
    ({"model_type": "mistral", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256,
      "layer_types": ["sliding_attention", "rwkv"], "sliding_window": 8}, "rwkv"),
])
def test_unknown_layer_types_are_refused(config, fields, use_transformers):
    # refused by verikv's reader, or already by transformers' own validation of layer_types
    with pytest.raises(SizingError, match=f"(layer types verikv does not handle|layer_types).*{fields}"):
        geometry_from_hf_config(config, use_transformers=use_transformers)


@pytest.mark.parametrize("extra, named", [
    ({"mamba_d_state": 16}, "mamba_d_state"),
    ({"num_kv_shared_layers": 10}, "num_kv_shared_layers"),
    ({"global_head_dim": 512, "linear_key_head_dim": 64}, "global_head_dim, linear_key_head_dim"),
    ({"layers_block_type": ["attention", "mamba"]}, "layers_block_type"),
])
def test_unhandled_layout_fields_are_refused_by_name(extra, named):
    base = {"model_type": "some_new_model", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256}
    with pytest.raises(SizingError, match=f"does not handle for it: {named}$"):
        geometry_from_hf_config({**base, **extra})
    geometry_from_hf_config(base)  # the same config without the field is plain decoder attention


@pytest.mark.parametrize("model, extra, named", [
    ("nemotron-h-8b", {"sliding_window": 4096}, "sliding_window"),
    ("deepseek-v3", {"sliding_window": 4096}, "sliding_window"),
    ("jamba-v0.1", {"sliding_window": 4096}, "sliding_window"),
    ("gemma-3-12b", {"num_kv_shared_layers": 5}, "num_kv_shared_layers"),
    ("bamba-9b", {"layer_types": ["mamba"] * 32}, "layer_types"),
    ("falcon-h1-7b", {"layer_types": ["attention"] * 44}, "layer_types"),
])
def test_listed_families_refuse_fields_their_reader_ignores(model, extra, named):
    config = json.loads((FIXTURES / model / "config.json").read_text())
    target = config.get("text_config", config)
    target.update(extra)
    with pytest.raises(SizingError, match=named):
        geometry_from_hf_config(config, use_transformers=False)


def test_refusal_exits_2_from_the_cli(tmp_path, capsys):
    folder = tmp_path / "new"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "x", "num_hidden_layers": 2, "hidden_size": 64,
                                                    "num_attention_heads": 2, "ssm_state_size": 16}))
    assert main(["--model", str(folder), "--device", "h100-sxm", "--weights-bytes", "1"]) == 2
    assert "ssm_state_size" in capsys.readouterr().err


def test_checkpoint_folder_needs_no_weights_bytes(tmp_path, capsys):
    folder = _checkpoint(tmp_path, "gemma-3-12b")
    assert main(["--model", str(folder), "--device", "h100-sxm", "--memory-bytes", "80GiB",
                 "--max-model-len", "8192", "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["num_pages"] == BUDGET // (8 * 16 * 8192)
    assert data["weights_bytes_per_device"] == WEIGHTS


def _safetensors(path: Path, tensors: dict[str, tuple[str, list[int], int]], header_len: int | None = None) -> None:
    """A safetensors file: 8-byte little-endian header length, JSON header, then the data bytes."""
    header: dict[str, dict[str, Any]] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape, size) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if header_len is None else header_len) + raw + b"\0" * offset)


def test_weights_from_safetensors_headers(tmp_path):
    # bf16 (3, 4): 24 B; f32 (5,): 20 B; fp8 (2, 2, 2): 8 B; second file: i64 (7,): 56 B -> 108 B
    _safetensors(tmp_path / "model-00001-of-00002.safetensors",
                 {"a": ("BF16", [3, 4], 24), "b": ("F32", [5], 20), "c": ("F8_E4M3", [2, 2, 2], 8)})
    _safetensors(tmp_path / "model-00002-of-00002.safetensors", {"d": ("I64", [7], 56)})
    assert checkpoint_weights_bytes(tmp_path) == 24 + 20 + 8 + 56
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 999}}))
    assert checkpoint_weights_bytes(tmp_path) == 999  # the index wins


def test_safetensors_headers_are_bounded_and_checked(tmp_path):
    huge = tmp_path / "huge.safetensors"
    _safetensors(huge, {"a": ("BF16", [2], 4)}, header_len=MAX_HEADER_BYTES + 1)
    with pytest.raises(SizingError, match="exceeds"):
        safetensors_bytes(huge)
    wrong = tmp_path / "wrong.safetensors"
    _safetensors(wrong, {"a": ("BF16", [3], 4)})  # 3 bf16 values are 6 bytes, not 4
    with pytest.raises(SizingError, match="data_offsets"):
        safetensors_bytes(wrong)
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x01\x00")
    with pytest.raises(SizingError, match="shorter than 8 bytes"):
        safetensors_bytes(short)


def test_huge_and_deeply_nested_configs_are_refused(tmp_path, capsys):
    deep = tmp_path / "deep"
    deep.mkdir()
    (deep / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    assert main(["--model", str(deep), "--device", "h100-sxm"]) == 2
    assert "cannot read" in capsys.readouterr().err
    nested = tmp_path / "nested"
    nested.mkdir()
    value: object = 1
    for _ in range(MAX_DEPTH + 1):
        value = {"x": value}
    (nested / "config.json").write_text(json.dumps({"model_type": "llama", "extra": value}))
    assert main(["--model", str(nested), "--device", "h100-sxm"]) == 2
    assert "nested deeper" in capsys.readouterr().err
    big = tmp_path / "big"
    big.mkdir()
    (big / "config.json").write_text(json.dumps({"model_type": "llama", "pad": "x" * MAX_CONFIG_BYTES}))
    assert main(["--model", str(big), "--device", "h100-sxm"]) == 2
    assert "larger than" in capsys.readouterr().err


@pytest.mark.parametrize("count", [2**63, 10**7, 0, -1, 4.0, "32", True])
def test_layer_counts_are_bounded(count):
    config = {"model_type": "llama", "num_hidden_layers": count, "num_attention_heads": 8, "hidden_size": 512}
    for reader in (False, None):
        with pytest.raises(SizingError, match="num_hidden_layers"):
            geometry_from_hf_config(config, use_transformers=reader)


@pytest.mark.skipif(not transformers_available(), reason="transformers not installed")
def test_builtin_defaults_are_the_transformers_class_defaults():
    from transformers import CONFIG_MAPPING

    patterns = {"sliding_window_pattern", "full_attention_interval"}  # folded into layer_types by the classes
    for model_type, defaults in FAMILY_DEFAULTS.items():
        config = CONFIG_MAPPING[model_type]()
        for key, value in defaults.items():
            if key in patterns:  # every value-th layer is the full-attention one
                full = [i for i, t in enumerate(config.layer_types) if t == "full_attention"]
                assert full == [i for i in range(config.num_hidden_layers) if (i + 1) % value == 0], model_type
                continue
            if key == "sliding_window" and model_type in ("qwen2", "qwen3"):
                config = CONFIG_MAPPING[model_type](use_sliding_window=True)  # else the class clears it
            if value == "auto":  # mamba_d_head: intermediate // heads
                value = defaults["mamba_expand"] * defaults["hidden_size"] // defaults["mamba_n_heads"]
            assert getattr(config, key) == value, (model_type, key)


def test_qwen3_next_default_pattern_is_refused_by_the_builtin_reader():
    with pytest.raises(SizingError, match="36 linear_attention layers"):
        geometry_from_hf_config({"model_type": "qwen3_next"}, use_transformers=False)


def test_mla_layer_record():
    model = geometry_from_hf_config(json.loads((FIXTURES / "kimi-k2" / "config.json").read_text()))
    assert set(model.layers) == {MLALayer(512, 64)}


def test_errors_are_typed_for_odd_configs():
    odd = [
        {"model_type": "jamba", "attn_layer_offset": 9},
        {"model_type": "bamba", "attn_layer_indices": [99]},
        {"model_type": "nemotron_h", "hybrid_override_pattern": "M*X"},
        {"model_type": "granitemoehybrid", "num_hidden_layers": 2, "layer_types": ["mamba"]},
        {"model_type": "llama4_text", "no_rope_layers": [2] * 48},
        {"model_type": "qwen3_moe", "use_sliding_window": True},
        {"model_type": "gemma3_text", "sliding_window_pattern": 0},
    ]
    for config in odd:
        with pytest.raises(VeriKVError):
            geometry_from_hf_config(config, use_transformers=False)


def test_without_transformers_the_builtin_defaults_apply(monkeypatch):
    """With transformers absent, ``None`` uses the built-in table and ``True`` is a typed error."""
    from verikv.sizing import hf_defaults

    monkeypatch.setattr(hf_defaults, "transformers_available", lambda: False)
    config = json.loads((FIXTURES / "gemma-3-12b" / "config.json").read_text())
    model = geometry_from_hf_config(config)
    assert Counter(layer.kind for layer in model.layers) == {"sliding": 40, "full": 8}
    with pytest.raises(SizingError, match="pip install 'verikv\\[hf\\]'"):
        geometry_from_hf_config(config, use_transformers=True)


def test_config_reader_option(capsys):
    kimi = str(FIXTURES / "kimi-k2")
    args = ["--model", kimi, "--device", "h100-sxm", "--weights-bytes", "1GB", "--max-model-len", "8k"]
    assert main([*args, "--config-reader", "builtin"]) == 0
    capsys.readouterr()
    if transformers_available():  # transformers has no kimi_k2 config class: requiring it is refused
        assert main([*args, "--config-reader", "transformers"]) == 2
        assert "kimi_k2" in capsys.readouterr().err
