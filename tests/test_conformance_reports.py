"""What a conformance failure looks like to its user: the first report at once, a shrunk one
within the shrink budget, the calls actually made, honest wording, and defaults that explain
themselves (a black-box adapter under the white-box default, the shared rejection default,
pytest's ``--hypothesis-seed``, the missing ``testing`` extra)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broken_managers import MALFORMED_OWN_HIT, STALE_KEY
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from verikv.errors import InvalidArgumentError
from verikv.spec.manager import RequestView
from verikv.testing import live
from verikv.testing._transcript import RecordedAdapter
from verikv.testing.conformance import (
    CacheManagerAdapter,
    ConformanceConfig,
    ConformanceError,
    check_conformance,
    conformance_test,
)
from verikv.testing.manager_machine import LAYOUTS, MachineOptions, ManagerMachine, Mode, machine_factory

HERE = Path(__file__).resolve().parent
DOC = HERE.parent / "docs" / "model-testing.md"


@pytest.fixture
def shown() -> Iterator[list[str]]:
    """What the harness prints live during the test (instead of pytest's terminal)."""
    texts: list[str] = []
    with live.writing_to(texts.append):
        yield texts


TOY_STEPS = 100
"""Steps per run for the stale-key toy: its bug shows once a cached page is handed out again, which
takes longer runs than Hypothesis' default 50 (at 50, the derandomized ci run happens to miss it)."""


def stale_key_error(config: ConformanceConfig, layout: str = "full") -> ConformanceError:
    with pytest.raises(ConformanceError) as caught:
        check_conformance(STALE_KEY, layout, config)
    return caught.value


# --- first report at once, then shrunk within the budget -------------------------------------------

def test_the_first_report_is_printed_before_shrinking(shown: list[str]) -> None:
    """The toy with a half-done lazy eviction: its unshrunk report is printed, then shrinking
    stops at the budget and the report says so (its run is shorter than the first)."""
    error = stale_key_error(ConformanceConfig(mode="black-box", profile="ci", shrink_seconds=1,
                                                stateful_step_count=TOY_STEPS))
    assert len(shown) == 1 and "shrinking it for up to 1 s" in shown[0]
    assert "(as generated, not shrunk yet):" in shown[0] and "INV-HIT-SAFE" in shown[0]
    first_calls = [line for line in shown[0].splitlines() if line.startswith("  ")]
    assert "INV-HIT-SAFE" in error.names
    assert error.shrinking == "shrunk by Hypothesis until the 1 s shrink budget ran out; a shorter one may exist"
    assert 0 < len(error.calls) <= len(first_calls)


def test_without_shrinking_nothing_is_printed_and_the_report_says_so(shown: list[str]) -> None:
    error = stale_key_error(ConformanceConfig(mode="black-box", profile="ci", shrink=False,
                                              stateful_step_count=TOY_STEPS))
    assert shown == []
    assert "(as generated, not shrunk: shrink=False):" in str(error)
    assert "shrunk by Hypothesis" not in str(error)


def test_a_profile_without_the_shrink_phase_is_not_called_shrunk(shown: list[str]) -> None:
    settings.register_profile("no-shrink-phase", settings.get_profile("ci"), phases=[Phase.explicit, Phase.generate],
                              stateful_step_count=TOY_STEPS)
    error = stale_key_error(ConformanceConfig(mode="black-box", profile="no-shrink-phase"))
    assert error.shrinking == "as generated, not shrunk: the Hypothesis profile leaves out the shrink phase"
    assert shown == []


def test_the_layouts_of_a_test_class_share_one_shrink_budget(shown: list[str]) -> None:
    """The first failing layout spends the budget; the next reports its run as generated at
    once, so failing layouts do not multiply the wait."""
    case = conformance_test(STALE_KEY, ConformanceConfig(mode="black-box", profile="ci", shrink_seconds=1,
                                                         layouts=("full", "full+sliding(window>page)"),
                                                         stateful_step_count=TOY_STEPS))
    errors = []
    for name in ("test_full", "test_full_sliding_window_gt_page"):
        with pytest.raises(ConformanceError) as caught:
            getattr(case(name), name)()
        errors.append(caught.value)
    assert errors[0].shrinking.startswith("shrunk by Hypothesis until the 1 s shrink budget ran out")
    assert errors[1].shrinking == "as generated, not shrunk: the shrink budget was spent on earlier layouts " \
                                  "of this test class"
    assert len(shown) == 1  # only the layout that was shrunk printed a first report


@pytest.mark.parametrize("seconds", [0, -1, float("nan"), float("inf"), True, "20"])
def test_the_shrink_budget_is_a_positive_number_of_seconds(seconds: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="shrink_seconds"):
        ConformanceConfig(shrink_seconds=seconds)


# --- one report per failure in pytest's output, live first report, --hypothesis-seed ---------------

def run_pytest(tmp_path: Path, config: str, *options: str, ci: bool = True) -> subprocess.CompletedProcess[str]:
    """pytest in a fresh interpreter on a conformance test of the stale-key toy."""
    (tmp_path / "test_toy_conformance.py").write_text(textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {str(HERE)!r})
        from broken_managers import STALE_KEY
        from hypothesis import Phase, settings
        from verikv.testing.conformance import ConformanceConfig, conformance_test
        settings.register_profile("toy-random", database=None, deadline=None)
        TestToy = conformance_test(STALE_KEY, ConformanceConfig({config}))
        """))
    env = {"PATH": "/usr/bin:/bin", "CI": "true" if ci else ""}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *options,
                           str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)


def test_pytest_shows_the_first_report_live_and_the_shrunk_one_once(tmp_path: Path) -> None:
    run = run_pytest(tmp_path, f"layouts=('full',), mode='black-box', profile='ci', shrink_seconds=1, "
                                   f"stateful_step_count={TOY_STEPS}")
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "PLEASE REPORT" not in out + run.stderr and "five minutes" not in out + run.stderr
    live_at, failures_at = out.index("verikv conformance: a failure after"), out.index("= FAILURES =")
    assert live_at < failures_at  # printed while the test ran, past pytest's capture
    assert out.count("not shrunk yet") == 1
    assert out.count("shrink budget ran out") == 1, out  # the shrunk report, once (not in the summary)
    summary = out[out.index("short test summary info"):]
    assert "FAILED test_toy_conformance.py::TestToy::test_full - layout 'full', seed 0: " in summary
    assert "Calls to the adapter" not in summary


def test_pytest_hypothesis_seed_is_the_runs_seed(tmp_path: Path) -> None:
    run = run_pytest(tmp_path, f"layouts=('full',), mode='black-box', profile='toy-random', shrink=False, "
                               f"stateful_step_count={TOY_STEPS}", "--hypothesis-seed=5")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "layout 'full', seed 5: " in run.stdout


# --- what the report shows ---------------------------------------------------------------------------

def test_a_run_without_features_shows_none_of_them() -> None:
    error = stale_key_error(ConformanceConfig(mode="black-box", profile="ci", shrink=False, features=frozenset(),
                                              stateful_step_count=TOY_STEPS))
    for feature in ("cache_salt", "lora", "mm_features", "prompt_logprobs"):
        assert feature not in str(error), str(error)
    assert any(re.match(r"r\d+ = new_request\(tokens=\[[^]]*\]\)$", call) for call in error.calls), error.calls


def test_the_transcript_shows_what_each_call_carried() -> None:
    adapter = RecordedAdapter(CacheManagerAdapter(LAYOUTS["full"].config))
    plain = adapter.new_request(RequestView("r0", (0, 1, 2, 0, 1)))
    salted = adapter.new_request(RequestView("r1", (0, 1, 2), cache_salt="tenant-b", lora_id=7))
    hit, _ = adapter.lookup(plain)
    adapter.allocate(plain, 5, 0, hit, 2, False)
    with pytest.raises(InvalidArgumentError):
        adapter.allocate(salted, 0, 0, None, 0, False)
    adapter.cache(plain, 4)
    adapter.free(plain)
    assert adapter.calls == [
        "r0 = new_request(tokens=[0, 1, 2, 0, 1])",
        "r1 = new_request(tokens=[0, 1, 2], cache_salt='tenant-b', lora_id=7)",
        "lookup(r0) -> [[]], 0 tokens",
        "allocate(r0, num_new_tokens=5, hit=[[]], num_lookahead_tokens=2) -> [[1, 2]]",
        "allocate(r1, num_new_tokens=0) raised InvalidArgumentError: num_new_tokens must be >= 1, got 0",
        "cache(r0, num_tokens=4)",
        "free(r0)",
    ]


@pytest.mark.parametrize("mode", ["white-box", "black-box"])
def test_a_bad_input_report_names_the_call(mode: Mode) -> None:
    with pytest.raises(ConformanceError) as caught:
        check_conformance(MALFORMED_OWN_HIT, "full+sliding(window>page)",
                          ConformanceConfig(mode=mode, profile="ci", shrink=False, free_order=None, max_examples=150))
    accepted = [line for line in caught.value.details if "accepted by the implementation" in line]
    assert accepted and all("own-hit-" in line and ": allocate(r" in line for line in accepted), caught.value.details


def test_the_docs_show_a_report_the_harness_prints() -> None:
    """docs/model-testing.md's example report uses the format the harness prints."""
    text = DOC.read_text()
    assert "Calls to the adapter, in order; the check failed after the last one (shrunk by Hypothesis in" in text


# --- defaults that explain themselves ----------------------------------------------------------------

class BlackBoxAdapter:
    """An adapter without ``abstraction()``: every call forwarded to verikv's manager, and
    verikv's typed errors turned into the ValueError another engine would raise."""

    def __init__(self, config: Any) -> None:
        self.inner = CacheManagerAdapter(config)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if name == "abstraction" or not callable(method):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            except InvalidArgumentError as exc:
                raise ValueError(str(exc)) from None
        return call


def test_a_black_box_adapter_under_the_white_box_default_is_told_how_to_choose() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        check_conformance(BlackBoxAdapter, "full")
    message = str(caught.value)
    assert "no abstraction() method" in message and "white-box is the default" in message
    assert "ConformanceConfig(mode='black-box')" in message


def test_an_adapter_missing_protocol_methods_is_named() -> None:
    lacks = r"object lacks the adapter \(verikv.testing.adapter.PageManagerAdapter\) methods \['new_request', 'lookup'"
    with pytest.raises(InvalidArgumentError, match=lacks):
        check_conformance(lambda config: object(), "full", ConformanceConfig(mode="black-box"))  # type: ignore[arg-type, return-value]


def test_one_rejection_default_any_exception_unless_the_adapter_narrows_it() -> None:
    """The documented state-machine snippet with another engine's adapter (its own exception
    types) runs; verikv's own adapter keeps requiring typed errors."""
    assert ManagerMachine(LAYOUTS["full"], BlackBoxAdapter).rejection == (Exception,)
    assert ManagerMachine(LAYOUTS["full"], CacheManagerAdapter).rejection == (InvalidArgumentError,)
    assert ConformanceConfig().machine_options().rejection is MachineOptions().rejection is None
    factory = machine_factory(LAYOUTS["full"], BlackBoxAdapter, MachineOptions(mode="black-box"))
    run_state_machine_as_test(factory, settings=settings(settings.get_profile("ci"), max_examples=20))  # type: ignore[arg-type]


def test_without_hypothesis_the_import_names_the_extra() -> None:
    shim = ("import sys; sys.modules['hypothesis'] = None\n"
            "import verikv.testing.adapter  # the adapter protocol needs no extra\n"
            "try:\n    import verikv.testing.conformance\n"
            "except ModuleNotFoundError as error:\n    print(error)\n")
    done = subprocess.run([sys.executable, "-c", shim], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("verikv.testing needs Hypothesis (hypothesis is missing): "
                                   "pip install 'verikv[testing]'")


@pytest.mark.parametrize("bad", [dict(profile="nope"), dict(profile=7), dict(layouts="full"),
                                 dict(skip_layouts="dp2"), dict(checks=frozenset({1})), dict(shrink="yes")])
def test_more_bad_configuration_is_rejected(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        ConformanceConfig(**bad)

