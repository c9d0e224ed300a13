"""The conformance harness: verikv passes it in both modes, each deliberately broken manager is
caught under the invariant it breaks, failures carry a shrunk operation sequence, and the
eSurge-style adapter printed in docs/model-testing.md (under 50 lines) runs as printed."""

from __future__ import annotations

import re
import unittest
from pathlib import Path
from typing import Any

import pytest
from broken_managers import BROKEN, OBSERVABLE, RefcountsNeverDecremented

from verikv.errors import InvalidArgumentError
from verikv.proofs.pool_mutants import UsageCountsNullPage
from verikv.testing.conformance import (
    CHECK_NAMES,
    CacheManagerAdapter,
    ConformanceConfig,
    ConformanceError,
    PageManagerAdapter,
    WhiteBoxAdapter,
    check_conformance,
    conformance_machine,
    conformance_test,
)
from verikv.testing.manager_machine import LAYOUTS, build_cache_manager

DOC = Path(__file__).resolve().parents[1] / "docs" / "model-testing.md"
MULTI_GROUP = "full+sliding(window>page)"
BLACK_BOX_NAMES = {
    "never-decrements-refcounts": "INV-CONSERVE",
    "evicts-page-in-use": "INV-CONSERVE",
    "hit-of-wrong-content": "INV-HIT-SAFE",
    "non-atomic-multi-group": "INV-ATOMIC",
}
"""What a black-box run reports for each broken manager (it sees the bug through a count)."""


def fast(**kw: Any) -> ConformanceConfig:
    """Detection settings: derandomized (the "ci" profile), no shrinking."""
    return ConformanceConfig(**{"free_order": None, "shrink": False, "profile": "ci", **kw})


def pool_swapped(cls: type) -> Any:
    """An adapter factory for verikv's CacheManager whose pool is replaced by a pool mutant."""
    def make(config: Any) -> Any:
        manager = build_cache_manager(config)
        manager.page_pool.__class__ = cls
        return manager
    return lambda config: CacheManagerAdapter(config, make)


# --- verikv conforms, in both modes, on every layout (collected by pytest as unittest cases) ---

TestVeriKVWhiteBox = conformance_test(CacheManagerAdapter,
                                      ConformanceConfig(free_order=None, max_examples=25, profile="ci"))
TestVeriKVBlackBox = conformance_test(CacheManagerAdapter, ConformanceConfig(
    free_order=None, mode="black-box", max_examples=25, profile="ci"))


def test_every_layout_is_a_test_method() -> None:
    names = {name for name in dir(TestVeriKVWhiteBox) if name.startswith("test_")}
    assert len(names) == len(LAYOUTS)
    assert {"test_full", "test_full_sliding_window_le_page", "test_full_sliding_window_gt_page"} <= names


# --- every broken manager is caught, by name ----------------------------------------------------

@pytest.mark.parametrize("mode", ["white-box", "black-box"])
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_manager_is_caught_by_name(name: str, mode: str) -> None:
    factory, white_box_name = BROKEN[name]
    expected = white_box_name if mode == "white-box" else BLACK_BOX_NAMES[name]
    with pytest.raises(ConformanceError) as caught:
        check_conformance(factory, MULTI_GROUP, fast(mode=mode))
    assert expected in caught.value.names, str(caught.value)
    assert caught.value.layout == MULTI_GROUP


def test_non_atomic_allocation_needs_several_groups() -> None:
    """The group-by-group bug is invisible with one group: the harness reports nothing there."""
    factory, _ = BROKEN["non-atomic-multi-group"]
    check_conformance(factory, "full", fast(max_examples=30))


@pytest.mark.parametrize("bug", sorted(OBSERVABLE))
def test_black_box_page_checks_can_fail(bug: str) -> None:
    """The black-box forms of INV-FREE-IFF-ZERO (a page handed out that is held elsewhere) and
    INV-NULL (page 0 handed out) are not vacuous: enforced alone, each catches its bug."""
    factory, name = OBSERVABLE[bug]
    with pytest.raises(ConformanceError) as caught:
        check_conformance(factory, MULTI_GROUP, fast(mode="black-box", checks=frozenset({name})))
    assert caught.value.names == [name], str(caught.value)


def test_failure_reports_names_and_a_shrunk_sequence() -> None:
    factory, _ = BROKEN["never-decrements-refcounts"]
    with pytest.raises(ConformanceError) as caught:
        check_conformance(factory, "full", ConformanceConfig(profile="ci"))
    error = caught.value
    assert error.names == ["INV-REF-COUNT", "REFINEMENT"]
    assert error.steps[0] == "state = Conformance[full]()" and error.steps[-1] == "state.teardown()"
    assert any(step.startswith(("state.abort", "state.preempt", "state.finish")) for step in error.steps)
    assert len(error.steps) <= 12, error.steps
    message = str(error)
    assert message.startswith("layout 'full': INV-REF-COUNT, REFINEMENT") and "Minimal failing sequence" in message
    assert "layout 'full': INV-REF-COUNT, REFINEMENT" in DOC.read_text()  # the failure the docs show


def test_generated_test_case_fails_with_the_invariant_name() -> None:
    factory, expected = BROKEN["evicts-page-in-use"]
    case = conformance_test(factory, fast(layouts=("full",)))
    assert issubclass(case, unittest.TestCase)
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(case).run(result)
    assert result.testsRun == 1 and len(result.failures) == 1
    assert expected in result.failures[0][1]


# --- configuration --------------------------------------------------------------------------------

def test_checks_select_what_is_enforced() -> None:
    """A known difference (usage counting the null page, as eSurge does) can be left out."""
    factory = pool_swapped(UsageCountsNullPage)
    with pytest.raises(ConformanceError) as caught:
        check_conformance(factory, "full", fast())
    assert caught.value.names == ["INV-USAGE"]
    check_conformance(factory, "full", fast(checks=CHECK_NAMES - {"INV-USAGE"}, max_examples=30))


def test_bad_inputs_can_be_turned_off() -> None:
    layout = ConformanceConfig().resolve("full")
    assert callable(conformance_machine(CacheManagerAdapter, layout, fast()).bad_input)
    assert conformance_machine(CacheManagerAdapter, layout, fast(bad_inputs=False)).bad_input is None


def test_claimed_free_order_selects_and_converts_layouts() -> None:
    esurge = ConformanceConfig(free_order="esurge").resolved_layouts()
    assert "full+sliding(unhashed-first)" not in {layout.name for layout in esurge}
    assert {layout.config.free_order for layout in esurge} == {"esurge"}
    unhashed = ConformanceConfig(free_order="unhashed-first").resolved_layouts()
    assert len(unhashed) == len(LAYOUTS) and {layout.config.free_order for layout in unhashed} == {"unhashed-first"}
    both = ConformanceConfig(free_order=None).resolved_layouts()
    assert {layout.config.free_order for layout in both} == {"esurge", "unhashed-first"}
    assert "dp2" not in {layout.name for layout in ConformanceConfig(skip_layouts=("dp2",)).resolved_layouts()}


@pytest.mark.parametrize("bad", [
    dict(checks=frozenset({"INV-NOPE"})), dict(layouts=("no-such-layout",)), dict(skip_layouts=("nope",)),
    dict(layouts=("full+sliding(unhashed-first)",), free_order="esurge"), dict(free_order="lifo"),
    dict(mode="grey-box"), dict(max_examples=0),
])
def test_bad_configuration_is_rejected(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        ConformanceConfig(**bad)


def test_ready_adapter_implements_the_protocols() -> None:
    adapter = CacheManagerAdapter(LAYOUTS["full"].config)
    assert isinstance(adapter, PageManagerAdapter) and isinstance(adapter, WhiteBoxAdapter)


# --- the eSurge-style adapter printed in docs/model-testing.md ----------------------------------------

def doc_adapter_source() -> str:
    """The Python block that follows the ``esurge-adapter`` marker in the docs."""
    match = re.search(r"<!-- esurge-adapter:.*?-->\n```python\n(.*?)```", DOC.read_text(), re.S)
    assert match, "the adapter block is missing from docs/model-testing.md"
    return match.group(1)


def doc_adapter() -> type:
    namespace: dict[str, Any] = {}
    exec(compile(doc_adapter_source(), str(DOC), "exec"), namespace)
    return namespace["ESurgeAdapter"]


def test_doc_adapter_is_under_50_lines_as_the_docs_say() -> None:
    lines = doc_adapter_source().splitlines()
    assert len(lines) < 50
    assert f"{len(lines)} lines" in DOC.read_text()


def test_doc_adapter_passes_black_box_against_verikv() -> None:
    adapter = doc_adapter()
    assert isinstance(adapter(LAYOUTS["full"].config), PageManagerAdapter)
    config = ConformanceConfig(mode="black-box", skip_layouts=("dp2",), max_examples=25, profile="ci")
    for layout in config.resolved_layouts():
        check_conformance(adapter, layout, config)


def test_doc_adapter_catches_a_manager_that_leaks_pages() -> None:
    base = doc_adapter()

    class Leaky(base):  # type: ignore[misc, valid-type]
        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.manager.page_pool.__class__ = RefcountsNeverDecremented

    with pytest.raises(ConformanceError) as caught:
        check_conformance(Leaky, "full", fast(mode="black-box", free_order="esurge"))
    assert "INV-CONSERVE" in caught.value.names
