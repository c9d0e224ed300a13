"""Cache specs: how many bytes one page of one layer type takes, and how layers form cache groups.

The classes keep eSurge's names, constructor fields and formulas (``page_size_bytes``,
``max_memory_usage_bytes``, ``type_id``, ``merge``) so eSurge/vLLM-style callers work unchanged.
Departures, all deliberate:

* every spec validates itself on construction and raises ``CacheSpecError`` (non-positive
  sizes, ``bool`` where an int is expected, MLA with a sliding window, a Mamba padding smaller
  than the raw state, an unknown or sub-byte dtype) where eSurge used ``assert`` or silently
  computed 0 bytes;
* ``dtype`` may be a NumPy dtype, a NumPy scalar type, an ``ml_dtypes`` type or a name; it is
  stored canonically (a ``numpy.dtype`` when NumPy has one, else the name, e.g. ``"bfloat16"``),
  so specs built from ``numpy.float16`` and ``"float16"`` are equal;
* ``estimate_runtime_page_budget`` raises ``DoesNotFitError`` when not one request fits instead
  of reporting one sequence;
* ``split_cache_groups`` classifies groups for the coordinators by lookup behaviour, accepts any
  number of attention types (several full-attention geometries included) and words its page-size
  error the right way round.
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from verikv.dp_sharding import checked_int, dp_shard_page_bounds, pages_per_dp_shard, usable_pages_count
from verikv.dtypes import ELEMENT_TYPES, element_type
from verikv.errors import CacheSpecError, DoesNotFitError, InvalidArgumentError, describe

_NUMPY_NATIVE = frozenset(
    {"float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8"}
)
"""Element types NumPy has natively; the others (bfloat16, fp8) are known by name (``verikv.dtypes``)."""


def _dtype_name(dtype: object) -> str:
    """Canonical lowercase name of a KV dtype given as a dtype, a scalar type or a string."""
    if not isinstance(dtype, (str, type, np.dtype)):  # a value (e.g. np.int64(3)) is not a type
        raise CacheSpecError(f"dtype must be a dtype, a scalar type or a dtype name, got {describe(dtype)}")
    if isinstance(dtype, str):
        known = element_type(dtype.strip())
        if known is not None:
            return known.name
    try:
        name = np.dtype(dtype).name
    except (TypeError, ValueError):
        name = None
    if isinstance(dtype, type) and name in (None, "object"):
        name = dtype.__name__  # a scalar type NumPy does not know, e.g. ml_dtypes without its registration
    if name is None:
        raise CacheSpecError(f"unknown KV cache dtype {describe(dtype)}")
    return name.lower()


def dtype_size_bytes(dtype: object) -> int:
    """Bytes per element of ``dtype``; sub-byte, packed, boolean and unknown types raise CacheSpecError.

    eSurge derived this from ``finfo(...).bits // 8``, which gives 0 for 4-bit types and so a
    zero-byte page; here such types are rejected by name.
    """
    name = _dtype_name(dtype)
    known = ELEMENT_TYPES.get(name)
    if known is not None and 0 < known.bits < 8:
        raise CacheSpecError(f"sub-byte dtype {name} cannot be sized per element; use a packed byte type")
    if known is None or known.bits == 0:
        supported = ", ".join(sorted(t.name for t in ELEMENT_TYPES.values() if t.bits >= 8))
        raise CacheSpecError(f"unsupported KV cache dtype {describe(name)}; supported: {supported}")
    return known.bits // 8


def _canonical_dtype(dtype: object) -> np.dtype | str:
    """The stored form of a dtype: ``numpy.dtype`` when NumPy has the type natively, else its name."""
    name = _dtype_name(dtype)
    dtype_size_bytes(name)
    return np.dtype(name) if name in _NUMPY_NATIVE else name


def _spec_int(value: object, name: str) -> int:
    return checked_int(value, name, minimum=1, error=CacheSpecError)


def _set_spec_ints(spec: object, *fields: str, optional: bool = False) -> None:
    """Validate the named fields of a frozen spec as positive ints (CacheSpecError otherwise) and
    store them normalised, in the given order; with ``optional``, a ``None`` field stays ``None``."""
    for field in fields:
        value = getattr(spec, field)
        if value is not None or not optional:
            object.__setattr__(spec, field, _spec_int(value, field))


def _spec_bool(value: object, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise CacheSpecError(f"{name} must be a bool, got {type(value).__name__} {describe(value)}")
    return bool(value)


def _token_limits(max_model_len: int | None, max_num_batched_tokens: int | None) -> tuple[int, int]:
    """Validated ``(max_model_len, max_num_batched_tokens)``; a missing batch limit means
    ``max_model_len`` (the most tokens of one request a step can schedule)."""
    if max_model_len is None:
        raise InvalidArgumentError("max_model_len is required for attention specs")
    model_len = checked_int(max_model_len, "max_model_len", minimum=1)
    if max_num_batched_tokens is None:
        return model_len, model_len
    return model_len, checked_int(max_num_batched_tokens, "max_num_batched_tokens", minimum=1)


@dataclass(frozen=True)
class CacheSpec(ABC):
    """The KV-cache format of one layer type: ``page_size`` tokens per page."""

    page_size: int

    def __post_init__(self) -> None:
        _set_spec_ints(self, "page_size")

    @property
    @abstractmethod
    def page_size_bytes(self) -> int:
        """Bytes one page of this layer type occupies."""

    @property
    @abstractmethod
    def type_id(self) -> str:
        """Identifier that differs whenever two layers cannot share one page table layout."""

    @abstractmethod
    def max_memory_usage_bytes(
        self, max_model_len: int | None = None, max_num_batched_tokens: int | None = None
    ) -> int:
        """Most bytes one request can hold in this layer type at any time."""

    @classmethod
    def merge(cls, specs: Sequence[CacheSpec]) -> CacheSpec:
        """One spec standing for several layers of the same type (all must share ``type_id``)."""
        return _check_mergeable(cls, specs)[0]


def _check_mergeable(cls: type, specs: Sequence[CacheSpec]) -> Sequence[CacheSpec]:
    if isinstance(specs, (str, bytes)) or not isinstance(specs, Sequence) or len(specs) == 0:
        raise CacheSpecError("merge needs a non-empty sequence of specs")
    for spec in specs:
        if not isinstance(spec, cls):
            raise CacheSpecError(f"cannot merge {type(spec).__name__} as {cls.__name__}")
    type_ids = {spec.type_id for spec in specs}
    if len(type_ids) != 1:
        raise CacheSpecError(f"cannot merge specs of different types: {sorted(type_ids)}")
    return specs


@dataclass(frozen=True)
class AttentionSpec(CacheSpec):
    """A paged attention layer: K and V (or one MLA latent) of ``num_kv_heads x head_size``."""

    num_kv_heads: int
    head_size: int
    dtype: Any
    use_mla: bool

    #: the first part of `type_id`
    _type_name: ClassVar[str]
    #: the field holding the attention span (window or chunk) when the type has one: validated
    #: last, and part of `type_id`
    _span_field: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _set_spec_ints(self, "num_kv_heads", "head_size")
        object.__setattr__(self, "dtype", _canonical_dtype(self.dtype))
        object.__setattr__(self, "use_mla", _spec_bool(self.use_mla, "use_mla"))
        if self._span_field is not None:
            _set_spec_ints(self, self._span_field)

    @property
    def type_id(self) -> str:
        """``<type name>[_<span>]_<page size>_<page bytes>``, eSurge's identifiers."""
        span = "" if self._span_field is None else f"_{getattr(self, self._span_field)}"
        return f"{self._type_name}{span}_{self.page_size}_{self.page_size_bytes}"

    @property
    def page_size_bytes(self) -> int:
        """K and V per token (one latent under MLA) times ``page_size`` tokens."""
        tensors = 1 if self.use_mla else 2
        return tensors * self.page_size * self.num_kv_heads * self.head_size * dtype_size_bytes(self.dtype)

    def max_memory_usage_bytes(
        self, max_model_len: int | None = None, max_num_batched_tokens: int | None = None
    ) -> int:
        """`_max_pages` pages (``max_model_len`` is required; the batch limit defaults to it)."""
        return self._max_pages(*_token_limits(max_model_len, max_num_batched_tokens)) * self.page_size_bytes

    @abstractmethod
    def _max_pages(self, model_len: int, batch: int) -> int:
        """Most pages a request of up to ``model_len`` tokens holds at once, ``batch`` tokens
        being scheduled per step."""


@dataclass(frozen=True)
class FullAttentionSpec(AttentionSpec):
    """Full attention: a request keeps one page per ``page_size`` tokens of its whole length.

    ``sliding_window`` / ``attention_chunk_size`` record a windowed layer that is nevertheless
    managed as full attention (pages for every token, windowing done by the kernel).
    """

    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    _type_name = "full_attention"

    def __post_init__(self) -> None:
        super().__post_init__()
        _set_spec_ints(self, "sliding_window", "attention_chunk_size", optional=True)
        if self.sliding_window is not None and self.attention_chunk_size is not None:
            raise CacheSpecError("a full-attention spec cannot record both a sliding window and a chunk size")

    def _max_pages(self, model_len: int, batch: int) -> int:
        """One page per ``page_size`` tokens of ``model_len``."""
        return -(-model_len // self.page_size)

    @classmethod
    def merge(cls, specs: Sequence[CacheSpec]) -> FullAttentionSpec:
        """Merge full-attention specs; differing recorded windows (or chunk sizes) are an error."""
        checked: Sequence[FullAttentionSpec] = _check_mergeable(cls, specs)  # type: ignore[assignment]
        windows = {s.sliding_window for s in checked if s.sliding_window is not None}
        chunks = {s.attention_chunk_size for s in checked if s.attention_chunk_size is not None}
        if len(windows) > 1:
            raise CacheSpecError(f"full-attention specs record different sliding windows {sorted(windows)}")
        if len(chunks) > 1:
            raise CacheSpecError(f"full-attention specs record different chunk sizes {sorted(chunks)}")
        if windows and chunks:
            raise CacheSpecError("full-attention specs mix a sliding window and a chunk size")
        return replace(
            checked[0],
            sliding_window=next(iter(windows), None),
            attention_chunk_size=next(iter(chunks), None),
        )


@dataclass(frozen=True)
class SlidingWindowSpec(AttentionSpec):
    """Sliding-window attention over the last ``sliding_window`` tokens (MLA not supported)."""

    sliding_window: int
    _type_name = "sliding_window"
    _span_field = "sliding_window"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.use_mla:
            raise CacheSpecError("sliding-window attention does not support MLA")

    def _max_pages(self, model_len: int, batch: int) -> int:
        """Pages for the window plus one step's tokens, plus one page for a window that starts
        mid-page."""
        return -(-min(self.sliding_window - 1 + batch, model_len) // self.page_size) + 1


@dataclass(frozen=True)
class ChunkedLocalAttentionSpec(AttentionSpec):
    """Chunked local attention: tokens attend within their ``attention_chunk_size`` chunk."""

    attention_chunk_size: int
    _type_name = "local_attention"
    _span_field = "attention_chunk_size"

    def _max_pages(self, model_len: int, batch: int) -> int:
        """Pages for one chunk plus one step's tokens, at most the whole request."""
        return -(-min(self.attention_chunk_size + batch, model_len) // self.page_size)


@dataclass(frozen=True)
class MambaSpec(CacheSpec):
    """Recurrent (Mamba) state: one page per request holding tensors of the given ``shapes``.

    ``page_size_padded`` pads the page to the attention page size so both share one buffer.
    """

    shapes: tuple[tuple[int, ...], ...]
    dtype: Any
    page_size_padded: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.shapes, (str, bytes)) or not isinstance(self.shapes, Sequence) or not self.shapes:
            raise CacheSpecError(f"shapes must be a non-empty sequence of shapes, got {describe(self.shapes)}")
        shapes = []
        for shape in self.shapes:
            if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
                raise CacheSpecError(f"each shape must be a sequence of dimensions, got {describe(shape)}")
            shapes.append(tuple(_spec_int(dim, "shape dimension") for dim in shape))
        object.__setattr__(self, "shapes", tuple(shapes))
        object.__setattr__(self, "dtype", _canonical_dtype(self.dtype))
        _set_spec_ints(self, "page_size_padded", optional=True)
        padded = self.page_size_padded
        if padded is not None and padded < self.raw_page_size_bytes:
            raise CacheSpecError(
                f"page_size_padded {padded} is smaller than the state it must hold "
                f"({self.raw_page_size_bytes} bytes)"
            )

    @property
    def num_elements(self) -> int:
        """Elements of all state tensors together."""
        return sum(math.prod(shape) for shape in self.shapes)

    @property
    def raw_page_size_bytes(self) -> int:
        """Bytes of the state itself, before padding."""
        return self.num_elements * dtype_size_bytes(self.dtype)

    @property
    def page_size_bytes(self) -> int:
        return self.raw_page_size_bytes if self.page_size_padded is None else self.page_size_padded

    @property
    def type_id(self) -> str:
        return f"mamba_{self.shapes}_{_dtype_name(self.dtype)}"

    def max_memory_usage_bytes(
        self, max_model_len: int | None = None, max_num_batched_tokens: int | None = None
    ) -> int:
        """One page whatever the length (the limits are validated when given, then unused)."""
        if max_model_len is not None:
            _token_limits(max_model_len, max_num_batched_tokens)
        return self.page_size_bytes


@dataclass(frozen=True)
class CacheGroupSpec:
    """Layers sharing one page table; the manager treats them as one layer.

    ``layer_names`` is stored as a tuple (or ``None`` when the layers are not named).
    """

    kv_cache_spec: CacheSpec
    layer_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kv_cache_spec, CacheSpec):
            raise CacheSpecError(f"kv_cache_spec must be a CacheSpec, got {type(self.kv_cache_spec).__name__}")
        if self.layer_names is not None:
            names = self.layer_names
            if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
                raise CacheSpecError(f"layer_names must be a sequence of strings, got {describe(names)}")
            if not all(isinstance(name, str) for name in names):
                raise CacheSpecError(f"layer_names must be strings, got {describe(names)}")
            object.__setattr__(self, "layer_names", tuple(names))


def _check_groups(kv_cache_groups: object) -> tuple[CacheGroupSpec, ...]:
    if isinstance(kv_cache_groups, (str, bytes)) or not isinstance(kv_cache_groups, Sequence):
        raise CacheSpecError(f"kv_cache_groups must be a sequence of CacheGroupSpec, got {describe(kv_cache_groups)}")
    for group in kv_cache_groups:
        if not isinstance(group, CacheGroupSpec):
            raise CacheSpecError(f"kv_cache_groups must hold CacheGroupSpec, got {type(group).__name__}")
    return tuple(kv_cache_groups)


@dataclass(frozen=True)
class CacheGroupsConfig:
    """A model's KV-cache layout: ``num_pages`` pages (null page included) shared by all groups."""

    num_pages: int
    kv_cache_groups: tuple[CacheGroupSpec, ...]

    def __post_init__(self) -> None:
        _set_spec_ints(self, "num_pages")
        object.__setattr__(self, "kv_cache_groups", _check_groups(self.kv_cache_groups))


@dataclass(frozen=True)
class RuntimePageBudgetEstimate:
    """How many requests of ``max_model_len`` the pool can hold at once, window-aware."""

    pages_per_request: int
    max_num_seqs: int
    usable_pages: int
    per_group_pages: tuple[int, ...]


def estimate_runtime_page_budget(
    *,
    num_pages: int,
    kv_cache_groups: Sequence[CacheGroupSpec],
    max_model_len: int,
    max_num_batched_tokens: int,
    data_parallel_size: int = 1,
) -> RuntimePageBudgetEstimate:
    """Worst-case pages one request needs (summed over groups) and how many such requests fit.

    Windowed groups need only their window's pages, so hybrid models fit more requests than a
    full-attention count suggests. With a valid DP partition each shard is counted separately
    (a request's pages stay in one shard; shard 0 loses the null page). No groups means nothing
    to hold: ``max_num_seqs`` is then ``max(1, usable_pages)`` as in eSurge. Raises
    ``DoesNotFitError`` when not even one request fits.
    """
    groups = _check_groups(kv_cache_groups)
    usable = usable_pages_count(num_pages)
    model_len = checked_int(max_model_len, "max_model_len", minimum=1)
    batch = min(checked_int(max_num_batched_tokens, "max_num_batched_tokens", minimum=1), model_len)
    dp = checked_int(data_parallel_size, "data_parallel_size", minimum=1)
    if not groups:
        return RuntimePageBudgetEstimate(0, max(1, usable), usable, ())
    per_group = tuple(
        -(-g.kv_cache_spec.max_memory_usage_bytes(model_len, batch) // g.kv_cache_spec.page_size_bytes)
        for g in groups
    )
    per_request = sum(per_group)
    shard_pages = pages_per_dp_shard(num_pages, dp)
    if shard_pages is None:
        max_num_seqs = usable // per_request
    else:
        bounds = (dp_shard_page_bounds(s, shard_pages, dp) for s in range(dp))
        max_num_seqs = sum((high - low) // per_request for low, high in bounds)
    if max_num_seqs == 0:
        where = "any data-parallel shard" if shard_pages is not None else f"{usable} usable pages"
        raise DoesNotFitError(
            f"one request of {model_len} tokens needs {per_request} pages, more than {where} holds"
        )
    return RuntimePageBudgetEstimate(per_request, max_num_seqs, usable, per_group)


@dataclass(frozen=True)
class AttentionTypeGroups:
    """Cache groups whose prefix lookups behave identically (same manager kind, page size and
    window or chunk), so a coordinator can look them up together with one representative spec."""

    kind: str
    page_size: int
    group_ids: tuple[int, ...]
    spec: CacheSpec

    @property
    def is_full_attention(self) -> bool:
        """Full-attention hits are prefix-closed; coordinators start their fixed point from them."""
        return self.kind == "full_attention"


def _lookup_key(spec: CacheSpec) -> tuple[str, int, int | None]:
    if isinstance(spec, FullAttentionSpec):
        return ("full_attention", spec.page_size, None)
    if isinstance(spec, SlidingWindowSpec):
        return ("sliding_window", spec.page_size, spec.sliding_window)
    if isinstance(spec, ChunkedLocalAttentionSpec):
        return ("chunked_local_attention", spec.page_size, spec.attention_chunk_size)
    if isinstance(spec, MambaSpec):
        return ("mamba", spec.page_size, None)
    raise CacheSpecError(f"no cache manager handles {type(spec).__name__}")


def split_cache_groups(kv_cache_groups: Sequence[CacheGroupSpec]) -> tuple[AttentionTypeGroups, ...]:
    """Classify cache groups by lookup behaviour: full-attention classes first, then the others,
    each in order of first appearance.

    Every page size must be a multiple of the smallest one, so a hit length that is a whole
    number of pages of every class exists; otherwise ``CacheSpecError`` names the offending group.
    Mamba groups are exempt: they hold one page per request and never produce prefix hits.
    """
    groups = _check_groups(kv_cache_groups)
    classes: dict[tuple[str, int, int | None], list[int]] = {}
    for group_id, group in enumerate(groups):
        classes.setdefault(_lookup_key(group.kv_cache_spec), []).append(group_id)
    paged = [g for g in range(len(groups)) if not isinstance(groups[g].kv_cache_spec, MambaSpec)]
    if paged:
        smallest_id = min(paged, key=lambda g: groups[g].kv_cache_spec.page_size)
        smallest = groups[smallest_id].kv_cache_spec.page_size
        for group_id in paged:
            group = groups[group_id]
            if group.kv_cache_spec.page_size % smallest != 0:
                raise CacheSpecError(
                    f"page size {group.kv_cache_spec.page_size} of cache group {group_id} is not a "
                    f"multiple of the smallest page size {smallest} (cache group {smallest_id})"
                )
    ordered = sorted(classes.items(), key=lambda item: item[0][0] != "full_attention")
    return tuple(
        AttentionTypeGroups(key[0], key[1], tuple(ids), groups[ids[0]].kv_cache_spec) for key, ids in ordered
    )


MAX_CONFIG_LAYERS = 4096
"""Most layers read from a model config (``num_hidden_layers`` and every per-layer list); the
largest published models have under 200. Checked before any per-layer work."""

MAX_CONFIG_DIM = 2**20
"""Largest head count or head dim read from a model config (real models stay under 2**10)."""

_MAX_SPAN = 2**31 - 1
"""Largest sliding window or attention chunk read from a config (a token count: int32)."""

# Layer-type names (lower case) that hold no paged KV cache: recurrent and linear-attention layers.
_NO_KV_MARKERS = ("linear", "mamba", "recurrent", "conv", "ssm", "delta", "rwkv", "lightning")
_FULL_NAMES = frozenset({"attention", "global", "global_attention", "hybrid", "parallel_hybrid"})


def _layer_kind(layer_type: object) -> str | None:
    """``"full"``, ``"sliding"``, ``"chunked"``, or ``None`` for a layer without paged KV."""
    if not isinstance(layer_type, str):
        raise CacheSpecError(f"layer_types entries must be strings, got {describe(layer_type)}")
    name = layer_type.lower()
    if "sliding" in name:
        return "sliding"
    if "chunk" in name:
        return "chunked"
    if "full" in name or name in _FULL_NAMES:
        return "full"
    if any(marker in name for marker in _NO_KV_MARKERS):
        return None
    raise CacheSpecError(
        f"unknown layer type {describe(layer_type)}: expected a full, sliding or chunked attention type "
        f"or a recurrent/linear layer"
    )


def _config_get(config: object, key: str) -> Any:
    if isinstance(config, Mapping):
        return config.get(key)
    try:
        return getattr(config, key, None)
    except Exception as exc:  # a config object's property that raises is a bad config
        raise CacheSpecError(f"config.{key} cannot be read: {type(exc).__name__}") from None


def _is_list(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _config_flag(config: object, key: str) -> bool | None:
    """A boolean config field (NumPy booleans included), ``None`` when absent; anything else is refused."""
    value = _config_get(config, key)
    if value is None:
        return None
    return _spec_bool(value, f"config {key}")


def _bounded(value: object, name: str, maximum: int) -> int:
    """A positive int read from a config, at most ``maximum``."""
    return checked_int(value, name, minimum=1, maximum=maximum, error=CacheSpecError)


def _at_layer(value: Any, index: int, num_layers: int | None, key: str) -> Any:
    """``value[index]`` for a per-layer list (whose length must match), the value itself otherwise."""
    if not _is_list(value):
        return value
    if num_layers is None or len(value) != num_layers:
        raise CacheSpecError(f"config {key} has {len(value)} entries for {num_layers} layers")
    return value[index]


def _num_layers(config: object) -> int | None:
    """Layer count from ``num_hidden_layers``, ``layer_types`` or a per-layer list; they must agree."""
    counts = {}
    declared = _config_get(config, "num_hidden_layers")
    if declared is not None:
        counts["num_hidden_layers"] = _bounded(declared, "num_hidden_layers", MAX_CONFIG_LAYERS)
    for key in ("layer_types", "sliding_window", "attention_chunk_size", "num_kv_heads", "num_key_value_heads",
                "head_dim"):
        value = _config_get(config, key)
        if _is_list(value):
            if len(value) > MAX_CONFIG_LAYERS:
                raise CacheSpecError(f"config {key} lists {len(value):,} layers; at most {MAX_CONFIG_LAYERS} are read")
            counts[key] = len(value)
    if len(set(counts.values())) > 1:
        raise CacheSpecError(f"config disagrees on the number of layers: {counts}")
    return next(iter(counts.values()), None)


def _layer_kinds(config: object, num_layers: int | None) -> list[str | None]:
    """Attention kind of every layer (one entry when the layer count is unknown), from the first
    source the config has: ``layer_types``, per-layer window / chunk lists, ``sliding_window_pattern``,
    else one kind for all layers."""
    count = 1 if num_layers is None else num_layers
    layer_types = _config_get(config, "layer_types")
    if layer_types is not None:
        return _kinds_from_layer_types(layer_types)
    window = _config_get(config, "sliding_window")
    chunk = _config_get(config, "attention_chunk_size")
    if _is_list(window) or _is_list(chunk):
        return _kinds_from_per_layer_sizes(window, chunk, count, num_layers)
    pattern = _config_get(config, "sliding_window_pattern")
    if pattern is not None and window is not None:
        return _kinds_from_window_pattern(pattern, count)
    return [_uniform_kind(config, window, chunk)] * count


def _kinds_from_layer_types(layer_types: Any) -> list[str | None]:
    """One kind per entry of ``layer_types`` (``None`` for layers with no attention cache)."""
    if not _is_list(layer_types):
        raise CacheSpecError(f"layer_types must be a list, got {describe(layer_types)}")
    return [_layer_kind(t) for t in layer_types]


def _kinds_from_per_layer_sizes(window: object, chunk: object, count: int, num_layers: int | None) -> list[str | None]:
    """Sliding where a layer has a window, chunked where it has a chunk size, else full; never both."""
    kinds: list[str | None] = []
    for i in range(count):
        has_window = _at_layer(window, i, num_layers, "sliding_window") is not None
        has_chunk = _at_layer(chunk, i, num_layers, "attention_chunk_size") is not None
        if has_window and has_chunk:
            raise CacheSpecError(f"layer {i} has both a sliding window and a chunk size")
        kinds.append("sliding" if has_window else "chunked" if has_chunk else "full")
    return kinds


def _kinds_from_window_pattern(pattern: object, count: int) -> list[str | None]:
    """Every ``pattern``-th layer full, the others sliding."""
    every = _bounded(pattern, "sliding_window_pattern", _MAX_SPAN)
    return ["full" if (i + 1) % every == 0 else "sliding" for i in range(count)]


def _uniform_kind(config: object, window: object, chunk: object) -> str:
    """The one kind of every layer: sliding when a window is set and ``use_sliding_window`` is not
    ``False``, chunked when a chunk size is set, else full; never both."""
    uses_window = window is not None and _config_flag(config, "use_sliding_window") is not False
    if uses_window and chunk is not None:
        raise CacheSpecError("config sets both sliding_window and attention_chunk_size for every layer")
    return "sliding" if uses_window else "chunked" if chunk is not None else "full"


def _layer_geometry(
    config: object, index: int, num_layers: int | None, kind: str, heads: int, head_size: int
) -> tuple[int, int]:
    """``(num_kv_heads, head_size)`` of one layer: config values (per-layer lists or scalars)
    override the arguments; Gemma-4 full-attention layers use ``global_head_dim`` and, with
    ``attention_k_eq_v``, ``num_global_key_value_heads``."""
    for key in ("num_kv_heads", "num_key_value_heads"):
        value = _at_layer(_config_get(config, key), index, num_layers, key)
        if value is not None:
            heads = value
            break
    value = _at_layer(_config_get(config, "head_dim"), index, num_layers, "head_dim")
    if value is not None:
        head_size = value
    if kind == "full":
        global_head_dim = _config_get(config, "global_head_dim")
        if global_head_dim is not None:
            head_size = global_head_dim
        global_heads = _config_get(config, "num_global_key_value_heads")
        if _config_flag(config, "attention_k_eq_v") and global_heads is not None:
            heads = global_heads
    return heads, head_size


def create_kv_cache_specs_from_config(
    config: object,
    page_size: int,
    num_kv_heads: int,
    head_size: int,
    dtype: Any,
    use_mla: bool = False,
) -> list[CacheGroupSpec]:
    """Cache groups for a model config (a plain object or a dict; ``text_config`` is used when
    present), grouping layers with equal ``(kind, window, chunk, heads, head_size)`` in order of
    first appearance, named ``"layer.{i}"``.

    Per-layer kinds come from ``layer_types`` (full / sliding / chunked names; recurrent and
    linear layers get no group), else from per-layer ``sliding_window`` / ``attention_chunk_size``
    lists (``None`` = full), else from ``sliding_window_pattern`` (every N-th layer full), else one
    kind for all layers (sliding when ``sliding_window`` is set and ``use_sliding_window`` is not
    ``False``, chunked when ``attention_chunk_size`` is set). Windows and chunk sizes may be
    scalars or per-layer lists. Heads and head dims come from the config when it has them
    (``num_kv_heads`` / ``num_key_value_heads``, ``head_dim``, Gemma-4 ``global_head_dim``), else
    from the arguments; under MLA the arguments describe the latent cache and are used as given.
    Sliding layers never use MLA. Without a layer count the result is one unnamed group.

    Sizes are bounded before any per-layer work: at most ``MAX_CONFIG_LAYERS`` layers, heads and
    head dims (arguments and config values) at most ``MAX_CONFIG_DIM``, windows and chunk sizes
    at most 2**31 - 1; beyond them ``CacheSpecError``. Integer fields accept ints and NumPy
    integers, never floats (a NumPy float included) or bools; flags (``use_sliding_window``,
    ``attention_k_eq_v``) accept bools and NumPy bools.
    """
    page_size = _spec_int(page_size, "page_size")
    num_kv_heads = _bounded(num_kv_heads, "num_kv_heads", MAX_CONFIG_DIM)
    head_size = _bounded(head_size, "head_size", MAX_CONFIG_DIM)
    use_mla = _spec_bool(use_mla, "use_mla")
    dtype = _canonical_dtype(dtype)
    if config is None or isinstance(config, (str, bytes, numbers.Number, np.bool_, np.ndarray, Sequence)):
        raise CacheSpecError(f"config must be a mapping or an object with attributes, got {describe(config)}")
    text_config = _config_get(config, "text_config")
    if text_config is not None:
        config = text_config
    num_layers = _num_layers(config)
    groups: dict[tuple[Any, ...], list[int]] = {}
    for index, kind in enumerate(_layer_kinds(config, num_layers)):
        if kind is None:
            continue
        window = chunk = None
        if kind == "sliding":
            window = _at_layer(_config_get(config, "sliding_window"), index, num_layers, "sliding_window")
            if window is None:
                raise CacheSpecError(f"layer {index} is sliding-window attention but has no sliding_window")
        elif kind == "chunked":
            chunk = _at_layer(_config_get(config, "attention_chunk_size"), index, num_layers, "attention_chunk_size")
            if chunk is None:
                raise CacheSpecError(f"layer {index} is chunked attention but has no attention_chunk_size")
        heads, size = (
            (num_kv_heads, head_size)
            if use_mla
            else _layer_geometry(config, index, num_layers, kind, num_kv_heads, head_size)
        )
        key = (
            kind,
            None if window is None else _bounded(window, f"sliding_window of layer {index}", _MAX_SPAN),
            None if chunk is None else _bounded(chunk, f"attention_chunk_size of layer {index}", _MAX_SPAN),
            _bounded(heads, f"num_kv_heads of layer {index}", MAX_CONFIG_DIM),
            _bounded(size, f"head_size of layer {index}", MAX_CONFIG_DIM),
        )
        groups.setdefault(key, []).append(index)
    result = []
    for (kind, window, chunk, heads, size), layers in groups.items():
        spec: CacheSpec
        if kind == "sliding":
            spec = SlidingWindowSpec(page_size, heads, size, dtype, False, window)
        elif kind == "chunked":
            spec = ChunkedLocalAttentionSpec(page_size, heads, size, dtype, use_mla, chunk)
        else:
            spec = FullAttentionSpec(page_size, heads, size, dtype, use_mla)
        names = None if num_layers is None else tuple(f"layer.{i}" for i in layers)
        result.append(CacheGroupSpec(spec, names))
    return result
