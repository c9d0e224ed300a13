"""Reading a Hugging Face ``config.json`` (as a dict) into a ``ModelGeometry``.

Which layers are full, sliding or chunked attention, and their heads and head dims, come from
``verikv.cache_specs.create_kv_cache_specs_from_config`` (the same reader the manager uses), so
the planner and the manager agree on the layer layout. On top of that this module knows:

* MLA models (a ``kv_lora_rank`` key: DeepSeek-V2/V3 style);
* Bamba-style attention/Mamba2 hybrids (``attn_layer_indices`` plus ``mamba_*`` keys);
* Gemma-2 configs without ``layer_types``: even layers sliding, odd layers full;
* the weights' size of dense decoder models (Llama, Mistral, Qwen2, Gemma 1-3): parameters
  counted from the shapes (embeddings, attention with optional biases, gated MLP, norms,
  untied LM head) times the width of ``torch_dtype``. Other model types need ``weights_bytes``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verikv.cache_specs import ChunkedLocalAttentionSpec, SlidingWindowSpec, create_kv_cache_specs_from_config
from verikv.dp_sharding import checked_int
from verikv.errors import CacheSpecError, SizingError
from verikv.sizing.dtypes import get_dtype
from verikv.sizing.geometry import AttentionLayer, Layer, MambaLayer, MLALayer, ModelGeometry

_DENSE_TYPES = frozenset({"llama", "mistral", "qwen2", "gemma", "gemma2", "gemma3_text", "gemma3"})
_GEMMA_NORMS = {"gemma": 2, "gemma2": 4, "gemma3_text": 4, "gemma3": 4}


def _int(config: Mapping[str, Any], key: str, default: Any = None, minimum: int = 1) -> int:
    """``config[key]`` as a checked int; a missing or null key takes ``default``."""
    value = config.get(key)
    if value is None:
        value = default
    if value is None:
        raise SizingError(f"config has no {key!r}")
    return checked_int(value, f"config {key}", minimum=minimum, error=SizingError)


def geometry_from_hf_config(config: Mapping[str, Any], name: str | None = None) -> ModelGeometry:
    """The model geometry described by a Hugging Face config dict (``text_config`` is used if present)."""
    if not isinstance(config, Mapping):
        raise SizingError(f"config must be a dict, got {type(config).__name__}")
    text = config.get("text_config")
    cfg: Mapping[str, Any] = text if isinstance(text, Mapping) else config
    model_type = str(cfg.get("model_type", config.get("model_type", "")))
    model_name = name or str(config.get("_name_or_path") or model_type or "model")
    dtype = get_dtype(str(cfg.get("torch_dtype") or cfg.get("dtype") or config.get("torch_dtype") or "bfloat16"))
    if "kv_lora_rank" in cfg:
        layers: tuple[Layer, ...] = _mla_layers(cfg)
    elif "attn_layer_indices" in cfg:
        layers = _bamba_layers(cfg)
    else:
        layers = _attention_layers(cfg, model_type)
    max_len = cfg.get("max_position_embeddings")
    params = dense_param_count(cfg, model_type) if model_type in _DENSE_TYPES else None
    weights = None if params is None else params * dtype.itemsize
    return ModelGeometry(model_name, layers, dtype.name, weights, max_len)


def _mla_layers(cfg: Mapping[str, Any]) -> tuple[Layer, ...]:
    layer = MLALayer(_int(cfg, "kv_lora_rank"), _int(cfg, "qk_rope_head_dim", 0, minimum=0))
    return (layer,) * _int(cfg, "num_hidden_layers")


def _bamba_layers(cfg: Mapping[str, Any]) -> tuple[Layer, ...]:
    count = _int(cfg, "num_hidden_layers")
    indices = cfg["attn_layer_indices"]
    if not isinstance(indices, list) or not all(isinstance(i, int) and 0 <= i < count for i in indices):
        raise SizingError(f"attn_layer_indices must list layer indices below {count}, got {indices!r}")
    hidden = _int(cfg, "hidden_size")
    heads = _int(cfg, "num_attention_heads")
    attention = AttentionLayer(_int(cfg, "num_key_value_heads", heads), _int(cfg, "head_dim", hidden // heads))
    intermediate = _int(cfg, "mamba_expand", 2) * hidden
    mamba_heads = _int(cfg, "mamba_n_heads")
    head_dim = cfg.get("mamba_d_head", "auto")
    mamba = MambaLayer(
        2, intermediate, _int(cfg, "mamba_d_state"), _int(cfg, "mamba_d_conv", 4, minimum=2),
        num_heads=mamba_heads,
        head_dim=intermediate // mamba_heads if head_dim == "auto" else _int(cfg, "mamba_d_head"),
        n_groups=_int(cfg, "mamba_n_groups", 1),
    )
    return tuple(attention if i in indices else mamba for i in range(count))


def _attention_layers(cfg: Mapping[str, Any], model_type: str) -> tuple[Layer, ...]:
    count = _int(cfg, "num_hidden_layers")
    heads = _int(cfg, "num_attention_heads")
    kv_heads = _int(cfg, "num_key_value_heads", heads)
    head_dim = _int(cfg, "head_dim", _int(cfg, "hidden_size") // heads)
    if model_type == "gemma2" and "layer_types" not in cfg and cfg.get("sliding_window") is not None:
        cfg = {**cfg, "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(count)]}
    try:
        groups = create_kv_cache_specs_from_config(dict(cfg), 1, kv_heads, head_dim, "bfloat16")
    except CacheSpecError as exc:
        raise SizingError(f"cannot read the attention layers of this config: {exc}") from exc
    layers: dict[int, Layer] = {}
    for group in groups:
        spec = group.kv_cache_spec
        window = spec.sliding_window if isinstance(spec, SlidingWindowSpec) else None
        chunk = spec.attention_chunk_size if isinstance(spec, ChunkedLocalAttentionSpec) else None
        layer = AttentionLayer(spec.num_kv_heads, spec.head_size, window, chunk)
        for layer_name in group.layer_names or ():
            layers[int(layer_name.split(".")[1])] = layer
    if sorted(layers) != list(range(count)):
        raise SizingError("this config has layers without a paged KV cache; describe the model with ModelGeometry")
    return tuple(layers[i] for i in range(count))


def dense_param_count(cfg: Mapping[str, Any], model_type: str) -> int:
    """Parameters of a dense decoder: embeddings, per-layer attention and gated MLP and norms, final norm, LM head.

    Attention biases (Qwen2) are counted when ``attention_bias`` is set or the model is Qwen2.
    Gemma adds per-layer norms (2, or 4 from Gemma 2 on) and Gemma 3 q/k norms; other models
    have 2 norms per layer. The LM head is counted unless ``tie_word_embeddings``.
    """
    hidden = _int(cfg, "hidden_size")
    heads = _int(cfg, "num_attention_heads")
    kv_heads = _int(cfg, "num_key_value_heads", heads)
    head_dim = _int(cfg, "head_dim", hidden // heads)
    vocab = _int(cfg, "vocab_size")
    layers = _int(cfg, "num_hidden_layers")
    intermediate = _int(cfg, "intermediate_size")
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden
    if model_type == "qwen2" or cfg.get("attention_bias"):
        attention += q + 2 * kv
    norms = _GEMMA_NORMS.get(model_type, 2) * hidden
    if model_type in ("gemma3", "gemma3_text"):
        norms += 2 * head_dim
    per_layer = attention + 3 * hidden * intermediate + norms
    tied = cfg.get("tie_word_embeddings", model_type.startswith("gemma"))
    embeddings = vocab * hidden * (1 if tied else 2)
    return embeddings + layers * per_layer + hidden
