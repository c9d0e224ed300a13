"""Smoke test of the soak benchmark (benchmarks/soak.py): a few hundred random scheduler steps.

No timing is asserted (the soak's numbers belong in benchmarks/RESULTS.md). Asserted: the spec
invariants hold throughout, the scheduler's running set is exactly what the manager holds, and
no page is lost: once every request is released, every usable page is free again.
"""

from __future__ import annotations

from benchmarks.soak import main, run_soak


def test_soak_keeps_invariants_and_loses_no_page() -> None:
    windows, soak = run_soak(steps=600, window=100, num_pages=256, seed=3, check_every=25)
    assert [w.end_step for w in windows] == [100, 200, 300, 400, 500, 600]
    assert soak.failed_allocations > 0, "the pool must fill up so preemption paths run"
    assert all(0 <= w.pages_in_use <= 255 for w in windows)
    for req in list(soak.running.values()):
        soak.finish(req)
    soak.check()
    assert soak.m.page_pool.get_num_free_pages() == 255
    assert soak.m.usage == 0.0


def test_soak_command_runs(capsys: object) -> None:
    assert main(["--steps", "200", "--window", "100", "--num-pages", "128", "--check-every", "50"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "invariants hold" in out and out.count("\n") >= 4
