"""docs/scheduler.md stays true: its Python code block runs end to end (its own asserts check
that every request finished, the pool is idle and the prefix cache was used) and exercises
chunked prefill, admission waits, the batched step (with refusals) and preemption."""

from __future__ import annotations

import re
from pathlib import Path

from verikv import CacheManager

DOC = Path(__file__).resolve().parents[1] / "docs" / "scheduler.md"


def code_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_doc_has_one_python_block():
    assert len(code_blocks()) == 1


def test_scheduler_loop_runs_and_covers_every_path(monkeypatch, capsys):
    calls = {"refused": 0, "chunked": 0, "hit": 0, "free": 0, "batch-refused": 0, "batch-chunked": 0}
    allocate, lookup, free = CacheManager.allocate_slots, CacheManager.get_computed_pages, CacheManager.free
    allocate_batch = CacheManager.allocate_slots_batch

    def counting_free(self, request):
        calls["free"] += 1
        return free(self, request)

    def counting_allocate(self, request, num_new_tokens, *args, **kwargs):
        result = allocate(self, request, num_new_tokens, *args, **kwargs)
        calls["refused"] += result is None
        calls["chunked"] += request.num_computed_tokens + num_new_tokens + (args[0] if args else 0) < request.num_tokens
        return result

    def counting_allocate_batch(self, requests, num_new_tokens, *args, **kwargs):
        results = allocate_batch(self, requests, num_new_tokens, *args, **kwargs)
        calls["batch-refused"] += results.count(None)
        calls["batch-chunked"] += sum(req.num_computed_tokens + n < req.num_tokens
                                      for req, n in zip(requests, num_new_tokens))
        return results

    def counting_lookup(self, request, **kwargs):
        pages, hit = lookup(self, request, **kwargs)
        calls["hit"] += hit > 0
        return pages, hit

    monkeypatch.setattr(CacheManager, "allocate_slots", counting_allocate)
    monkeypatch.setattr(CacheManager, "get_computed_pages", counting_lookup)
    monkeypatch.setattr(CacheManager, "free", counting_free)
    monkeypatch.setattr(CacheManager, "allocate_slots_batch", counting_allocate_batch)
    namespace: dict = {"__name__": "scheduler_doc"}
    exec(compile(code_blocks()[0], str(DOC), "exec"), namespace)
    assert "prompt tokens found in the prefix cache" in capsys.readouterr().out
    assert calls["refused"] > 0 and calls["chunked"] > 0 and calls["hit"] > 0, calls
    assert calls["batch-refused"] > 0 and calls["batch-chunked"] > 0, calls  # decodes and prefill chunks batched
    assert calls["free"] > len(namespace["prompts"]), calls  # finishes plus at least one preemption
    assert namespace["manager"].page_pool.get_num_free_pages() == 47
