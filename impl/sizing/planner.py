"""The KV-cache planner: model geometry + accelerator -> exact buffers and page count.

``plan_kv_cache`` works per device. It builds every layer's arrays for one page (padded, as the
kernel allocates them), adds them up into the bytes one page id costs on one device, applies
the utilisation rule to get the device's KV budget, and gives each data-parallel shard as many
pages as fit (``verikv.sizing.budget``), so ``num_pages`` is a multiple of ``dp``. Page 0 is the
null page. The result is checked against ``max_model_len``: if not one request of that length
fits, ``KVCacheDoesNotFitError`` says by how much and which length would fit.

How page ids map to memory depends on the platform:

* TPU (JAX arrays cannot alias): every layer has its own arrays with ``num_pages`` pages, so a
  page id costs the sum over all layers. Layers of equal geometry and kind form one cache group.
* GPU (vLLM's hybrid allocator): all pages have one size (Mamba states are padded to the
  attention page, whose block size is raised to hold them), layers of each kind are split into
  groups of ``group_size`` layers, and ``group_size`` tensors are each shared by one layer of
  every group, so a page id costs ``group_size`` pages. For a uniform model both rules agree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from typing import Any

from verikv.cache_specs import (
    CacheGroupsConfig,
    CacheGroupSpec,
    CacheSpec,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    SlidingWindowSpec,
    estimate_runtime_page_budget,
)
from verikv.dp_sharding import checked_int
from verikv.errors import DoesNotFitError, KVCacheDoesNotFitError, SizingError, describe
from verikv.sizing.arith import INT32_MAX, align, cdiv
from verikv.sizing.bounds import MAX_BYTES, MAX_DP, MAX_NUM_SEQS, MAX_PAGE_SIZE, MAX_TP
from verikv.sizing.budget import (
    UTILIZATION_RULES,
    device_budget,
    memory_page_limit,
    pages_per_shard,
    shard_range,
    usable_pages_in_shard,
    utilization_fraction,
)
from verikv.sizing.catalog import Accelerator, get_accelerator
from verikv.sizing.dtypes import KVDType, get_dtype
from verikv.sizing.geometry import AttentionLayer, Layer, MambaLayer, MLALayer, ModelGeometry
from verikv.sizing.gpu import auto_block_size, kv_heads_per_rank
from verikv.sizing.hf_config import SupportsToDict, geometry_from_hf_config
from verikv.sizing.kernels import Kernel, get_kernel, page_size_rule
from verikv.sizing.layers import PageArray, layer_arrays
from verikv.sizing.mamba import unified_block_size
from verikv.sizing.serving import USAGE_CONTEXTS, vllm_batch_defaults
from verikv.sizing.tpu import auto_page_size, packing, tpu_mla_token_packing


@dataclass(frozen=True)
class LayerBuffer:
    """Identical device buffers: ``len(layers)`` of them on TPU (one per layer), or on GPU
    ``num_buffers`` tensors each shared by one layer of every group (``layers`` lists them all).

    ``page`` describes one page of one buffer on one device: label, dtype, padded
    ``page_bytes`` and ``unpadded_bytes`` (the largest among the buffers merged here). The
    shapes and byte count below derive from it and the page counts: ``shape`` is the global
    shape (all TP ranks, all DP shards), ``device_shape`` what one device holds,
    ``bytes_per_device`` one buffer on one device. ``label``, ``dtype``, ``page_bytes``,
    ``unpadded_page_bytes`` and ``unpadded_bytes`` read the same facts from ``page``.
    """

    page: PageArray
    layers: tuple[int, ...]
    num_buffers: int
    pages_per_shard: int
    num_pages: int

    @property
    def label(self) -> str:
        """What the buffer holds (``"kv"``, ``"latent"``, ``"conv"``, ...): ``page.label``."""
        return self.page.label

    @property
    def dtype(self) -> str:
        """Element type of the buffer: ``page.dtype``."""
        return self.page.dtype

    @property
    def page_bytes(self) -> int:
        """Bytes one page of this buffer costs on one device, padding included: ``page.page_bytes``."""
        return self.page.page_bytes

    @property
    def unpadded_page_bytes(self) -> int:
        """Bytes the data of one page needs on one device, without padding: ``page.unpadded_bytes``."""
        return self.page.unpadded_bytes

    @property
    def unpadded_bytes(self) -> int:
        """``unpadded_page_bytes`` under the name ``PageArray`` uses."""
        return self.page.unpadded_bytes

    @property
    def shape(self) -> tuple[int, ...]:
        """The global shape: every page of every shard."""
        return self.page.with_pages(self.num_pages, self.page.global_shape)

    @property
    def device_shape(self) -> tuple[int, ...]:
        """What one device holds: one shard's pages."""
        return self.page.with_pages(self.pages_per_shard, self.page.device_shape)

    @property
    def bytes_per_device(self) -> int:
        """One buffer on one device."""
        return self.pages_per_shard * self.page_bytes

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON: what a reader of the plan needs, without the page description."""
        return {"label": self.label, "layers": list(self.layers), "num_buffers": self.num_buffers,
                "shape": list(self.shape), "device_shape": list(self.device_shape), "dtype": self.dtype,
                "page_bytes": self.page_bytes, "unpadded_page_bytes": self.unpadded_page_bytes,
                "bytes_per_device": self.bytes_per_device}


@dataclass(frozen=True)
class PlanGroup:
    """One cache group of the plan: its kind, its layers and the spec the manager uses for it."""

    kind: str
    layers: tuple[int, ...]
    spec: CacheSpec


@dataclass(frozen=True)
class KVCachePlan:
    """A sized KV cache. Bytes are per device unless the name says otherwise.

    ``num_pages`` includes the null page (``usable_pages = num_pages - 1``) and is
    ``pages_per_shard * dp``; ``kv_bytes_per_device = pages_per_shard * page_bytes_per_device``
    never exceeds ``budget_bytes``. ``limited_by`` is ``"memory"`` or ``"int32 index"``.
    ``capacity_tokens = num_pages * page_size`` (what engines log); ``max_concurrent_requests``
    counts whole requests of ``max_model_len`` that fit at once, window-aware and per DP shard;
    ``max_concurrency`` is vLLM's "maximum concurrency" figure, one shard's pages (null page
    included) over the pages one request needs, as a ratio.
    ``max_num_batched_tokens`` (tokens per step; a request never has more than ``max_model_len``
    of them live) and ``max_num_seqs`` (running requests) are the caller's or vLLM's defaults for
    the device and ``usage_context`` (``verikv.sizing.serving``); ``assumed`` names the ones that
    were defaults and ``defaults_rule`` says which row of vLLM's table they come from.
    ``weights_source`` says where the weights' bytes come from: a ``ModelGeometry.weights_source``,
    ``"given"`` (``weights_bytes``) or ``"not applied"`` (the budget was given directly).
    ``shard_ranges`` are the page ids ``[start, end)`` each DP shard owns (shard 0 owns the null page).
    ``reserved_bytes`` includes ``workspace_bytes``, the attention kernel's workspace.
    ``utilization_rule`` is ``"total"``, ``"free"`` or ``"given"`` (the budget was given as ``kv_cache_bytes``).
    """

    model: str
    device: str
    platform: str
    kernel: str
    kv_dtype: str
    page_size: int
    tp: int
    dp: int
    memory_bytes: int
    memory_source: str
    utilization: float
    utilization_rule: str
    weights_bytes_per_device: int
    in_use_bytes: int
    reserved_bytes: int
    workspace_bytes: int
    budget_bytes: int
    page_bytes_per_device: int
    unpadded_page_bytes_per_device: int
    pages_per_shard: int
    num_pages: int
    limited_by: str
    kv_bytes_per_device: int
    max_model_len: int
    max_num_batched_tokens: int
    pages_per_request: int
    max_concurrent_requests: int
    buffers: tuple[LayerBuffer, ...]
    groups: tuple[PlanGroup, ...] = field(repr=False)
    shard_ranges: tuple[tuple[int, int], ...]
    notes: tuple[str, ...]
    max_num_seqs: int
    max_concurrency: float
    usage_context: str
    assumed: tuple[str, ...]
    defaults_rule: str
    weights_source: str

    @property
    def num_devices(self) -> int:
        """Devices the plan spans: ``tp * dp``."""
        return self.tp * self.dp

    @property
    def data_parallel_size(self) -> int:
        """The DP size, under the name ``CacheManager.from_plan`` reads."""
        return self.dp

    @property
    def usable_pages_per_shard(self) -> tuple[int, ...]:
        """Pages each DP shard can hand out (shard 0 keeps the null page)."""
        return tuple(usable_pages_in_shard(s, self.pages_per_shard) for s in range(self.dp))

    @property
    def usable_pages(self) -> int:
        """Pages that can be handed out (all but the null page)."""
        return self.num_pages - 1

    @property
    def weights_estimated(self) -> bool:
        """Whether the weights' bytes are an estimate from a dense parameter count (no checkpoint read)."""
        return self.weights_source == "dense estimate"

    @property
    def capacity_tokens(self) -> int:
        """Token slots of all pages, null page included (the figure engines log)."""
        return self.num_pages * self.page_size

    def to_cache_groups_config(self) -> CacheGroupsConfig:
        """The ``CacheGroupsConfig`` a ``CacheManager`` is built from (layers named ``layer.{i}``)."""
        groups = tuple(
            CacheGroupSpec(g.spec, tuple(f"layer.{i}" for i in g.layers)) for g in self.groups
        )
        return CacheGroupsConfig(self.num_pages, groups)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON: every field, plus the derived totals, groups without their spec objects."""
        data = asdict(self)
        data["groups"] = [{"kind": g.kind, "layers": list(g.layers)} for g in self.groups]
        data["buffers"] = [b.to_dict() for b in self.buffers]
        data.update(num_devices=self.num_devices, usable_pages=self.usable_pages, capacity_tokens=self.capacity_tokens,
                    weights_estimated=self.weights_estimated)
        return data

    def to_json(self) -> str:
        """``to_dict`` as indented JSON."""
        return json.dumps(self.to_dict(), indent=2)


def plan_kv_cache(
    model: ModelGeometry | Mapping[str, Any] | SupportsToDict,
    device: Accelerator | str,
    *,
    tp: int = 1,
    dp: int = 1,
    num_devices: int | None = None,
    kv_dtype: str = "auto",
    page_size: int | None = None,
    max_model_len: int | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    usage_context: str = "serve",
    utilization: float | str = 0.9,
    utilization_of: str = "total",
    memory_bytes: int | None = None,
    weights_bytes: int | None = None,
    weights_shards: int | None = None,
    in_use_bytes: int = 0,
    reserved_bytes: int = 0,
    kernel: str | None = None,
    workspace_bytes: int | None = None,
    kv_cache_bytes: int | None = None,
) -> KVCachePlan:
    """Size the KV cache of ``model`` on ``tp * dp`` devices of type ``device``.

    model: a ``ModelGeometry``, or a Hugging Face config (a ``config.json`` dict or a
    ``transformers.PretrainedConfig``) read with ``geometry_from_hf_config``.

    utilization / utilization_of: the share of memory KV may use and what it is a share of,
    ``"total"`` (vLLM, tpu-inference) or ``"free"`` (EasyDeL: memory left after ``weights`` and
    ``in_use_bytes``); see ``verikv.sizing.budget``. memory_bytes: the device's bytes (default:
    the catalog's software-visible figure, else its vendor capacity). weights_bytes: all weights
    (default: the model's), split evenly over ``weights_shards`` devices (default ``tp``; more
    when experts or FSDP shard the weights over the DP devices too). in_use_bytes: other
    memory in use per device before sizing. reserved_bytes: per device, kept back after the
    utilisation (plus the kernel's workspace). workspace_bytes: the attention kernel's workspace
    per device (default: the kernel's, 256 MiB for FlashInfer, else 0; give 0 to reproduce a budget
    that excludes it). kv_cache_bytes: the KV budget per device given directly (vLLM's
    ``kv_cache_memory_bytes``): utilisation, weights, in-use, reserved and workspace bytes are
    then not applied. page_size: tokens per page (default: the kernel's
    rule; see ``tpu.auto_page_size`` / ``gpu.auto_block_size``). max_num_batched_tokens (tokens
    per step, which sets how much of a window stays live) and max_num_seqs (running requests,
    which steers the TPU page-size choice): default vLLM's for the device when run as
    ``usage_context`` (``"serve"``: ``vllm serve``; ``"offline"``: the ``LLM`` class), see
    ``verikv.sizing.serving``; the plan says which were assumed. Raises ``SizingError`` for
    invalid input and ``KVCacheDoesNotFitError`` when not one ``max_model_len`` request fits.
    """
    if not isinstance(model, ModelGeometry):
        if not isinstance(model, Mapping) and not callable(getattr(type(model), "to_dict", None)):
            raise SizingError(f"model must be a ModelGeometry or a Hugging Face config, got {type(model).__name__}")
        model = geometry_from_hf_config(model)
    acc = device if isinstance(device, Accelerator) else get_accelerator(device)
    tp, dp = _resolve_parallelism(tp, dp, num_devices)
    kern = _resolve_kernel(model, acc, kernel)
    dtype = _resolve_kv_dtype(model, acc, kern, kv_dtype)
    mml = _resolve_max_model_len(model, max_model_len)
    batch = _resolve_batch_limits(acc, usage_context, max_num_batched_tokens, max_num_seqs)
    mnbt, seqs = batch.max_num_batched_tokens, batch.max_num_seqs
    memory = _resolve_memory_inputs(
        model, acc, kern, tp, dp, utilization=utilization, utilization_of=utilization_of,
        memory_bytes=memory_bytes, weights_bytes=weights_bytes, weights_shards=weights_shards,
        in_use_bytes=in_use_bytes, reserved_bytes=reserved_bytes, workspace_bytes=workspace_bytes,
        kv_cache_bytes=kv_cache_bytes,
    )
    notes: list[str] = []
    ps = _resolve_page_size(model, kern, dtype, tp, mml, seqs, page_size, notes)
    layout = _page_layout(model, kern, dtype, ps, tp, notes)
    budget, utilization_rule = _kv_budget(memory, kern, notes)
    per_shard, limited_by = _pages_per_shard(budget, layout.page_bytes, dp, ps if kern.flat_int32_slots else 1, notes)
    num_pages = per_shard * dp
    plan_groups = tuple(
        PlanGroup(kind, layers,
                  _group_spec(model.layers[layers[0]], layout.arrays[layers[0]], kern, dtype, ps, tp, mml))
        for kind, layers in layout.groups
    )
    config_groups = [CacheGroupSpec(g.spec) for g in plan_groups]
    estimate = _estimate(num_pages, config_groups, mml, mnbt, dp)
    if estimate is None:
        raise _does_not_fit(model, acc, tp, dp, mml, mnbt, ps, config_groups, memory, budget,
                            layout.page_bytes, per_shard)
    return KVCachePlan(
        model=model.name, device=acc.name, platform=acc.platform, kernel=kern.name, kv_dtype=dtype.name,
        page_size=ps, tp=tp, dp=dp, memory_bytes=memory.memory, memory_source=memory.memory_source,
        utilization=float(memory.utilization), utilization_rule=utilization_rule,
        weights_bytes_per_device=memory.weights_per_device, in_use_bytes=memory.in_use,
        reserved_bytes=memory.reserved_total, workspace_bytes=memory.workspace, budget_bytes=budget,
        page_bytes_per_device=layout.page_bytes,
        unpadded_page_bytes_per_device=layout.unpadded_page_bytes, pages_per_shard=per_shard, num_pages=num_pages,
        limited_by=limited_by, kv_bytes_per_device=per_shard * layout.page_bytes, max_model_len=mml,
        max_num_batched_tokens=mnbt, pages_per_request=estimate.pages_per_request,
        max_concurrent_requests=estimate.max_num_seqs, buffers=_buffers(layout.arrays, layout.buffers, per_shard,
                                                                       num_pages),
        groups=plan_groups, shard_ranges=tuple(shard_range(s, per_shard) for s in range(dp)),
        notes=tuple(notes + _batch_notes(batch, estimate.max_num_seqs, mml) + _weights_notes(memory)),
        max_num_seqs=seqs, max_concurrency=per_shard / estimate.pages_per_request, usage_context=usage_context,
        assumed=batch.assumed, defaults_rule=batch.rule if batch.assumed else "",
        weights_source=memory.weights_source,
    )


@dataclass(frozen=True)
class _MemoryInputs:
    """The validated per-device memory arguments the KV budget is computed from.

    ``reserved_total`` is the caller's reserved bytes plus the kernel's workspace; ``given_budget``
    is ``kv_cache_bytes`` (``None``: the budget follows from the utilisation rule).
    """

    utilization: Fraction
    utilization_of: str
    memory: int
    memory_source: str
    weights_per_device: int
    weights_source: str
    in_use: int
    reserved_total: int
    workspace: int
    given_budget: int | None


@dataclass(frozen=True)
class _PageLayout:
    """What one page id costs on one device and how the layers' arrays share buffers.

    ``arrays`` holds each layer's arrays for one page (padded to one page size on GPU),
    ``groups`` the cache groups ``(kind, layers)``, ``buffers`` the layers sharing each buffer.
    """

    arrays: list[tuple[PageArray, ...]]
    groups: list[tuple[str, tuple[int, ...]]]
    buffers: list[tuple[int, ...]]
    page_bytes: int
    unpadded_page_bytes: int


def _resolve_parallelism(tp: int, dp: int, num_devices: int | None) -> tuple[int, int]:
    """``(tp, dp)`` validated; ``num_devices``, when given, must equal ``tp * dp``."""
    tp = checked_int(tp, "tp", minimum=1, maximum=MAX_TP, error=SizingError)
    dp = checked_int(dp, "dp", minimum=1, maximum=MAX_DP, error=SizingError)
    if num_devices is not None and checked_int(num_devices, "num_devices", minimum=1, error=SizingError) != tp * dp:
        raise SizingError(f"num_devices = {num_devices} but tp * dp = {tp * dp}")
    return tp, dp


@dataclass(frozen=True)
class _BatchLimits:
    """The step budget and running-request cap a plan assumes, which of them are vLLM's
    defaults (``assumed``) and the row of vLLM's table those come from."""

    max_num_batched_tokens: int
    max_num_seqs: int
    assumed: tuple[str, ...]
    rule: str


def _resolve_batch_limits(acc: Accelerator, usage_context: str, max_num_batched_tokens: int | None,
                          max_num_seqs: int | None) -> _BatchLimits:
    """The caller's limits, validated, with vLLM's defaults for the device filling the missing ones
    (its sequence cap at most the batched-token budget, as vLLM lowers it)."""
    if not isinstance(usage_context, str) or usage_context not in USAGE_CONTEXTS:
        raise SizingError(f"usage_context must be one of {USAGE_CONTEXTS}, got {describe(usage_context)}")
    defaults = vllm_batch_defaults(acc, usage_context)
    assumed: list[str] = []
    if max_num_batched_tokens is None:
        tokens = defaults.max_num_batched_tokens
        assumed.append("max_num_batched_tokens")
    else:
        tokens = checked_int(max_num_batched_tokens, "max_num_batched_tokens", minimum=1, maximum=INT32_MAX,
                             error=SizingError)
    if max_num_seqs is None:
        seqs = min(defaults.max_num_seqs, tokens)
        assumed.append("max_num_seqs")
    else:
        seqs = checked_int(max_num_seqs, "max_num_seqs", minimum=1, maximum=MAX_NUM_SEQS, error=SizingError)
    return _BatchLimits(tokens, seqs, tuple(assumed), defaults.rule)


def _batch_notes(batch: _BatchLimits, whole_requests: int, mml: int) -> list[str]:
    """What the plan assumed about the batch, and when the scheduler's cap binds before the cache."""
    notes = []
    if batch.assumed:
        notes.append(f"{' and '.join(batch.assumed)} not given: assumed {batch.rule}")
    if whole_requests > batch.max_num_seqs:
        notes.append(f"the cache holds {whole_requests:,} requests of {mml:,} tokens but the scheduler runs at most "
                     f"max_num_seqs = {batch.max_num_seqs:,} at once")
    return notes


def _weights_notes(memory: _MemoryInputs) -> list[str]:
    if memory.weights_source != "dense estimate":
        return []
    return ["weights estimated from a dense parameter count of the config (no checkpoint weights were read); "
            "give weights_bytes (--weights-bytes) or a folder with the checkpoint's safetensors for the real size"]


def _resolve_memory_inputs(
    model: ModelGeometry, acc: Accelerator, kern: Kernel, tp: int, dp: int, *, utilization: float | str,
    utilization_of: str, memory_bytes: int | None, weights_bytes: int | None, weights_shards: int | None,
    in_use_bytes: int, reserved_bytes: int, workspace_bytes: int | None, kv_cache_bytes: int | None,
) -> _MemoryInputs:
    """Validate the memory arguments of ``plan_kv_cache`` (in the order of its signature) and fill in defaults."""
    if not isinstance(utilization_of, str) or utilization_of not in UTILIZATION_RULES:
        raise SizingError(f"utilization_of must be one of {UTILIZATION_RULES}, got {describe(utilization_of)}")
    util = utilization_fraction(utilization)
    in_use = _bytes_arg(in_use_bytes, "in_use_bytes")
    reserved = _bytes_arg(reserved_bytes, "reserved_bytes")
    workspace = kern.workspace_bytes if workspace_bytes is None else _bytes_arg(workspace_bytes, "workspace_bytes")
    given_budget = None if kv_cache_bytes is None else _bytes_arg(kv_cache_bytes, "kv_cache_bytes", minimum=1)
    memory, memory_source = _resolve_memory(acc, memory_bytes)
    weights, weights_source = _resolve_weights(model, weights_bytes, required=given_budget is None)
    shards = tp if weights_shards is None else checked_int(
        weights_shards, "weights_shards", minimum=1, maximum=tp * dp, error=SizingError)
    return _MemoryInputs(util, utilization_of, memory, memory_source, cdiv(weights, shards), weights_source, in_use,
                         reserved + workspace, workspace, given_budget)


def _resolve_kernel(model: ModelGeometry, acc: Accelerator, name: str | None) -> Kernel:
    kern = get_kernel(name if name is not None else (acc.mla_kernel if model.is_mla else acc.attention_kernel))
    if kern.platform != acc.platform:
        raise SizingError(f"kernel {kern.name} is a {kern.platform} kernel; {acc.name} is a {acc.platform}")
    if kern.is_mla != model.is_mla:
        what = "an MLA" if model.is_mla else "a standard-attention"
        raise SizingError(f"kernel {kern.name} cannot hold {what} model")
    return kern


def _resolve_kv_dtype(model: ModelGeometry, acc: Accelerator, kern: Kernel, kv_dtype: str) -> KVDType:
    if not isinstance(kv_dtype, str):
        raise SizingError(f"kv_dtype must be a dtype name or 'auto', got {type(kv_dtype).__name__}")
    dtype = get_dtype(model.dtype if kv_dtype == "auto" else kv_dtype)
    if dtype.name not in acc.kv_dtypes:
        raise SizingError(f"{acc.name} does not support KV dtype {dtype.name}; supported: {', '.join(acc.kv_dtypes)}")
    if dtype.name not in kern.kv_dtypes:
        raise SizingError(f"kernel {kern.name} does not support KV dtype {dtype.name}; "
                          f"supported: {', '.join(kern.kv_dtypes)}")
    return dtype


def _resolve_max_model_len(model: ModelGeometry, max_model_len: int | None) -> int:
    if max_model_len is None:
        if model.max_model_len is None:
            raise SizingError(f"max_model_len is required: {model.name} does not state its context length")
        max_model_len = model.max_model_len
    return checked_int(max_model_len, "max_model_len", minimum=1, maximum=INT32_MAX, error=SizingError)


def _bytes_arg(value: object, name: str, minimum: int = 0) -> int:
    """A byte count argument: an int in ``[minimum, MAX_BYTES]``."""
    return checked_int(value, name, minimum=minimum, maximum=MAX_BYTES, error=SizingError)


def _resolve_memory(acc: Accelerator, memory_bytes: int | None) -> tuple[int, str]:
    if memory_bytes is None:
        return acc.memory_bytes, acc.memory_source
    return _bytes_arg(memory_bytes, "memory_bytes", minimum=1), "given by the caller"


def _resolve_weights(model: ModelGeometry, weights_bytes: int | None, required: bool) -> tuple[int, str]:
    """The weights' bytes and where they come from (``weights_source`` of the plan)."""
    if weights_bytes is not None:
        return _bytes_arg(weights_bytes, "weights_bytes"), "given"
    if not required:
        return 0, "not applied"
    if model.weights_bytes is None:
        raise SizingError(f"weights_bytes is required: {model.name} does not state the size of its weights")
    return model.weights_bytes, model.weights_source


def _resolve_page_size(model: ModelGeometry, kern: Kernel, dtype: KVDType, tp: int, mml: int, seqs: int,
                       page_size: int | None, notes: list[str]) -> int:
    """The page size: validated if given, else the kernel's rule (raised on GPU to hold a Mamba state)."""
    alignment = packing(dtype.bits) if kern.page_multiple == 0 else kern.page_multiple
    if page_size is None:
        chosen = _kernel_page_size(kern, dtype, mml, seqs, alignment)
    else:
        chosen = _checked_page_size(page_size, kern, dtype, alignment)
    mamba = [layer for layer in model.layers if isinstance(layer, MambaLayer)]
    if kern.platform != "gpu" or not mamba:
        return chosen
    return _page_size_holding_mamba_state(model, mamba, kern, dtype, tp, alignment, chosen,
                                          raise_to_fit=page_size is None, notes=notes)


def _kernel_page_size(kern: Kernel, dtype: KVDType, mml: int, seqs: int, alignment: int) -> int:
    """The kernel's default page size: TPU picks one from the request shape, GPU uses its block size."""
    if kern.platform == "tpu":
        auto_alignment = tpu_mla_token_packing(kern.token_packing, dtype.bits) if kern.is_mla else alignment
        return auto_page_size(mml, seqs, auto_alignment)
    return auto_block_size(kern.default_page_size, alignment)


def _checked_page_size(page_size: int, kern: Kernel, dtype: KVDType, alignment: int) -> int:
    """A caller's page size: an int that the kernel's alignment and allowed sizes accept."""
    chosen = checked_int(page_size, "page_size", minimum=1, maximum=MAX_PAGE_SIZE, error=SizingError)
    if not all(holds for _, holds in page_size_rule(chosen, alignment)):
        raise SizingError(f"page_size {chosen} must be a multiple of {alignment} for {kern.name} with {dtype.name}")
    if kern.allowed_page_sizes is not None and chosen not in kern.allowed_page_sizes:
        raise SizingError(f"kernel {kern.name} accepts page sizes {kern.allowed_page_sizes}, not {chosen}")
    return chosen


def _page_size_holding_mamba_state(model: ModelGeometry, mamba: list[MambaLayer], kern: Kernel, dtype: KVDType,
                                   tp: int, alignment: int, chosen: int, *, raise_to_fit: bool,
                                   notes: list[str]) -> int:
    """GPU hybrid models: one attention page must hold the largest Mamba state. A default page size
    is raised until it does; a caller's page size that is too small is an error."""
    attention = next(layer for layer in model.layers if not isinstance(layer, MambaLayer))
    per_token = layer_arrays(attention, kern, dtype.name, model.dtype, 1, tp)[0].page_bytes
    state = max(sum(a.page_bytes for a in layer_arrays(m, kern, dtype.name, model.dtype, 1, tp)) for m in mamba)
    if raise_to_fit:
        unified = unified_block_size(state, per_token, alignment, chosen)
        if unified != chosen:
            notes.append(f"page size raised from {chosen} to {unified} tokens so one attention page holds a "
                         f"Mamba state of {state:,} B")
        return unified
    if chosen * per_token < state:
        least = unified_block_size(state, per_token, alignment, alignment)
        raise SizingError(f"page_size {chosen} gives {chosen * per_token:,} B attention pages, smaller than the "
                          f"Mamba state of {state:,} B; use at least {least}")
    return chosen


def _page_layout(model: ModelGeometry, kern: Kernel, dtype: KVDType, ps: int, tp: int,
                 notes: list[str]) -> _PageLayout:
    """Every layer's arrays for one page of ``ps`` tokens, grouped by the platform's rule."""
    arrays = [layer_arrays(layer, kern, dtype.name, model.dtype, ps, tp) for layer in model.layers]
    layout = _gpu_page_layout(model, arrays, notes) if kern.platform == "gpu" else _tpu_page_layout(model, arrays)
    _note_padding(model, layout.arrays, tp, notes)
    return layout


def _tpu_page_layout(model: ModelGeometry, arrays: list[tuple[PageArray, ...]]) -> _PageLayout:
    """TPU: one buffer per layer, so a page id costs the sum over all layers."""
    return _PageLayout(
        arrays=arrays, groups=_tpu_groups(model), buffers=[(i,) for i in range(len(model.layers))],
        page_bytes=sum(a.page_bytes for layer in arrays for a in layer),
        unpadded_page_bytes=sum(a.unpadded_bytes for layer in arrays for a in layer),
    )


def _gpu_page_layout(model: ModelGeometry, arrays: list[tuple[PageArray, ...]], notes: list[str]) -> _PageLayout:
    """GPU: pages of one size, ``group_size`` tensors each shared by one layer of every group."""
    arrays = _pad_to_uniform_pages(model, arrays, notes)
    groups, buffers = _gpu_groups(model)
    # a page id is used by one group at a time: its data needs at most the largest layer per tensor
    unpadded = sum(max(sum(a.unpadded_bytes for a in arrays[i]) for i in tensor) for tensor in buffers)
    return _PageLayout(arrays=arrays, groups=groups, buffers=buffers,
                       page_bytes=len(buffers) * arrays[0][0].page_bytes, unpadded_page_bytes=unpadded)


def _kv_budget(memory: _MemoryInputs, kern: Kernel, notes: list[str]) -> tuple[int, str]:
    """The KV budget per device and the rule it came from (``"given"`` for ``kv_cache_bytes``)."""
    if memory.workspace:
        notes.append(f"{kern.name} workspace of {memory.workspace:,} B added to the reserved bytes")
    if memory.given_budget is not None:
        notes.append(f"KV budget of {memory.given_budget:,} B per device given directly; utilisation, weights, "
                     f"in-use, reserved and workspace bytes not applied")
        return memory.given_budget, "given"
    budget = device_budget(memory.memory, memory.weights_per_device + memory.in_use, memory.reserved_total,
                           memory.utilization.numerator, memory.utilization.denominator, memory.utilization_of)
    return budget, memory.utilization_of


def _pages_per_shard(budget: int, page_bytes: int, dp: int, index_unit: int, notes: list[str]) -> tuple[int, str]:
    """Pages per DP shard and what limits them: ``"memory"`` or ``"int32 index"``."""
    per_shard = pages_per_shard(budget, page_bytes, dp, index_unit)
    if per_shard == memory_page_limit(budget, page_bytes):
        return per_shard, "memory"
    notes.append("page count capped so page ids and slot indices fit in int32")
    return per_shard, "int32 index"


def _does_not_fit(model: ModelGeometry, acc: Accelerator, tp: int, dp: int, mml: int, mnbt: int, ps: int,
                  groups: list[CacheGroupSpec], memory: _MemoryInputs, budget: int, page_bytes: int,
                  per_shard: int) -> KVCacheDoesNotFitError:
    """The error for a budget that does not hold one request of ``mml`` tokens: how many pages it
    needs, how many fit, and the largest ``max_model_len`` that would fit."""
    num_pages = per_shard * dp
    # the same estimate on a pool too large to run out gives the pages one request needs
    needed = _estimate(2**62, groups, mml, mnbt, 1).pages_per_request
    largest = _largest_fitting_len(num_pages, groups, mml, mnbt, dp)
    overdrawn = "" if budget >= 0 else (
        f"; weights ({memory.weights_per_device:,} B per device), other memory in use and reserved bytes already "
        f"exceed the usable memory")
    return KVCacheDoesNotFitError(
        f"{model.name} on {acc.name} (tp={tp}, dp={dp}): one request of {mml} tokens needs {needed} pages of "
        f"{ps} tokens, but the budget of {budget:,} B per device holds {per_shard} page(s) of "
        f"{page_bytes:,} B per shard ({num_pages} in all, page 0 reserved); the largest max_model_len that "
        f"fits is {largest}{overdrawn}",
        max_model_len=mml, largest_max_model_len=largest, pages_per_request=needed, num_pages=num_pages,
        budget_bytes=budget, page_bytes=page_bytes,
    )


def _pad_to_uniform_pages(model: ModelGeometry, arrays: list[tuple[PageArray, ...]],
                          notes: list[str]) -> list[tuple[PageArray, ...]]:
    """GPU: one page size for every layer; a Mamba state becomes one byte array of the attention page size."""
    attention_bytes = {arrays[i][0].page_bytes for i, layer in enumerate(model.layers)
                       if not isinstance(layer, MambaLayer)}
    if len(attention_bytes) != 1:
        raise SizingError(f"GPU hybrid allocation needs one page size for all attention layers; got "
                          f"{sorted(attention_bytes)} B (layers of different KV geometry are not supported on GPU)")
    page = attention_bytes.pop()
    result: list[tuple[PageArray, ...]] = []
    for layer, layer_pages in zip(model.layers, arrays):
        if isinstance(layer, MambaLayer):
            state = sum(a.page_bytes for a in layer_pages)
            result.append((PageArray("mamba state (padded)", (1, page), (1, page), 0, "uint8", 8, state),))
        else:
            result.append(layer_pages)
    if any(isinstance(layer, MambaLayer) for layer in model.layers):
        state = max(a[0].unpadded_bytes for a, layer in zip(result, model.layers) if isinstance(layer, MambaLayer))
        notes.append(f"Mamba state pages padded from {state:,} B to the attention page of {page:,} B")
    return result


def _type_key(layer: Layer) -> tuple[Any, ...]:
    if isinstance(layer, AttentionLayer):
        return (layer.kind, layer.sliding_window, layer.attention_chunk_size, layer.num_kv_heads, layer.head_dim)
    if isinstance(layer, MLALayer):
        return ("mla", layer.kv_lora_rank, layer.qk_rope_head_dim)
    return ("mamba", layer)


def _bucket(model: ModelGeometry) -> list[tuple[str, list[int]]]:
    buckets: dict[tuple[Any, ...], list[int]] = {}
    for index, layer in enumerate(model.layers):
        buckets.setdefault(_type_key(layer), []).append(index)
    return [(key[0], layers) for key, layers in buckets.items()]


def _tpu_groups(model: ModelGeometry) -> list[tuple[str, tuple[int, ...]]]:
    """One cache group per layer type and geometry, in order of first appearance."""
    return [(kind, tuple(layers)) for kind, layers in _bucket(model)]


def _gpu_groups(model: ModelGeometry) -> tuple[list[tuple[str, tuple[int, ...]]], list[tuple[int, ...]]]:
    """vLLM's grouping: ``group_size`` = the smallest type's layer count, or the largest's when it
    is below 1.5x the smallest; each type splits into ``cdiv(n, group_size)`` strided groups;
    tensor ``t`` is shared by the ``t``-th layer of every group."""
    buckets = _bucket(model)
    counts = [len(layers) for _, layers in buckets]
    group_size = min(counts)
    if 2 * max(counts) < 3 * min(counts):
        group_size = max(counts)
    groups: list[tuple[str, tuple[int, ...]]] = []
    for kind, layers in buckets:
        num_groups = cdiv(len(layers), group_size)
        groups.extend((kind, tuple(layers[j::num_groups])) for j in range(num_groups))
    tensors = [tuple(g[t] for _, g in groups if t < len(g)) for t in range(group_size)]
    return groups, tensors


def _group_spec(layer: Layer, arrays: tuple[PageArray, ...], kern: Kernel, dtype: KVDType, ps: int, tp: int,
                max_model_len: int) -> CacheSpec:
    """The manager's spec for a group, in per-device heads. A Mamba group's page covers a whole
    request (one page per request, as in vLLM): its page size is ``max_model_len`` rounded up to
    a multiple of the attention page size (the manager needs every page size to be a multiple of
    the smallest), and its state is given as byte arrays, padded to the attention page on GPU."""
    if isinstance(layer, AttentionLayer):
        heads = kv_heads_per_rank(layer.num_kv_heads, tp)
        if layer.kind == "sliding":
            return SlidingWindowSpec(ps, heads, layer.head_dim, dtype.name, False, _present(layer.sliding_window))
        if layer.kind == "chunked":
            return ChunkedLocalAttentionSpec(ps, heads, layer.head_dim, dtype.name, False,
                                             _present(layer.attention_chunk_size))
        return FullAttentionSpec(ps, heads, layer.head_dim, dtype.name, False)
    if isinstance(layer, MLALayer):
        if arrays[0].dtype == "uint8":
            return FullAttentionSpec(ps, 1, arrays[0].device_shape[-1], "uint8", True)
        return FullAttentionSpec(ps, 1, layer.kv_lora_rank + layer.qk_rope_head_dim, dtype.name, True)
    if kern.platform == "gpu":
        return MambaSpec(align(max_model_len, ps), ((arrays[0].unpadded_bytes,),), "uint8",
                         page_size_padded=arrays[0].page_bytes)
    return MambaSpec(align(max_model_len, ps), tuple((a.page_bytes,) for a in arrays), "uint8")


def _present(value: int | None) -> int:
    """A window or chunk size the layer's kind guarantees is set."""
    if value is None:
        raise SizingError("a windowed layer without its window size")
    return value


def _estimate(num_pages: int, groups: list[CacheGroupSpec], mml: int, mnbt: int, dp: int) -> Any:
    """The window-aware request estimate, or ``None`` when not one request fits."""
    if num_pages < 1:
        return None
    try:
        return estimate_runtime_page_budget(num_pages=num_pages, kv_cache_groups=groups, max_model_len=mml,
                                            max_num_batched_tokens=mnbt, data_parallel_size=dp)
    except DoesNotFitError:
        return None


def _largest_fitting_len(num_pages: int, groups: list[CacheGroupSpec], mml: int, mnbt: int, dp: int) -> int:
    """Largest request length below ``mml`` that fits (0 if none); pages needed grow with the length."""
    low, high = 0, mml - 1
    while low < high:
        mid = (low + high + 1) // 2
        if _estimate(num_pages, groups, mid, min(mnbt, mid), dp) is not None:
            low = mid
        else:
            high = mid - 1
    return low


def _buffers(arrays: list[tuple[PageArray, ...]], layout: list[tuple[int, ...]], per_shard: int, num_pages: int
             ) -> tuple[LayerBuffer, ...]:
    """Group identical buffers (same label, shape, dtype) for the report, in order of first layer."""
    merged: dict[tuple[Any, ...], list[Any]] = {}
    for tensor in layout:
        members = [arrays[i] for i in tensor]
        if len({m[0].label for m in members}) > 1:
            # GPU: attention pages and padded Mamba states alias one byte tensor.
            page = members[0][0].page_bytes
            members = [(PageArray("shared kv / mamba state", (1, page), (1, page), 0, "uint8", 8,
                                  m[0].unpadded_bytes),) for m in members]
        for position, array in enumerate(members[0]):
            unpadded = max(m[position].unpadded_bytes for m in members)
            key = (array.label, array.device_shape, array.global_shape, array.dtype, unpadded)
            entry = merged.setdefault(key, [array, [], 0, unpadded])
            entry[1].extend(tensor)
            entry[2] += 1
    return tuple(
        LayerBuffer(replace(array, unpadded_bytes=unpadded), tuple(sorted(layers)), count, per_shard, num_pages)
        for array, layers, count, unpadded in merged.values()
    )


def _note_padding(model: ModelGeometry, arrays: list[tuple[PageArray, ...]], tp: int, notes: list[str]) -> None:
    padded = sum(a.page_bytes for layer in arrays for a in layer)
    raw = sum(a.unpadded_bytes for layer in arrays for a in layer)
    if padded != raw:
        notes.append(f"layout padding: {padded:,} B allocated per page id for {raw:,} B of data "
                     f"(x{padded / raw:.3f}); sized from the allocated bytes")
    heads = {layer.num_kv_heads for layer in model.layers if isinstance(layer, AttentionLayer)}
    if any(tp > h for h in heads):
        notes.append(f"KV heads replicated: tp = {tp} exceeds {min(heads)} KV heads, one head per rank")
    if model.is_mla and tp > 1:
        notes.append(f"MLA latent replicated on all {tp} TP ranks (no head axis)")
