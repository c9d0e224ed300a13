"""The batch limits a vLLM engine assumes when it is not told: ``max_num_batched_tokens`` and ``max_num_seqs``.

vLLM (V1 engine, chunked prefill on) picks both from a table keyed by how it is run, its
*usage context*, and by the device:

=========================================  ===========================  ==========================
device                                     ``vllm serve`` (``serve``)   ``LLM(...)`` (``offline``)
=========================================  ===========================  ==========================
GPU with at least 70 GiB, not an A100      8,192 tokens, 1,024 seqs     16,384 tokens, 1,024 seqs
any other GPU                              2,048 tokens, 256 seqs       8,192 tokens, 256 seqs
TPU v6e / v5e / v5p                        1,024 / 512 / 256 tokens     2,048 / 1,024 / 512 tokens
other TPUs                                 2,048 tokens                 8,192 tokens
=========================================  ===========================  ==========================

On TPU the sequence cap is the "any other GPU" row's 256 (vLLM reads no device memory there).
The sequence cap is then lowered to the batched-token budget when that is smaller (a step
cannot run more requests than it has tokens). "At least 70 GiB" is the device's memory as the
runtime reports it, here the catalog's ``memory_bytes``.

These limits matter to sizing in two places: a sliding-window or chunked layer keeps
``window - 1 + max_num_batched_tokens`` tokens of a request live during a step (capped at
``max_model_len``), so the budget changes how many requests fit; and the TPU page-size rule
reads ``max_num_seqs``.
"""

from __future__ import annotations

from dataclasses import dataclass

from verikv.sizing.catalog import Accelerator, GiB

USAGE_CONTEXTS: tuple[str, ...] = ("serve", "offline")
"""``serve``: an OpenAI-compatible server (``vllm serve``); ``offline``: the ``LLM`` class."""

LARGE_GPU_BYTES = 70 * GiB
"""Device memory from which vLLM uses its larger GPU defaults (A100s excepted)."""

_LARGE_GPU = {"serve": (8192, 1024), "offline": (16384, 1024)}
_OTHER_GPU = {"serve": (2048, 256), "offline": (8192, 256)}
_TPU_TOKENS = {"tpu-v6e": {"serve": 1024, "offline": 2048}, "tpu-v5e": {"serve": 512, "offline": 1024},
               "tpu-v5p": {"serve": 256, "offline": 512}}


@dataclass(frozen=True)
class BatchDefaults:
    """vLLM's ``max_num_batched_tokens`` and ``max_num_seqs`` for one device and usage context,
    and the row of its table they come from (``rule``, for the plan's output)."""

    max_num_batched_tokens: int
    max_num_seqs: int
    rule: str


def vllm_batch_defaults(acc: Accelerator, usage_context: str) -> BatchDefaults:
    """The batch limits vLLM assumes on ``acc`` when run as ``usage_context`` (``"serve"`` or ``"offline"``)."""
    runner = "vllm serve" if usage_context == "serve" else "the LLM class"
    if acc.platform == "tpu":
        seqs = _OTHER_GPU[usage_context][1]
        chip = _TPU_TOKENS.get(acc.name)
        if chip is not None:
            tokens = chip[usage_context]
            return BatchDefaults(tokens, min(seqs, tokens), f"vLLM's {runner} default for {acc.name}")
        tokens = _OTHER_GPU[usage_context][0]
        return BatchDefaults(tokens, min(seqs, tokens), f"vLLM's {runner} default for a TPU it has no entry for")
    large = acc.memory_bytes >= LARGE_GPU_BYTES and "a100" not in acc.name.lower()
    tokens, seqs = (_LARGE_GPU if large else _OTHER_GPU)[usage_context]
    row = "a GPU with at least 70 GiB (not an A100)" if large else "a GPU under 70 GiB or an A100"
    return BatchDefaults(tokens, min(seqs, tokens), f"vLLM's {runner} default for {row}")
