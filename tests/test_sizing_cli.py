"""``verikv size``: the two acceptance plans, JSON, configs from files, errors and exit codes."""

from __future__ import annotations

import json

import pytest

from verikv.cli import main as verikv_main
from verikv.sizing.cli import main, print_rich, render_plain
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
    assert "28,831 = 28,831 per shard x 1" in out  # reference §4.3
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
    assert "2,679 per shard x 2" in out  # reference §4.3 EasyDeL rule, per shard
    assert "page ids per DP shard: 0: [0, 2679) (2678 usable), 1: [2679, 5358) (2679 usable)" in out


def test_config_json_file(tmp_path, capsys):
    path = tmp_path / "qwen" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(PRESETS["qwen2.5-7b"]))
    code, out, _ = run(capsys, "--model", str(path), "--device", "h100-sxm", "--max-model-len", "8192")
    assert code == 0
    assert "qwen" in out and "66,805 = 66,805 per shard" in out  # reference §4.3
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
