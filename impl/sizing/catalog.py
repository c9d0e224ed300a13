"""The accelerator catalog: memory per device, default kernels and KV dtypes of each target.

Figures are from vendor data sheets and public runtime reports. ``capacity_bytes`` is the vendor's
quoted capacity (GB = 1e9 for GPUs as vendors quote it; TPU docs quote GiB). ``visible_bytes``
is what a runtime reported (TPU ``bytes_limit``, CUDA/ROCm ``total_memory``) when such a report
was found; ``visible_note`` says where it comes from and whether it is unverified. The planner
uses ``visible_bytes`` when known and the vendor capacity otherwise, and says which in the plan.
Real deployments should pass the runtime figure (``memory_bytes=``): these are fixtures.

A TPU v7 (Ironwood) chip has two TensorCores and each is its own JAX device with half the
chip's HBM, so the catalog entry is one TensorCore.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from verikv.dp_sharding import checked_int
from verikv.errors import SizingError, describe
from verikv.sizing.bounds import MAX_BYTES
from verikv.sizing.dtypes import get_dtype
from verikv.sizing.kernels import get_kernel

GiB = 2**30
MiB = 2**20
GB = 10**9

_TPU_KV = ("float32", "bfloat16", "float16", "fp8_e4m3", "fp8_e5m2")
_NV_KV = ("float32", "bfloat16", "float16", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla")
_AMPERE_KV = ("float32", "bfloat16", "float16")
_AMD_KV = ("float32", "bfloat16", "float16", "fp8_e4m3", "fp8_e5m2")


@dataclass(frozen=True)
class Accelerator:
    """One device as the sizing sees it (for TPU v7: one TensorCore).

    memory_bytes is the figure the planner sizes against: ``visible_bytes`` if known, else
    ``capacity_bytes``; ``memory_source`` says which.
    """

    name: str
    vendor: str
    platform: Literal["tpu", "gpu"]
    capacity_bytes: int
    capacity_label: str
    visible_bytes: int | None
    visible_note: str
    attention_kernel: str
    mla_kernel: str
    kv_dtypes: tuple[str, ...]
    aliases: tuple[str, ...] = ()

    @property
    def memory_bytes(self) -> int:
        """Bytes the planner sizes against by default."""
        return self.capacity_bytes if self.visible_bytes is None else self.visible_bytes

    @property
    def memory_source(self) -> str:
        """Where ``memory_bytes`` comes from."""
        if self.visible_bytes is None:
            return f"vendor capacity {self.capacity_label} (software-visible bytes not observed)"
        return f"software-visible: {self.visible_note}"


def _tpu(name: str, cap: int, label: str, visible: int | None, note: str, aliases: tuple[str, ...]) -> Accelerator:
    return Accelerator(name, "Google", "tpu", cap, label, visible, note, "tpu-rpa-v3", "tpu-mla", _TPU_KV, aliases)


def _gpu(
    name: str, vendor: str, cap: int, label: str, visible: int | None, note: str,
    attn: str, mla: str, kv: tuple[str, ...], aliases: tuple[str, ...],
) -> Accelerator:
    return Accelerator(name, vendor, "gpu", cap, label, visible, note, attn, mla, kv, aliases)


ACCELERATORS: tuple[Accelerator, ...] = (
    _tpu("tpu-v4", 32 * GiB, "32 GiB per chip (one JAX device per chip, megacore)", 33_014_415_360,
         "bytes_limit 30.75 GiB from jax-ml/jax#1491 (device kind not named: unverified)", ("v4",)),
    _tpu("tpu-v5e", 16 * GiB, "16 GiB", 16_911_433_728,
         "bytes_limit 15.75 GiB in a tpu-inference log on v5e-1 (rounded to 0.01 GiB)", ("v5e", "v5litepod")),
    _tpu("tpu-v5p", 95 * GiB, "95 GiB per chip (megacore)", None,
         "not observed; tpu-inference assumes 95 GiB on Pathways", ("v5p",)),
    _tpu("tpu-v6e", 32 * GiB, "32 GB (Trillium)", 33_543_694_581,
         "31.24 GiB in a tpu-inference log (not attributable: unverified, rounded)", ("v6e", "trillium")),
    _tpu("tpu-v7", 96 * GiB, "96 GiB per TensorCore (192 GiB chip, 2 TensorCores)", None,
         "not observed; tpu-inference assumes 96 GiB per device", ("v7", "tpu7x", "ironwood")),
    _gpu("a100-40", "NVIDIA", 40 * GB, "40 GB HBM2", 40_536 * MiB,
         "CUDA total 40,536 MiB (public log)", "flash-attn", "triton-mla", _AMPERE_KV, ("a100-40gb",)),
    _gpu("a100-80", "NVIDIA", 80 * GB, "80 GB HBM2e", 81_920 * MiB,
         "nvidia-smi 81,920 MiB (CUDA-visible total not observed)", "flash-attn", "triton-mla", _AMPERE_KV,
         ("a100", "a100-80gb")),
    _gpu("h100-sxm", "NVIDIA", 80 * GB, "80 GB HBM3", 81_089 * MiB,
         "torch total_memory 81,089 MiB (public logs show 81,082-81,090 MiB)", "flash-attn", "flashmla", _NV_KV,
         ("h100",)),
    _gpu("h100-pcie", "NVIDIA", 80 * GB, "80 GB HBM2e", None,
         "not observed", "flash-attn", "flashmla", _NV_KV, ()),
    _gpu("h100-nvl", "NVIDIA", 94 * GB, "94 GB HBM3", 99_961_274_368,
         "DRM-reported total (fastfetch-cli/fastfetch#1658)", "flash-attn", "flashmla", _NV_KV, ()),
    _gpu("h200", "NVIDIA", 141 * GB, "141 GB HBM3e", 143_156 * MiB,
         "torch total 143,156 MiB (public log)", "flash-attn", "flashmla", _NV_KV, ("h200-sxm",)),
    _gpu("b200", "NVIDIA", 180 * GB, "180 GB usable HBM3e (192 GB physical)", 182_642 * MiB,
         "torch total 182,642 MiB (public logs show 182,631-182,642 MiB)", "flash-attn", "cutlass-mla", _NV_KV, ()),
    _gpu("gb200", "NVIDIA", 186 * GB, "about 186 GB HBM3e per GPU (unverified; some sources say 192 GB)", None,
         "not observed", "flash-attn", "cutlass-mla", _NV_KV, ()),
    _gpu("mi300x", "AMD", 192 * GB, "192 GB HBM3", 205_822_885_888,
         "rocm-smi / totalGlobalMem (many logs)", "triton", "triton-mla", _AMD_KV, ()),
    _gpu("mi325x", "AMD", 256 * GB, "256 GB HBM3E", None, "not observed", "triton", "triton-mla", _AMD_KV, ()),
    _gpu("mi355x", "AMD", 288 * GB, "288 GB HBM3E", None, "not observed", "triton", "triton-mla", _AMD_KV,
         ("mi350x",)),
)

_BY_NAME: dict[str, Accelerator] = {}
for _acc in ACCELERATORS:
    for _key in (_acc.name, *_acc.aliases):
        _BY_NAME[_key] = _acc


def get_accelerator(name: str) -> Accelerator:
    """The catalog entry called ``name`` (case-insensitive; aliases such as ``v6e`` accepted)."""
    if not isinstance(name, str) or name.lower() not in _BY_NAME:
        known = ", ".join(a.name for a in ACCELERATORS)
        raise SizingError(f"unknown accelerator {describe(name)}; known: {known} "
                          "(or describe one with describe_accelerator)")
    return _BY_NAME[name.lower()]


def describe_accelerator(
    name: str,
    memory_bytes: int,
    platform: Literal["tpu", "gpu"],
    *,
    attention_kernel: str | None = None,
    mla_kernel: str | None = None,
    kv_dtypes: tuple[str, ...] | None = None,
) -> Accelerator:
    """A device not in the catalog: its software-visible bytes and platform (kernels default by platform).

    ``name``: a non-empty string; ``memory_bytes``: an int in ``[1, MAX_BYTES]``; kernels: kernel
    names of that platform; ``kv_dtypes``: a non-empty tuple or list of dtype names (default:
    every KV dtype of the platform). Anything else is a ``SizingError``.
    """
    if not isinstance(name, str) or not name or len(name) > 200:
        raise SizingError(f"name must be a non-empty string of at most 200 characters, got {describe(name)}")
    if not isinstance(platform, str) or platform not in ("tpu", "gpu"):
        raise SizingError(f"platform must be 'tpu' or 'gpu', got {describe(platform)}")
    memory = checked_int(memory_bytes, "memory_bytes", minimum=1, maximum=MAX_BYTES, error=SizingError)
    attn = attention_kernel if attention_kernel is not None else ("tpu-rpa-v3" if platform == "tpu" else "flash-attn")
    mla = mla_kernel if mla_kernel is not None else ("tpu-mla" if platform == "tpu" else "triton-mla")
    for kernel_name in (attn, mla):
        if get_kernel(kernel_name).platform != platform:
            raise SizingError(f"kernel {kernel_name!r} is not a {platform} kernel")
    dtypes = _kv_dtype_names(kv_dtypes if kv_dtypes is not None else (_TPU_KV if platform == "tpu" else _NV_KV))
    label = f"{memory:,} B (user-described)"
    return Accelerator(name, "user", platform, memory, label, memory, "given by the user", attn, mla, dtypes)


def _kv_dtype_names(given: object) -> tuple[str, ...]:
    """Canonical names of a non-empty tuple or list of KV dtype names (at most one per known spelling)."""
    if not isinstance(given, (tuple, list)) or not given or len(given) > 64:
        raise SizingError(f"kv_dtypes must be a non-empty tuple or list of dtype names, got {describe(given)}")
    return tuple(dict.fromkeys(get_dtype(d).name for d in given))
