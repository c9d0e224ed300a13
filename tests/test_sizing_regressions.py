"""The sizing defects as reported, call for call: a typed error (or the command's "bad input"
status 2 with one line on stderr and nothing on stdout) and nothing changed, or now the right answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from verikv import create_kv_cache_specs_from_config
from verikv.errors import CacheSpecError, SizingError
from verikv.sizing import describe_accelerator, geometry_from_hf_config, get_preset, plan_kv_cache
from verikv.sizing.cli import main
from verikv.sizing.units import UnitError, parse_bytes, parse_count

SMALL = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 512,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 1024}
CHILD_SECONDS = 30
"""Generous bound on a child ``verikv size`` (hang detection only)."""


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(SMALL))
    return folder


def _contents(folder: Path) -> list[tuple[str, bool, bytes]]:
    return [(p.name, p.is_symlink(), p.read_bytes() if p.is_file() and not p.is_symlink() else b"")
            for p in sorted(folder.iterdir())]


def _size(*argv: str) -> subprocess.CompletedProcess[str]:
    """``verikv size`` in a child interpreter, so a blocking read cannot hang the test run."""
    flags = ["-O"] if sys.flags.optimize else []
    return subprocess.run([sys.executable, *flags, "-m", "verikv", "size", *argv], capture_output=True, text=True,
                          timeout=CHILD_SECONDS)


def _refused(proc: subprocess.CompletedProcess[str], says: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("verikv size: ") and says in lines[0], proc.stderr


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "model.safetensors.index.json"])
def test_a_fifo_in_the_model_folder_is_refused_not_waited_on(tmp_path, name):
    folder = _folder(tmp_path)
    (folder / name).unlink(missing_ok=True)
    os.mkfifo(folder / name)
    before = _contents(folder)
    _refused(_size("--model", str(folder), "--device", "h100", "--max-model-len", "1024"), "is a FIFO")
    assert _contents(folder) == before


@pytest.mark.parametrize("index, says", [({"metadata": None}, "no \"metadata\" object (got NoneType None)"),
                                         ([1], "no \"metadata\" object"), ("x", "no \"metadata\" object"),
                                         ({"metadata": {"total_size": "1"}}, "metadata.total_size must be")])
def test_index_metadata_of_the_wrong_type_is_bad_input(tmp_path, index, says):
    """(``{"metadata": null}`` raised AttributeError and exited 1, the "does not fit" status.)"""
    folder = _folder(tmp_path)
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    before = _contents(folder)
    _refused(_size("--model", str(folder), "--device", "h100", "--max-model-len", "1024"), says)
    assert _contents(folder) == before


def test_symlink_loop_is_refused_and_a_link_to_a_file_is_read(tmp_path):
    folder = _folder(tmp_path)
    os.symlink(folder / "b.safetensors", folder / "a.safetensors")
    os.symlink(folder / "a.safetensors", folder / "b.safetensors")
    _refused(_size("--model", str(folder), "--device", "h100", "--max-model-len", "1024"), "cannot read")
    (folder / "a.safetensors").unlink()
    (folder / "b.safetensors").unlink()
    (folder / "blob").write_text(json.dumps(SMALL))
    (folder / "config.json").unlink()
    os.symlink(folder / "blob", folder / "config.json")
    assert _size("--model", str(folder), "--device", "h100", "--max-model-len", "1024").returncode == 0


@pytest.mark.parametrize("layers", [10**7, 2**63, 2**31])
def test_create_kv_cache_specs_from_config_bounds_the_layer_count_first(layers):
    config = {"num_hidden_layers": layers}
    with pytest.raises(CacheSpecError, match="num_hidden_layers must be <= 4096"):
        create_kv_cache_specs_from_config(config, 16, 8, 128, "bfloat16")
    assert config == {"num_hidden_layers": layers}


def test_numpy_float_window_is_a_sizing_error():
    config = {**SMALL, "sliding_window": np.float64(1.0)}
    before = dict(config)
    with pytest.raises(SizingError):
        geometry_from_hf_config(config)
    assert config == before


def test_describe_accelerator_kv_dtypes_zero():
    with pytest.raises(SizingError, match="kv_dtypes must be"):
        describe_accelerator("d", 2**34, "gpu", kv_dtypes=0)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["\u0661\u0662", "\uff11\uff12", "1_2", " 12"])
def test_size_parser_reads_ascii_digits_only(text):
    for parse in (parse_count, parse_bytes):
        with pytest.raises(UnitError):
            parse(text)


def test_gemma_3_27b_on_h200_reads_like_vllm(capsys):
    """The batched-token budget assumed (vLLM's 8,192 for ``vllm serve`` on an H200) and vLLM's
    "maximum concurrency" ratio, beside the whole-request count."""
    assert main(["--model", "gemma-3-27b", "--device", "h200"]) == 0
    out = capsys.readouterr().out
    assert "max_num_batched_tokens   8,192 tokens per step (assumed: vLLM's vllm serve default" in out
    assert "max_num_seqs             1,024 running requests (assumed:" in out
    assert "maximum concurrency      5.31x for 131,072 tokens per request" in out
    assert "max concurrent requests  5 of max_model_len" in out
    assert "ESTIMATED from a dense parameter count" in out and "note: weights estimated" in out
    assert main(["--model", "gemma-3-27b", "--device", "h200", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["max_num_batched_tokens"] == 8192 and data["max_num_seqs"] == 1024
    assert data["assumed"] == ["max_num_batched_tokens", "max_num_seqs"] and round(data["max_concurrency"], 2) == 5.31
    assert data["weights_source"] == "dense estimate" and data["weights_estimated"] is True
    assert main(["--model", "gemma-3-27b", "--device", "h200", "--max-num-batched-tokens", "8192",
                 "--max-num-seqs", "256"]) == 0
    out = capsys.readouterr().out
    assert "8,192 tokens per step (given)" in out and "256 running requests (given)" in out
    assert "not given" not in out


def test_hub_id_gets_a_hint(capsys):
    assert main(["--model", "meta-llama/Llama-3.1-8B", "--device", "h100"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "pass a local checkpoint folder or its config.json" in captured.err
    assert len(captured.err.strip().splitlines()) == 1


def test_every_documented_exit_status(tmp_path, capsys):
    """0 planned, 1 does not fit (the message names the length that would), 2 bad input."""
    assert main(["--model", "llama-3-8b", "--device", "h100", "--max-model-len", "1024"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["--model", "llama-3-70b", "--device", "a100-40"]) == 1
    assert "does not fit" in capsys.readouterr().err
    for argv in (["--model", "nope", "--device", "h100"], ["--model", "llama-3-8b", "--device", "nope"],
                 ["--model", "llama-3-8b"], ["--model", "a\x00b", "--device", "h100"],
                 ["--model", "\ud800", "--device", "h100"], ["--model", "llama-3-8b", "--device", "h100", "--tp", "x"]):
        assert main(argv) == 2, argv
        captured = capsys.readouterr()
        assert captured.out == "" and "Traceback" not in captured.err
        assert captured.err.strip().splitlines()[-1].startswith("verikv size: ")


def test_config_only_folder_says_weights_are_estimated(tmp_path):
    folder = _folder(tmp_path)
    plan = plan_kv_cache(get_preset("llama-3-8b"), "h100", max_model_len=1024)
    assert plan.weights_estimated and any("dense parameter count" in note for note in plan.notes)
    from verikv.sizing import load_model

    assert load_model(folder).weights_source == "dense estimate"
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 1000}}))
    model = load_model(folder)
    assert (model.weights_bytes, model.weights_source) == (1000, "checkpoint index")
    plan = plan_kv_cache(model, "h100", max_model_len=1024)
    assert not plan.weights_estimated and not any("dense parameter count" in note for note in plan.notes)
