"""Reading a Hugging Face ``config.json`` (as a dict) into a ``ModelGeometry``.

Two steps, whatever the source of the defaults:

1. ``hf_defaults.complete_config`` applies the model class's defaults (through transformers
   when installed, else verikv's table for the families it knows);
2. the reader of the model's family turns the completed dict into layer records
   (``AttentionLayer``, ``MLALayer``, ``MambaLayer``): the one intermediate description the
   planner sizes from.

Families (``model_type``) and what decides each layer's kind:

* decoder attention: ``llama``, ``gemma``, ``mistral``, ``mixtral``, ``phi3`` (all layers
  sliding when ``sliding_window`` is set), ``llama4_text`` (chunked local attention on the RoPE
  layers, full on every ``no_rope_layer_interval``-th), ``qwen2`` / ``qwen3`` (sliding from
  ``max_window_layers`` on, only when ``use_sliding_window``), ``qwen2_moe`` / ``qwen3_moe``
  (full), ``gemma2`` and ``gpt_oss`` (alternating sliding / full; gpt-oss's sinks are weights,
  not cached tokens), ``gemma3_text`` / ``cohere2`` (every ``sliding_window_pattern``-th layer
  full); an explicit ``layer_types`` list always wins;
* MLA: ``deepseek_v2``, ``deepseek_v3``, ``kimi_k2`` (``kv_lora_rank`` + ``qk_rope_head_dim``);
* attention + Mamba: ``jamba`` (Mamba1; attention where ``i % attn_layer_period ==
  attn_layer_offset``), ``bamba`` (``attn_layer_indices``), ``granitemoehybrid``
  (``layer_types``), ``nemotron_h`` (``hybrid_override_pattern``: ``M`` Mamba2, ``*``
  attention, ``-`` / ``E`` MLP / MoE blocks without a cache), ``falcon_h1`` (every layer has
  attention and Mamba2 side by side: two records per layer);
* refused: ``qwen3_next`` (Gated DeltaNet linear attention keeps a state the cache specs
  cannot express), and in every family any field that changes the KV layout which its reader
  does not handle (the error names the fields). A model type not listed is read as plain
  decoder attention only if it has no such field.

Layer records are numbered as the cache sees them: blocks without a cache (Nemotron-H's MLP
blocks) are skipped, and Falcon-H1's layer ``i`` gives records ``2i`` (attention) and ``2i+1``
(Mamba2).

Weights: for dense decoders given without a ``text_config`` (Llama, Mistral, Qwen2, Gemma 1-3)
the parameters are counted from the shapes; otherwise ``weights_bytes`` must come from the
checkpoint (``verikv.sizing.checkpoint``) or the caller.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from verikv.dp_sharding import checked_int
from verikv.errors import SizingError, describe
from verikv.sizing.bounds import MAX_CONFIG_DIM
from verikv.sizing.dtypes import get_dtype
from verikv.sizing.geometry import AttentionLayer, Layer, MambaLayer, MLALayer, ModelGeometry
from verikv.sizing.hf_defaults import MAX_LAYERS, complete_config, plain_json

_DENSE_TYPES = frozenset({"llama", "mistral", "qwen2", "gemma", "gemma2", "gemma3_text"})
_GEMMA_NORMS = {"gemma": 2, "gemma2": 4, "gemma3_text": 4}
_MAX_DIM = MAX_CONFIG_DIM
"""Largest head count, head dim, hidden size or state size accepted from a config."""

_LAYOUT_KEY = re.compile(
    r"layer_types|block_type|override_pattern|attn_layer|attention_layer|layer_(period|offset|indices|interval)"
    r"|sliding|window|chunk|kv_lora|kv_heads|key_value|head_dim|linear_|mamba|ssm|conv|state|recurrent|rwkv"
    r"|lru|sink|rope_layers|kv_shared|cross_attention|global_attn|local_attn|swa|d_inner|expand|n_groups"
)
"""Field names that, in some model family, change which layers keep a KV cache or its shape."""

_NOT_LAYOUT = frozenset({"chunk_size_feed_forward", "output_hidden_states", "num_key_value_heads",
                         "head_dim", "use_cache"})
"""Fields matching the pattern that every reader handles or that never change the layout."""


@dataclass(frozen=True)
class _Family:
    """How to read one family: its layer reader and the layout fields that reader handles."""

    read: Callable[[Mapping[str, Any], str], tuple[Layer, ...]]
    handles: frozenset[str]


def _int(cfg: Mapping[str, Any], key: str, minimum: int = 1, maximum: int = _MAX_DIM) -> int:
    """``cfg[key]`` as a checked int in ``[minimum, maximum]``; missing or null is an error."""
    value = cfg.get(key)
    if value is None:
        raise SizingError(f"config has no {key!r}")
    return checked_int(value, f"config {key}", minimum=minimum, maximum=maximum, error=SizingError)


def _opt_int(cfg: Mapping[str, Any], key: str, default: int) -> int:
    return default if cfg.get(key) is None else _int(cfg, key)


def _layer_count(cfg: Mapping[str, Any]) -> int:
    return _int(cfg, "num_hidden_layers", maximum=MAX_LAYERS)


# ---- attention geometry and per-layer kinds ------------------------------------------------------

def _attention_shape(cfg: Mapping[str, Any]) -> tuple[int, int]:
    """(KV heads, head dim): ``num_key_value_heads`` (default: all heads), ``head_dim`` (default:
    ``hidden_size / num_attention_heads``)."""
    heads = _int(cfg, "num_attention_heads")
    kv_heads = _opt_int(cfg, "num_key_value_heads", heads)
    if cfg.get("head_dim") is not None:
        return kv_heads, _int(cfg, "head_dim")
    hidden = _int(cfg, "hidden_size")
    if hidden % heads:
        raise SizingError(f"config has no 'head_dim' and hidden_size {hidden} is not a multiple of {heads} heads")
    return kv_heads, hidden // heads


_KIND_NAMES = {"full_attention": "full", "attention": "full", "sliding_attention": "sliding",
               "chunked_attention": "chunked"}


def _kinds_from_layer_types(cfg: Mapping[str, Any], count: int) -> list[str]:
    types = cfg["layer_types"]
    if not isinstance(types, list) or len(types) != count:
        raise SizingError(f"layer_types must list one type per layer ({count}), got {_short(types)}")
    unknown = sorted({str(t) for t in types if not (isinstance(t, str) and t in _KIND_NAMES)})
    if unknown:
        raise SizingError(f"layer_types has layer types verikv does not handle for this model: {unknown}")
    return [_KIND_NAMES[t] for t in types]


def _pattern_kinds(cfg: Mapping[str, Any], model_type: str, count: int) -> list[str]:
    """Per-layer kinds from a family's pattern when the config gives no ``layer_types``."""
    if model_type in ("gemma2", "gpt_oss"):
        return ["sliding" if i % 2 == 0 else "full" for i in range(count)]
    if model_type in ("gemma3_text", "cohere2"):
        period = _int(cfg, "sliding_window_pattern")
        return ["sliding" if (i + 1) % period else "full" for i in range(count)]
    if model_type in ("qwen2", "qwen3"):
        if not cfg.get("use_sliding_window") or cfg.get("sliding_window") is None:
            return ["full"] * count
        start = _int(cfg, "max_window_layers", minimum=0, maximum=MAX_LAYERS)
        return ["sliding" if i >= start else "full" for i in range(count)]
    if model_type in ("qwen2_moe", "qwen3_moe"):
        if cfg.get("use_sliding_window"):
            raise SizingError(f"use_sliding_window = true is not handled for {model_type} (field use_sliding_window)")
        return ["full"] * count
    if model_type == "llama4_text":
        return _llama4_kinds(cfg, count)
    if cfg.get("use_sliding_window") is False or cfg.get("sliding_window") is None:
        return ["chunked" if cfg.get("attention_chunk_size") is not None else "full"] * count
    return ["sliding"] * count


def _llama4_kinds(cfg: Mapping[str, Any], count: int) -> list[str]:
    """Chunked local attention on layers that use RoPE (``no_rope_layers[i] == 1``), full on the others."""
    if cfg.get("attention_chunk_size") is None:
        return ["full"] * count
    rope = cfg.get("no_rope_layers")
    if not rope:
        interval = _int(cfg, "no_rope_layer_interval")
        rope = [int((i + 1) % interval != 0) for i in range(count)]
    if not isinstance(rope, list) or len(rope) != count or any(r not in (0, 1) for r in rope):
        raise SizingError(f"no_rope_layers must list 0 or 1 for each of the {count} layers")
    return ["chunked" if r else "full" for r in rope]


def _attention_layer(cfg: Mapping[str, Any], kind: str, shape: tuple[int, int]) -> AttentionLayer:
    if kind == "sliding":
        return AttentionLayer(*shape, sliding_window=_int(cfg, "sliding_window", maximum=2**31 - 1))
    if kind == "chunked":
        return AttentionLayer(*shape, attention_chunk_size=_int(cfg, "attention_chunk_size", maximum=2**31 - 1))
    return AttentionLayer(*shape)


def _decoder_layers(cfg: Mapping[str, Any], model_type: str) -> tuple[Layer, ...]:
    count = _layer_count(cfg)
    shape = _attention_shape(cfg)
    kinds = _kinds_from_layer_types(cfg, count) if cfg.get("layer_types") else _pattern_kinds(cfg, model_type, count)
    cache: dict[str, AttentionLayer] = {}
    return tuple(cache.setdefault(kind, _attention_layer(cfg, kind, shape)) for kind in kinds)


def _qwen3_next_layers(cfg: Mapping[str, Any], model_type: str) -> tuple[Layer, ...]:
    count = _layer_count(cfg)
    types = cfg.get("layer_types")
    if not types:
        interval = _int(cfg, "full_attention_interval")
        types = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(count)]
    if isinstance(types, list) and "linear_attention" in types:
        raise SizingError(
            f"{model_type}: {types.count('linear_attention')} linear_attention layers (Gated DeltaNet) keep a "
            "recurrent state that verikv's cache specs cannot express; refusing rather than mis-sizing")
    return _decoder_layers({**cfg, "layer_types": types}, model_type)


# ---- MLA ------------------------------------------------------------------------------------------

def _mla_layers(cfg: Mapping[str, Any], model_type: str) -> tuple[Layer, ...]:
    layer = MLALayer(_int(cfg, "kv_lora_rank"), _int(cfg, "qk_rope_head_dim", minimum=0))
    return (layer,) * _layer_count(cfg)


# ---- attention + Mamba hybrids --------------------------------------------------------------------

def _ssm_dtype(cfg: Mapping[str, Any]) -> str | None:
    """The SSM state dtype a config asks for (``mamba_ssm_cache_dtype``; ``auto``: the model's)."""
    value = cfg.get("mamba_ssm_cache_dtype")
    return None if value in (None, "auto") else get_dtype(str(value)).name


def _mamba2(cfg: Mapping[str, Any], intermediate: int, heads: str, head_dim: str, d_state: str, groups: str,
            conv: str) -> MambaLayer:
    """A Mamba2 layer from the config keys a family names its fields with."""
    num_heads = _int(cfg, heads)
    per_head = cfg.get(head_dim)
    dim = intermediate // num_heads if per_head == "auto" else _int(cfg, head_dim)
    return MambaLayer(2, intermediate, _int(cfg, d_state), _int(cfg, conv, minimum=2), num_heads=num_heads,
                      head_dim=dim, n_groups=_int(cfg, groups), ssm_dtype=_ssm_dtype(cfg))


def _mamba2_prefixed(cfg: Mapping[str, Any], intermediate: int) -> MambaLayer:
    """Bamba / Granite 4 / Falcon-H1 naming: ``mamba_n_heads``, ``mamba_d_head``, ``mamba_d_state``, ..."""
    return _mamba2(cfg, intermediate, "mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups",
                   "mamba_d_conv")


def _expand_intermediate(cfg: Mapping[str, Any]) -> int:
    return _int(cfg, "mamba_expand") * _int(cfg, "hidden_size")


def _jamba_layers(cfg: Mapping[str, Any], model_type: str) -> tuple[Layer, ...]:
    if cfg.get("sliding_window") is not None:
        raise SizingError("jamba with a sliding_window is not handled (field sliding_window)")
    count = _layer_count(cfg)
    period = _int(cfg, "attn_layer_period")
    offset = _int(cfg, "attn_layer_offset", minimum=0)
    if offset >= period:
        raise SizingError(f"attn_layer_offset {offset} must be below attn_layer_period {period}")
    attention = AttentionLayer(*_attention_shape(cfg))
    mamba = MambaLayer(1, _expand_intermediate(cfg), _int(cfg, "mamba_d_state"), _int(cfg, "mamba_d_conv", minimum=2),
                       ssm_dtype=_ssm_dtype(cfg))
    return tuple(attention if i % period == offset else mamba for i in range(count))


def _bamba_layers(cfg: Mapping[str, Any], model_type: str) -> tuple[Layer, ...]:
    count = _layer_count(cfg)
    indices = cfg.get("attn_layer_indices")
    if not isinstance(indices, list) or not all(type(i) is int and 0 <= i < count for i in indices):
        raise SizingError(f"attn_layer_indices must list layer indices below {count}, got {_short(indices)}")
    attention = AttentionLayer(*_attention_shape(cfg))
    mamba = _mamba2_prefixed(cfg, _expand_intermediate(cfg))
    chosen = set(indices)
    return tuple(attention if i in chosen else mamba for i in range(count))


_MAMBA_NAMES = frozenset({"mamba", "linear_attention"})
"""Names of a Mamba2 block in Granite 4 / Nemotron-H ``layer_types`` (transformers 5 renamed
``mamba`` to ``linear_attention``; in these two families both mean Mamba2)."""
_ATTENTION_NAMES = frozenset({"attention", "full_attention"})


def _granite_hybrid_layers(cfg: Mapping[str, Any], model_type: str) -> tuple[Layer, ...]:
    count = _layer_count(cfg)
    types = cfg.get("layer_types")
    if not isinstance(types, list) or len(types) != count:
        raise SizingError(f"layer_types must list one type per layer ({count}), got {_short(types)}")
    unknown = sorted({str(t) for t in types} - _MAMBA_NAMES - _ATTENTION_NAMES)
    if unknown:
        raise SizingError(f"layer_types has layer types verikv does not handle for {model_type}: {unknown}")
    attention = AttentionLayer(*_attention_shape(cfg))
    mamba = _mamba2_prefixed(cfg, _expand_intermediate(cfg))
    return tuple(attention if t in _ATTENTION_NAMES else mamba for t in types)


_NEMOTRON_BLOCKS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}


def _nemotron_h_layers(cfg: Mapping[str, Any], model_type: str) -> tuple[Layer, ...]:
    blocks = _nemotron_blocks(cfg)
    shape = (_opt_int(cfg, "num_key_value_heads", _int(cfg, "num_attention_heads")),
             _opt_int(cfg, "head_dim", _opt_int(cfg, "attention_head_dim", 0) or _attention_shape(cfg)[1]))
    attention = AttentionLayer(*shape)
    heads, dim = _int(cfg, "mamba_num_heads"), _int(cfg, "mamba_head_dim")
    mamba = _mamba2(cfg, heads * dim, "mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups",
                    "conv_kernel")
    return tuple(attention if b in _ATTENTION_NAMES else mamba for b in blocks if b not in ("mlp", "moe"))


def _nemotron_blocks(cfg: Mapping[str, Any]) -> list[str]:
    """Block types from ``hybrid_override_pattern`` or ``layers_block_type`` (either naming)."""
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        if len(pattern) > MAX_LAYERS or set(pattern) - set(_NEMOTRON_BLOCKS):
            raise SizingError(f"hybrid_override_pattern must be at most {MAX_LAYERS} of M * - E, got {_short(pattern)}")
        blocks: list[Any] = [_NEMOTRON_BLOCKS[c] for c in pattern]
    else:
        listed = cfg.get("layers_block_type") or cfg.get("layer_types")
        if not isinstance(listed, list) or not listed or len(listed) > MAX_LAYERS:
            raise SizingError("nemotron_h needs a hybrid_override_pattern or a layers_block_type list")
        blocks = listed
        unknown = sorted({str(b) for b in blocks} - _MAMBA_NAMES - _ATTENTION_NAMES - {"mlp", "moe"})
        if unknown:
            raise SizingError(f"layers_block_type has block types verikv does not handle: {unknown}")
    count = cfg.get("num_hidden_layers")
    if count is not None and count != len(blocks):
        raise SizingError(f"num_hidden_layers {count!r} differs from the {len(blocks)} blocks of the pattern")
    return ["mamba" if b in _MAMBA_NAMES else "attention" if b in _ATTENTION_NAMES else str(b) for b in blocks]


def _falcon_h1_layers(cfg: Mapping[str, Any], model_type: str) -> tuple[Layer, ...]:
    """Every Falcon-H1 layer runs attention and Mamba2 in parallel: both keep state."""
    count = _layer_count(cfg)
    intermediate = _int(cfg, "mamba_d_ssm") if cfg.get("mamba_d_ssm") is not None else _expand_intermediate(cfg)
    attention = AttentionLayer(*_attention_shape(cfg))
    mamba = _mamba2_prefixed(cfg, intermediate)
    return (attention, mamba) * count


# ---- the family table and the refusal of unhandled fields ----------------------------------------

_DECODER = frozenset({"layer_types", "sliding_window", "use_sliding_window", "attention_chunk_size"})
_MAMBA_FIELDS = frozenset({"mamba_chunk_size", "mamba_conv_bias", "mamba_proj_bias", "use_mamba_kernels",
                            "mamba_dt_rank", "use_mambapy", "mamba_ssm_cache_dtype", "mamba_rms_norm",
                            "mamba_norm_before_gate", "mamba_hidden_act", "use_conv_bias", "chunk_size",
                            "ssm_multipliers", "ssm_in_multiplier", "ssm_out_multiplier",
                            "time_step_limit", "time_step_min", "time_step_max", "time_step_floor",
                            "mamba_dt_min", "mamba_dt_max", "mamba_dt_init_floor", "mamba_dt_limit",
                            "mamba_use_mlp", "mamba_d_ssm", "mamba_expand", "mamba_n_heads", "mamba_d_head",
                            "mamba_n_groups", "mamba_d_state", "mamba_d_conv"})
"""Mamba fields the hybrid readers read, or that do not change the state's size (kernel
switches, biases, time-step ranges, multipliers)."""

FAMILIES: dict[str, _Family] = {
    **{t: _Family(_decoder_layers, _DECODER) for t in ("llama", "mistral", "mixtral", "phi3", "gemma")},
    "llama4_text": _Family(_decoder_layers, _DECODER | {"no_rope_layers", "no_rope_layer_interval"}),
    **{t: _Family(_decoder_layers, _DECODER | {"max_window_layers"}) for t in ("qwen2", "qwen3")},
    **{t: _Family(_decoder_layers, _DECODER | {"max_window_layers"}) for t in ("qwen2_moe", "qwen3_moe")},
    **{t: _Family(_decoder_layers, _DECODER | {"sliding_window_pattern"}) for t in ("gemma2", "gemma3_text",
                                                                                  "cohere2", "gpt_oss")},
    "qwen3_next": _Family(_qwen3_next_layers, _DECODER | {"full_attention_interval", "linear_conv_kernel_dim",
                                                          "linear_key_head_dim", "linear_value_head_dim",
                                                          "linear_num_key_heads", "linear_num_value_heads"}),
    **{t: _Family(_mla_layers, frozenset({"kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
                                          "qk_head_dim"})) for t in ("deepseek_v2", "deepseek_v3", "kimi_k2")},
    "jamba": _Family(_jamba_layers, _MAMBA_FIELDS | {"attn_layer_period", "attn_layer_offset", "sliding_window",
                                                      "expert_layer_period", "expert_layer_offset"}),
    "bamba": _Family(_bamba_layers, _MAMBA_FIELDS | {"attn_layer_indices"}),
    "granitemoehybrid": _Family(_granite_hybrid_layers, _MAMBA_FIELDS | {"layer_types"}),
    "nemotron_h": _Family(_nemotron_h_layers, _MAMBA_FIELDS | {
        "hybrid_override_pattern", "layers_block_type", "layer_types", "mtp_layers_block_type",
        "mtp_hybrid_override_pattern",
        "mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel", "expand",
        "attention_head_dim"}),
    "falcon_h1": _Family(_falcon_h1_layers, _MAMBA_FIELDS),
}
"""Every model type verikv reads, with the layout fields its reader handles (or knows to be
irrelevant to the cache: kernel switches, initialisation ranges, MoE placement)."""

_GENERIC = _Family(_decoder_layers, _DECODER)
"""An unlisted model type: plain decoder attention, refused if it has any other layout field."""


def _unhandled_fields(cfg: Mapping[str, Any], family: _Family) -> list[str]:
    """Set fields that can change the KV layout and that the family's reader does not handle."""
    fields = []
    for key, value in cfg.items():
        if value in (None, False, [], "", {}) or key in _NOT_LAYOUT or key in family.handles:
            continue
        if isinstance(key, str) and _LAYOUT_KEY.search(key.lower()):
            fields.append(key)
    return sorted(fields)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# ---- the public reader ---------------------------------------------------------------------------

def geometry_from_hf_config(
    config: Mapping[str, Any] | SupportsToDict, name: str | None = None, *, use_transformers: bool | None = None
) -> ModelGeometry:
    """The model geometry described by a Hugging Face config (its ``text_config`` if it has one).

    ``config``: a dict as in ``config.json``, or a ``transformers.PretrainedConfig`` (any object
    with a ``to_dict()`` method returning such a dict). Its values are read as plain JSON
    (``hf_defaults.plain_json``: NumPy numbers as Python numbers, a nested dict's integer keys
    as strings) and known alias spellings are merged (``CONFIG_ALIASES``). ``use_transformers``:
    ``None`` applies the model class's defaults through transformers when it is installed and
    knows the model type (else verikv's own table), ``True`` requires transformers, ``False``
    never uses it. Raises ``SizingError`` for anything it cannot size exactly, naming the fields.
    """
    if not any(use_transformers is choice for choice in (None, True, False)):  # (no == : 0 is not False)
        raise SizingError(f"use_transformers must be None, True or False, got {describe(use_transformers)}")
    if name is not None and (not isinstance(name, str) or not name):
        raise SizingError(f"name must be a non-empty string or None, got {describe(name)}")
    plain = _with_canonical_names(plain_json(_config_mapping(config)))
    completed = _with_canonical_names(complete_config(plain, use_transformers))
    text = completed.get("text_config")
    cfg: Mapping[str, Any] = text if isinstance(text, Mapping) else completed
    model_type = str(cfg.get("model_type") or completed.get("model_type") or "")
    family = FAMILIES.get(model_type, _GENERIC)
    unhandled = _unhandled_fields(cfg, family)
    if unhandled:
        raise SizingError(f"model_type {model_type or '(none)'!r}: fields that change the KV cache layout and "
                          f"that verikv does not handle for it: {', '.join(unhandled)}")
    layers = family.read(cfg, model_type)
    dtype_name = cfg.get("torch_dtype") or cfg.get("dtype") or completed.get("torch_dtype") or \
        completed.get("dtype") or "bfloat16"
    dtype = get_dtype(str(dtype_name))
    model_name = name or str(plain.get("_name_or_path") or model_type or "model")
    max_len = cfg.get("max_position_embeddings")
    dense = model_type in _DENSE_TYPES and not isinstance(text, Mapping)
    if not dense:
        return ModelGeometry(model_name, layers, dtype.name, None, max_len)
    weights = dense_param_count(cfg, model_type) * dtype.itemsize
    return ModelGeometry(model_name, layers, dtype.name, weights, max_len, weights_source="dense estimate")


class SupportsToDict(Protocol):
    """A config object that gives its fields as a dict (``transformers.PretrainedConfig``)."""

    def to_dict(self) -> Mapping[str, Any]: ...


def _config_mapping(config: object) -> Mapping[str, Any]:
    """``config`` itself if it is a mapping, else its ``to_dict()`` (transformers is never imported here)."""
    if isinstance(config, Mapping):
        return config
    to_dict = getattr(type(config), "to_dict", None)
    if not callable(to_dict):
        raise SizingError(f"config must be a dict or a config object with to_dict() "
                          f"(a transformers PretrainedConfig), got {type(config).__name__}")
    try:
        data = to_dict(config)
    except Exception as exc:  # a third-party object failing: report it as ours
        raise SizingError(f"{type(config).__name__}.to_dict() failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(data, Mapping):
        raise SizingError(f"{type(config).__name__}.to_dict() returned a {type(data).__name__}, not a dict")
    return data


CONFIG_ALIASES: dict[str, str] = {
    "sliding_window_size": "sliding_window",
    "_sliding_window_pattern": "sliding_window_pattern",
}
"""Other spellings of a field, by the field they stand for: Gemma-2's published config states
``sliding_window_size`` beside ``sliding_window`` (an older transformers name); transformers
writes Gemma-3's pattern as ``_sliding_window_pattern``."""


def _with_canonical_names(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` (and its ``text_config``) with each alias merged into its field: read when the field
    is absent, dropped when equal, refused naming both fields when they differ."""
    merged = dict(cfg)
    for alias, field in CONFIG_ALIASES.items():
        value = merged.pop(alias, None)
        if value is None:
            continue
        current = merged.get(field)
        if current is not None and (current != value or type(current) is not type(value)):
            raise SizingError(f"config fields {alias} = {_short(value)} and {field} = {_short(current)} disagree; "
                              f"they name the same setting")
        merged[field] = value
    text = merged.get("text_config")
    if isinstance(text, dict):
        merged["text_config"] = _with_canonical_names(text)
    return merged


def dense_param_count(cfg: Mapping[str, Any], model_type: str) -> int:
    """Parameters of a dense decoder: embeddings, per-layer attention and gated MLP and norms, final norm, LM head.

    Attention biases (Qwen2) are counted when ``attention_bias`` is set or the model is Qwen2.
    Gemma adds per-layer norms (2, or 4 from Gemma 2 on) and Gemma 3 q/k norms; other models
    have 2 norms per layer. The LM head is counted unless ``tie_word_embeddings``.
    """
    hidden = _int(cfg, "hidden_size")
    heads = _int(cfg, "num_attention_heads")
    kv_heads, head_dim = _attention_shape(cfg)
    vocab = _int(cfg, "vocab_size", maximum=2**24)
    layers = _layer_count(cfg)
    intermediate = _int(cfg, "intermediate_size")
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden
    if model_type == "qwen2" or cfg.get("attention_bias"):
        attention += q + 2 * kv
    norms = _GEMMA_NORMS.get(model_type, 2) * hidden
    if model_type == "gemma3_text":
        norms += 2 * head_dim
    per_layer = attention + 3 * hidden * intermediate + norms
    tied = cfg.get("tie_word_embeddings", model_type.startswith("gemma"))
    embeddings = vocab * hidden * (1 if tied else 2)
    return embeddings + layers * per_layer + hidden
