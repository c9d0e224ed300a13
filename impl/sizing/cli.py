"""``verikv size``: plan a KV cache from the command line and print it as a table or JSON.

The table is plain aligned text; when ``rich`` is importable and stdout is a terminal it is
drawn with rich instead (rich is not a dependency of ``verikv``). Exit status: 0 planned,
1 does not fit (the message says which ``--max-model-len`` would), 2 invalid arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from verikv.errors import DoesNotFitError, SizingError
from verikv.sizing.budget import UTILIZATION_RULES
from verikv.sizing.catalog import ACCELERATORS, GiB
from verikv.sizing.geometry import ModelGeometry
from verikv.sizing.hf_config import geometry_from_hf_config
from verikv.sizing.kernels import KERNELS
from verikv.sizing.planner import KVCachePlan, plan_kv_cache
from verikv.sizing.presets import get_preset, preset_names


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="verikv size",
        description="Size a paged KV cache: exact per-layer buffers and page count for a model on an accelerator.",
    )
    parser.add_argument("--model", help=f"a preset ({', '.join(preset_names())}), a config.json or a model directory")
    parser.add_argument("--device", help=f"an accelerator ({', '.join(a.name for a in ACCELERATORS)})")
    parser.add_argument("--list", action="store_true", help="list presets, accelerators and kernels, then exit")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size (KV heads split or replicated)")
    parser.add_argument("--dp", type=int, default=1, help="data-parallel size (the page axis is split)")
    parser.add_argument("--kv-dtype", default="auto", help="KV cache dtype: auto, bfloat16, float16, float32, fp8, ...")
    parser.add_argument("--kernel", help=f"attention kernel ({', '.join(KERNELS)}); default: the device's")
    parser.add_argument("--page-size", type=int, help="tokens per page (default: the kernel's rule)")
    parser.add_argument("--max-model-len", type=int, help="tokens of the longest request (default: the model's)")
    parser.add_argument("--max-num-batched-tokens", type=int, help="tokens per step (window-aware estimate)")
    parser.add_argument("--max-num-seqs", type=int, default=256, help="running requests (TPU page-size rule)")
    parser.add_argument("--utilization", default="0.9", help="share of memory KV may use (default 0.9)")
    parser.add_argument("--utilization-of", choices=UTILIZATION_RULES, default="total",
                        help="total: share of total memory (vLLM); free: share of memory free after weights (EasyDeL)")
    parser.add_argument("--memory-bytes", type=int, help="bytes per device (default: the catalog figure)")
    parser.add_argument("--weights-bytes", type=int, help="bytes of all weights (default: the model's)")
    parser.add_argument("--weights-shards", type=int, help="devices the weights are split over (default: --tp)")
    parser.add_argument("--in-use-bytes", type=int, default=0, help="other bytes in use per device before sizing")
    parser.add_argument("--reserved-bytes", type=int, default=0, help="bytes kept back per device after utilisation")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``verikv size``; returns the exit status."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.list:
        print(_listing())
        return 0
    if not args.model or not args.device:
        print("verikv size: --model and --device are required (or --list)", file=sys.stderr)
        return 2
    try:
        plan = plan_kv_cache(
            _load_model(args.model), args.device, tp=args.tp, dp=args.dp, kv_dtype=args.kv_dtype,
            page_size=args.page_size, max_model_len=args.max_model_len,
            max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
            utilization=args.utilization, utilization_of=args.utilization_of, memory_bytes=args.memory_bytes,
            weights_bytes=args.weights_bytes, weights_shards=args.weights_shards,
            in_use_bytes=args.in_use_bytes, reserved_bytes=args.reserved_bytes,
            kernel=args.kernel,
        )
    except DoesNotFitError as exc:
        print(f"verikv size: does not fit: {exc}", file=sys.stderr)
        return 1
    except SizingError as exc:
        print(f"verikv size: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(plan.to_json())
    elif sys.stdout.isatty() and _rich_available():
        print_rich(plan)
    else:
        print(render_plain(plan))
    return 0


def _load_model(spec: str) -> ModelGeometry:
    """A preset name, a config.json path, or a model directory holding a config.json."""
    path = Path(spec)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.is_file():
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise SizingError(f"cannot read model config {spec}: {exc}") from exc
        return geometry_from_hf_config(config, name=path.parent.name or path.stem)
    return get_preset(spec)


def _bytes(n: int) -> str:
    return f"{n:,} B ({n / GiB:.2f} GiB)" if abs(n) >= GiB else f"{n:,} B"


def _layer_ranges(layers: Sequence[int]) -> str:
    """``0-31`` or ``0,2,4,...`` style: consecutive runs joined by commas."""
    runs: list[str] = []
    start = prev = layers[0]
    for layer in [*layers[1:], None]:
        if layer is not None and layer == prev + 1:
            prev = layer
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if layer is not None:
            start = prev = layer
    return ",".join(runs)


def summary_rows(plan: KVCachePlan) -> list[tuple[str, str]]:
    """The plan's headline figures as (label, value) rows."""
    return [
        ("model", plan.model),
        ("device", f"{plan.device} x {plan.num_devices} (tp={plan.tp}, dp={plan.dp}), {plan.platform}"),
        ("memory per device", f"{_bytes(plan.memory_bytes)}: {plan.memory_source}"),
        ("kernel / KV dtype", f"{plan.kernel} / {plan.kv_dtype}"),
        ("page size", f"{plan.page_size} tokens"),
        ("utilisation", f"{plan.utilization} of {plan.utilization_rule} memory"),
        ("weights per device", _bytes(plan.weights_bytes_per_device)),
        ("other in use / reserved", f"{_bytes(plan.in_use_bytes)} / {_bytes(plan.reserved_bytes)}"),
        ("KV budget per device", _bytes(plan.budget_bytes)),
        ("bytes per page id", f"{plan.page_bytes_per_device:,} B per device "
                              f"({plan.unpadded_page_bytes_per_device:,} B unpadded)"),
        ("pages", f"{plan.num_pages:,} = {plan.pages_per_shard:,} per shard x {plan.dp} "
                  f"(page 0 is the null page; limited by {plan.limited_by})"),
        ("KV bytes per device", _bytes(plan.kv_bytes_per_device)),
        ("capacity", f"{plan.capacity_tokens:,} tokens"),
        ("max_model_len", f"{plan.max_model_len:,} tokens: {plan.pages_per_request:,} pages per request"),
        ("max concurrent requests", f"{plan.max_concurrent_requests:,} of max_model_len"),
    ]


_BUFFER_HEADER = ("buffer", "layers", "count", "shape (global)", "shape (per device)", "dtype", "B/page", "B/device")


def buffer_rows(plan: KVCachePlan) -> list[tuple[str, ...]]:
    """One row per group of identical buffers."""
    return [
        (b.label, _layer_ranges(b.layers), str(b.num_buffers), str(b.shape), str(b.device_shape), b.dtype,
         f"{b.page_bytes:,}", f"{b.bytes_per_device:,}")
        for b in plan.buffers
    ]


def render_plain(plan: KVCachePlan) -> str:
    """The plan as plain aligned text: summary, buffer table, shard ranges, notes."""
    width = max(len(label) for label, _ in summary_rows(plan))
    lines = [f"{label.ljust(width)}  {value}" for label, value in summary_rows(plan)]
    rows = [_BUFFER_HEADER, *buffer_rows(plan)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_BUFFER_HEADER))]
    lines.append("")
    for row in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    if plan.dp > 1:
        lines.extend(["", f"page ids per DP shard: {_shards(plan)}"])
    lines.extend(["", *(f"note: {n}" for n in plan.notes)] if plan.notes else [])
    return "\n".join(lines)


def _shards(plan: KVCachePlan) -> str:
    return ", ".join(f"{s}: [{lo}, {hi}) ({usable} usable)" for s, ((lo, hi), usable)
                     in enumerate(zip(plan.shard_ranges, plan.usable_pages_per_shard)))


def _rich_available() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def print_rich(plan: KVCachePlan, console: object | None = None) -> None:
    """Draw the plan with rich (only called when rich is importable)."""
    from rich.console import Console
    from rich.table import Table

    out = console if console is not None else Console()
    summary = Table(show_header=False, title=f"KV cache plan: {plan.model} on {plan.device}")
    summary.add_column(style="bold")
    summary.add_column()
    for label, value in summary_rows(plan):
        summary.add_row(label, value)
    buffers = Table(*_BUFFER_HEADER)
    for row in buffer_rows(plan):
        buffers.add_row(*row)
    out.print(summary)  # type: ignore[attr-defined]
    out.print(buffers)  # type: ignore[attr-defined]
    if plan.dp > 1:
        out.print(f"page ids per DP shard: {_shards(plan)}")  # type: ignore[attr-defined]
    for note in plan.notes:
        out.print(f"note: {note}")  # type: ignore[attr-defined]


def _listing() -> str:
    lines = ["presets: " + ", ".join(preset_names()), "", "accelerators:"]
    for acc in ACCELERATORS:
        lines.append(f"  {acc.name:<10} {acc.capacity_label}; sizing uses {acc.memory_bytes:,} B "
                     f"({acc.memory_source}); kernels {acc.attention_kernel} / {acc.mla_kernel}")
    lines.extend(["", "kernels:"])
    lines.extend(f"  {k.name:<16} {k.platform} {k.layout}; {k.source}" for k in KERNELS.values())
    return "\n".join(lines)
