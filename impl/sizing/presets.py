"""Built-in models, given as the relevant keys of their Hugging Face ``config.json``.

Each preset goes through the same reader as a user's config (``hf_config``), so presets and
configs cannot disagree. Shapes are the published configs'. Where a preset states something
the config does not, the ``_verikv_*`` keys say so: DeepSeek-V3's weights are taken as 6.71e11
B (1 B per parameter in fp8, the MTP layer and bf16 norms ignored), and the Bamba-style
hybrid's attention layer positions, size and context are assumptions of a worked example, not
a checkpoint's values.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from verikv.errors import SizingError
from verikv.sizing.geometry import ModelGeometry
from verikv.sizing.hf_config import geometry_from_hf_config

PRESETS: dict[str, dict[str, Any]] = {
    "llama-3-8b": {
        "model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 8192, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    },
    "llama-3-70b": {
        "model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192, "intermediate_size": 28672,
        "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 8192, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    },
    "qwen2.5-7b": {
        "model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "intermediate_size": 18944,
        "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
        "max_position_embeddings": 32768, "sliding_window": 131072, "use_sliding_window": False,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    },
    "gemma-2-9b": {
        "model_type": "gemma2", "num_hidden_layers": 42, "hidden_size": 3584, "intermediate_size": 14336,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000,
        "sliding_window": 4096, "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
    },
    "gemma-3-1b": {
        "model_type": "gemma3_text", "num_hidden_layers": 26, "hidden_size": 1152, "intermediate_size": 6912,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144,
        "sliding_window": 512, "sliding_window_pattern": 6, "max_position_embeddings": 32768,
        "torch_dtype": "bfloat16",
    },
    "gemma-3-27b": {
        "model_type": "gemma3_text", "num_hidden_layers": 62, "hidden_size": 5376, "intermediate_size": 21504,
        "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128, "vocab_size": 262208,
        "sliding_window": 1024, "sliding_window_pattern": 6, "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    },
    "deepseek-v3": {
        "model_type": "deepseek_v3", "num_hidden_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
        "max_position_embeddings": 163840, "torch_dtype": "bfloat16",
        "_verikv_weights_bytes": 671_000_000_000,
    },
    "bamba-9b-hybrid": {
        "model_type": "bamba", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "attn_layer_indices": [9, 18, 27], "mamba_expand": 2, "mamba_n_heads": 128,
        "mamba_d_head": "auto", "mamba_d_state": 256, "mamba_n_groups": 1, "mamba_d_conv": 4,
        "torch_dtype": "bfloat16", "_verikv_weights_bytes": 9_780_000_000 * 2, "_verikv_max_model_len": 8192,
    },
}


def preset_names() -> tuple[str, ...]:
    """Names of the built-in models."""
    return tuple(PRESETS)


def get_preset(name: str) -> ModelGeometry:
    """The built-in model called ``name`` (case-insensitive)."""
    if not isinstance(name, str):
        raise SizingError(f"a preset name must be a string, got {type(name).__name__}")
    key = name.lower()
    if key not in PRESETS:
        raise SizingError(f"unknown model preset {name[:80]!r}; known: {', '.join(PRESETS)}")
    config = PRESETS[key]
    geometry = geometry_from_hf_config(config, name=key, use_transformers=False)  # presets state every field
    max_len = config.get("_verikv_max_model_len", geometry.max_model_len)
    if "_verikv_weights_bytes" in config:
        return replace(geometry, weights_bytes=config["_verikv_weights_bytes"], max_model_len=max_len,
                       weights_source="stated")
    return replace(geometry, max_model_len=max_len)
