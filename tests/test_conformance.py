"""The conformance harness: verikv passes it in both modes, each deliberately broken manager is
caught under the invariant it breaks, failures carry a shrunk operation sequence, and the
eSurge-style adapter printed in docs/model-testing.md (under 50 lines) runs as printed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import unittest
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from broken_managers import BROKEN, MALFORMED_OWN_HIT, OBSERVABLE, RefcountsNeverDecremented
from hypothesis import settings

from verikv.errors import InvalidArgumentError
from verikv.page_pool import PagePool
from verikv.proofs.mutants.pool import DoubleFreeAccepted, FreedPagesReversed, UsageCountsNullPage
from verikv.spec.manager import GroupLayout, Hit, ManagerConfig
from verikv.testing import live
from verikv.testing.conformance import (
    CHECK_NAMES,
    CacheManagerAdapter,
    ConformanceConfig,
    ConformanceError,
    PageManagerAdapter,
    WhiteBoxAdapter,
    build_cache_manager,
    check_conformance,
    check_pool_conformance,
    conformance_test,
)
from verikv.testing.manager_machine import FEATURES, LAYOUTS, ManagerMachine, window_pages_real

DOC = Path(__file__).resolve().parents[1] / "docs" / "model-testing.md"
MULTI_GROUP = "full+sliding(window>page)"
BLACK_BOX_NAMES = {
    "never-decrements-refcounts": "INV-CONSERVE",
    "evicts-page-in-use": "INV-CONSERVE",
    "hit-of-wrong-content": "INV-HIT-SAFE",
    "non-atomic-multi-group": "INV-ATOMIC",
}
"""What a black-box or policy-free run reports for each broken manager (it sees the bug through
a count, a hit's content, or a state change after a failed allocation)."""


SHRINKS_AS_WRITTEN = hypothesis.__version_info__ >= (6, 170)
"""The fixed-seed runs below name the check they expect, as Hypothesis 6.170 generates and shrinks
them. Older releases allowed by pyproject (CI's lowest-versions run) generate other steps: the bug
is still caught, but another check may fail first, so there only "caught" is asserted."""


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
                                      ConformanceConfig(free_order=None, eagle_rule=None, max_examples=12,
                                                        profile="ci"))
TestVeriKVBlackBox = conformance_test(CacheManagerAdapter, ConformanceConfig(
    free_order=None, eagle_rule=None, mode="black-box", max_examples=12, profile="ci"))
TestVeriKVPolicyFree = conformance_test(CacheManagerAdapter, ConformanceConfig(
    free_order=None, eagle_rule=None, mode="policy-free", max_examples=10, profile="ci"))


def test_every_layout_is_a_test_method() -> None:
    names = {name for name in dir(TestVeriKVWhiteBox) if name.startswith("test_")}
    assert len(names) == len(LAYOUTS)
    assert {"test_full", "test_full_sliding_window_le_page", "test_full_sliding_window_gt_page"} <= names


# --- every broken manager is caught, by name ----------------------------------------------------

@pytest.mark.parametrize("mode", ["white-box", "black-box", "policy-free"])
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_manager_is_caught_by_name(name: str, mode: str) -> None:
    factory, white_box_name = BROKEN[name]
    expected = white_box_name if mode == "white-box" else BLACK_BOX_NAMES[name]
    with pytest.raises(ConformanceError) as caught:
        check_conformance(factory, MULTI_GROUP, fast(mode=mode))
    assert caught.value.names and caught.value.layout == MULTI_GROUP
    if SHRINKS_AS_WRITTEN:
        assert expected in caught.value.names, str(caught.value)


@pytest.mark.parametrize("mode", ["white-box", "black-box"])
def test_a_malformed_hit_is_rejected_even_as_the_managers_own_result(mode: str) -> None:
    """The manager's own latest lookup result, claimed with a count it does not cover or with a
    page id removed from it, must be rejected like any other malformed hit (a shortcut for the
    manager's own result could skip validation). Only the bad-input cases send it."""
    with pytest.raises(ConformanceError) as caught:  # 150 runs: the ci profile's 100 do not reach it
        check_conformance(MALFORMED_OWN_HIT, MULTI_GROUP, fast(mode=mode, max_examples=150))
    assert {"REFINEMENT", "INV-ATOMIC"} & set(caught.value.names), str(caught.value)
    assert "rejected by the spec" in str(caught.value) or "INV-ATOMIC" in caught.value.names, str(caught.value)
    check_conformance(MALFORMED_OWN_HIT, MULTI_GROUP, fast(mode=mode, bad_inputs=False, max_examples=30))


def test_non_atomic_allocation_needs_several_groups() -> None:
    """The group-by-group bug is invisible with one group: the harness reports nothing there."""
    factory, _ = BROKEN["non-atomic-multi-group"]
    check_conformance(factory, "full", fast(max_examples=30))


def black_box_names_here(bug: str) -> list[str]:
    """The failed checks of a black-box run of ``bug``'s manager enforcing only its invariant."""
    factory, name = OBSERVABLE[bug]
    try:
        check_conformance(factory, "full+sliding(window<=page)", fast(mode="black-box", checks=frozenset({name})))
    except ConformanceError as failure:
        return failure.names
    return []


@pytest.mark.parametrize("bug", sorted(OBSERVABLE))
def test_black_box_page_checks_can_fail(bug: str) -> None:
    """The black-box forms of INV-FREE-IFF-ZERO (a page handed out that is held elsewhere) and
    INV-NULL (page 0 handed out) are not vacuous: enforced alone, each catches its bug. The
    derandomized run is made in a fresh interpreter: Hypothesis also draws from constants of the
    modules a process has imported, and in a pytest worker another failure (a free count out of
    range) can come first."""
    script = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
              "from test_conformance import black_box_names_here; "
              f"print(json.dumps(black_box_names_here({bug!r})))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [OBSERVABLE[bug][1]], out.stdout


def test_failure_reports_names_and_the_calls_of_a_shrunk_run() -> None:
    """Shrunk to the end (the budget is far above the seconds it takes), after the run as
    generated was printed."""
    factory, _ = BROKEN["never-decrements-refcounts"]
    shown: list[str] = []
    with live.writing_to(shown.append), pytest.raises(ConformanceError) as caught:
        check_conformance(factory, "full", ConformanceConfig(profile="ci", shrink_seconds=3600))
    assert len(shown) == 1 and "(as generated, not shrunk yet)" in shown[0]
    error = caught.value
    assert error.names == ["INV-REF-COUNT", "REFINEMENT"]
    assert error.steps[0] == "state = ManagerMachine()" and error.steps[-1] == "state.teardown()"
    assert error.calls[0].startswith("r0 = new_request(tokens=[") and error.calls[-2:] == ["free(r0)", "finish(r0)"]
    assert len(error.calls) <= 8, error.calls
    message = str(error)
    assert message.startswith("layout 'full', seed 0: INV-REF-COUNT, REFINEMENT")
    assert "; the check failed after the last one (shrunk by Hypothesis in " in message
    doc = DOC.read_text()
    assert "layout 'full', seed 0: INV-REF-COUNT, REFINEMENT" in doc  # the failure the docs show
    assert all(f"  {call}\n" in doc for call in error.calls), error.calls


def test_generated_test_case_fails_with_the_invariant_name() -> None:
    factory, expected = BROKEN["evicts-page-in-use"]
    case = conformance_test(factory, fast(layouts=("full",), seed=1))  # (seed 0 first shows INV-REF-COUNT)
    assert issubclass(case, unittest.TestCase)
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(case).run(result)
    assert result.testsRun == 1 and len(result.failures) == 1
    if SHRINKS_AS_WRITTEN:  # (older Hypothesis releases generate other steps: another check may fail first)
        assert expected in result.failures[0][1]


# --- configuration --------------------------------------------------------------------------------

def test_checks_select_what_is_enforced() -> None:
    """A known difference (usage counting the null page, as eSurge does) can be left out."""
    factory = pool_swapped(UsageCountsNullPage)
    with pytest.raises(ConformanceError) as caught:
        check_conformance(factory, "full", fast())
    assert caught.value.names == ["INV-USAGE"]
    check_conformance(factory, "full", fast(checks=CHECK_NAMES - {"INV-USAGE"}, max_examples=30))


class CountingBadInputs(ManagerMachine):
    bad_calls = 0

    def bad_call(self, rid: str, case: str) -> Any:
        CountingBadInputs.bad_calls += 1
        return super().bad_call(rid, case)


def test_bad_inputs_can_be_turned_off() -> None:
    CountingBadInputs.bad_calls = 0
    check_conformance(CacheManagerAdapter, "full", fast(max_examples=10), machine=CountingBadInputs)
    assert CountingBadInputs.bad_calls > 0
    CountingBadInputs.bad_calls = 0
    check_conformance(CacheManagerAdapter, "full", fast(max_examples=10, bad_inputs=False), machine=CountingBadInputs)
    assert CountingBadInputs.bad_calls == 0


def test_claimed_free_order_selects_and_converts_layouts() -> None:
    esurge = ConformanceConfig(free_order="esurge").resolved_layouts()
    assert "full+sliding(unhashed-first)" not in {layout.name for layout in esurge}
    assert {layout.config.free_order for layout in esurge} == {"esurge"}
    unhashed = ConformanceConfig(free_order="unhashed-first", eagle_rule=None).resolved_layouts()
    assert len(unhashed) == len(LAYOUTS) and {layout.config.free_order for layout in unhashed} == {"unhashed-first"}
    both = ConformanceConfig(free_order=None).resolved_layouts()
    assert {layout.config.free_order for layout in both} == {"esurge", "unhashed-first"}
    assert "dp2" not in {layout.name for layout in ConformanceConfig(skip_layouts=("dp2",)).resolved_layouts()}


@pytest.mark.parametrize("bad", [
    dict(checks=frozenset({"INV-NOPE"})), dict(layouts=("no-such-layout",)), dict(skip_layouts=("nope",)),
    dict(layouts=("full+sliding(unhashed-first)",), free_order="esurge"), dict(free_order="lifo"),
    dict(eagle_rule="esurge"), dict(layouts=("full(page 8)+sliding(page 4)(eagle, vllm rule)",)),
    dict(mode="grey-box"), dict(max_examples=0), dict(stateful_step_count=True), dict(seed="7"),
    dict(waivers=frozenset({"everything"})), dict(features=frozenset({"audio"})),
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
    config = ConformanceConfig(mode="black-box", skip_layouts=("dp2", "full+mamba(align)"), max_examples=12,
                               profile="ci")
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


# --- budget, seed, report ------------------------------------------------------------------------

settings.register_profile("conformance-tiny", max_examples=3, database=None, deadline=None)
TINY_RUNS = 20
"""Runs under max_examples=3: Hypothesis adds some that do not count as examples (overruns,
invalid draws: 8 were seen once), never anywhere near its default budget of 100."""


class CountingRuns(ManagerMachine):
    runs = 0

    def teardown(self) -> None:
        CountingRuns.runs += 1


def runs_under(config: ConformanceConfig) -> int:
    CountingRuns.runs = 0
    check_conformance(CacheManagerAdapter, "full", config, machine=CountingRuns)
    return CountingRuns.runs


def test_the_active_profile_sets_the_budget_unless_the_config_does() -> None:
    settings.register_profile("conformance-saved", settings())  # the active profile, to restore
    settings.load_profile("conformance-tiny")
    try:
        assert runs_under(ConformanceConfig()) <= TINY_RUNS
        assert runs_under(ConformanceConfig(max_examples=40)) >= 40
    finally:
        settings.load_profile("conformance-saved")
    assert runs_under(ConformanceConfig(profile="conformance-tiny")) <= TINY_RUNS


def test_a_seed_replays_the_same_failure_and_is_printed() -> None:
    factory, _ = BROKEN["never-decrements-refcounts"]
    config = ConformanceConfig(profile="conformance-tiny", max_examples=50, seed=1234, shrink=False)
    errors = []
    for _ in range(2):
        with pytest.raises(ConformanceError) as caught:
            check_conformance(factory, "full", config)
        errors.append(caught.value)
    assert errors[0].steps == errors[1].steps and errors[0].seed == 1234
    assert str(errors[0]).startswith("layout 'full', seed 1234: ")


def test_a_failure_report_fits_on_one_screen(tmp_path: Path) -> None:
    """Run as a user would: pytest on a conformance test of a broken manager. The failure
    section shows the report, not the harness' source (it once printed 121 lines of
    harness code before the error)."""
    test_file = tmp_path / "test_broken_conformance.py"
    test_file.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from broken_managers import BROKEN\n"
        "from verikv.testing.conformance import ConformanceConfig, conformance_test\n"
        "TestBroken = conformance_test(BROKEN['never-decrements-refcounts'][0],\n"
        "                              ConformanceConfig(layouts=('full',), profile='ci'))\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    failure = run.stdout[run.stdout.index("___ "):run.stdout.index("Captured")]
    lines = failure.splitlines()
    assert "ConformanceError: layout 'full', seed 0: INV-REF-COUNT, REFINEMENT" in failure, failure
    assert len(lines) <= 30 and "def run_state_machine" not in failure and "Traceback" not in failure, failure


# --- modes, waivers, features ----------------------------------------------------------------------

def test_policy_free_mode_accepts_another_legal_free_order() -> None:
    """A pool that links freed pages in the opposite order (a legal policy: any free page may
    be handed out) fails the exact comparison and passes the policy-free one, and the
    ``free-order`` waiver does the same in white-box mode."""
    factory = pool_swapped(FreedPagesReversed)
    with pytest.raises(ConformanceError) as caught:
        check_conformance(factory, MULTI_GROUP, fast())
    assert caught.value.names == ["REFINEMENT"], str(caught.value)
    check_conformance(factory, MULTI_GROUP, fast(mode="policy-free", max_examples=40))
    check_conformance(factory, MULTI_GROUP, fast(waivers=frozenset({"free-order"}), max_examples=40))


def test_a_waiver_lifts_its_check_only() -> None:
    """Usage counting the null page (eSurge's formula) is declared once by name; the other
    checks still run (a second bug is still caught)."""
    factory = pool_swapped(UsageCountsNullPage)
    check_conformance(factory, "full", fast(waivers=frozenset({"usage-formula"}), max_examples=30))
    usage_and_leak = pool_swapped(type("LeakyUsage", (UsageCountsNullPage, RefcountsNeverDecremented), {}))
    with pytest.raises(ConformanceError) as caught:
        check_conformance(usage_and_leak, "full", fast(waivers=frozenset({"usage-formula"})))
    assert "INV-USAGE" not in caught.value.names and "INV-REF-COUNT" in caught.value.names


class NoSaltAdapter(CacheManagerAdapter):
    """An engine without per-tenant salts: it refuses requests that carry one."""

    def new_request(self, view: Any) -> Any:
        if view.cache_salt is not None:
            raise NotImplementedError("this engine has no cache_salt")
        return super().new_request(view)


def test_features_an_engine_lacks_can_be_switched_off() -> None:
    with pytest.raises(ConformanceError):
        check_conformance(NoSaltAdapter, "full", fast())
    check_conformance(NoSaltAdapter, "full", fast(features=FEATURES - {"salt"}, max_examples=30))


def test_a_windowed_hit_needs_real_pages_inside_the_window() -> None:
    config = LAYOUTS["full+sliding(window>page)"].config  # window 9, page 4: the last 2 pages
    assert window_pages_real(config, Hit(((1, 2, 3), (0, 5, 6)), 12))
    assert not window_pages_real(config, Hit(((1, 2, 3), (0, 0, 6)), 12))
    first = LAYOUTS["sliding+full(window<=page)"].config  # window 3 <= page: the last page
    assert not window_pages_real(first, Hit(((4, 0), (1, 2)), 8))
    chunked = LAYOUTS["full+chunked"].config  # chunk 8: pages of the current chunk
    assert window_pages_real(chunked, Hit(((1, 2, 3), (0, 0, 7)), 12))
    assert not window_pages_real(chunked, Hit(((1, 2, 3), (0, 0, 0)), 12))


# --- the pool harness: a double free through an engine's own manager ---------------------------

def engine_pool(pool_class: type) -> Any:
    """A pool factory for the pool machine: the page pool of a freshly built manager."""
    def make(num_pages: int, free_order: str) -> Any:
        config = ManagerConfig((GroupLayout("full", 4),), num_pages, 8, free_order=free_order)  # type: ignore[arg-type]
        manager = build_cache_manager(config)
        manager.page_pool.__class__ = pool_class
        return manager.page_pool
    return make


class IgnoresBadFrees:
    """A pool behind the id-level API that silently ignores a free of the null page or of a page
    nobody holds (accepting it, as eSurge does, without the state damage)."""

    def __init__(self, num_pages: int, free_order: str) -> None:
        self.pool = engine_pool(PagePool)(num_pages, free_order)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)

    def free_page_ids(self, ids: list[int]) -> None:
        if 0 not in ids and all(self.pool.ref_count(p) > 0 for p in ids):
            self.pool.free_page_ids(ids)


def test_the_null_page_free_waiver_lets_the_double_free_show() -> None:
    with pytest.raises(ConformanceError) as caught:
        check_pool_conformance(IgnoresBadFrees, fast(waivers=frozenset({"null-page-free"})))
    assert caught.value.names == ["rejects:double-free"], str(caught.value)
    with pytest.raises(ConformanceError) as caught:
        check_pool_conformance(IgnoresBadFrees, fast())
    assert caught.value.names[0] in ("rejects:double-free", "rejects:null-page"), str(caught.value)


def test_the_usage_formula_waiver_applies_to_the_pool_harness() -> None:
    with pytest.raises(ConformanceError) as caught:
        check_pool_conformance(engine_pool(UsageCountsNullPage), fast())
    assert "INV-USAGE" in caught.value.names, str(caught.value)
    check_pool_conformance(engine_pool(UsageCountsNullPage), fast(waivers=frozenset({"usage-formula"}),
                                                                  max_examples=30))


def test_pool_harness_finds_a_double_free_through_the_managers_pool() -> None:
    check_pool_conformance(engine_pool(PagePool), fast(max_examples=30))
    with pytest.raises(ConformanceError) as caught:
        check_pool_conformance(engine_pool(DoubleFreeAccepted), fast())
    assert caught.value.names and caught.value.layout == "pool"
    if SHRINKS_AS_WRITTEN:
        assert "rejects:double-free" in caught.value.names, str(caught.value)
