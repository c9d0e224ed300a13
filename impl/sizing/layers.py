"""Per-layer device arrays: what one page of one layer costs, padded, on one device.

This turns a layer record (``verikv.sizing.geometry``) plus the kernel, KV dtype, page size and
tensor-parallel size into the arrays the engine allocates for that layer, each described for
one page: its shape on one device, its global shape (all TP ranks), which axis is the page
axis, its element type, and the bytes the data needs without padding. The shapes come from the
layout functions of ``tpu``, ``gpu`` and ``mamba``, so the planner sizes from exactly the
shapes it reports.
"""

from __future__ import annotations

from dataclasses import dataclass

from verikv.errors import SizingError
from verikv.sizing.dtypes import FP8_DS_MLA_BYTES_PER_TOKEN, get_dtype
from verikv.sizing.geometry import AttentionLayer, Layer, MambaLayer, MLALayer
from verikv.sizing.gpu import gpu_kv_shape, gpu_mla_shape, kv_heads_per_rank
from verikv.sizing.kernels import Kernel
from verikv.sizing.mamba import mamba1_state_shapes, mamba2_state_shapes
from verikv.sizing.tpu import buffer_bytes, rpa_v3_shape, tpu_mla_shape, tpu_mla_token_packing


@dataclass(frozen=True)
class PageArray:
    """One array of one layer, described for a single page.

    ``device_shape`` / ``global_shape`` have 1 on ``page_axis``; ``page_bytes`` is
    ``prod(device_shape) * itemsize`` (padding included) and ``unpadded_bytes`` what the data
    itself needs on one device.
    """

    label: str
    device_shape: tuple[int, ...]
    global_shape: tuple[int, ...]
    page_axis: int
    dtype: str
    bits: int
    unpadded_bytes: int

    @property
    def page_bytes(self) -> int:
        """Padded bytes of one page of this array on one device."""
        return buffer_bytes(self.device_shape, self.bits)

    def with_pages(self, pages: int, shape: tuple[int, ...]) -> tuple[int, ...]:
        """``shape`` with its page axis set to ``pages``."""
        return shape[: self.page_axis] + (pages,) + shape[self.page_axis + 1 :]


def check_tp_split(count: int, tp: int, what: str) -> None:
    """Heads split over TP need ``count % tp == 0`` (sharded) or ``tp % count == 0`` (replicated)."""
    if count % tp != 0 and tp % count != 0:
        raise SizingError(f"{what} = {count} cannot be split over tp = {tp}: one must divide the other")


def attention_arrays(layer: AttentionLayer, kernel: Kernel, kv_dtype: str, page_size: int, tp: int) -> PageArray:
    """The K/V array of a standard attention layer (one array; K and V interleaved or stacked)."""
    check_tp_split(layer.num_kv_heads, tp, "num_kv_heads")
    _check_head_dim(layer.head_dim, kernel)
    dtype = get_dtype(kv_dtype)
    heads = kv_heads_per_rank(layer.num_kv_heads, tp)
    unpadded = 2 * page_size * heads * layer.head_dim * dtype.itemsize
    if kernel.layout == "rpa-v3":
        device = rpa_v3_shape(1, page_size, heads, layer.head_dim, dtype.bits)
        global_shape = device[:2] + (device[2] * tp,) + device[3:]
        return PageArray("kv", device, global_shape, 0, dtype.name, dtype.bits, unpadded)
    if kernel.layout in ("gpu-kv-first", "gpu-page-first"):
        kv_first = kernel.layout == "gpu-kv-first"
        device = gpu_kv_shape(1, page_size, heads, layer.head_dim, kv_first)
        global_shape = device[:3] + (heads * tp,) + device[4:]
        return PageArray("kv", device, global_shape, 1 if kv_first else 0, dtype.name, dtype.bits, unpadded)
    raise SizingError(f"kernel {kernel.name} ({kernel.layout}) cannot hold standard attention layers")


def mla_arrays(layer: MLALayer, kernel: Kernel, kv_dtype: str, page_size: int) -> PageArray:
    """The latent array of an MLA layer; replicated on every TP rank (it has no head axis)."""
    dtype = get_dtype(kv_dtype)
    width = layer.kv_lora_rank + layer.qk_rope_head_dim
    if kernel.layout == "tpu-mla":
        pack = tpu_mla_token_packing(kernel.token_packing, dtype.bits)
        device = tpu_mla_shape(1, page_size, layer.kv_lora_rank, layer.qk_rope_head_dim, pack)
        return PageArray("latent", device, device, 0, dtype.name, dtype.bits, page_size * width * dtype.itemsize)
    if kernel.layout == "gpu-mla":
        if dtype.name == "fp8_ds_mla":
            if (layer.kv_lora_rank, layer.qk_rope_head_dim) != (512, 64):
                raise SizingError("fp8_ds_mla stores a 512 + 64 latent (DeepSeek-V3.2); this layer differs")
            device = gpu_mla_shape(1, page_size, FP8_DS_MLA_BYTES_PER_TOKEN)
            return PageArray("latent", device, device, 0, "uint8", 8, page_size * FP8_DS_MLA_BYTES_PER_TOKEN)
        device = gpu_mla_shape(1, page_size, width)
        return PageArray("latent", device, device, 0, dtype.name, dtype.bits, page_size * width * dtype.itemsize)
    raise SizingError(f"kernel {kernel.name} ({kernel.layout}) cannot hold MLA layers")


def mamba_state(layer: MambaLayer, model_dtype: str, tp: int) -> tuple[PageArray, PageArray]:
    """The conv and SSM state arrays of a Mamba layer for one request slot, unpadded."""
    conv: tuple[int, int]
    ssm: tuple[int, ...]
    if layer.version == 2:
        if layer.num_heads % tp != 0:
            raise SizingError(f"Mamba2 num_heads = {layer.num_heads} is not divisible by tp = {tp}")
        check_tp_split(layer.n_groups, tp, "Mamba2 n_groups")
        groups = layer.n_groups if layer.n_groups % tp == 0 else tp
        if (layer.intermediate_size + 2 * groups * layer.d_state) % tp != 0:
            raise SizingError(f"Mamba2 conv width is not divisible by tp = {tp}")
        conv, ssm = mamba2_state_shapes(
            layer.intermediate_size, layer.n_groups, layer.d_state, layer.num_heads, layer.head_dim,
            layer.conv_kernel, tp,
        )
    else:
        if layer.intermediate_size % tp != 0:
            raise SizingError(f"Mamba1 intermediate_size = {layer.intermediate_size} is not divisible by tp = {tp}")
        conv, ssm = mamba1_state_shapes(layer.intermediate_size, layer.d_state, layer.conv_kernel, tp)
    arrays = []
    for label, shape, dtype_name in (("conv", conv, layer.conv_dtype), ("ssm", ssm, layer.ssm_dtype)):
        dtype = get_dtype(dtype_name or model_dtype)
        if dtype.bits not in (8, 16, 32):
            raise SizingError(f"Mamba {label} state dtype {dtype.name} is not a plain 8/16/32-bit type")
        device = (1, *shape)
        arrays.append(PageArray(label, device, device, 0, dtype.name, dtype.bits, buffer_bytes(device, dtype.bits)))
    return arrays[0], arrays[1]


def _check_head_dim(head_dim: int, kernel: Kernel) -> None:
    if kernel.head_dims is not None:
        if head_dim not in kernel.head_dims:
            raise SizingError(f"kernel {kernel.name} supports head dims {kernel.head_dims}, not {head_dim}")
        return
    if head_dim % kernel.head_dim_multiple != 0 or head_dim < kernel.head_dim_min or (
        kernel.head_dim_max and head_dim > kernel.head_dim_max
    ):
        upper = kernel.head_dim_max or "any"
        raise SizingError(
            f"kernel {kernel.name} needs a head dim that is a multiple of {kernel.head_dim_multiple} "
            f"in [{kernel.head_dim_min}, {upper}], not {head_dim}"
        )


def layer_arrays(layer: Layer, kernel: Kernel, kv_dtype: str, model_dtype: str, page_size: int, tp: int
                 ) -> tuple[PageArray, ...]:
    """Every array one page id reserves in ``layer`` (Mamba: its state, unpadded)."""
    if isinstance(layer, AttentionLayer):
        return (attention_arrays(layer, kernel, kv_dtype, page_size, tp),)
    if isinstance(layer, MLALayer):
        return (mla_arrays(layer, kernel, kv_dtype, page_size),)
    return mamba_state(layer, model_dtype, tp)
