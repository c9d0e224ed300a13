"""``verikv size``: plan a KV cache from the command line and print it as a table or JSON.

``configure_parser(parser)`` adds every option of ``verikv size`` to a parser (the top-level
``verikv`` command gives it its ``size`` subparser), ``run(args)`` plans and prints from the
parsed namespace and returns the exit status, and ``main(argv)`` does both with a parser of its
own. vLLM's flag names are accepted as aliases (``--block-size``, ``--kv-cache-dtype``,
``--gpu-memory-utilization``, ``-tp`` / ``--tensor-parallel-size``, ``--kv-cache-memory-bytes``),
and counts and sizes may be written ``32k`` / ``80GiB`` (``verikv.sizing.units``).

The table is plain aligned text; when ``rich`` is importable and stdout is a terminal it is
drawn with rich instead (rich is not a dependency of ``verikv``). ``--json`` (or ``--json -``)
prints JSON to stdout, ``--json FILE`` writes it to FILE. A reader that stops early (``| head``)
ends the output quietly. Exit status: 0 planned, 1 does not fit (the message says which
``--max-model-len`` would), 2 invalid arguments or a model that cannot be read.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from verikv.cache_specs import AttentionSpec, ChunkedLocalAttentionSpec, SlidingWindowSpec
from verikv.cli import command_line
from verikv.errors import DoesNotFitError, SizingError, VeriKVError, describe
from verikv.sizing.budget import UTILIZATION_RULES
from verikv.sizing.catalog import ACCELERATORS, GiB
from verikv.sizing.checkpoint import load_model
from verikv.sizing.geometry import ModelGeometry
from verikv.sizing.kernels import KERNELS
from verikv.sizing.planner import KVCachePlan, plan_kv_cache
from verikv.sizing.presets import get_preset, preset_names
from verikv.sizing.serving import USAGE_CONTEXTS
from verikv.sizing.units import UnitError, parse_bytes, parse_count

_CONFIG_READERS = {"auto": None, "transformers": True, "builtin": False}


def _argparse_type(parse: Callable[[str], int]) -> Callable[[str], int]:
    """``parse`` with its ``UnitError`` reported by argparse (usage line, exit status 2)."""
    def convert(text: str) -> int:
        try:
            return parse(text)
        except UnitError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc
    convert.__name__ = parse.__name__
    return convert


_COUNT = _argparse_type(parse_count)
_BYTES = _argparse_type(parse_bytes)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add every option of ``verikv size`` to ``parser``."""
    add = parser.add_argument
    add("--model", help=f"a preset ({', '.join(preset_names())}), a config.json or a checkpoint folder")
    add("--device", help=f"an accelerator ({', '.join(a.name for a in ACCELERATORS)})")
    add("--list", action="store_true", help="list presets, accelerators and kernels, then exit")
    add("--tp", "-tp", "--tensor-parallel-size", dest="tp", type=_COUNT, default=1,
        help="tensor-parallel size (KV heads split or replicated)")
    add("--dp", "-dp", "--data-parallel-size", dest="dp", type=_COUNT, default=1,
        help="data-parallel size (the page axis is split)")
    add("--kv-dtype", "--kv-cache-dtype", dest="kv_dtype", default="auto",
        help="KV cache dtype: auto, bfloat16, float16, float32, fp8, ...")
    add("--kernel", help=f"attention kernel ({', '.join(KERNELS)}); default: the device's")
    add("--page-size", "--block-size", dest="page_size", type=_COUNT,
        help="tokens per page (default: the kernel's rule)")
    add("--max-model-len", type=_COUNT, help="tokens of the longest request, e.g. 32768 or 32k (default: the model's)")
    add("--max-num-batched-tokens", type=_COUNT,
        help="tokens per step, which sets how much of a sliding window stays live (default: vLLM's for the device "
             "and --usage-context: with serve, 8192 on GPUs of 70 GiB or more other than A100s, 2048 on other "
             "GPUs, 1024 / 512 / 256 on TPU v6e / v5e / v5p, 2048 on other TPUs)")
    add("--max-num-seqs", type=_COUNT,
        help="running requests, which steers the TPU page size (default: vLLM's: with serve, 1024 on GPUs of "
             "70 GiB or more other than A100s, 256 elsewhere; never above --max-num-batched-tokens)")
    add("--usage-context", choices=USAGE_CONTEXTS, default="serve",
        help="which vLLM defaults to assume for the two options above: serve (vllm serve, the default) or "
             "offline (the LLM class)")
    add("--utilization", "--gpu-memory-utilization", dest="utilization", default="0.9",
        help="share of memory KV may use (default 0.9)")
    add("--utilization-of", choices=UTILIZATION_RULES, default="total",
        help="total: share of total memory (vLLM); free: share of memory free after weights (EasyDeL)")
    add("--memory-bytes", type=_BYTES, help="bytes per device, e.g. 80GiB (default: the catalog figure)")
    add("--weights-bytes", type=_BYTES, help="bytes of all weights (default: the checkpoint's or the model's)")
    add("--weights-shards", type=_COUNT, help="devices the weights are split over (default: --tp)")
    add("--in-use-bytes", type=_BYTES, default=0, help="other bytes in use per device before sizing")
    add("--reserved-bytes", type=_BYTES, default=0, help="bytes kept back per device after utilisation")
    add("--workspace-bytes", type=_BYTES, help="attention kernel workspace per device (default: the kernel's, "
                                              "256MiB for flashinfer)")
    add("--kv-cache-bytes", "--kv-cache-memory-bytes", dest="kv_cache_bytes", type=_BYTES,
        help="KV budget per device, given directly (utilisation, weights and reserved bytes then not applied)")
    add("--config-reader", choices=tuple(_CONFIG_READERS), default="auto",
        help="defaults for config.json fields: transformers if installed (auto), transformers, or builtin")
    add("--json", nargs="?", const="-", metavar="PATH", help="print the plan as JSON (to stdout, or to PATH)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``verikv size`` with its own parser; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="verikv size",
        description="Size a paged KV cache: exact per-layer buffers and page count for a model on an accelerator.",
    )
    configure_parser(parser)
    arguments = command_line(argv, "verikv size")
    if arguments is None:
        return 2
    try:
        args = parser.parse_args(arguments)
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed by argparse
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return run(args)
    except BrokenPipeError:  # the reader went away (`| head`): end like the `verikv` command does
        from verikv.cli import quiet_broken_pipe

        return quiet_broken_pipe()


def run(args: argparse.Namespace) -> int:
    """Plan and print from arguments parsed with ``configure_parser``; returns the exit status."""
    if args.list:
        return _emit(_listing())
    if not args.model or not args.device:
        print("verikv size: --model and --device are required (or --list)", file=sys.stderr)
        return 2
    try:
        plan = plan_kv_cache(
            load(args.model, _CONFIG_READERS[args.config_reader]), args.device, tp=args.tp, dp=args.dp,
            kv_dtype=args.kv_dtype, page_size=args.page_size, max_model_len=args.max_model_len,
            max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
            usage_context=args.usage_context,
            utilization=args.utilization, utilization_of=args.utilization_of, memory_bytes=args.memory_bytes,
            weights_bytes=args.weights_bytes, weights_shards=args.weights_shards,
            in_use_bytes=args.in_use_bytes, reserved_bytes=args.reserved_bytes, kernel=args.kernel,
            workspace_bytes=args.workspace_bytes, kv_cache_bytes=args.kv_cache_bytes,
        )
    except DoesNotFitError as exc:
        print(f"verikv size: does not fit: {one_line(exc)}", file=sys.stderr)
        return 1
    except VeriKVError as exc:
        print(f"verikv size: {one_line(exc)}", file=sys.stderr)
        return 2
    if args.json is not None and args.json != "-":
        return _write_json(Path(args.json), plan)
    if args.json is not None:
        return _emit(plan.to_json())
    if sys.stdout.isatty() and _rich_available():
        print_rich(plan)
        return 0
    return _emit(render_plain(plan))


def one_line(exc: BaseException) -> str:
    """The error's message on one line (a message quoting a third-party error may span several)."""
    return " ".join(str(exc).split())


def load(spec: str, use_transformers: bool | None = None) -> ModelGeometry:
    """A checkpoint folder or config.json (when the path exists), else a preset name.

    Nothing is downloaded: a name that is neither (a Hugging Face hub id, say) is refused with a
    hint to pass a local folder or ``config.json``.
    """
    path = Path(spec)
    try:
        exists = os.path.lexists(path)
    except (OSError, ValueError) as exc:  # an embedded NUL, an unencodable character
        raise SizingError(f"invalid model path {describe(spec)}: {exc}") from exc
    if exists or path.suffix == ".json":
        return load_model(path, use_transformers=use_transformers)
    if spec.lower() in preset_names():
        return get_preset(spec)
    raise SizingError(f"{describe(spec)} is neither a preset ({', '.join(preset_names())}) nor an existing path; "
                      "verikv size does not download models: pass a local checkpoint folder or its config.json "
                      "(for a hub id, download the folder first)")


def _write_json(path: Path, plan: KVCachePlan) -> int:
    try:
        path.write_text(plan.to_json() + "\n")
    except OSError as exc:
        print(f"verikv size: cannot write {path}: {exc}", file=sys.stderr)
        return 2
    return 0


def _emit(text: str) -> int:
    """Print ``text`` (a closed pipe raises BrokenPipeError: `main` and ``verikv`` end quietly)."""
    print(text, flush=True)
    return 0


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


def layer_summary(plan: KVCachePlan) -> str:
    """Layers per kind, with windows, chunk sizes and head dims: ``40 sliding (window 1,024), 8 full; head dim 256``."""
    counts: dict[str, int] = {}
    head_dims: set[int] = set()
    for group in plan.groups:
        spec = group.spec
        label = group.kind
        if isinstance(spec, SlidingWindowSpec):
            label = f"sliding (window {spec.sliding_window:,})"
        elif isinstance(spec, ChunkedLocalAttentionSpec):
            label = f"chunked (chunk {spec.attention_chunk_size:,})"
        if isinstance(spec, AttentionSpec):
            head_dims.add(spec.head_size)
        counts[label] = counts.get(label, 0) + len(group.layers)
    text = ", ".join(f"{n} {label}" for label, n in counts.items())
    dims = ", ".join(str(d) for d in sorted(head_dims))
    return f"{text}; {'latent width' if plan.groups[0].kind == 'mla' else 'head dim'} {dims}" if dims else text


def summary_rows(plan: KVCachePlan) -> list[tuple[str, str]]:
    """The plan's headline figures as (label, value) rows."""
    return [
        ("model", plan.model),
        ("layers", layer_summary(plan)),
        ("device", f"{plan.device} x {plan.num_devices} (tp={plan.tp}, dp={plan.dp}), {plan.platform}"),
        ("memory per device", f"{_bytes(plan.memory_bytes)}: {plan.memory_source}"),
        ("kernel / KV dtype", f"{plan.kernel} / {plan.kv_dtype}"),
        ("page size", f"{plan.page_size} tokens"),
        ("utilisation", "not applied: KV budget given directly" if plan.utilization_rule == "given"
                        else f"{plan.utilization} of {plan.utilization_rule} memory"),
        ("weights per device", f"{_bytes(plan.weights_bytes_per_device)}: {_WEIGHTS_SOURCES[plan.weights_source]}"),
        ("other in use / reserved", f"{_bytes(plan.in_use_bytes)} / {_bytes(plan.reserved_bytes)}"),
        ("KV budget per device", _bytes(plan.budget_bytes)),
        ("bytes per page id", f"{plan.page_bytes_per_device:,} B per device "
                              f"({plan.unpadded_page_bytes_per_device:,} B unpadded)"),
        ("pages", f"{plan.num_pages:,} = {plan.pages_per_shard:,} per shard x {plan.dp} "
                  f"(page 0 is the null page; limited by {plan.limited_by})"),
        ("KV bytes per device", _bytes(plan.kv_bytes_per_device)),
        ("capacity", f"{plan.capacity_tokens:,} tokens"),
        ("max_num_batched_tokens",
         f"{plan.max_num_batched_tokens:,} tokens per step{_assumed(plan, 'max_num_batched_tokens')}"),
        ("max_num_seqs", f"{plan.max_num_seqs:,} running requests{_assumed(plan, 'max_num_seqs')}"),
        ("max_model_len", f"{plan.max_model_len:,} tokens: {plan.pages_per_request:,} pages per request"),
        ("max concurrent requests", f"{plan.max_concurrent_requests:,} of max_model_len"),
        ("maximum concurrency", f"{plan.max_concurrency:.2f}x for {plan.max_model_len:,} tokens per request "
                                f"(vLLM's figure: pages per shard / pages per request)"),
    ]


_WEIGHTS_SOURCES = {
    "stated": "stated with the model", "checkpoint index": "from the checkpoint's index",
    "safetensors headers": "from the checkpoint's safetensors headers",
    "dense estimate": "ESTIMATED from a dense parameter count (no checkpoint read)",
    "given": "given by the caller", "not applied": "not applied (KV budget given directly)",
}


def _assumed(plan: KVCachePlan, name: str) -> str:
    return f" (assumed: {plan.defaults_rule})" if name in plan.assumed else " (given)"


_BUFFER_HEADER = ("buffer", "layers", "count", "shape (global)", "shape (per device)", "dtype", "B/page", "B/device")


def buffer_rows(plan: KVCachePlan) -> list[tuple[str, ...]]:
    """One row per group of identical buffers."""
    return [
        (b.page.label, _layer_ranges(b.layers), str(b.num_buffers), str(b.shape), str(b.device_shape), b.page.dtype,
         f"{b.page.page_bytes:,}", f"{b.bytes_per_device:,}")
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
