"""Model geometry as the sizing sees it: one record per layer, plus the model's dtype and size.

A layer is standard attention (full, sliding-window or chunked-local; ``num_kv_heads`` heads of
``head_dim`` for K and the same for V), MLA (one latent of ``kv_lora_rank`` plus a rope part
of ``qk_rope_head_dim`` per token) or a Mamba layer (per-request state, no pages per token).
Records validate themselves on construction and raise ``SizingError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from verikv.dp_sharding import checked_int
from verikv.errors import SizingError, describe
from verikv.sizing.bounds import MAX_MODEL_LAYERS
from verikv.sizing.dtypes import get_dtype


def _positive(value: object, name: str) -> int:
    return checked_int(value, name, minimum=1, error=SizingError)


def _optional_positive(value: object, name: str) -> int | None:
    return None if value is None else _positive(value, name)


def _dtype_name(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise SizingError(f"{name} must be a dtype name, got {describe(value)}")
    return get_dtype(value).name


@dataclass(frozen=True)
class AttentionLayer:
    """Standard attention: full unless ``sliding_window`` or ``attention_chunk_size`` is set."""

    num_kv_heads: int
    head_dim: int
    sliding_window: int | None = None
    attention_chunk_size: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_kv_heads", _positive(self.num_kv_heads, "num_kv_heads"))
        object.__setattr__(self, "head_dim", _positive(self.head_dim, "head_dim"))
        object.__setattr__(self, "sliding_window", _optional_positive(self.sliding_window, "sliding_window"))
        chunk = _optional_positive(self.attention_chunk_size, "attention_chunk_size")
        object.__setattr__(self, "attention_chunk_size", chunk)
        if self.sliding_window is not None and chunk is not None:
            raise SizingError("an attention layer cannot have both a sliding window and a chunk size")

    @property
    def kind(self) -> str:
        """``"full"``, ``"sliding"`` or ``"chunked"``."""
        if self.sliding_window is not None:
            return "sliding"
        return "chunked" if self.attention_chunk_size is not None else "full"


@dataclass(frozen=True)
class MLALayer:
    """Multi-head latent attention (DeepSeek-style): one compressed latent per token."""

    kv_lora_rank: int
    qk_rope_head_dim: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "kv_lora_rank", _positive(self.kv_lora_rank, "kv_lora_rank"))
        rope = checked_int(self.qk_rope_head_dim, "qk_rope_head_dim", minimum=0, error=SizingError)
        object.__setattr__(self, "qk_rope_head_dim", rope)

    @property
    def kind(self) -> str:
        """Always ``"mla"``."""
        return "mla"


@dataclass(frozen=True)
class MambaLayer:
    """A Mamba layer (``version`` 1 or 2) whose state is kept per request.

    Mamba2 uses ``num_heads``, ``head_dim`` and ``n_groups``; Mamba1 ignores them (give 0/1).
    ``conv_dtype`` / ``ssm_dtype`` default to the model dtype when ``None`` (vLLM's
    ``mamba_ssm_cache_dtype`` may make the SSM state float32).
    """

    version: int
    intermediate_size: int
    d_state: int
    conv_kernel: int
    num_heads: int = 0
    head_dim: int = 0
    n_groups: int = 1
    conv_dtype: str | None = None
    ssm_dtype: str | None = None

    def __post_init__(self) -> None:
        version = checked_int(self.version, "Mamba version", minimum=1, maximum=2, error=SizingError)
        object.__setattr__(self, "version", version)
        object.__setattr__(self, "intermediate_size", _positive(self.intermediate_size, "intermediate_size"))
        object.__setattr__(self, "d_state", _positive(self.d_state, "d_state"))
        object.__setattr__(self, "conv_kernel", checked_int(self.conv_kernel, "conv_kernel", minimum=2,
                                                            error=SizingError))
        object.__setattr__(self, "n_groups", _positive(self.n_groups, "n_groups"))
        if self.version == 2:
            object.__setattr__(self, "num_heads", _positive(self.num_heads, "num_heads"))
            object.__setattr__(self, "head_dim", _positive(self.head_dim, "head_dim"))
        for field in ("conv_dtype", "ssm_dtype"):
            value = getattr(self, field)
            if value is not None:
                object.__setattr__(self, field, _dtype_name(value, field))

    @property
    def kind(self) -> str:
        """Always ``"mamba"``."""
        return "mamba"


Layer: TypeAlias = AttentionLayer | MLALayer | MambaLayer

WEIGHTS_SOURCES: tuple[str, ...] = ("stated", "checkpoint index", "safetensors headers", "dense estimate")
"""Where a model's ``weights_bytes`` can come from (``ModelGeometry.weights_source``)."""


@dataclass(frozen=True)
class ModelGeometry:
    """What the planner needs to know about a model.

    ``dtype``: the KV dtype for ``kv_dtype="auto"`` (the model's activation dtype).
    ``weights_bytes``: bytes of all weights, the planner's default (``None``: the caller must give
    it). ``max_model_len``: the model's context length, the default request length.
    ``weights_source``: where ``weights_bytes`` comes from, one of ``WEIGHTS_SOURCES``:
    ``"stated"`` (given with the geometry, the default), ``"checkpoint index"`` or
    ``"safetensors headers"`` (read from a checkpoint), ``"dense estimate"`` (counted from a
    config's shapes; quantized or tied weights, biases and extra modules can make it wrong).
    """

    name: str
    layers: tuple[Layer, ...]
    dtype: str = "bfloat16"
    weights_bytes: int | None = None
    max_model_len: int | None = None
    weights_source: str = "stated"

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", _model_name(self.name))
        layers = tuple(self.layers) if isinstance(self.layers, (list, tuple)) else None
        if not layers:
            raise SizingError("a model needs at least one layer")
        if len(layers) > MAX_MODEL_LAYERS:
            raise SizingError(f"a model may have at most {MAX_MODEL_LAYERS} layers, got {len(layers)}")
        for index, layer in enumerate(layers):
            if not isinstance(layer, (AttentionLayer, MLALayer, MambaLayer)):
                raise SizingError(f"layer {index} is not a layer record: {describe(layer)}")
        if all(isinstance(layer, MambaLayer) for layer in layers):
            raise SizingError("a model without attention layers has no paged KV cache to size")
        if any(isinstance(layer, MLALayer) for layer in layers) and any(
                isinstance(layer, AttentionLayer) for layer in layers):
            raise SizingError("mixing MLA and standard attention layers in one model is not supported")
        object.__setattr__(self, "layers", layers)
        object.__setattr__(self, "dtype", _dtype_name(self.dtype, "dtype"))
        if self.weights_bytes is not None:
            weights = checked_int(self.weights_bytes, "weights_bytes", minimum=0, error=SizingError)
            object.__setattr__(self, "weights_bytes", weights)
        object.__setattr__(self, "max_model_len", _optional_positive(self.max_model_len, "max_model_len"))
        if not isinstance(self.weights_source, str) or self.weights_source not in WEIGHTS_SOURCES:
            raise SizingError(f"weights_source must be one of {WEIGHTS_SOURCES}, got {describe(self.weights_source)}")

    @property
    def weights_estimated(self) -> bool:
        """Whether ``weights_bytes`` is an estimate from a dense parameter count, not read from a checkpoint."""
        return self.weights_source == "dense estimate"

    @property
    def is_mla(self) -> bool:
        """Whether the model's attention layers are MLA."""
        return any(isinstance(layer, MLALayer) for layer in self.layers)


def _model_name(name: object) -> str:
    """A model's name as a plain, non-empty ``str`` that UTF-8 can encode (it is printed and
    written to JSON; a lone surrogate can be neither)."""
    if not isinstance(name, str) or not name:
        raise SizingError(f"model name must be a non-empty string, got {describe(name)}")
    text = str.__str__(name)  # a subclass becomes its plain copy
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise SizingError(f"model name is not encodable Unicode (lone surrogate): {describe(text)}") from None
    return text


def uniform_model(
    name: str,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    *,
    dtype: str = "bfloat16",
    weights_bytes: int | None = None,
    max_model_len: int | None = None,
) -> ModelGeometry:
    """A model whose layers are all full attention with the same geometry."""
    count = checked_int(num_layers, "num_layers", minimum=1, maximum=MAX_MODEL_LAYERS, error=SizingError)
    layer = AttentionLayer(num_kv_heads, head_dim)
    return ModelGeometry(name, (layer,) * count, dtype, weights_bytes, max_model_len)
