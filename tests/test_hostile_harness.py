"""The conformance harness' hostile cases (``tests/hostile_harness_cases.py``, run with every other
cases module by ``tests/test_hostile_inputs.py``) cover what they claim to, and the harness's
building blocks refuse bad arguments with `InvalidArgumentError` before doing anything, while a
factory that raises or an adapter's malformed answer is still reported by the run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

import numpy as np
import pytest
from hostile_harness_cases import CASES, CONFIG_FIELDS
from hypothesis import HealthCheck, Phase, settings

from verikv.errors import InvalidArgumentError
from verikv.page_pool import PagePool
from verikv.spec.abstraction import abstract_pool
from verikv.spec.manager import Hit, ManagerConfig
from verikv.testing import manager_machine, pool_machine
from verikv.testing.adapter import KeyFailingAdapter, page_ids_of
from verikv.testing.conformance import (
    CacheManagerAdapter,
    ConformanceConfig,
    ConformanceError,
    build_cache_manager,
    check_conformance,
)
from verikv.testing.manager_machine import LAYOUTS, Layout, MachineOptions, machine_factory


def test_the_cases_cover_the_harness_entry_points() -> None:
    ids = {case.id.split("[")[0] for case in CASES}
    assert ids == {"harness.ConformanceConfig", "harness.check_conformance", "harness.answer",
                   "testing.live.set_writer", "testing.live.emit", "testing.live.writing_to",
                   "testing.manager_machine.StepDraw"}
    assert len({case.id for case in CASES}) == len(CASES)
    assert set(CONFIG_FIELDS) == {field.name for field in fields(ConformanceConfig)}
    assert {case.expect for case in CASES} == {"accept", "reject", "either"}


# --- typed refusals at the harness's building blocks ------------------------------------------------

FULL = LAYOUTS["full"]
TINY_RUN = settings(max_examples=2, stateful_step_count=3, derandomize=True, database=None, deadline=None,
                    phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck))
"""A run of two short examples: enough for a factory that raises to be met."""


def _pool(num_pages: int, free_order: str) -> PagePool:
    return PagePool(num_pages, free_order=free_order)


def _no_manager(config: ManagerConfig) -> int:
    return 0


def _raises(config: Any, *rest: Any) -> Any:
    raise RuntimeError("the factory failed")


@pytest.mark.parametrize("build", [build_cache_manager, CacheManagerAdapter, KeyFailingAdapter])
def test_a_config_that_is_not_a_manager_config_is_refused(build: Callable[[Any], Any]) -> None:
    with pytest.raises(InvalidArgumentError, match=r"config must be a ManagerConfig, got \{'groups': \(\)\}"):
        build({"groups": ()})
    build(FULL.config)


def test_the_adapter_refuses_a_make_manager_it_cannot_call() -> None:
    with pytest.raises(InvalidArgumentError, match="make_manager must be a class or function"):
        CacheManagerAdapter(FULL.config, "build")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["12", "", {"a": 1}, 3, [1, 2], [[1, "2"]], [[1.0]], [[True]], np.array(3),
                                 [["x"]], [b"ab"]])
def test_page_ids_of_refuses_what_is_not_page_lists(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="page ids must be a collection of page lists"):
        page_ids_of(bad)


def test_page_ids_of_reads_lists_arrays_and_result_objects() -> None:
    class Blocks:
        def get_block_ids(self) -> tuple[list[int], ...]:
            return ([1, 2], [])

    assert page_ids_of([[1, 2], []]) == ((1, 2), ()) == page_ids_of(Blocks())
    assert page_ids_of(np.array([[1, 2]])) == ((1, 2),)
    assert page_ids_of(()) == ()


def test_a_malformed_adapter_answer_is_still_reported_by_the_run() -> None:
    """Inside a run, page ids that are not page lists are the adapter's fault, named as such."""
    class AnswersText(CacheManagerAdapter):
        def page_ids(self, request_id: str) -> Any:
            return "12"

    with pytest.raises(ConformanceError) as caught:
        check_conformance(AnswersText, "full", ConformanceConfig(mode="black-box", profile="ci", shrink=False))
    assert caught.value.names == ["adapter:page_ids"], str(caught.value)


@pytest.mark.parametrize("fields, match", [
    (dict(name=None), "name must be a str"), (dict(name=b"full"), "name must be a str"),
    (dict(config=None), "config must be a ManagerConfig"), (dict(config=FULL), "config must be a ManagerConfig"),
])
def test_a_layout_is_a_name_and_a_manager_config(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        Layout(**{"name": "mine", "config": FULL.config, **fields})
    assert Layout("", FULL.config).config is FULL.config


@pytest.mark.parametrize("fields, match", [
    (dict(mode="grey-box"), "mode must be one of"), (dict(mode=None), "mode must be one of"),
    (dict(bad_inputs=1), "bad_inputs must be a bool"), (dict(bad_inputs=np.bool_(True)), "bad_inputs must be a bool"),
    (dict(key_failures=None), "key_failures must be a bool"), (dict(record_calls="yes"), "record_calls must be a bool"),
    (dict(checks=frozenset({"INV-NOPE"})), "unknown checks"), (dict(checks="REFINEMENT"), "must be a tuple or set"),
    (dict(waivers=frozenset({"everything"})), "unknown waivers"), (dict(features=[1]), "must hold names"),
    (dict(rejection=ValueError), "rejection must be None or a tuple"), (dict(rejection=()), "rejection must be"),
    (dict(rejection=(int,)), "rejection must be"),
])
def test_machine_options_refuse_unknown_modes_names_and_non_bool_flags(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        MachineOptions(**fields)


def test_machine_options_take_name_lists_as_frozensets() -> None:
    options = MachineOptions(mode="black-box", checks=["REFINEMENT"], waivers=("usage-formula",),  # type: ignore[arg-type]
                             features=set())  # type: ignore[arg-type]
    assert (options.checks, options.waivers, options.features) == (
        frozenset({"REFINEMENT"}), frozenset({"usage-formula"}), frozenset())
    assert MachineOptions().checks is None


@pytest.mark.parametrize("args, match", [
    (("full",), "layout must be a Layout"), ((FULL, "adapter"), "make_adapter must be a class or function"),
    ((FULL, CacheManagerAdapter, {"mode": "black-box"}), "options must be a MachineOptions"),
    ((FULL, CacheManagerAdapter, MachineOptions(), object), "machine must be ManagerMachine or a subclass"),
])
def test_machine_factory_refuses_what_it_cannot_run(args: tuple[Any, ...], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        machine_factory(*args)


@pytest.mark.parametrize("counts, match", [
    ((0, 5), "max_examples must be an int >= 1"), ((True, 5), "max_examples must be an int >= 1"),
    ((np.int64(3), 5), "max_examples must be an int >= 1"), ((5, 2.0), "steps must be an int >= 1"),
    ((5, None), "steps must be an int >= 1"),
])
def test_pool_detection_settings_take_exact_int_counts(counts: tuple[Any, Any], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        pool_machine.detection_settings(*counts)
    assert pool_machine.detection_settings(2, 3).max_examples == 2


@pytest.mark.parametrize("args, match", [
    ((None, FULL), "make_manager must be a class or function"),
    ((_no_manager, FULL), r"int lacks the manager \(verikv.CacheManager\) methods \['get_computed_pages'"),
    ((build_cache_manager, "full"), "layout must be a Layout"),
    ((build_cache_manager, FULL, {"max_examples": 2}), "run_settings must be a settings"),
])
def test_find_manager_failure_refuses_a_bad_factory_or_layout(args: tuple[Any, ...], match: str) -> None:
    """Refused before anything runs, instead of reported as a failure of the manager."""
    with pytest.raises(InvalidArgumentError, match=match):
        manager_machine.find_manager_failure(*args)


def test_a_manager_factory_that_raises_is_still_reported_as_a_crash() -> None:
    assert manager_machine.find_manager_failure(_raises, FULL, TINY_RUN) == ["crash:RuntimeError"]


@pytest.mark.parametrize("factory, match", [
    ("PagePool", "factory must be a class or function"),
    (lambda num_pages, free_order: object(), r"object lacks the pool methods \['get_new_page_ids'"),
])
def test_the_pool_machine_refuses_a_factory_that_builds_no_pool(factory: Any, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        pool_machine.make_pool_machine(factory)
    with pytest.raises(InvalidArgumentError, match=match):
        pool_machine.find_pool_failure(factory, TINY_RUN)


@pytest.mark.parametrize("fields, match", [
    (dict(free_orders=()), "free_orders must be a non-empty tuple"),
    (dict(free_orders="esurge"), "free_orders must be a non-empty tuple"),
    (dict(free_orders=("lifo",)), "free_orders must be a non-empty tuple"),
    (dict(waivers=frozenset({"per-call-dp-size"})), "unknown waivers"),
])
def test_the_pool_machine_refuses_unknown_policies_and_waivers(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        pool_machine.make_pool_machine(_pool, **fields)


def test_a_pool_factory_that_raises_is_still_reported_as_a_crash() -> None:
    assert pool_machine.find_pool_failure(_raises, TINY_RUN) == ["crash:RuntimeError"]
    with pytest.raises(InvalidArgumentError, match="run_settings must be a settings"):
        pool_machine.find_pool_failure(_pool, {"max_examples": 2})  # type: ignore[arg-type]


def test_pool_invariant_failures_refuses_what_is_not_a_pool_or_its_state() -> None:
    pool = PagePool(4)
    state = abstract_pool(pool)
    with pytest.raises(InvalidArgumentError, match=r"list lacks the pool \(verikv.spec.abstraction.PoolLike\)"):
        pool_machine.pool_invariant_failures([], state)
    with pytest.raises(InvalidArgumentError, match="state must be a PoolState"):
        pool_machine.pool_invariant_failures(pool, np.array([1, 2]))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="check_usage must be a bool"):
        pool_machine.pool_invariant_failures(pool, state, check_usage=None)  # type: ignore[arg-type]
    assert pool_machine.pool_invariant_failures(pool, state) == []
    assert pool_machine.pool_invariant_failures(pool, replace(state, free=state.free[::-1])) == ["refines-spec"]


def test_window_pages_real_refuses_a_config_or_hit_of_another_type() -> None:
    with pytest.raises(InvalidArgumentError, match="config must be a ManagerConfig"):
        manager_machine.window_pages_real(FULL, Hit(((),), 0))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="hit must be a Hit"):
        manager_machine.window_pages_real(FULL.config, ((), 0))  # type: ignore[arg-type]
    assert manager_machine.window_pages_real(FULL.config, Hit(((),), 0))
