"""CrossHair on the implementation: the report parser, every check on the real code, every mutant caught."""

from __future__ import annotations

import pytest

from verikv.page_pool import PagePool
from verikv.proofs.crosshair import common as crosshair_common, impl as crosshair_impl, targets as crosshair_targets
from verikv.proofs.crosshair.common import Verdict, check_outcome, declared_conditions, parse_check
from verikv.proofs.runner.registry import discover_checks, discover_mutants

CHECKS = crosshair_impl.checks()
MUTANTS = crosshair_impl.mutants()


def _verdict(line: int, level: str, text: str) -> Verdict:
    return Verdict("t.py", line, level, text)


def test_parse_check_reads_verdict_lines() -> None:
    out = "t.py:3: info: Confirmed over all paths.\nnoise\nt.py:9: error: false when calling f(1)\n"
    assert parse_check(out) == [_verdict(3, "info", "Confirmed over all paths."),
                                _verdict(9, "error", "false when calling f(1)")]


@pytest.mark.parametrize(("verdicts", "expected", "code", "status"), [
    ([_verdict(1, "info", "Confirmed over all paths.")], 1, 0, "confirmed"),
    ([_verdict(1, "info", "Confirmed over all paths."), _verdict(2, "info", "Not confirmed.")], 2, 0,
     "no-counterexample"),
    ([_verdict(1, "error", "false when calling f(0)")], 1, 1, "failed"),
    ([_verdict(1, "info", "Unable to meet precondition.")], 1, 0, "vacuous"),
    ([_verdict(1, "info", "Not confirmed.")], 2, 0, "error"),  # a condition was silently skipped
    ([], 0, 0, "error"),  # nothing declared: exit 0 is not a result
    ([_verdict(1, "info", "Not confirmed.")], 1, 2, "error"),
])
def test_check_outcome_maps_verdicts(verdicts: list[Verdict], expected: int, code: int, status: str) -> None:
    assert check_outcome(verdicts, expected, code, "").status == status


def test_bounded_is_a_failure_when_confirmation_is_required() -> None:
    outcome = check_outcome([_verdict(1, "info", "Not confirmed.")], 1, 0, "", require_confirmed=True)
    assert outcome.status == "unknown" and not outcome.ok


def test_declared_conditions_count_posts_and_class_invariants_once() -> None:
    assert len(declared_conditions("verikv.proofs.crosshair.targets.full_hit")) == 1
    queue = [declared_conditions(f"verikv.free_queue.FreeCachePageQueue.{m}") for m in ("popleft_ids", "popleft")]
    assert len(queue[0]) == len(queue[1]) == 3 and len(queue[0] | queue[1]) == 4  # 2 invariants, shared


def test_a_missing_target_is_an_error_not_a_pass() -> None:
    budget = crosshair_common.Budget(per_condition=1, iterations=1)
    assert crosshair_common.run_check(["verikv.proofs.crosshair.targets.MUTANTS"], budget).status == "error"


def test_targets_hold_on_concrete_examples() -> None:
    queue = crosshair_targets.build_queue(5, [3, 1, 4])
    assert queue is not None and crosshair_targets.queue_popleft_ids(queue, 2) and queue.ids() == [4]
    assert crosshair_targets.queue_append_ids(3, True, False, 0, False, 2, 0, 1)  # [1] + [2]
    pool = PagePool(4)
    pool.get_new_page_ids(2)
    assert crosshair_targets.pool_free_page_ids(pool, 1, 1, 2)  # a double free: rejected by both, state kept
    assert pool.ref_count(1) == 1
    assert crosshair_targets.full_hit(True, True, True, False, 3, 1, 2, 1, 0)


def test_registered_with_the_runner() -> None:
    """Registered checks are run (and must hold) by tests/test_proofs.py, like `verikv prove`."""
    assert {c.name for c in CHECKS} <= {c.name for c in discover_checks()}
    assert {m.name for m in MUTANTS} <= {m.name for m in discover_mutants()}
    assert all(c.kind == "crosshair" and c.bound and c.transition for c in CHECKS)


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_mutant_is_caught(mutant) -> None:
    assert mutant.detect(), f"{mutant.name} survived every CrossHair check"


# --- the manager drivers of verikv.proofs.crosshair.manager ------------------------------------

MANAGER_DRIVER_ARGS = {
    "manager_lookup": (4, True, 4, 0, 1, 0, 1),
    "manager_allocate_slots": (4, True, 4, 0, 1, 0, 1, True, 0),
    "manager_cache_pages": (4, False, 4, 0, 1, 0, 1, 4),
    "manager_free": (4, True, 3, 0, 1, 0, 1),
    "manager_decode_step": (4, True, 3, 0, 1, 0, 1, 1),
}


@pytest.mark.parametrize("driver", sorted(MANAGER_DRIVER_ARGS))
def test_manager_driver_agrees_on_a_warm_cache(driver: str) -> None:
    from verikv.proofs.crosshair import manager as crosshair_manager

    assert getattr(crosshair_manager, driver)(*MANAGER_DRIVER_ARGS[driver]) is True


@pytest.mark.parametrize("driver", ["manager_lookup", "manager_allocate_slots"])
def test_manager_driver_catches_a_colliding_hash(driver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every page key the same number: the manager hits pages of another content (a false hit
    the spec, which keys by content, never makes), and the driver reports it."""
    from verikv.proofs.crosshair import manager as crosshair_manager
    from verikv.proofs.crosshair.targets import Mismatch

    monkeypatch.setattr(crosshair_manager, "HASH_SCHEME", lambda: (lambda message: 7))
    args = (4, True, 4, 1, 1, 1, 1) + MANAGER_DRIVER_ARGS[driver][7:]
    with pytest.raises(Mismatch):
        getattr(crosshair_manager, driver)(*args)


def test_manager_checks_report_a_budget_not_a_proof() -> None:
    from verikv.proofs.crosshair import manager as crosshair_manager

    checks = crosshair_manager.checks()
    assert {c.transition for c in checks} >= {"manager.lookup", "manager.allocate_slots", "manager.cache_pages",
                                              "manager.free_request", "manager.allocate_slots (decode)"}
    assert all("until exhausted" in c.bound for c in checks)
    assert crosshair_manager.BUDGET.iterations is None  # run() then requires "confirmed"


def test_queue_remove_id_driver_sees_a_stale_back_link() -> None:
    """The driver checks the back links, which the abstraction (the forward walk) does not show."""
    cap, order = crosshair_targets.queue_choice(3, [1, 1], 0, 0, crosshair_targets.SMALL_QUEUE_CAPACITY)
    assert (cap, order) == (3, [1, 2])
    assert crosshair_targets.queue_remove_id(3, True, True, False, 0, False, 1)
    crosshair_targets.activate("QueueStalePrevOnUnlink")
    try:
        with pytest.raises(crosshair_targets.Mismatch, match="links consistent"):
            crosshair_targets.queue_remove_id(3, True, True, False, 0, False, 1)  # [1, 2] without 1
    finally:
        crosshair_targets._ACTIVE["queue"] = crosshair_targets.FreeCachePageQueue


def test_exhaustive_manager_checks_catch_a_colliding_hash() -> None:
    """The CrossHair runs themselves (not only the drivers) find the false hit of a colliding hash."""
    from verikv.proofs.crosshair import manager as crosshair_manager

    (mutant,) = crosshair_manager.mutants()
    assert mutant.name in {m.name for m in discover_mutants()}
    assert mutant.detect() == ["crosshair:manager_lookup", "crosshair:manager_allocate_slots"]


def test_an_enumerating_target_that_confirms_is_reported_bounded_exhaustive() -> None:
    from verikv.proofs.crosshair.common import bounded_exhaustive
    from verikv.proofs.runner.registry import Outcome

    confirmed = check_outcome([_verdict(1, "info", "Confirmed over all paths.")], 1, 0, "")
    outcome = bounded_exhaustive(confirmed, "queues of up to 3 ids")
    assert outcome.status == "passed" and outcome.ok
    assert "bounded-exhaustive over queues of up to 3 ids" in outcome.detail
    assert bounded_exhaustive(Outcome("failed", "x"), "d").status == "failed"
    enumerating = {c.name for c in discover_checks() if c.bound.startswith("bounded-exhaustive")}
    assert {"crosshair:queue_remove_id", "crosshair:queue_append_ids", "crosshair:manager_lookup"} <= enumerating
