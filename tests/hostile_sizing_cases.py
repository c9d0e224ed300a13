"""Hostile cases for device-buffer sizing: model folders, config values, the CLI, the new plan fields.

``CASES`` is a list of `hostile.Case` for the hostile suite. Three kinds:

* **model folders** (``folder[...]`` for ``load_model``, ``verikv size[folder ...]`` for the
  command): a fresh folder holding a valid small config plus one hostile file named
  ``config.json``, ``model.safetensors`` or ``model.safetensors.index.json``: a FIFO, a socket,
  a directory, a device, a symlink loop or dangling link, an oversized or malformed JSON file,
  a truncated, oversized or garbage safetensors header, ``null`` / list / string index
  metadata, an unreadable file. The call runs in a child interpreter with a timeout (a FIFO
  must not block it); the child's answer is turned back into the outcome the harness reads: a
  ``VeriKVError`` (or the command's "bad input" status 2 with a one-line message) is a typed
  refusal, anything else (a traceback, status 1 "does not fit") is untyped, no answer in
  ``CHILD_SECONDS`` is a hang. The folder's contents are part of the world: a call that
  changes them is caught as a state change;
* **values** (``geometry_from_hf_config``, ``create_kv_cache_specs_from_config``,
  ``describe_accelerator``, ``plan_kv_cache``'s batch options, the size parser): every hostile
  value of `hostile.HOSTILE` in each parameter or config field, plus the reproductions of the
  sizing defects (NumPy floats, ``kv_dtypes=0``, other scripts' digits, 10**7 layers);
* **the command line** (``verikv size[...]``, in process): NUL and lone-surrogate paths, hub
  ids, conflicting aliases.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from hostile import HANG_SECONDS, Case, Hang, P, World, substitution_cases

from verikv.errors import InvalidArgumentError, SizingError

CHILD_SECONDS = HANG_SECONDS - 5
"""How long a child interpreter may take (below the harness's own alarm, so the child's timeout
is what reports a hang)."""

_ROOT: Path | None = None


def _root() -> Path:
    """One temporary folder per process for the cases' model folders, removed at exit."""
    global _ROOT
    if _ROOT is None:
        _ROOT = Path(tempfile.mkdtemp(prefix="verikv-hostile-sizing-"))
        atexit.register(shutil.rmtree, _ROOT, True)
    return _ROOT


SMALL_LLAMA: dict[str, Any] = {
    "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 512,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 1024,
    "torch_dtype": "bfloat16",
}
"""A config any reader sizes: 2 full-attention layers of 2 KV heads x 64."""


# --- model folders ------------------------------------------------------------------------------

def _tree(folder: Path) -> tuple[tuple[str, str, bytes], ...]:
    """What a reader must not change: each entry's name, kind and (regular files) first 64 KiB."""
    entries = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.is_symlink():
            entries.append((entry.name, "link", os.readlink(entry.path).encode()))
        elif entry.is_file(follow_symlinks=False):
            with open(entry.path, "rb") as handle:
                entries.append((entry.name, "file", handle.read(65536)))
        else:
            entries.append((entry.name, "other", b""))
    return tuple(entries)


def _folder_world(make: Callable[[Path], None], config: bool = True) -> Callable[[], World]:
    def build() -> World:
        folder = Path(tempfile.mkdtemp(dir=_root()))
        if config:
            (folder / "config.json").write_text(json.dumps(SMALL_LLAMA))
        make(folder)
        return {"folder": str(folder), "tree": _tree(folder)}
    return build


def _fifo(name: str) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        (folder / name).unlink(missing_ok=True)
        os.mkfifo(folder / name)
    return make


def _socket(name: str) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        (folder / name).unlink(missing_ok=True)
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(folder / name))  # the socket file stays after the socket is closed
    return make


def _directory(name: str) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        (folder / name).unlink(missing_ok=True)
        (folder / name).mkdir()
    return make


def _link(name: str, target: str) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        (folder / name).unlink(missing_ok=True)
        os.symlink(target, folder / name)
    return make


def _loop(name: str) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        (folder / name).unlink(missing_ok=True)
        os.symlink(folder / "loop-b", folder / name)
        os.symlink(folder / name, folder / "loop-b")
    return make


def _linked_config(folder: Path) -> None:
    """config.json as a symlink to a regular file elsewhere (a hub cache's layout): legitimate."""
    target = folder / "blobs"
    target.mkdir()
    (folder / "config.json").rename(target / "abc123")
    os.symlink(target / "abc123", folder / "config.json")


def _bytes(name: str, data: bytes) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        (folder / name).write_bytes(data)
    return make


def _sparse(name: str, size: int) -> Callable[[Path], None]:
    """A file of ``size`` bytes without writing them (a huge file cheaply)."""
    def make(folder: Path) -> None:
        with open(folder / name, "wb") as handle:
            handle.truncate(size)
    return make


def _unreadable(name: str) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        os.chmod(folder / name, 0)
    return make


def _many_safetensors(count: int) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        for i in range(count):
            (folder / f"model-{i:05d}.safetensors").write_bytes(b"")
    return make


def safetensors(header: object, data_bytes: int = 0, length: int | None = None) -> bytes:
    """A safetensors file: 8-byte little-endian header length, the JSON header, ``data_bytes`` of data."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + b"\0" * data_bytes


_TENSOR = {"w": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 32]}}

INDEX = "model.safetensors.index.json"
ST = "model.safetensors"

_FOLDERS: list[tuple[str, Callable[[Path], None], str]] = [
    # (id, what to put in the folder, expectation)
    ("valid config only", lambda folder: None, "accept"),
    ("config.json symlink to a regular file", _linked_config, "accept"),
    ("valid index", _bytes(INDEX, json.dumps({"metadata": {"total_size": 1000}}).encode()), "accept"),
    ("valid safetensors", _bytes(ST, safetensors(_TENSOR, 32)), "accept"),
    ("config.json FIFO", _fifo("config.json"), "reject"),
    ("model.safetensors FIFO", _fifo(ST), "reject"),
    ("index FIFO", _fifo(INDEX), "reject"),
    ("config.json socket", _socket("config.json"), "reject"),
    ("model.safetensors socket", _socket(ST), "reject"),
    ("config.json directory", _directory("config.json"), "reject"),
    ("model.safetensors directory", _directory(ST), "reject"),
    ("index directory", _directory(INDEX), "reject"),
    ("config.json -> /dev/zero", _link("config.json", "/dev/zero"), "reject"),
    ("model.safetensors -> /dev/zero", _link(ST, "/dev/zero"), "reject"),
    ("index -> /dev/null", _link(INDEX, "/dev/null"), "reject"),
    ("config.json symlink loop", _loop("config.json"), "reject"),
    ("model.safetensors symlink loop", _loop(ST), "reject"),
    ("index symlink loop", _loop(INDEX), "reject"),
    ("index dangling symlink", _link(INDEX, "/nonexistent/index.json"), "reject"),
    ("model.safetensors dangling symlink", _link(ST, "/nonexistent/model.safetensors"), "reject"),
    ("huge config.json", _sparse("config.json", 4 * 2**20 + 1), "reject"),
    ("huge index", _sparse(INDEX, 64 * 2**20 + 1), "reject"),
    ("malformed config.json", _bytes("config.json", b'{"model_type": "llama",'), "reject"),
    ("config.json invalid utf-8", _bytes("config.json", b'{"model_type": "\xff"}'), "reject"),
    ("config.json nested deep", _bytes("config.json", b"[" * 100_000 + b"]" * 100_000), "reject"),
    ("config.json a list", _bytes("config.json", b"[1, 2]"), "reject"),
    ("config.json a string", _bytes("config.json", b'"llama"'), "reject"),
    ("config.json empty", _bytes("config.json", b""), "reject"),
    ("index metadata null", _bytes(INDEX, b'{"metadata": null}'), "reject"),
    ("index metadata list", _bytes(INDEX, b'{"metadata": [1]}'), "reject"),
    ("index metadata string", _bytes(INDEX, b'{"metadata": "x"}'), "reject"),
    ("index a list", _bytes(INDEX, b"[1]"), "reject"),
    ("index a string", _bytes(INDEX, b'"x"'), "reject"),
    ("index without metadata", _bytes(INDEX, b'{"weight_map": {}}'), "reject"),
    ("index total_size a string", _bytes(INDEX, b'{"metadata": {"total_size": "1000"}}'), "reject"),
    ("index total_size a float", _bytes(INDEX, b'{"metadata": {"total_size": 1.6e10}}'), "reject"),
    ("index total_size negative", _bytes(INDEX, b'{"metadata": {"total_size": -1}}'), "reject"),
    ("index total_size 2**70", _bytes(INDEX, json.dumps({"metadata": {"total_size": 2**70}}).encode()), "reject"),
    ("index total_size true", _bytes(INDEX, b'{"metadata": {"total_size": true}}'), "reject"),
    ("malformed index", _bytes(INDEX, b'{"metadata": {'), "reject"),
    ("safetensors shorter than 8 bytes", _bytes(ST, b"\x01\x02"), "reject"),
    ("safetensors header length 2**63", _bytes(ST, safetensors(_TENSOR, 32, length=2**63)), "reject"),
    ("safetensors header over the limit", _bytes(ST, safetensors(_TENSOR, 32, length=100_000_001)), "reject"),
    ("safetensors header longer than the file", _bytes(ST, safetensors(_TENSOR, 0, length=10_000)), "reject"),
    ("safetensors garbage header", _bytes(ST, safetensors(b"\xff\xfe garbage")), "reject"),
    ("safetensors header a list", _bytes(ST, safetensors([1, 2])), "reject"),
    ("safetensors dtype a list", _bytes(ST, safetensors({"w": {"dtype": ["BF16"], "shape": [1],
                                                               "data_offsets": [0, 2]}}, 2)), "reject"),
    ("safetensors unknown dtype", _bytes(ST, safetensors({"w": {"dtype": "Q3", "shape": [1],
                                                                "data_offsets": [0, 2]}}, 2)), "reject"),
    ("safetensors shape of floats", _bytes(ST, safetensors({"w": {"dtype": "BF16", "shape": [1.0],
                                                                  "data_offsets": [0, 2]}}, 2)), "reject"),
    ("safetensors offsets past the file", _bytes(ST, safetensors({"w": {"dtype": "BF16", "shape": [2**40],
                                                                        "data_offsets": [0, 2**41]}}, 2)), "reject"),
    ("safetensors tensor not an object", _bytes(ST, safetensors({"w": 5})), "reject"),
    ("4097 safetensors files", _many_safetensors(4097), "reject"),
    ("unreadable config.json", _unreadable("config.json"), "either" if os.geteuid() == 0 else "reject"),
]
"""(An unreadable file is read anyway by root: either outcome is right there.)"""


_LOAD_CHILD = """
import json, sys
from verikv.errors import VeriKVError
from verikv.sizing import load_model
try:
    load_model(sys.argv[1])
except VeriKVError as exc:
    print(json.dumps(["typed", type(exc).__name__, str(exc)]))
except BaseException as exc:
    print(json.dumps(["untyped", type(exc).__name__, str(exc)]))
else:
    print(json.dumps(["ok", "", ""]))
"""


def _python() -> list[str]:
    return [sys.executable, *(["-O"] if sys.flags.optimize else [])]


def _refresh_tree(world: World) -> None:
    world["tree"] = _tree(Path(world["folder"]))


def _load_in_child(world: World) -> None:
    """``load_model(folder)`` in a child interpreter; its answer raised here as the harness reads it."""
    try:
        proc = subprocess.run([*_python(), "-c", _LOAD_CHILD, world["folder"]], capture_output=True, text=True,
                              timeout=CHILD_SECONDS)
    except subprocess.TimeoutExpired:
        raise Hang(f"load_model gave no answer within {CHILD_SECONDS} s (child killed)") from None
    finally:
        _refresh_tree(world)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"child exited {proc.returncode}: {proc.stderr[-300:]}")
    outcome, name, message = json.loads(lines[-1])
    if outcome == "typed":
        raise SizingError(f"{name}: {message}")
    if outcome == "untyped":
        raise RuntimeError(f"{name}: {message}")


def _size_in_child(world: World) -> None:
    """``verikv size`` on the folder in a child interpreter: status 0 accepts, status 2 with one
    line on stderr is a typed refusal, anything else (1 "does not fit", a traceback) is not."""
    argv = ["-m", "verikv", "size", "--model", world["folder"], "--device", "h200", "--max-model-len", "1024"]
    try:
        proc = subprocess.run([*_python(), *argv], capture_output=True, text=True, timeout=CHILD_SECONDS)
    except subprocess.TimeoutExpired:
        raise Hang(f"verikv size gave no answer within {CHILD_SECONDS} s (child killed)") from None
    finally:
        _refresh_tree(world)
    _check_status(proc.returncode, proc.stderr)


def _check_status(status: int, stderr: str) -> None:
    """Status 2 with one message line (after argparse's usage lines, for a malformed option) is a
    typed refusal; any other failure is not."""
    lines = stderr.strip().splitlines()
    if status == 0:
        return
    usage = all(line.startswith(("usage:", " ")) for line in lines[:-1])
    if status == 2 and lines and lines[-1].startswith("verikv size: ") and usage and "Traceback" not in stderr:
        raise InvalidArgumentError(lines[-1])
    raise RuntimeError(f"verikv size exited {status} with {len(lines)} line(s) on stderr: {stderr[-300:]}")


def _folder_cases() -> list[Case]:
    cases = []
    for cid, make, expect in _FOLDERS:
        cases.append(Case(f"load_model.folder[{cid}]", _folder_world(make), _load_in_child, expect))
        cases.append(Case(f"verikv size[folder {cid}]", _folder_world(make), _size_in_child, expect))
    cases.append(Case("load_model.folder[no config.json]", _folder_world(lambda f: None, config=False),
                      _load_in_child, "reject"))
    return cases


# --- values -------------------------------------------------------------------------------------

def empty_world() -> World:
    return {}


def _config_world(**config: Any) -> Callable[[], World]:
    return lambda: {"config": {**SMALL_LLAMA, **config}}


_CONFIG_FIELDS: dict[str, tuple[str, frozenset[str], frozenset[str]]] = {
    # field: (profile, either, accept)
    "num_hidden_layers": ("count1", frozenset(), frozenset()),
    "num_attention_heads": ("count1", frozenset(), frozenset()),
    "num_key_value_heads": ("opt_count1", frozenset(), frozenset()),
    "head_dim": ("opt_count1", frozenset(), frozenset()),
    "sliding_window": ("opt_count1", frozenset(), frozenset()),
    # (transformers' own validation refuses a null context length; verikv's table reads it as unknown)
    "max_position_embeddings": ("opt_count1", frozenset({"None"}), frozenset()),
}


def _config_field_cases() -> list[Case]:
    """Each hostile value in each KV-relevant field of a valid config, for both readers."""
    from verikv.sizing import geometry_from_hf_config

    cases = []
    for reader, variant in ((False, "builtin"), (None, "auto")):
        for field, (kind, either, accept) in _CONFIG_FIELDS.items():
            def call(world: World, reader: bool | None = reader, field: str = field, **value: Any) -> Any:
                return geometry_from_hf_config({**world["config"], field: value["value"]}, use_transformers=reader)
            # a NumPy float is a float: refused wherever an integer is read
            params = {"value": P(SMALL_LLAMA.get(field, 64), kind, either=either, accept=accept,
                                 reject={"np_float"})}
            cases += substitution_cases(f"geometry_from_hf_config.{variant}.{field}", _config_world(), call, params)
    return cases


def _geometry_cases() -> list[Case]:
    from verikv.sizing import geometry_from_hf_config

    published_gemma_2 = {"model_type": "gemma2", "num_hidden_layers": 42, "hidden_size": 3584,
                         "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
                         "query_pre_attn_scalar": 256, "sliding_window": 4096, "sliding_window_size": 4096,
                         "max_position_embeddings": 8192, "vocab_size": 256000, "intermediate_size": 14336}
    cases = substitution_cases("geometry_from_hf_config", _config_world(), lambda w, **k: geometry_from_hf_config(
        w["config"], **k), {"name": P(None, "object", accept={"None", "str", "hashflip_str"}, either={"surrogate"}),
                            "use_transformers": P(False, "bool", accept={"None"})})
    cases += substitution_cases("geometry_from_hf_config.config", empty_world,
                                lambda w, **k: geometry_from_hf_config(**k), {"config": P(SMALL_LLAMA, "object")})
    specific: list[tuple[str, dict[str, Any], str]] = [
        ("sliding_window=np.float64(1.0)", {"sliding_window": np.float64(1.0)}, "reject"),
        ("num_hidden_layers=np.int64(2)", {"num_hidden_layers": np.int64(2)}, "accept"),
        ("num_hidden_layers=10**7", {"num_hidden_layers": 10**7}, "reject"),
        ("num_hidden_layers=2**63", {"num_hidden_layers": 2**63}, "reject"),
        ("id2label with int keys", {"id2label": {0: "NEG", 1: "POS"}}, "accept"),
        ("id2label with colliding keys", {"id2label": {1: "a", "1": "b"}}, "reject"),
        ("id2label with a tuple key", {"id2label": {(0,): "a"}}, "reject"),
        ("0-d array", {"max_position_embeddings": np.array(4096)}, "reject"),
        ("np.bool_ flag", {"tie_word_embeddings": np.bool_(True)}, "accept"),
        ("million values", {"extra": [0] * (2**20 + 1)}, "reject"),
        ("published gemma-2-9b", published_gemma_2, "accept"),
        ("conflicting aliases", {**published_gemma_2, "sliding_window_size": 2048}, "reject"),
        ("alias alone", {**{k: v for k, v in published_gemma_2.items() if k != "sliding_window"}}, "accept"),
    ]
    for reader, variant in ((False, "builtin"), (None, "auto")):
        for cid, extra, expect in specific:
            cases.append(Case(f"geometry_from_hf_config.{variant}[{cid}]", _config_world(**extra),
                              lambda w, reader=reader: geometry_from_hf_config(  # type: ignore[misc]
                                  w["config"], use_transformers=reader), expect))
    return cases + _config_field_cases()


def _pretrained_config_cases() -> list[Case]:
    """A transformers config object, built offline (skipped when transformers is not installed)."""
    from verikv.sizing import geometry_from_hf_config, plan_kv_cache
    from verikv.sizing.hf_defaults import transformers_available

    if not transformers_available():
        return []

    def build() -> World:
        from transformers import LlamaConfig

        return {"config": LlamaConfig(**{k: v for k, v in SMALL_LLAMA.items() if k != "model_type"},
                                      id2label={0: "NEG", 1: "POS"})}

    class Broken:
        def to_dict(self) -> dict[str, Any]:
            raise RuntimeError("to_dict exploded")

    return [
        Case("geometry_from_hf_config[PretrainedConfig]", build, lambda w: geometry_from_hf_config(w["config"]),
             "accept"),
        Case("geometry_from_hf_config[PretrainedConfig.to_dict()]", build,
             lambda w: geometry_from_hf_config(w["config"].to_dict()), "accept"),
        Case("plan_kv_cache[model=PretrainedConfig]", build,
             lambda w: plan_kv_cache(w["config"], "h100", max_model_len=1024), "accept"),
        Case("geometry_from_hf_config[to_dict raises]", empty_world, lambda w: geometry_from_hf_config(Broken()),
             "reject"),
    ]


def _cache_spec_cases() -> list[Case]:
    from verikv import create_kv_cache_specs_from_config

    def call(world: World, **fields: Any) -> Any:
        return create_kv_cache_specs_from_config({**world["config"], **fields}, 16, 8, 128, "bfloat16")

    world = _config_world()
    cases = substitution_cases("create_kv_cache_specs_from_config.config", world, call, {
        "num_hidden_layers": P(2, "opt_count1", reject={"2**31", "2**63", "10**100", "np_float"}),
        "sliding_window": P(8, "opt_count1", accept={"list"},  # [1, 2]: one window per layer
                            reject={"2**31", "2**63", "10**100", "np_float", "np_array", "empty_list"}),
        "use_sliding_window": P(True, "bool", accept={"None", "np_bool"}),
    })
    for layers in (10**7, 2**31, 2**63):
        cases.append(Case(f"create_kv_cache_specs_from_config[num_hidden_layers={layers}]", world,
                          lambda w, layers=layers: call(w, num_hidden_layers=layers), "reject"))  # type: ignore[misc]
    cases.append(Case("create_kv_cache_specs_from_config[sliding_window=np.float64(1.0)]", world,
                      lambda w: call(w, sliding_window=np.float64(1.0)), "reject"))
    cases.append(Case("create_kv_cache_specs_from_config[layer_types of 10**6]", world,
                      lambda w: call(w, num_hidden_layers=None, layer_types=["full_attention"] * 10**6), "reject"))
    return cases


def _accelerator_cases() -> list[Case]:
    from verikv.sizing import describe_accelerator

    cases = substitution_cases("describe_accelerator", empty_world, lambda w, **k: describe_accelerator(**k), {
        "name": P("d", "object", accept={"str", "surrogate", "hashflip_str"}),
        "memory_bytes": P(2**34, "count1", reject={"10**100"}),
        "platform": P("gpu", "object"),
        "kv_dtypes": P(None, "object", accept={"None"}),
        "attention_kernel": P(None, "object", accept={"None"}),
    })
    cases.append(Case("describe_accelerator[kv_dtypes=0]", empty_world,
                      lambda w: describe_accelerator("d", 2**34, "gpu", kv_dtypes=0), "reject"))  # type: ignore[arg-type]
    return cases


def _plan_cases() -> list[Case]:
    from verikv.sizing import get_preset, plan_kv_cache

    def call(world: World, **k: Any) -> Any:
        return plan_kv_cache(get_preset("gemma-3-27b"), "h200", **k)

    cases = substitution_cases("plan_kv_cache.batch", empty_world, call, {
        "max_num_batched_tokens": P(None, "opt_count1", reject={"2**63", "10**100"}),
        "max_num_seqs": P(None, "opt_count1", reject={"2**31", "2**63", "10**100"}),
        "usage_context": P("serve", "object"),
    })

    def concurrency(world: World) -> None:
        plan = call(world)
        if plan.assumed != ("max_num_batched_tokens", "max_num_seqs") or f"{plan.max_concurrency:.2f}" != "5.31":
            raise RuntimeError(f"gemma-3-27b on h200: assumed {plan.assumed}, concurrency {plan.max_concurrency}")
        if plan.buffers[0].dtype != plan.buffers[0].page.dtype or "weights_estimated" not in plan.to_dict():
            raise RuntimeError("a plan lost a public attribute")

    cases.append(Case("plan_kv_cache[gemma-3-27b on h200: vLLM's figures]", empty_world, concurrency, "accept"))
    return cases


def _unit_cases() -> list[Case]:
    from verikv.sizing.units import parse_bytes, parse_count

    cases = []
    for name, parse in (("parse_count", parse_count), ("parse_bytes", parse_bytes)):
        cases += substitution_cases(name, empty_world, lambda w, parse=parse, **k: parse(**k),  # type: ignore[misc]
                                    {"text": P("12", "object")})
        for text, expect in (("\u0661\u0662", "reject"), ("\uff11\uff12", "reject"), ("1_000", "reject"),
                             (" 12", "reject"), ("12 ", "reject"), ("12\n", "reject"), ("\u096812", "reject"),
                             ("32k", "accept"), ("12", "accept")):
            cases.append(Case(f"{name}[{text!r}]", empty_world, lambda w, parse=parse, text=text: parse(text),  # type: ignore[misc]
                              expect))
    return cases


# --- the command line, in process ---------------------------------------------------------------

def _cli(argv: list[str]) -> None:
    """``verikv size`` in process: status 2 with one line on stderr is a typed refusal."""
    from verikv.sizing.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(argv)
    _check_status(status, err.getvalue())


def _cli_cases() -> list[Case]:
    base = ["--device", "h200", "--max-model-len", "1024"]
    cases = []
    for model, expect in (("a\x00b", "reject"), ("\ud800", "reject"), ("\ud800/config.json", "reject"),
                          ("meta-llama/Llama-3.1-8B", "reject"), ("gemma-3-27b", "accept"), ("", "reject")):
        cases.append(Case(f"verikv size[--model {model!r}]", empty_world,
                          lambda w, model=model: _cli(["--model", model, *base]), expect))  # type: ignore[misc]
    for option, value, expect in (("--max-num-batched-tokens", "\u0661\u0662", "reject"),
                                  ("--max-num-seqs", "1_000", "reject"), ("--tp", " 1", "reject"),
                                  ("--dp", "\uff11", "reject"), ("--page-size", "16", "accept"),
                                  ("--usage-context", "offline", "accept"), ("--usage-context", "nope", "reject"),
                                  ("--max-num-seqs", "99999999", "reject")):
        cases.append(Case(f"verikv size[{option} {value!r}]", empty_world,
                          lambda w, o=option, v=value: _cli(["--model", "gemma-3-27b", *base, o, v]),  # type: ignore[misc]
                          expect))
    return cases


CASES: list[Case] = (_folder_cases() + _geometry_cases() + _pretrained_config_cases() + _cache_spec_cases()
                     + _accelerator_cases() + _plan_cases() + _unit_cases() + _cli_cases())
CASES_BY_ID = {case.id: case for case in CASES}
if len(CASES_BY_ID) != len(CASES):
    raise RuntimeError("hostile sizing case ids must be unique")
