"""``verikv size``: the two acceptance plans, JSON, configs from files, errors and exit codes."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from verikv.cli import main as verikv_main
from verikv.sizing.cli import configure_parser, main, print_rich, render_plain, run as size_run
from verikv.sizing.planner import plan_kv_cache
from verikv.sizing.presets import PRESETS, get_preset


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_llama_3_8b_on_tpu_v6e(capsys):
    code, out, _ = run(capsys, "--model", "llama-3-8b", "--device", "tpu-v6e")
    assert code == 0
    # tpu-inference page rule for 8,192 tokens: 256; budget int(0.9 x 33,543,694,581) - 16,060,522,496
    assert "14,128,802,626 B" in out
    assert "page size                256 tokens" in out
    assert "421 = 421 per shard x 1" in out
    assert "(421, 256, 8, 2, 128)" in out and "bfloat16" in out
    assert "107,776 tokens" in out  # 421 x 256
    assert "13 of max_model_len" in out  # 420 usable pages // 32 per request


def test_llama_3_8b_on_h100_sxm(capsys):
    code, out, _ = run(capsys, "--model", "llama-3-8b", "--device", "h100-sxm")
    assert code == 0
    assert "28,831 = 28,831 per shard x 1" in out  # vLLM's rule on an H100
    assert "(2, 28831, 16, 8, 128)" in out and "flash-attn / bfloat16" in out
    assert "461,296 tokens" in out
    assert "56 of max_model_len" in out  # 28,830 // 512


def test_top_level_dispatch_and_json(capsys):
    assert verikv_main(["size", "--model", "llama-3-8b", "--device", "h100-sxm", "--kv-dtype", "fp8", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["num_pages"] == 57_663 and data["kv_dtype"] == "fp8_e4m3"
    assert data["buffers"][0]["shape"] == [2, 57_663, 16, 8, 128]


def test_tp_dp_and_options(capsys):
    code, out, _ = run(capsys, "--model", "llama-3-70b", "--device", "tpu-v6e", "--tp", "8", "--dp", "2",
                       "--page-size", "128", "--utilization-of", "free", "--reserved-bytes", str(256 * 2**20),
                       "--max-model-len", "4096")
    assert code == 0
    assert "2,679 per shard x 2" in out  # EasyDeL's rule, per shard
    assert "page ids per DP shard: 0: [0, 2679) (2678 usable), 1: [2679, 5358) (2679 usable)" in out


def test_config_json_file(tmp_path, capsys):
    path = tmp_path / "qwen" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(PRESETS["qwen2.5-7b"]))
    code, out, _ = run(capsys, "--model", str(path), "--device", "h100-sxm", "--max-model-len", "8192")
    assert code == 0
    assert "qwen" in out and "66,805 = 66,805 per shard" in out
    code, out, _ = run(capsys, "--model", str(path.parent), "--device", "h100-sxm", "--max-model-len", "8192")
    assert code == 0 and "66,805 = 66,805 per shard" in out


def test_errors_and_exit_codes(capsys, tmp_path):
    code, _, err = run(capsys, "--model", "llama-3-70b", "--device", "tpu-v5e")
    assert code == 1 and "does not fit" in err and "largest max_model_len" in err
    code, _, err = run(capsys, "--model", "llama-3-8b", "--device", "tpu-v99")
    assert code == 2 and "unknown accelerator" in err
    code, _, err = run(capsys, "--model", "llama-3-8b")
    assert code == 2 and "required" in err
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    code, _, err = run(capsys, "--model", str(bad), "--device", "h100-sxm")
    assert code == 2 and "cannot read" in err


def test_list(capsys):
    code, out, _ = run(capsys, "--list")
    assert code == 0
    assert "llama-3-8b" in out and "tpu-v7" in out and "tpu-rpa-v3" in out and "flashmla" in out


def test_rich_rendering_has_the_same_numbers():
    rich_console = pytest.importorskip("rich.console")
    plan = plan_kv_cache(get_preset("llama-3-8b"), "tpu-v6e", page_size=128, dp=2)
    console = rich_console.Console(record=True, width=250)
    print_rich(plan, console)
    text = console.export_text()
    assert "1,684 = 842 per shard x 2" in text
    assert "1,684 = 842 per shard x 2" in render_plain(plan)


# ---- vLLM habits, human-readable values, JSON, pipes; the parser API ------------------------------

H100 = ["--model", "llama-3-8b", "--device", "h100-sxm"]


@pytest.mark.parametrize("ours, vllms", [
    (["--tp", "2"], ["-tp", "2"]),
    (["--tp", "2"], ["--tensor-parallel-size", "2"]),
    (["--page-size", "32"], ["--block-size", "32"]),
    (["--kv-dtype", "fp8"], ["--kv-cache-dtype", "fp8"]),
    (["--utilization", "0.8"], ["--gpu-memory-utilization", "0.8"]),
    (["--kv-cache-bytes", "8000000000"], ["--kv-cache-memory-bytes", "8000000000"]),
    (["--dp", "2"], ["--data-parallel-size", "2"]),
])
def test_vllm_flag_names_are_aliases(capsys, ours, vllms):
    assert main([*H100, *ours, "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)
    assert main([*H100, *vllms, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == expected


def test_kv_cache_memory_bytes_is_the_budget(capsys):
    assert main([*H100, "--kv-cache-memory-bytes", "8G", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # 8G = 8 x 2**30 (vLLM: uppercase is binary); a page id costs 32 layers x 16 x 4,096 B
    assert data["budget_bytes"] == 8 * 2**30 and data["utilization_rule"] == "given"
    assert data["num_pages"] == 8 * 2**30 // (32 * 16 * 4096)


@pytest.mark.parametrize("text, tokens", [("32k", 32_000), ("32K", 32_768), ("25.6k", 25_600), ("8192", 8192)])
def test_human_readable_max_model_len(capsys, text, tokens):
    assert main([*H100, "--max-model-len", text, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_model_len"] == tokens


@pytest.mark.parametrize("text, size", [
    ("80GiB", 80 * 2**30), ("80GB", 80 * 10**9), ("80G", 80 * 2**30), ("80g", 80 * 10**9),
    ("1.5TiB", 3 * 2**39), ("85899345920", 85_899_345_920), ("81920MiB", 80 * 2**30),
])
def test_human_readable_memory_bytes(capsys, text, size):
    assert main([*H100, "--memory-bytes", text, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory_bytes"] == size


@pytest.mark.parametrize("option, text", [
    ("--max-model-len", "1.5K"), ("--max-model-len", "1.0001k"), ("--max-model-len", "32x"),
    ("--memory-bytes", "80 GiBs"), ("--memory-bytes", "-5GB"), ("--memory-bytes", "1" * 60),
    ("--utilization", "1e999999999"), ("--utilization", "1/0"), ("--utilization", "nan"),
    ("--dp", str(2**30)), ("--tp", "0"),
])
def test_bad_values_exit_2_without_traceback(capsys, option, text):
    assert main([*H100, option, text]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and ("error" in err or "verikv size:" in err)


def test_json_numbers_are_numbers(capsys):
    assert main([*H100, "--utilization", "9/10", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["utilization"] == 0.9

    def strings(value):
        if isinstance(value, dict):
            for v in value.values():
                yield from strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v)
        elif isinstance(value, str):
            yield value

    for text in strings(data):
        with pytest.raises(ValueError):
            float(text)  # no number is written as a string


def test_json_dash_is_stdout_and_a_path_is_a_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([*H100, "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["num_pages"] == 28_831
    assert not (tmp_path / "-").exists()
    assert main([*H100, "--json", "plan.json"]) == 0
    assert capsys.readouterr().out == ""
    assert json.loads((tmp_path / "plan.json").read_text())["num_pages"] == 28_831
    assert main([*H100, "--json", str(tmp_path / "missing" / "plan.json")]) == 2


def test_closed_pipe_exits_cleanly():
    """``verikv size ... | head`` when head has already exited: no BrokenPipeError traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write now fails with EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-c", "import sys; from verikv.sizing.cli import main; sys.exit(main(sys.argv[1:]))",
             *H100], stdout=write_end, stderr=subprocess.PIPE, text=True, check=False)
    finally:
        os.close(write_end)
    assert done.returncode == 141  # 128 + SIGPIPE, as the `verikv` command and piped Unix tools report
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


def test_configure_parser_and_run_from_a_subcommand(capsys):
    top = argparse.ArgumentParser(prog="verikv")
    size = top.add_subparsers(dest="command").add_parser("size")
    configure_parser(size)
    args = top.parse_args(["size", *H100, "--max-model-len", "4k", "--json"])
    assert size_run(args) == 0
    assert json.loads(capsys.readouterr().out)["max_model_len"] == 4000
    assert main(["--help"]) == 0
    assert "--gpu-memory-utilization" in capsys.readouterr().out


def test_workspace_option(capsys):
    args = [*H100, "--kernel", "flashinfer", "--json"]
    assert main(args) == 0
    default = json.loads(capsys.readouterr().out)
    assert main([*args, "--workspace-bytes", "0"]) == 0
    none = json.loads(capsys.readouterr().out)
    # FlashInfer keeps 256 MiB back by default; stating 0 gives those bytes to the cache
    assert default["workspace_bytes"] == 256 * 2**20 and none["workspace_bytes"] == 0
    assert none["budget_bytes"] - default["budget_bytes"] == 256 * 2**20
    assert none["num_pages"] == none["budget_bytes"] // (32 * 16 * 4096)
    assert default["num_pages"] == default["budget_bytes"] // (32 * 16 * 4096)


@pytest.mark.parametrize("model, line", [
    ("gemma-3-12b", "layers                   40 sliding (window 1,024), 8 full; head dim 256"),
    ("jamba-v0.1", "layers                   28 mamba, 4 full; head dim 128"),
    ("deepseek-v3", "layers                   61 mla; latent width 576"),
])
def test_table_states_the_layer_kinds(capsys, model, line):
    folder = os.path.join(os.path.dirname(__file__), "fixtures", "configs", model)
    assert main(["--model", folder, "--device", "h100-sxm", "--weights-bytes", "1GB", "--max-model-len", "8k"]) == 0
    assert line in capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("argv", [
    ["--model", "llama-3-8b", "--device", "h100-sxm", "--json", "a\x00b"],
    ["--model", "llama-3-8b", "--device", "h100-sxm", "--json", "\udc80x\ud800"],
    ["--model", "llama-3-8b", "--device", 5],
])
def test_size_main_refuses_an_impossible_command_line_before_any_work(tmp_path, capsys, argv):
    """`verikv.sizing.cli.main` checks its arguments as `verikv.cli.main` does: status 2, one
    line naming the argument, nothing written."""
    os.chdir(tmp_path)
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.startswith("verikv size: argument ") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_size_main_refuses_a_str_argv(capsys):
    assert main("--list") == 2  # type: ignore[arg-type]
    assert capsys.readouterr().err == "verikv size: argv must be a list of str, got '--list'\n"
