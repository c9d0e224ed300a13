"""The spec as a conformance test for any page manager: configuration, runs and short reports.

An engine author wraps their page manager in a small adapter (`PageManagerAdapter`, in
`verikv.testing.adapter`) and calls `conformance_test(factory, config)`. The result is a
`unittest.TestCase` class (pytest collects it too) with one test per group layout. Each test
runs verikv's scheduler-shaped state machine (`verikv.testing.manager_machine.ManagerMachine`)
against the adapter and the spec (`verikv.spec.manager`) side by side. A departure fails the test
with a `ConformanceError` that fits on one screen: the layout, the seed, the check names (for
example ``INV-REF-COUNT`` or ``INV-ATOMIC``), their details and the calls made to the adapter in
the failing run. The run is printed as soon as it is found, then shortened by Hypothesis within
a time budget (``shrink_seconds``) and raised.

Three modes (`ConformanceConfig.mode`):

- **white-box**: the adapter also returns a read-only view of its internal state
  (`WhiteBoxAdapter.abstraction`, the protocol of `verikv.spec.abstraction`), and the machine
  compares the abstract state with the spec's after every step;
- **black-box**: only what a scheduler sees is compared: returned page ids, hit lengths, free
  page counts, usage and each request's page table;
- **policy-free**: black-box, but the spec takes the free pages the manager chose and hits are
  compared by length and content, so any legal free-list policy passes.

Known departures are declared by name (`ConformanceConfig.waivers`, see
`manager_machine.WAIVERS`), request features an engine lacks are switched off
(``features``), the policies a manager follows are claimed (``free_order``, ``eagle_rule``:
vLLM 0.33's EAGLE lookup is one of the rules the spec states), and the pool alone can be
checked through an engine's manager with `check_pool_conformance` (a double free is a
pool-level bug).
"""

from __future__ import annotations

import importlib
import math
import numbers
import random
import re
import time
import unittest
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from verikv.testing import _missing_extra

try:
    import hypothesis.core
    from hypothesis import HealthCheck, Phase, Verbosity, seed as hypothesis_seed, settings
    from hypothesis.errors import InvalidArgument
    from hypothesis.reporting import with_reporter
    from hypothesis.stateful import run_state_machine_as_test
except ModuleNotFoundError as missing:  # pragma: no cover - exercised in a subprocess
    raise _missing_extra(missing) from missing

from verikv.errors import InvalidArgumentError
from verikv.spec.hit_rules import EAGLE_RULES, EagleRule
from verikv.spec.pool import FREE_ORDERS, FreeOrder
from verikv.testing import live
from verikv.testing._answers import shown
from verikv.testing._arguments import built_with, checked_count, checked_factory, checked_flag, checked_names
from verikv.testing.adapter import (
    AdapterFactory,
    CacheManagerAdapter,
    PageIds,
    PageManagerAdapter,
    WhiteBoxAdapter,
    build_cache_manager,
)
from verikv.testing.manager_machine import (
    CHECK_NAMES,
    FEATURES,
    LAYOUTS,
    MODES,
    WAIVERS,
    ConformanceFailure,
    Layout,
    MachineOptions,
    ManagerMachine,
    Mode,
    machine_factory,
)

__all__ = ["CHECK_NAMES", "DEFAULT_SHRINK_SECONDS", "FEATURES", "LAYOUTS", "WAIVERS", "AdapterFactory",
           "CacheManagerAdapter", "ConformanceConfig", "ConformanceError", "Layout", "PageIds",
           "PageManagerAdapter", "WhiteBoxAdapter", "build_cache_manager", "check_conformance",
           "check_pool_conformance", "conformance_test"]

MAX_DETAIL_LINES = 8
"""A report shows at most this many failure details (the names list them all)."""
MAX_DETAIL_WIDTH = 160
DEFAULT_SHRINK_SECONDS = 20.0
"""Default shrinking time (`ConformanceConfig.shrink_seconds`): a failure is found in about a
second; shrinking a long scheduler run can take Hypothesis minutes, and most of the shortening
comes early."""


@dataclass(frozen=True)
class ConformanceConfig:
    """How a conformance run is set up.

    ``layouts``: group layouts to test, names of `manager_machine.LAYOUTS` or `Layout`
    objects (default: every layout that applies); ``skip_layouts``: names left out (features
    the implementation does not have, e.g. ``"dp2"``). ``free_order``: the free-order policy the
    implementation follows. Layouts with the default policy ``"esurge"`` run with it, and
    layouts built for another policy run only if it is the one claimed. ``None`` means the
    implementation supports both, and each layout runs with its own policy (the factory
    reads it from ``config.free_order``). ``eagle_rule``: the EAGLE lookup rule the
    implementation follows (`verikv.spec.hit_rules.EAGLE_RULES`: ``"drop-once"``, verikv's
    default, or ``"vllm"``, vLLM 0.33's), chosen the same way: EAGLE layouts with the default
    rule run with the claimed one, a layout built for ``"vllm"`` only when it is claimed (or
    None: both); a white-box view reports its rule as ``eagle_rule`` (absent: ``"drop-once"``).
    ``mode``: ``"white-box"`` (needs `WhiteBoxAdapter`),
    ``"black-box"`` or ``"policy-free"``. ``checks``: the names to enforce (default: all of
    `CHECK_NAMES`). ``waivers``: known departures by name (`WAIVERS`), each lifting one check
    in one scope. ``features``: request features the engine has (`FEATURES`: salt, LoRA,
    images, prompt logprobs). ``bad_inputs``: also check that invalid calls are rejected
    without a state change. ``max_examples`` / ``stateful_step_count``: the Hypothesis budget
    per layout; None (default) takes it from the active profile. ``shrink``: minimise a
    failing sequence. ``profile``: a registered Hypothesis profile to start from instead of
    the active one. ``seed``: the run's random seed, printed in every report; the same seed
    replays the same runs whatever else changed in the code (None: pytest's
    ``--hypothesis-seed`` when given, else 0 under a derandomized profile, else a fresh random
    seed). ``shrink_seconds``: how long shrinking may take, in wall seconds; the layouts of
    one `conformance_test` class share it (see `check_conformance`).
    """

    layouts: tuple[str | Layout, ...] | None = None
    skip_layouts: tuple[str, ...] = ()
    free_order: FreeOrder | None = "esurge"
    eagle_rule: EagleRule | None = "drop-once"
    mode: Mode = "white-box"
    checks: frozenset[str] | None = None
    waivers: frozenset[str] = frozenset()
    features: frozenset[str] = FEATURES
    bad_inputs: bool = True
    max_examples: int | None = None
    stateful_step_count: int | None = None
    shrink: bool = True
    profile: str | None = None
    seed: int | None = None
    shrink_seconds: float = DEFAULT_SHRINK_SECONDS

    def __post_init__(self) -> None:
        if self.free_order is not None and (not isinstance(self.free_order, str) or self.free_order not in FREE_ORDERS):
            raise InvalidArgumentError(f"free_order must be one of {sorted(FREE_ORDERS)} or None, "
                                       f"got {shown(self.free_order)}")
        if self.eagle_rule is not None and (not isinstance(self.eagle_rule, str) or self.eagle_rule not in EAGLE_RULES):
            raise InvalidArgumentError(f"eagle_rule must be one of {EAGLE_RULES} or None, got {shown(self.eagle_rule)}")
        if not isinstance(self.mode, str) or self.mode not in MODES:
            raise InvalidArgumentError(f"mode must be one of {MODES}, got {shown(self.mode)}")
        self._normalize_collections()
        self._check_layouts()
        self._check_budget()
        self._check_profile()

    def _normalize_collections(self) -> None:
        """Layout lists become tuples and name sets frozensets of known names; anything but a
        tuple, list or set there (a string, a number, an array) is refused."""
        for name in ("layouts", "skip_layouts"):
            value = getattr(self, name)
            if value is None and name == "layouts":
                continue
            if not isinstance(value, tuple | list | set | frozenset):
                raise InvalidArgumentError(f"{name} must be a tuple or set, got {shown(value)}")
            object.__setattr__(self, name, tuple(value))
        for name, known in (("checks", CHECK_NAMES), ("waivers", WAIVERS), ("features", FEATURES)):
            value = getattr(self, name)
            if value is not None or name != "checks":
                object.__setattr__(self, name, checked_names(value, name, known))

    def _check_layouts(self) -> None:
        """Every named layout exists, and each chosen one applies under the claimed policy."""
        for name in self.skip_layouts:
            known_layout(name)
        for layout in self.layouts or ():
            if self.resolve(layout) is None:
                raise InvalidArgumentError(f"layout {shown(layout)} tests a free-order policy or EAGLE rule other "
                                           f"than the claimed {self.free_order!r}, {self.eagle_rule!r}")

    def _check_budget(self) -> None:
        """The example budget and the seed are exact ints (None: Hypothesis' own); the shrink
        time is a positive finite number of seconds."""
        for name in ("max_examples", "stateful_step_count"):
            value = getattr(self, name)
            if value is not None:
                checked_count(value, name)
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise InvalidArgumentError(f"seed must be an int or None, got {shown(self.seed)}")
        seconds = self.shrink_seconds
        if (isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or not math.isfinite(seconds)
                or seconds <= 0):
            raise InvalidArgumentError(f"shrink_seconds must be a positive finite number, got {shown(seconds)}")
        checked_flag(self.shrink, "shrink")
        checked_flag(self.bad_inputs, "bad_inputs")

    def _check_profile(self) -> None:
        """``profile`` names a registered Hypothesis settings profile."""
        if self.profile is None:
            return
        if not isinstance(self.profile, str):
            raise InvalidArgumentError(f"profile must be the name of a Hypothesis settings profile, "
                                       f"got {shown(self.profile)}")
        try:
            settings.get_profile(self.profile)
        except InvalidArgument:
            raise InvalidArgumentError(f"no Hypothesis settings profile named {shown(self.profile)} is registered "
                                       f"(hypothesis.settings.register_profile registers one)") from None

    def resolve(self, layout: str | Layout) -> Layout | None:
        """The layout as it runs under the claimed policies, or None when it does not apply;
        `InvalidArgumentError` for a name that is not a layout."""
        found = layout if isinstance(layout, Layout) else LAYOUTS[known_layout(layout)]
        config = found.config
        order = _claimed(config.free_order, self.free_order, "esurge")
        rule = _claimed(config.eagle_rule, self.eagle_rule, "drop-once") if config.use_eagle else config.eagle_rule
        if order is None or rule is None:
            return None
        if (order, rule) == (config.free_order, config.eagle_rule):
            return found
        return replace(found, config=replace(config, free_order=order, eagle_rule=rule))

    def resolved_layouts(self) -> list[Layout]:
        """The layouts to run, each with its free-order policy."""
        chosen = (self.resolve(layout) for layout in (self.layouts or tuple(LAYOUTS)))
        return [layout for layout in chosen if layout is not None and layout.name not in self.skip_layouts]

    def hypothesis_settings(self) -> settings:
        """Settings for one layout's run: the active (or named) profile, with this config's
        budget only where it sets one; no deadline; shrinking as ``shrink`` says."""
        parent = settings.get_profile(self.profile) if self.profile else settings()
        phases = parent.phases if self.shrink else tuple(p for p in parent.phases if p != Phase.shrink)
        return settings(parent, max_examples=self.max_examples or parent.max_examples,
                        stateful_step_count=self.stateful_step_count or parent.stateful_step_count,
                        deadline=None, phases=phases, report_multiple_bugs=False,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

    def run_seed(self) -> int:
        """The seed this run uses (see ``seed``)."""
        if self.seed is not None:
            return self.seed
        forced = getattr(hypothesis.core, "global_force_seed", None)  # pytest --hypothesis-seed
        if forced is not None:
            return forced if isinstance(forced, int) else random.Random(str(forced)).getrandbits(32)
        return 0 if self.hypothesis_settings().derandomize else random.getrandbits(32)

    def machine_options(self) -> MachineOptions:
        """The machine's options: this config's judgement, calls recorded for the report, and
        the shared default rejection (`MachineOptions.rejection`)."""
        return MachineOptions(mode=self.mode, checks=self.checks, waivers=self.waivers, features=self.features,
                              bad_inputs=self.bad_inputs, record_calls=True)


def known_layout(name: Any) -> str:
    """``name`` if it names a layout of `LAYOUTS`, else `InvalidArgumentError` listing them."""
    if not isinstance(name, str) or name not in LAYOUTS:
        raise InvalidArgumentError(f"unknown layout {shown(name)}: a name of verikv.testing.manager_machine.LAYOUTS "
                                   f"({', '.join(LAYOUTS)}) or a Layout")
    return name


def _claimed(own: Any, claimed: Any, default: Any) -> Any:
    """The value of a layout's policy under a claim: its own when the claim is None (both) or
    the same; the claimed one when the layout has the default; else None (it does not apply)."""
    if claimed is None or own == claimed:
        return own
    return claimed if own == default else None


class ConformanceError(AssertionError):
    """A manager departed from the spec. ``names``: the failed checks; ``details``: one line
    per failure; ``calls``: the calls made to the adapter in the reported run (readable lines;
    empty for the pool machine); ``steps``: the same run as
    Hypothesis' rule sequence (Python lines, as Hypothesis prints them); ``seed``: replays the
    run with ``ConformanceConfig(seed=...)``; ``shrinking``: how the reported run was obtained
    (shrunk, or why not)."""

    def __init__(self, layout: str, names: Sequence[str], details: Sequence[str], steps: Sequence[str],
                 seed: int, *, calls: Sequence[str] = (), shrinking: str = "shrunk by Hypothesis") -> None:
        self.layout: str = layout
        self.names: list[str] = list(names)
        self.details: list[str] = list(details)
        self.steps: list[str] = list(steps)
        self.calls: list[str] = list(calls)
        self.seed: int = seed
        self.shrinking: str = shrinking
        shown = [_clip(line) for line in self.details[:MAX_DETAIL_LINES]]
        if len(self.details) > MAX_DETAIL_LINES:
            shown.append(f"... {len(self.details) - MAX_DETAIL_LINES} more")
        sequence = ([f"Calls to the adapter, in order; the check failed after the last one ({shrinking}):",
                     *(f"  {call}" for call in self.calls)] if self.calls else
                    [f"Failing sequence ({shrinking}):", *(f"  {step}" for step in self.steps)])
        super().__init__("\n".join([f"layout {layout!r}, seed {seed}: {', '.join(self.names)}", *shown,
                                    *sequence]))


def _clip(line: str) -> str:
    return line if len(line) <= MAX_DETAIL_WIDTH else line[:MAX_DETAIL_WIDTH - 3] + "..."


def _steps(error: BaseException) -> list[str]:
    """The operation sequence Hypothesis attached to a failure (its notes), without headers; a
    drawn value Hypothesis printed over several lines is joined back into one."""
    notes: Iterable[str] = getattr(error, "__notes__", ())
    steps: list[str] = []
    for line in (line.strip() for note in notes for line in note.splitlines()):
        if line.startswith(("state", "Draw")):
            steps.append(line)
        elif steps and steps[-1].startswith("Draw") and steps[-1].count("(") > steps[-1].count(")"):
            steps[-1] += " " + line
    return steps


@dataclass
class ShrinkBudget:
    """Wall seconds of shrinking left for the layouts that share it (one `conformance_test`
    class, or one `check_conformance` call)."""

    seconds: float

    def spend(self, seconds: float) -> None:
        self.seconds = max(0.0, self.seconds - seconds)


@dataclass(frozen=True)
class Found:
    """One failing run: what failed, the run, and how long the search took."""

    names: list[str]
    details: list[str]
    steps: list[str]
    calls: list[str]
    seconds: float

    def error(self, layout: str, seed: int, shrinking: str) -> ConformanceError:
        return ConformanceError(layout, self.names, self.details, self.steps, seed, calls=self.calls,
                                shrinking=shrinking)


def _search(test_factory: Callable[[], Any], run_settings: settings, run_seed: int,
            failure_type: type[AssertionError], names_of: Callable[[Any], list[str]]) -> Found | None:
    """One Hypothesis run; the failing run it reports (its last machine's calls), or None."""
    machines: list[Any] = []

    def tracked() -> Any:
        machine = test_factory()
        machines[:] = [machine]  # Hypothesis replays the reported run last
        return machine

    started = time.perf_counter()
    try:
        # Hypothesis takes any zero-argument factory (its docstring); its annotation says a class
        run_state_machine_as_test(hypothesis_seed(run_seed)(tracked), settings=run_settings)  # type: ignore[arg-type]
        return None
    except failure_type as failure:
        error: Exception = failure
        names, details = names_of(failure), str(failure).splitlines()
    except Exception as exc:
        error = exc
        names, details = [f"crash:{type(exc).__name__}"], [f"{type(exc).__name__}: {exc}"]
    calls = list(getattr(machines[0], "calls", ())) if machines else []
    return Found(names, details, _steps(error), calls, time.perf_counter() - started)


def _shrink_limit() -> Any:
    """Hypothesis' conjecture engine, whose ``MAX_SHRINKING_SECONDS`` bounds its shrinking
    (five minutes by default); None when this Hypothesis version has no such limit."""
    engine = importlib.import_module("hypothesis.internal.conjecture.engine")
    return engine if isinstance(getattr(engine, "MAX_SHRINKING_SECONDS", None), int | float) else None


@contextmanager
def _shrinking_for(seconds: float) -> Iterator[list[object]]:
    """Hypothesis' shrinking stops after ``seconds``. Yields the list that receives what
    Hypothesis reports meanwhile instead of printing it: at normal verbosity, only its notice
    that it stopped shrinking (the report says so in its own words)."""
    engine = _shrink_limit()
    saved = engine.MAX_SHRINKING_SECONDS
    engine.MAX_SHRINKING_SECONDS = seconds
    reported: list[object] = []
    try:
        with with_reporter(reported.append):
            yield reported
    finally:
        engine.MAX_SHRINKING_SECONDS = saved


def _run(test_factory: Callable[[], Any], layout: str, config: ConformanceConfig,
         failure_type: type[AssertionError], names_of: Callable[[Any], list[str]], budget: ShrinkBudget) -> None:
    """Run one state machine with the config's settings and seed; a failure becomes a
    `ConformanceError` (raised without the Hypothesis traceback chained to it).

    The search runs without shrinking, so a failure is known at once; it is printed right away
    (`verikv.testing.live`) when it will be shrunk. Shrinking then repeats the same seeded
    search with Hypothesis' shrink phase (at normal verbosity), stopped after what is left of
    ``budget``.
    """
    __tracebackhide__ = True
    run_seed = config.run_seed()
    unshrunk = replace(config, shrink=False).hypothesis_settings()
    found = _search(test_factory, unshrunk, run_seed, failure_type, names_of)
    if found is None:
        return
    reason = _why_not_shrunk(config, budget)
    if reason is not None:
        raise found.error(layout, run_seed, f"as generated, not shrunk: {reason}")
    seconds = budget.seconds
    live.emit(f"verikv conformance: a failure after {found.seconds:.1f} s; shrinking it for up to {seconds:g} s. "
              f"The run as generated:\n{found.error(layout, run_seed, 'as generated, not shrunk yet')}")
    started = time.perf_counter()
    with _shrinking_for(seconds) as stopped:
        shrunk = _search(test_factory, settings(config.hypothesis_settings(), verbosity=Verbosity.normal),
                         run_seed, failure_type, names_of)
    spent = time.perf_counter() - started - found.seconds  # (the search ran again first)
    budget.spend(seconds if stopped else spent)
    if shrunk is None:
        raise found.error(layout, run_seed, "as generated, not shrunk: it passed when run again to shrink it, "
                                            "so the manager or adapter is not deterministic")
    if stopped:
        raise shrunk.error(layout, run_seed, f"shrunk by Hypothesis until the {seconds:g} s shrink budget ran out; "
                                             f"a shorter one may exist")
    raise shrunk.error(layout, run_seed, f"shrunk by Hypothesis in {max(spent, 0.0):.1f} s")


def _why_not_shrunk(config: ConformanceConfig, budget: ShrinkBudget) -> str | None:
    """Why a failure is reported as generated, or None when it is shrunk."""
    if not config.shrink:
        return "shrink=False"
    if Phase.shrink not in config.hypothesis_settings().phases:
        return "the Hypothesis profile leaves out the shrink phase"
    if budget.seconds <= 0:
        return "the shrink budget was spent on earlier layouts of this test class"
    if _shrink_limit() is None:
        return f"Hypothesis {hypothesis.__version__} offers no shrink time limit to keep to shrink_seconds"
    return None


ADAPTER_METHODS = ("new_request", "lookup", "allocate", "free", "finish", "cache", "reset", "usage",
                   "num_free_pages", "page_ids")
"""The methods of `PageManagerAdapter` (white-box adds ``abstraction``)."""


def _check_adapter(adapter_factory: AdapterFactory, layout: Layout, mode: Mode) -> None:
    """What ``adapter_factory`` builds for ``layout`` has the protocol's methods, and
    ``abstraction`` in white-box mode (a factory that raises is left to the run: `built_with`)."""
    adapter = built_with(adapter_factory, (layout.config,), ADAPTER_METHODS,
                         "adapter (verikv.testing.adapter.PageManagerAdapter)")
    if adapter is not None and mode == "white-box" and not callable(getattr(adapter, "abstraction", None)):
        raise InvalidArgumentError(
            f"{type(adapter).__name__} has no abstraction() method, which mode='white-box' needs, and white-box is "
            f"the default mode: to compare only what a scheduler sees, use ConformanceConfig(mode='black-box') (or "
            f"mode='policy-free' for a manager with its own free-list policy)")


def check_conformance(adapter_factory: AdapterFactory, layout: str | Layout,
                      config: ConformanceConfig = ConformanceConfig(),
                      machine: type[ManagerMachine] = ManagerMachine) -> None:
    """Run one layout; raise `ConformanceError` (names, details, the calls of the failing run,
    seed) on a departure. An exception escaping the machine is reported as ``crash:<type>``;
    an unknown layout or an adapter the mode cannot use is an `InvalidArgumentError` before
    anything runs.

    A failure is found without shrinking and printed at once (`verikv.testing.live`: standard
    error, or pytest's terminal); then Hypothesis shrinks it for at most
    ``config.shrink_seconds`` and the shrunk run is raised. In a `conformance_test` class the
    layouts share one ``shrink_seconds``: once it is spent, later failing layouts report their
    run as generated, so a class waits for its searches plus at most ``shrink_seconds``.
    """
    __tracebackhide__ = True
    _check_layout(checked_factory(adapter_factory, "adapter_factory"), layout, config, machine,
                  ShrinkBudget(_checked(config).shrink_seconds))


def _checked(config: Any) -> ConformanceConfig:
    if not isinstance(config, ConformanceConfig):
        raise InvalidArgumentError(f"config must be a ConformanceConfig, got {shown(config)}")
    return config


def _check_layout(adapter_factory: AdapterFactory, layout: str | Layout, config: ConformanceConfig,
                  machine: type[ManagerMachine], budget: ShrinkBudget) -> None:
    __tracebackhide__ = True
    chosen = config.resolve(layout)
    if chosen is None:
        raise InvalidArgumentError(f"layout {shown(layout)} tests a free-order policy or EAGLE rule the "
                                   f"implementation does not claim")
    _check_adapter(adapter_factory, chosen, config.mode)
    factory = machine_factory(chosen, adapter_factory, config.machine_options(), machine)
    _run(factory, chosen.name, config, ConformanceFailure, lambda failure: failure.names, budget)


def check_pool_conformance(pool_factory: Callable[[int, str], Any],
                           config: ConformanceConfig = ConformanceConfig()) -> None:
    """Run the pool machine (`verikv.testing.pool_machine`) against pools built by
    ``pool_factory(num_pages, free_order)`` (e.g. the page pool of an engine's own manager,
    behind the id-level API), under the policy ``config.free_order`` claims (both when None)
    and the waivers of ``config.waivers`` that concern a pool (``usage-formula``,
    ``null-page-free``); raise `ConformanceError` on a departure, found, printed and shrunk as
    in `check_conformance`. This is where a double free, a freed null page or a re-keyed page
    shows: the manager protocol never frees twice."""
    __tracebackhide__ = True
    from verikv.testing.pool_machine import POOL_WAIVERS, PoolCheckFailure, make_pool_machine

    config, pool_factory = _checked(config), checked_factory(pool_factory, "pool_factory")
    orders = tuple(sorted(FREE_ORDERS)) if config.free_order is None else (config.free_order,)
    _run(make_pool_machine(pool_factory, orders, config.waivers & POOL_WAIVERS), "pool", config, PoolCheckFailure,
         lambda failure: failure.checks, ShrinkBudget(config.shrink_seconds))


def conformance_test(adapter_factory: AdapterFactory,
                     config: ConformanceConfig = ConformanceConfig()) -> type[unittest.TestCase]:
    """A `unittest.TestCase` class with one ``test_<layout>`` method per configured layout; the
    methods share one shrink budget (``config.shrink_seconds``, see `check_conformance`).

    Assign it to a module-level name starting with ``Test`` so pytest collects it::

        TestMyManager = conformance_test(MyAdapter, ConformanceConfig(mode="black-box"))
    """
    config, adapter_factory = _checked(config), checked_factory(adapter_factory, "adapter_factory")
    methods: dict[str, Any] = {}
    budget = ShrinkBudget(config.shrink_seconds)
    layouts = config.resolved_layouts()
    if layouts:  # a factory that builds no adapter is refused now, not once per test
        _check_adapter(adapter_factory, layouts[0], config.mode)
    for layout in layouts:
        def test(self: unittest.TestCase, layout: Layout = layout) -> None:
            __tracebackhide__ = True
            _check_layout(adapter_factory, layout, config, ManagerMachine, budget)
        slug = re.sub(r"\W+", "_", layout.name.replace("<=", " le ").replace(">", " gt ")).strip("_")
        test.__name__ = next(f"test_{slug}{suffix}" for suffix in ("", *range(2, len(methods) + 2))
                             if f"test_{slug}{suffix}" not in methods)
        test.__doc__ = f"The manager conforms to the spec on layout {layout.name!r}."
        methods[test.__name__] = test
    name = getattr(adapter_factory, "__name__", "Adapter")
    return type(f"Conformance_{name}", (unittest.TestCase,), methods)
