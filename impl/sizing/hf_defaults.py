"""Completing a Hugging Face ``config.json`` with the defaults its model class applies.

A published ``config.json`` omits every field whose value is the class default (Gemma-3-12B
states no ``head_dim``: the class default 256 applies, not ``hidden_size / heads``). Two ways
to fill them in, one result (a plain dict) read by the same family readers afterwards:

* with ``transformers`` installed (the ``verikv[hf]`` extra): the model type's config class
  builds the config and ``to_dict()`` returns it with every default applied;
* without it: the defaults below, the KV-relevant fields of the same classes, for the model
  types verikv knows. An unknown model type gets no defaults: a missing field is an error.

Inputs are bounded before either path sees them (``MAX_LAYERS``), so a hostile layer count
cannot make a config class build a list of ten million layer names.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from verikv.errors import SizingError
from verikv.sizing.bounds import MAX_CONFIG_LAYERS

MAX_LAYERS = MAX_CONFIG_LAYERS

FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
              "max_position_embeddings": 2048, "vocab_size": 32000, "intermediate_size": 11008},
    "llama4_text": {"num_hidden_layers": 48, "hidden_size": 5120, "num_attention_heads": 40,
                    "num_key_value_heads": 8, "head_dim": 128, "attention_chunk_size": 8192,
                    "no_rope_layer_interval": 4, "max_position_embeddings": 131072},
    "mistral": {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                "num_key_value_heads": 8, "sliding_window": 4096, "max_position_embeddings": 131072,
                "vocab_size": 32000, "intermediate_size": 14336},
    "mixtral": {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                "num_key_value_heads": 8, "max_position_embeddings": 131072},
    "qwen2": {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
              "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 28,
              "max_position_embeddings": 32768, "vocab_size": 151936, "intermediate_size": 22016},
    "qwen2_moe": {"num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16,
                  "use_sliding_window": False, "max_position_embeddings": 32768},
    "qwen3": {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
              "num_key_value_heads": 32, "head_dim": 128, "use_sliding_window": False,
              "sliding_window": 4096, "max_window_layers": 28, "max_position_embeddings": 32768},
    "qwen3_moe": {"num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 32,
                  "num_key_value_heads": 4, "use_sliding_window": False, "max_position_embeddings": 32768},
    "qwen3_next": {"num_hidden_layers": 48, "hidden_size": 2048, "num_attention_heads": 16,
                   "num_key_value_heads": 2, "head_dim": 256, "full_attention_interval": 4,
                   "max_position_embeddings": 32768},
    "gemma": {"num_hidden_layers": 28, "hidden_size": 3072, "num_attention_heads": 16,
              "num_key_value_heads": 16, "head_dim": 256, "max_position_embeddings": 8192,
              "vocab_size": 256000, "intermediate_size": 24576},
    "gemma2": {"num_hidden_layers": 26, "hidden_size": 2304, "num_attention_heads": 8,
               "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096,
               "max_position_embeddings": 8192, "vocab_size": 256000, "intermediate_size": 9216},
    "gemma3_text": {"num_hidden_layers": 26, "hidden_size": 2304, "num_attention_heads": 8,
                    "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096,
                    "sliding_window_pattern": 6, "max_position_embeddings": 131072,
                    "vocab_size": 262208, "intermediate_size": 9216},
    "gpt_oss": {"num_hidden_layers": 36, "hidden_size": 2880, "num_attention_heads": 64,
                "num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128,
                "max_position_embeddings": 131072},
    "cohere2": {"num_hidden_layers": 40, "hidden_size": 8192, "num_attention_heads": 64,
                "sliding_window": 4096, "sliding_window_pattern": 4, "max_position_embeddings": 8192},
    "phi3": {"num_hidden_layers": 32, "hidden_size": 3072, "num_attention_heads": 32,
             "max_position_embeddings": 4096},
    "deepseek_v2": {"num_hidden_layers": 32, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                    "max_position_embeddings": 2048},
    "deepseek_v3": {"num_hidden_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                    "max_position_embeddings": 4096},
    "jamba": {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
              "num_key_value_heads": 8, "attn_layer_period": 8, "attn_layer_offset": 4,
              "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2, "max_position_embeddings": 262144},
    "bamba": {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
              "num_key_value_heads": 8, "mamba_n_heads": 128, "mamba_d_head": "auto", "mamba_n_groups": 1,
              "mamba_d_state": 256, "mamba_d_conv": 4, "mamba_expand": 2, "max_position_embeddings": 262144},
    "granitemoehybrid": {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                         "mamba_n_heads": 128, "mamba_d_head": "auto", "mamba_n_groups": 1, "mamba_d_state": 256,
                         "mamba_d_conv": 4, "mamba_expand": 2, "max_position_embeddings": 2048},
    "nemotron_h": {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                   "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
                   "conv_kernel": 4, "mamba_ssm_cache_dtype": "float32", "max_position_embeddings": 4096},
    "falcon_h1": {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                  "num_key_value_heads": 8, "mamba_n_heads": 128, "mamba_d_head": 8, "mamba_n_groups": 1,
                  "mamba_d_state": 256, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_d_ssm": 1024,
                  "max_position_embeddings": 8192},
}
"""Class defaults of the fields the family readers use, per model type (the transformers
classes' values; ``tests/test_sizing_families.py`` compares them when transformers is installed)."""

_SAME_DEFAULTS = {"kimi_k2": "deepseek_v3"}
"""Model types transformers does not register whose configs are another type's (Kimi-K2 ships
a DeepSeek-V3 architecture under its own name)."""

TEXT_MODEL_TYPES = {"gemma3": "gemma3_text", "llama4": "llama4_text"}
"""Multimodal wrappers: the model type of their ``text_config`` when it does not say."""

MAX_DEPTH = 32
"""Deepest nesting of dicts and lists accepted in a config (published configs nest 3-4 deep)."""


def transformers_available() -> bool:
    """Whether ``transformers`` can be imported (without importing it)."""
    return importlib.util.find_spec("transformers") is not None


MAX_ITEMS = 2**20
"""Most values (dict entries and list items, at any depth) in a config (published configs hold a few hundred)."""

_KEY_TYPES = (str, int, float, bool, type(None))
"""Dict keys a nested dict may have; non-string ones are read as JSON writes them (``1`` -> ``"1"``)."""


def plain_json(value: object, what: str = "config") -> Any:
    """A copy of ``value`` made of plain JSON data only (dicts with ``str`` keys, lists, ``str``,
    ``int``, ``float``, ``bool``, ``None``), so the readers never meet an object whose comparison,
    hash or truth value could raise or change.

    Accepted and converted as ``json.dumps`` would write them: tuples (as lists), subclasses of
    the builtin types, NumPy booleans, integers and floats (as ``bool``, ``int``, ``float``: a
    NumPy float is then a float, refused wherever an integer is read), and the ``int``, ``float``,
    ``bool`` or ``None`` keys of a nested dict (as strings: ``id2label``'s ``{0: "LABEL_0"}``
    reads ``{"0": "LABEL_0"}``). Refused with ``SizingError``: anything else, a top-level key that
    is not a string, keys that collide once converted, nesting deeper than ``MAX_DEPTH`` and more
    than ``MAX_ITEMS`` values. Walked without recursion.
    """
    root: list[Any] = [None]
    stack: list[tuple[object, list[Any] | dict[str, Any], int | str, int]] = [(value, root, 0, 0)]
    items = 0
    while stack:
        item, parent, slot, depth = stack.pop()
        items += 1
        if depth > MAX_DEPTH or items > MAX_ITEMS:
            raise SizingError(f"{what} is nested deeper than {MAX_DEPTH} levels" if depth > MAX_DEPTH
                              else f"{what} holds more than {MAX_ITEMS:,} values")
        if isinstance(item, Mapping):
            copy: dict[str, Any] = {}
            for key, child in item.items():
                name = _plain_key(key, what, top=depth == 0)
                if name in copy:
                    raise SizingError(f"{what} has two keys that both read {name!r}")
                copy[name] = None
                stack.append((child, copy, name, depth + 1))
            parent[slot] = copy  # type: ignore[index]
        elif isinstance(item, (list, tuple)):
            seq: list[Any] = [None] * len(item)
            stack.extend((child, seq, index, depth + 1) for index, child in enumerate(item))
            parent[slot] = seq  # type: ignore[index]
        else:
            parent[slot] = _plain_scalar(item, what)  # type: ignore[index]
    return root[0]


def _plain_scalar(item: object, what: str) -> Any:
    """A JSON scalar as its exact builtin type (a subclass's own methods are never called)."""
    if item is None or type(item) in (str, int, float, bool):
        return item
    if isinstance(item, np.bool_):
        return bool(item)
    if isinstance(item, (np.integer, np.floating)):
        return item.item()
    if isinstance(item, str):
        return str.__str__(item)
    if isinstance(item, int):
        return int.__int__(item)
    if isinstance(item, float):
        return float.__float__(item)
    raise SizingError(f"{what} holds a {type(item).__name__}; only JSON values are read")


def _plain_key(key: object, what: str, *, top: bool) -> str:
    if isinstance(key, str):
        return str.__str__(key)
    if top or not isinstance(key, (*_KEY_TYPES, np.bool_, np.integer, np.floating)):
        raise SizingError(f"{what} has a non-string key of type {type(key).__name__}"
                          + (" at the top level (field names are strings)" if top else ""))
    return json.dumps(_plain_scalar(key, what))  # what JSON writes: 1 -> "1", None -> "null", True -> "true"


_PER_LAYER_FIELDS = ("layer_types", "layers_block_type", "hybrid_override_pattern", "no_rope_layers",
                     "attn_layer_indices", "moe_layers", "mlp_only_layers")
"""Fields holding one entry per layer; no longer than ``MAX_LAYERS``."""


def _check_layer_count(cfg: Mapping[str, Any], where: str) -> None:
    """Bound the layer count and the per-layer lists before any config class builds lists from them."""
    count = cfg.get("num_hidden_layers")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_LAYERS):
        raise SizingError(f"{where}num_hidden_layers must be an integer in [1, {MAX_LAYERS}], got {count!r}")
    for key in _PER_LAYER_FIELDS:
        value = cfg.get(key)
        if isinstance(value, (list, str)) and len(value) > MAX_LAYERS:
            raise SizingError(f"{where}{key} lists {len(value):,} layers; at most {MAX_LAYERS} are read")


def complete_config(config: Mapping[str, Any], use_transformers: bool | None) -> dict[str, Any]:
    """``config`` (plain JSON data, see ``plain_json``) with its model class's defaults applied.

    ``use_transformers``: ``None`` uses transformers when it is installed and knows the model
    type, ``True`` requires it, ``False`` uses the built-in defaults.
    """
    text = config.get("text_config")
    _check_layer_count(config, "")
    if isinstance(text, Mapping):
        _check_layer_count(text, "text_config ")
    model_type = config.get("model_type")
    if use_transformers is None:
        use_transformers = transformers_available() and _transformers_knows(model_type)
    if use_transformers:
        return _with_transformers(config, model_type)
    return _with_builtin_defaults(config)


def _config_classes() -> Any:
    """transformers' model-type -> config-class mapping, imported without its advisory notice
    (that PyTorch is absent: only configuration classes are used here)."""
    previous = os.environ.get(_NO_ADVICE)
    os.environ[_NO_ADVICE] = "1"
    try:
        from transformers import CONFIG_MAPPING
    finally:
        if previous is None:
            del os.environ[_NO_ADVICE]
        else:
            os.environ[_NO_ADVICE] = previous
    return CONFIG_MAPPING


_NO_ADVICE = "TRANSFORMERS_NO_ADVISORY_WARNINGS"


def _transformers_knows(model_type: object) -> bool:
    return isinstance(model_type, str) and model_type in _config_classes()


def _with_transformers(config: Mapping[str, Any], model_type: object) -> dict[str, Any]:
    if not transformers_available():
        raise SizingError("transformers is not installed: pip install 'verikv[hf]'")
    if not _transformers_knows(model_type):
        raise SizingError(f"transformers does not know model_type {model_type!r}")
    config_classes = _config_classes()
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity(logging.ERROR)  # config classes log their own validation notes
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            built = config_classes[model_type].from_dict(dict(config))
            completed: dict[str, Any] = built.to_dict()
    except Exception as exc:  # a third-party class rejecting the config: report it as ours
        raise SizingError(f"transformers cannot read this {model_type} config: {exc}") from exc
    finally:
        hf_logging.set_verbosity(verbosity)
    return completed


def _with_builtin_defaults(config: Mapping[str, Any]) -> dict[str, Any]:
    model_type = config.get("model_type")
    completed = {**FAMILY_DEFAULTS.get(_SAME_DEFAULTS.get(str(model_type), str(model_type)), {}), **config}
    text = config.get("text_config")
    wrapped = TEXT_MODEL_TYPES.get(str(model_type))
    if isinstance(text, Mapping) or (wrapped and text is None):
        text = dict(text or {})
        text_type = str(text.get("model_type") or wrapped or "")
        text.setdefault("model_type", text_type)
        completed["text_config"] = {**FAMILY_DEFAULTS.get(text_type, {}), **text}
    return completed
