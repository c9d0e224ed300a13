"""Hostile cases for public entry points no other case module calls: sizing's geometry and
catalog building blocks, and the model-testing harness's building blocks.

``CASES`` is a list of `hostile.Case`: each entry point with every hostile value in each
parameter (`hostile.substitution_cases`), beside one valid call that must succeed.
"""

from __future__ import annotations

from typing import Any

from hostile import Case, P, World, substitution_cases

from verikv import PagePool
from verikv.sizing import AttentionLayer, MLALayer, ModelGeometry, get_accelerator, preset_names, uniform_model
from verikv.spec.abstraction import abstract_pool
from verikv.spec.manager import Hit
from verikv.testing import manager_machine, pool_machine
from verikv.testing.adapter import ArmableHash, CacheManagerAdapter, KeyFailingAdapter, build_cache_manager, page_ids_of
from verikv.testing.conformance import ConformanceConfig, check_conformance, check_pool_conformance, conformance_test
from verikv.testing.manager_machine import LAYOUTS, Layout, MachineOptions, machine_factory
from verikv.testing.pool_machine import detection_settings

COUNT_BIG = frozenset({"2**31", "2**63", "10**100"})


def empty_world() -> World:
    return {}


def _config() -> Any:
    """The manager configuration of the harness's ``full`` layout."""
    return LAYOUTS["full"].config


def sizing_cases() -> list[Case]:
    cases = substitution_cases("AttentionLayer", empty_world, lambda w, **k: AttentionLayer(**k), dict(
        num_kv_heads=P(8, "count1", either=COUNT_BIG | {"np_int", "hashflip_int"}),
        head_dim=P(128, "count1", either=COUNT_BIG | {"np_int", "hashflip_int"}),
        sliding_window=P(None, "opt_count1", either=COUNT_BIG),
        attention_chunk_size=P(None, "opt_count1", either=COUNT_BIG)))
    cases += substitution_cases("MLALayer", empty_world, lambda w, **k: MLALayer(**k), dict(
        kv_lora_rank=P(512, "count1", either=COUNT_BIG | {"np_int", "hashflip_int"}),
        qk_rope_head_dim=P(64, "count1", either=COUNT_BIG | {"np_int", "hashflip_int", "zero"})))
    cases += substitution_cases("ModelGeometry", empty_world, lambda w, **k: ModelGeometry(**k), dict(
        name=P("m", "object", accept={"str"}, either={"hashflip_str"}),
        layers=P(lambda: (AttentionLayer(8, 128),), "object"),
        dtype=P("bfloat16", "object"),
        weights_bytes=P(None, "opt_count0", either=COUNT_BIG | {"np_int", "hashflip_int"}),
        max_model_len=P(None, "opt_count1", either=COUNT_BIG | {"np_int", "hashflip_int"})))
    cases += substitution_cases("uniform_model", empty_world, lambda w, **k: uniform_model(**k), dict(
        name=P("m", "object", accept={"str"}, either={"hashflip_str"}),
        num_layers=P(2, "count1", either=COUNT_BIG | {"np_int", "hashflip_int"}),
        num_kv_heads=P(8, "count1", either=COUNT_BIG | {"np_int", "hashflip_int"}),
        head_dim=P(128, "count1", either=COUNT_BIG | {"np_int", "hashflip_int"})))
    cases += substitution_cases("get_accelerator", empty_world, lambda w, **k: get_accelerator(**k),
                                {"name": P("h100", "object", either={"hashflip_str"})})
    cases.append(Case("preset_names[]", empty_world, lambda w: preset_names(), "accept"))
    return cases


def harness_cases() -> list[Case]:
    cases = substitution_cases("testing.build_cache_manager", empty_world,
                               lambda w, **k: build_cache_manager(**k), {"config": P(_config, "object")})
    cases += substitution_cases("testing.CacheManagerAdapter", empty_world,
                                lambda w, **k: CacheManagerAdapter(**k), {"config": P(_config, "object")})
    cases += substitution_cases("testing.KeyFailingAdapter", empty_world,
                                lambda w, **k: KeyFailingAdapter(**k), {"config": P(_config, "object")})
    cases.append(Case("testing.ArmableHash[]", empty_world, lambda w: ArmableHash(), "accept"))
    cases += substitution_cases("testing.page_ids_of", empty_world, lambda w, **k: page_ids_of(**k),
                                {"result": P(lambda: [[1, 2]], "object", either=frozenset({"list", "empty_list",
                                                                                           "ragged", "np_array2d"}))})
    cases += substitution_cases("testing.manager_machine.page_ids_or_none", empty_world,
                                lambda w, **k: manager_machine.page_ids_or_none(**k),
                                {"result": P(lambda: [[1, 2]], "object", accept={"None"},
                                             either={"list", "empty_list", "ragged", "np_array2d"})})
    cases += substitution_cases("testing.Layout", empty_world, lambda w, **k: Layout(**k), dict(
        name=P("full", "object", accept={"str", "empty_str"}, either={"hashflip_str", "surrogate"}),
        config=P(_config, "object")))
    cases += substitution_cases("testing.MachineOptions", empty_world, lambda w, **k: MachineOptions(**k), dict(
        mode=P("white-box", "object"), bad_inputs=P(True, "bool")))
    cases += substitution_cases("testing.machine_factory", empty_world, lambda w, **k: machine_factory(**k),
                                {"layout": P(lambda: Layout("full", _config()), "object")})
    cases += substitution_cases("testing.pool_machine.detection_settings", empty_world,
                                lambda w, **k: detection_settings(**k), dict(
                                    max_examples=P(5, "count1", either=COUNT_BIG | {"np_int", "hashflip_int"}),
                                    steps=P(5, "count1", either=COUNT_BIG | {"np_int", "hashflip_int"})))
    cases += _search_cases()
    return cases


def _pool(num_pages: int, free_order: str) -> PagePool:
    return PagePool(num_pages, free_order=free_order)


def _tiny() -> ConformanceConfig:
    """A run of a few short examples: the valid calls search briefly, the refused ones never start."""
    return ConformanceConfig(max_examples=2, stateful_step_count=3, shrink=False, seed=0)


def _search_cases() -> list[Case]:
    """The harness's searches, each with a tiny budget, and their building blocks."""
    cases = substitution_cases("testing.ConformanceConfig", empty_world, lambda w, **k: ConformanceConfig(**k), dict(
        max_examples=P(2, "opt_count1", either=COUNT_BIG | {"np_int", "hashflip_int"}),
        mode=P("white-box", "object")))
    cases += substitution_cases("testing.check_conformance", empty_world, lambda w, **k: check_conformance(**k), dict(
        adapter_factory=P(lambda: CacheManagerAdapter, "object"), layout=P("full", "object"),
        config=P(_tiny, "object")))
    cases += substitution_cases("testing.check_pool_conformance", empty_world,
                                lambda w, **k: check_pool_conformance(**k), dict(
                                    pool_factory=P(lambda: _pool, "object"), config=P(_tiny, "object")))
    cases += substitution_cases("testing.conformance_test", empty_world, lambda w, **k: conformance_test(**k), dict(
        adapter_factory=P(lambda: CacheManagerAdapter, "object"), config=P(_tiny, "object")))
    cases += substitution_cases("testing.manager_machine.find_manager_failure", empty_world,
                                lambda w, **k: manager_machine.find_manager_failure(
                                    **k, run_settings=detection_settings(2, 3)), dict(
                                    make_manager=P(lambda: build_cache_manager, "object"),
                                    layout=P(lambda: LAYOUTS["full"], "object")))
    cases += substitution_cases("testing.pool_machine.find_pool_failure", empty_world,
                                lambda w, **k: pool_machine.find_pool_failure(
                                    **k, run_settings=detection_settings(2, 3)),
                                {"factory": P(lambda: _pool, "object")})
    cases += substitution_cases("testing.pool_machine.make_pool_machine", empty_world,
                                lambda w, **k: pool_machine.make_pool_machine(**k),
                                {"factory": P(lambda: _pool, "object")})
    cases += substitution_cases("testing.pool_machine.pool_invariant_failures", empty_world,
                                lambda w, **k: pool_machine.pool_invariant_failures(**k), dict(
                                    pool=P(lambda: PagePool(4), "object"),
                                    state=P(lambda: abstract_pool(PagePool(4)), "object")))
    cases.append(Case("testing.manager_machine.detection_settings[]", empty_world,
                      lambda w: manager_machine.detection_settings(), "accept"))
    cases += substitution_cases("testing.manager_machine.window_pages_real", empty_world,
                                lambda w, **k: manager_machine.window_pages_real(**k), dict(
                                    config=P(_config, "object"), hit=P(_no_hit, "object")))
    return cases


def _no_hit() -> Any:
    """A miss of the one-group ``full`` layout."""
    return Hit(((),), 0)


CASES: list[Case] = sizing_cases() + harness_cases()
