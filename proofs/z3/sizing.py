"""Sizing theorems, proved with Z3 on the implementation's own sizing functions.

The functions of ``verikv.sizing.tpu``, ``gpu``, ``mamba`` and ``budget`` are called here with
Z3 integers instead of ints (their arithmetic goes through ``verikv.sizing.arith``, for which
this module registers Z3 as the symbolic backend), so what is proved is the code the planner
runs, not a re-typed copy. For every parameter in the stated ranges (``BOUND``):

* ``SIZE-FITS``: the bytes really allocated on a device (the product of every buffer's
  shape times its element width, with the page axis set to the pages the planner chose) never
  exceed the KV budget, and weights + memory in use + reserved + KV never exceed the device
  (under the "total" rule also the utilised share of it), for both utilisation rules;
* ``SIZE-MAXIMAL``: one more page per data-parallel shard (one more DP round) would exceed
  the budget, unless the int32 index limit is what stopped the count;
* ``SIZE-INT32``: page ids and page-table entries (and on TPU the flat slot index
  ``page * page_size + offset``) fit in int32;
* ``SIZE-ALIGNED``: every buffer shape meets its kernel's rules (RPA v3 validator, MLA lanes
  and token rows, GPU block multiples, Mamba padding), with no more padding than one unit;
* ``SIZE-DP-EQUAL``: the DP shards are equal, contiguous and tile ``[0, num_pages)``; only
  shard 0 loses a page (the null page).

One more check runs the whole planner concretely over every preset, catalog device, KV dtype
and a few TP/DP sizes, recomputing each plan's bytes from the shapes it reports (this is what
catches a planner that sizes from other bytes than those of its buffers).

Each check first proves its hypotheses satisfiable (vacuity check); ``unknown`` fails.
``mutants()`` breaks the sizing code in plausible ways and shows which check catches each.
"""

from __future__ import annotations

import builtins
import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import z3

from verikv.errors import DoesNotFitError, SizingError
from verikv.proofs.runner.registry import Check, Mutant, Outcome
from verikv.proofs.z3.common import Obligation, discharge
from verikv.sizing import arith, budget, gpu, mamba, tpu
from verikv.sizing.catalog import ACCELERATORS
from verikv.sizing.dtypes import get_dtype
from verikv.sizing.kernels import KERNELS, get_kernel, page_size_rule
from verikv.sizing.layers import PageArray
from verikv.sizing.planner import KVCachePlan, plan_kv_cache
from verikv.sizing.presets import get_preset, preset_names

arith.set_symbolic_backend(arith.SymbolicBackend(floordiv=lambda a, b: a / b, ite=z3.If))

MEM_MAX = 2**40          # bytes per device (1 TiB; the largest catalog device has 288 GB)
UTIL_DEN_MAX = 10**6     # utilisation is a decimal fraction with up to 6 digits
LAYERS_MAX = 1024
HEADS_MAX = 1024
HEAD_DIM_MAX = 4096
PAGE_MAX = 2**16
TP_MAX = 1024
DP_MAX = 4096
STATE_MAX = 2**34        # bytes of one Mamba state page
BOUND = "mem<=2^40 B, util<=1, layers,heads<=1024, head dim<=4096, page<=2^16, tp<=1024, dp<=4096"
GPU_BLOCK_MULTIPLES = tuple(sorted({k.page_multiple for k in KERNELS.values() if k.platform == "gpu"}))


class _Vars:
    """Fresh Z3 integers with their range hypotheses."""

    def __init__(self) -> None:
        self.hyps: list[Any] = []
        self.names: list[tuple[str, Any]] = []

    def int(self, name: str, lo: int, hi: int) -> Any:
        var = z3.Int(name)
        self.hyps.append(z3.And(lo <= var, var <= hi))
        self.names.append((name, var))
        return var

    def choice(self, name: str, values: tuple[builtins.int, ...]) -> Any:  # `int` here is the method above
        var = z3.Int(name)
        self.hyps.append(z3.Or([var == value for value in values]))
        self.names.append((name, var))
        return var

    def explain(self, model: z3.ModelRef) -> str:
        return ", ".join(f"{name}={model.eval(var, model_completion=True)}" for name, var in self.names)


def dense_bytes(shape: tuple[Any, ...], bits: Any) -> Any:
    """What a dense array of ``shape`` with ``bits``-wide elements occupies: the definition the proofs use."""
    return math.prod(shape) * (bits / 8)


@dataclass(frozen=True)
class Layout:
    """One kernel layout under symbolic parameters: ``buffers(n)`` are the (shape, bits, count) of
    one device holding ``n`` pages; ``index_unit`` is int32 units per page (page size on TPU)."""

    buffers: Callable[[Any], list[tuple[tuple[Any, ...], Any, Any]]]
    page_bytes: Any
    index_unit: Any
    aligned: list[tuple[str, Any]]


def _rpa_v3(v: _Vars) -> Layout:
    layers = v.int("layers", 1, LAYERS_MAX)
    page = v.int("page_size", 1, PAGE_MAX)
    kv = v.int("kv_heads", 1, HEADS_MAX)
    tp = v.int("tp", 1, TP_MAX)
    head_dim = v.int("head_dim", 1, HEAD_DIM_MAX)
    bits = v.choice("bits", (8, 16, 32))
    v.hyps += [z3.Or(kv % tp == 0, tp % kv == 0), page % tpu.packing(bits) == 0]  # the planner's validation
    heads = gpu.kv_heads_per_rank(kv, tp)

    def shape(n: Any) -> tuple[Any, ...]:
        return tpu.rpa_v3_shape(n, page, heads, head_dim, bits)

    one = shape(1)
    combined = z3.If(head_dim == 64, heads, 2 * heads)
    aligned = [*tpu.rpa_v3_alignment(one, page, heads, head_dim, bits),
               ("TP ranks together hold every KV head", heads * tp >= kv),
               ("head rows padded by less than one packing", (one[2] - 1) * one[3] < combined),
               ("lanes padded by less than 128", z3.Or(head_dim == 64, one[4] < head_dim + 128))]
    return Layout(lambda n: [(shape(n), bits, layers)], layers * tpu.buffer_bytes(one, bits), page, aligned)


def _tpu_mla(v: _Vars) -> Layout:
    layers = v.int("layers", 1, LAYERS_MAX)
    page = v.int("page_size", 1, PAGE_MAX)
    rank = v.int("kv_lora_rank", 1, HEAD_DIM_MAX)
    rope = v.int("rope_dim", 0, HEAD_DIM_MAX)
    bits = v.choice("bits", (8, 16, 32))
    kernel_packing = v.choice("kernel_token_packing", tuple(sorted({k.token_packing for k in KERNELS.values()
                                                                    if k.layout == "tpu-mla"})))
    packing = tpu.tpu_mla_token_packing(kernel_packing, bits)

    def shape(n: Any) -> tuple[Any, ...]:
        return tpu.tpu_mla_shape(n, page, rank, rope, packing)

    one = shape(1)
    aligned = [("lanes are a multiple of 128", one[3] % tpu.LANES == 0),
               ("lanes hold the latent and the rope part", one[3] >= rank + rope),
               ("each part padded by less than 128 lanes", one[3] < rank + rope + 2 * tpu.LANES),
               ("rows hold every token of the page", one[1] * one[2] >= page),
               ("tokens padded by less than one row", (one[1] - 1) * one[2] < page)]
    return Layout(lambda n: [(shape(n), bits, layers)], layers * tpu.buffer_bytes(one, bits), page, aligned)


def _gpu_kv(kv_first: bool) -> Callable[[_Vars], Layout]:
    def build(v: _Vars) -> Layout:
        layers = v.int("layers", 1, LAYERS_MAX)
        multiple = v.choice("block_multiple", GPU_BLOCK_MULTIPLES)
        page = v.int("page_size", 1, PAGE_MAX)
        kv = v.int("kv_heads", 1, HEADS_MAX)
        tp = v.int("tp", 1, TP_MAX)
        head_dim = v.int("head_dim", 1, HEAD_DIM_MAX)
        bits = v.choice("bits", (8, 16, 32))
        v.hyps += [z3.Or(kv % tp == 0, tp % kv == 0), page % multiple == 0]
        heads = gpu.kv_heads_per_rank(kv, tp)

        def shape(n: Any) -> tuple[Any, ...]:
            return gpu.gpu_kv_shape(n, page, heads, head_dim, kv_first)

        aligned = [*page_size_rule(page, multiple), ("TP ranks together hold every KV head", heads * tp >= kv)]
        return Layout(lambda n: [(shape(n), bits, layers)], layers * tpu.buffer_bytes(shape(1), bits), 1, aligned)

    return build


def _gpu_mla(v: _Vars) -> Layout:
    layers = v.int("layers", 1, LAYERS_MAX)
    multiple = v.choice("block_multiple", GPU_BLOCK_MULTIPLES)
    page = v.int("page_size", 1, PAGE_MAX)
    width = v.int("latent_width", 1, HEAD_DIM_MAX)
    bits = v.choice("bits", (8, 16, 32))
    v.hyps.append(page % multiple == 0)

    def shape(n: Any) -> tuple[Any, ...]:
        return gpu.gpu_mla_shape(n, page, width)

    aligned = list(page_size_rule(page, multiple))
    return Layout(lambda n: [(shape(n), bits, layers)], layers * tpu.buffer_bytes(shape(1), bits), 1, aligned)


def _gpu_mamba_hybrid(v: _Vars) -> Layout:
    """GPU attention + Mamba: block raised to hold the state, state padded to the attention page,
    ``group_size`` byte tensors shared by one layer of every group."""
    group_size = v.int("group_size", 1, LAYERS_MAX)
    multiple = v.choice("block_multiple", GPU_BLOCK_MULTIPLES)
    default = v.int("default_block", 1, 256)
    per_token = v.int("attn_bytes_per_token", 1, 2 * HEADS_MAX * HEAD_DIM_MAX * 4)
    state = v.int("mamba_state_bytes", 1, STATE_MAX)
    requested = gpu.auto_block_size(default, multiple)
    block = mamba.unified_block_size(state, per_token, multiple, requested)
    page = block * per_token
    v.hyps.append(block <= PAGE_MAX)  # within the supported page range

    aligned = [("auto block is a multiple of the kernel block", requested % multiple == 0),
               ("auto block is at least the default", requested >= default),
               ("unified block is a multiple of the kernel block", block % multiple == 0),
               ("one attention page holds the Mamba state (padded up)", page >= state),
               ("state padded by less than one aligned chunk unless the requested block was larger",
                z3.Or(block == requested, (block - multiple) * per_token < state))]
    return Layout(lambda n: [((n, page), 8, group_size)], group_size * page, 1, aligned)


LAYOUTS: dict[str, Callable[[_Vars], Layout]] = {
    "rpa-v3": _rpa_v3,
    "tpu-mla": _tpu_mla,
    "gpu-kv-first": _gpu_kv(True),
    "gpu-page-first": _gpu_kv(False),
    "gpu-mla": _gpu_mla,
    "gpu-mamba-hybrid": _gpu_mamba_hybrid,
}


def _allocated(layout: Layout, n: Any) -> Any:
    return z3.Sum([count * dense_bytes(shape, bits) for shape, bits, count in layout.buffers(n)])


def _sized(layout_name: str, rule: str) -> tuple[_Vars, Layout, dict[str, Any]]:
    """Symbolic device, budget and layout, and the planner's page count for them."""
    v = _Vars()
    layout = LAYOUTS[layout_name](v)
    memory = v.int("memory", 1, MEM_MAX)
    used = v.int("used", 0, MEM_MAX)
    reserved = v.int("reserved", 0, MEM_MAX)
    den = v.int("util_den", 1, UTIL_DEN_MAX)
    num = v.int("util_num", 1, UTIL_DEN_MAX)
    dp = v.int("dp", 1, DP_MAX)
    v.hyps.append(num <= den)
    kv_budget = budget.device_budget(memory, used, reserved, num, den, rule)
    n = budget.pages_per_shard(kv_budget, layout.page_bytes, dp, layout.index_unit)
    env = dict(memory=memory, used=used, reserved=reserved, num=num, den=den, dp=dp, budget=kv_budget, n=n)
    return v, layout, env


def _fits(layout_name: str, rule: str) -> Obligation:
    v, layout, e = _sized(layout_name, rule)
    kv = _allocated(layout, e["n"])
    goals = [
        ("KV bytes allocated <= max(budget, 0)", kv <= z3.If(e["budget"] >= 0, e["budget"], 0)),
        ("weights + in use + reserved + KV <= device memory",
         z3.Implies(z3.And(e["budget"] >= 0, e["used"] <= e["memory"]),
                    e["used"] + e["reserved"] + kv <= e["memory"])),
    ]
    if rule == "total":
        total = e["used"] + e["reserved"] + kv
        goals.append(("weights + in use + reserved + KV <= utilisation x memory",
                      z3.Implies(e["budget"] >= 0, e["den"] * total <= e["num"] * e["memory"])))
    return Obligation(z3.And(v.hyps), goals, v.explain)


def _maximal(layout_name: str, rule: str) -> Obligation:
    v, layout, e = _sized(layout_name, rule)
    one_more = _allocated(layout, e["n"] + 1)
    goal = z3.Or(one_more > e["budget"], (e["n"] + 1) * e["dp"] * layout.index_unit > arith.INT32_MAX)
    return Obligation(z3.And(v.hyps), [("one more page per shard exceeds the budget or the int32 limit", goal)],
                      v.explain)


def _int32(layout_name: str, rule: str) -> Obligation:
    v, layout, e = _sized(layout_name, rule)
    num_pages = e["n"] * e["dp"]
    goals = [("largest page id / page-table entry fits in int32", num_pages - 1 <= arith.INT32_MAX),
             ("largest index (page * index unit + offset) fits in int32",
              num_pages * layout.index_unit - 1 <= arith.INT32_MAX)]
    return Obligation(z3.And(v.hyps), goals, v.explain)


def _aligned(layout_name: str) -> Obligation:
    v = _Vars()
    layout = LAYOUTS[layout_name](v)
    return Obligation(z3.And(v.hyps), layout.aligned, v.explain)


def _dp_equal() -> Obligation:
    v = _Vars()
    n = v.int("pages_per_shard", 1, arith.INT32_MAX)
    dp = v.int("dp", 1, DP_MAX)
    s = v.int("shard", 0, DP_MAX - 1)
    v.hyps += [s < dp, n * dp <= arith.INT32_MAX]
    start, end = budget.shard_range(s, n)
    next_start, _ = budget.shard_range(s + 1, n)
    first_start, _ = budget.shard_range(0, n)
    _, last_end = budget.shard_range(dp - 1, n)
    usable = budget.usable_pages_in_shard(s, n)
    goals = [("every shard has pages_per_shard pages", end - start == n),
             ("shards are contiguous", z3.Implies(s + 1 < dp, next_start == end)),
             ("shard 0 starts at page 0 (the null page)", first_start == 0),
             ("the last shard ends at num_pages", last_end == n * dp),
             ("only shard 0 loses a page (the null page)", usable == z3.If(s == 0, n - 1, n))]
    return Obligation(z3.And(v.hyps), goals, v.explain)


def _run_all(obligations: Callable[[], list[Obligation]]) -> Callable[[], Outcome]:
    def run() -> Outcome:
        for ob in obligations():
            outcome = discharge(ob)
            if not outcome.ok:
                return outcome
        return Outcome("proved", "", vacuity_checked=True)

    return run


def checks() -> list[Check]:
    """Every sizing theorem as a ``z3-sizing`` check."""
    result = []
    for name in LAYOUTS:
        for prop, build in (("SIZE-FITS", _fits), ("SIZE-MAXIMAL", _maximal), ("SIZE-INT32", _int32)):
            # (mypy cannot infer a lambda with default arguments, python/mypy#12557: hence the ignores)
            run = _run_all(lambda b=build, n=name: [b(n, "total"), b(n, "free")])  # type: ignore[misc]
            result.append(Check(f"sizing.{name}/{prop}", "z3-sizing", prop, "-", BOUND, run))
        result.append(Check(f"sizing.{name}/SIZE-ALIGNED", "z3-sizing", "SIZE-ALIGNED", "-", BOUND,
                            _run_all(lambda n=name: [_aligned(n)])))  # type: ignore[misc]
    result.append(Check("sizing.dp/SIZE-DP-EQUAL", "z3-sizing", "SIZE-DP-EQUAL", "-",
                        "pages per shard <= 2^31-1, dp <= 4096", _run_all(lambda: [_dp_equal()])))
    result.append(Check("sizing.planner/SIZE-FITS:grid", "planner-grid", "SIZE-FITS", "-", GRID_BOUND, _grid))
    return result


# --- the whole planner over the catalog ----------------------------------------------------------

GRID_TP = (1, 8)
GRID_DP = (1, 2)
GRID_BOUND = f"presets x catalog devices x a KV dtype per width x tp {GRID_TP} x dp {GRID_DP}, max_model_len 4096"


def _plan_problems(plan: KVCachePlan) -> list[str]:
    """What is wrong with a concrete plan: bytes from its reported shapes, maximality, DP split."""
    allocated = sum(b.num_buffers * math.prod(b.device_shape)
                    * (8 if b.page.dtype == "uint8" else get_dtype(b.page.dtype).bits) // 8
                    for b in plan.buffers)
    problems = []
    if allocated != plan.kv_bytes_per_device or allocated > plan.budget_bytes:
        problems.append(f"allocates {allocated:,} B against a budget of {plan.budget_bytes:,} B "
                        f"(plan says {plan.kv_bytes_per_device:,} B)")
    if plan.limited_by == "memory" and plan.budget_bytes - allocated >= plan.page_bytes_per_device:
        problems.append("one more page per shard would still fit")
    if plan.num_pages != plan.pages_per_shard * plan.dp or plan.shard_ranges[-1][1] != plan.num_pages:
        problems.append("DP shards do not tile the pages")
    if plan.to_cache_groups_config().num_pages != plan.num_pages:
        problems.append("the manager config disagrees on num_pages")
    return problems


def _grid() -> Outcome:
    planned: dict[str, int] = {name: 0 for name in preset_names()}
    for model_name in preset_names():
        model = get_preset(model_name)
        for device in ACCELERATORS:
            kernel = get_kernel(device.mla_kernel if model.is_mla else device.attention_kernel)
            supported = [get_dtype(d) for d in sorted(set(device.kv_dtypes) & set(kernel.kv_dtypes))]
            # one dtype per width: the layouts depend on the width only
            for kv_dtype in {d.bits: d.name for d in supported}.values():
                for tp in GRID_TP:
                    for dp in GRID_DP:
                        try:
                            plan = plan_kv_cache(model, device, tp=tp, dp=dp, kv_dtype=kv_dtype, max_model_len=4096)
                        except (SizingError, DoesNotFitError):
                            continue
                        planned[model_name] += 1
                        problems = _plan_problems(plan)
                        if problems:
                            return Outcome("failed", f"{model_name} on {device.name} tp={tp} dp={dp} {kv_dtype}: "
                                                     + "; ".join(problems), vacuity_checked=True)
    unplanned = [name for name, count in planned.items() if count == 0]
    if unplanned:
        return Outcome("vacuous", f"no plan at all for {unplanned}", vacuity_checked=True)
    return Outcome("passed", f"{sum(planned.values())} plans checked", vacuity_checked=True)


# --- mutants ------------------------------------------------------------------------------------

@contextlib.contextmanager
def _patched(module: Any, name: str, replacement: Any) -> Iterator[None]:
    original = getattr(module, name)
    setattr(module, name, replacement)
    try:
        yield
    finally:
        setattr(module, name, original)


def _failing(module: Any, name: str, replacement: Any, invariant: str) -> list[str]:
    """Names of this module's checks of ``invariant`` that fail while ``module.name`` is replaced."""
    with _patched(module, name, replacement):
        return [c.name for c in checks() if c.invariant == invariant and not c.run().ok]


def _off_by_one_pages(b: Any, page_bytes: Any) -> Any:
    return arith.fdiv(arith.imax(b, 0), page_bytes) + 1


def _one_page_short(b: Any, page_bytes: Any) -> Any:
    return arith.imax(arith.fdiv(arith.imax(b, 0), page_bytes) - 1, 0)


def _hd64_half_lanes(n: Any, page: Any, kv: Any, hd: Any, bits: Any) -> tuple[Any, ...]:
    p = tpu.packing(bits)
    return (n, page, arith.ite(hd == 64, arith.cdiv(kv, p), arith.cdiv(2 * kv, p)), p,
            arith.ite(hd == 64, 64, arith.align(hd, 128)))


def _no_int32_cap(b: Any, page_bytes: Any, dp: Any, index_unit: Any) -> Any:
    return budget.memory_page_limit(b, page_bytes)


def _free_rule_forgets_used(memory: Any, used: Any, reserved: Any, num: Any, den: Any, rule: str) -> Any:
    return arith.fdiv(memory * num, den) - reserved


def _lanes_unpadded(n: Any, page: Any, kv: Any, hd: Any, bits: Any) -> tuple[Any, ...]:
    p = tpu.packing(bits)
    return (n, page, arith.ite(hd == 64, arith.cdiv(kv, p), arith.cdiv(2 * kv, p)), p, arith.ite(hd == 64, 128, hd))


def _heads_floor(n: Any, page: Any, kv: Any, hd: Any, bits: Any) -> tuple[Any, ...]:
    p = tpu.packing(bits)
    return (n, page, arith.ite(hd == 64, arith.fdiv(kv, p), arith.fdiv(2 * kv, p)), p,
            arith.ite(hd == 64, 128, arith.align(hd, 128)))


def _mla_rows_floor(n: Any, page: Any, rank: Any, rope: Any, packing: Any) -> tuple[Any, ...]:
    return (n, arith.fdiv(page, packing), packing, arith.align(rank, 128) + arith.align(rope, 128))


def _mamba_block_unaligned(state: Any, per_token: Any, alignment: Any, block: Any) -> Any:
    return arith.imax(arith.cdiv(state, per_token), block)


def _shard_skips_null(shard: Any, pages: Any) -> tuple[Any, Any]:
    start = shard * pages + arith.ite(shard == 0, 1, 0)
    return (start, start + pages)


def _size_from_unpadded() -> list[str]:
    with _patched(PageArray, "page_bytes", property(lambda self: self.unpadded_bytes)):
        return [c.name for c in checks() if c.kind == "planner-grid" and not c.run().ok]


def mutants() -> list[Mutant]:
    """Broken sizing code, each with the checks that must catch it."""
    def patched(name: str, invariant: str, description: str, module: Any, attr: str, replacement: Any) -> Mutant:
        """``module.attr`` replaced; caught if a check of ``invariant`` then fails."""
        return Mutant(f"sizing:{name}", "impl", invariant, description,
                      lambda: _failing(module, attr, replacement, invariant))

    return [
        patched("pages-off-by-one", "SIZE-FITS", "memory_page_limit returns one page more than fits",
                budget, "memory_page_limit", _off_by_one_pages),
        patched("pages-one-short", "SIZE-MAXIMAL", "memory_page_limit leaves one page that would fit unused",
                budget, "memory_page_limit", _one_page_short),
        patched("hd64-half-lanes", "SIZE-ALIGNED", "head dim 64 keeps 64 lanes: no room for V beside K",
                tpu, "rpa_v3_shape", _hd64_half_lanes),
        patched("no-int32-cap", "SIZE-INT32", "pages_per_shard ignores the int32 index limit",
                budget, "pages_per_shard", _no_int32_cap),
        patched("free-rule-forgets-used", "SIZE-FITS", "the free-memory rule applies utilisation to total memory",
                budget, "device_budget", _free_rule_forgets_used),
        patched("lanes-unpadded", "SIZE-ALIGNED", "RPA v3 head dim not padded to 128 lanes",
                tpu, "rpa_v3_shape", _lanes_unpadded),
        patched("head-rows-floor", "SIZE-ALIGNED", "RPA v3 combined heads rounded down to the packing",
                tpu, "rpa_v3_shape", _heads_floor),
        patched("mla-rows-floor", "SIZE-ALIGNED", "MLA token rows rounded down: the page's last tokens have no row",
                tpu, "tpu_mla_shape", _mla_rows_floor),
        patched("mamba-block-unaligned", "SIZE-ALIGNED", "hybrid block size not a multiple of the kernel block",
                mamba, "unified_block_size", _mamba_block_unaligned),
        patched("shard-skips-null", "SIZE-DP-EQUAL", "shard ranges start after the null page and overlap",
                budget, "shard_range", _shard_skips_null),
        Mutant("sizing:size-from-unpadded", "impl", "SIZE-FITS",
               "the planner sizes from unpadded bytes (EasyDeL's v3 formula)", _size_from_unpadded),
    ]
