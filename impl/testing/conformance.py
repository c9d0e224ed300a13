"""The spec as a conformance test for any page manager: configuration, runs and short reports.

An engine author wraps their page manager in a small adapter (`PageManagerAdapter`, in
`verikv.testing.adapter`) and calls `conformance_test(factory, config)`. The result is a
`unittest.TestCase` class (pytest collects it too) with one test per group layout. Each test
runs verikv's scheduler-shaped state machine (`verikv.testing.manager_machine.ManagerMachine`)
against the adapter and the spec (`verikv.spec.manager`) side by side. A departure fails the test
with a `ConformanceError` that fits on one screen: the layout, the seed, the check names (for
example ``INV-REF-COUNT`` or ``INV-ATOMIC``), their details and the shortest operation sequence
Hypothesis found.

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

import random
import re
import unittest
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import HealthCheck, Phase, seed as hypothesis_seed, settings
from hypothesis.stateful import run_state_machine_as_test

from verikv.errors import InvalidArgumentError
from verikv.spec.hit_rules import EAGLE_RULES, EagleRule
from verikv.spec.pool import FREE_ORDERS, FreeOrder
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

__all__ = ["CHECK_NAMES", "FEATURES", "LAYOUTS", "WAIVERS", "AdapterFactory", "CacheManagerAdapter",
           "ConformanceConfig", "ConformanceError", "Layout", "PageIds", "PageManagerAdapter",
           "WhiteBoxAdapter", "build_cache_manager", "check_conformance", "check_pool_conformance",
           "conformance_test"]

MAX_DETAIL_LINES = 8
"""A report shows at most this many failure details (the names list them all)."""
MAX_DETAIL_WIDTH = 160


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
    replays the same runs whatever else changed in the code (None: 0 under a derandomized
    profile, else a fresh random seed).
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

    def __post_init__(self) -> None:
        if self.free_order is not None and self.free_order not in FREE_ORDERS:
            raise InvalidArgumentError(f"free_order must be one of {sorted(FREE_ORDERS)} or None, "
                                       f"got {self.free_order!r}")
        if self.eagle_rule is not None and self.eagle_rule not in EAGLE_RULES:
            raise InvalidArgumentError(f"eagle_rule must be one of {EAGLE_RULES} or None, got {self.eagle_rule!r}")
        if self.mode not in MODES:
            raise InvalidArgumentError(f"mode must be one of {MODES}, got {self.mode!r}")
        for what, given, known in (("check names", self.checks or (), CHECK_NAMES),
                                   ("waivers", self.waivers, WAIVERS), ("features", self.features, FEATURES)):
            unknown = set(given) - set(known)
            if unknown:
                raise InvalidArgumentError(f"unknown {what} {sorted(unknown)}; known: {sorted(known)}")
        self._check_layouts()
        self._check_budget()

    def _check_layouts(self) -> None:
        """Every named layout exists, and each chosen one applies under the claimed policy."""
        for name in self.skip_layouts:
            if name not in LAYOUTS:
                raise InvalidArgumentError(f"unknown layout {name!r} in skip_layouts; known: {sorted(LAYOUTS)}")
        for layout in self.layouts or ():
            if not isinstance(layout, Layout) and layout not in LAYOUTS:
                raise InvalidArgumentError(f"unknown layout {layout!r}; known: {sorted(LAYOUTS)}")
            if self.resolve(layout) is None:
                raise InvalidArgumentError(f"layout {layout!r} tests a free-order policy or EAGLE rule other than "
                                           f"the claimed {self.free_order!r}, {self.eagle_rule!r}")

    def _check_budget(self) -> None:
        """The example budget and the seed are exact ints (None: Hypothesis' own)."""
        for name in ("max_examples", "stateful_step_count"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise InvalidArgumentError(f"{name} must be an int >= 1 or None, got {value!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise InvalidArgumentError(f"seed must be an int or None, got {self.seed!r}")

    def resolve(self, layout: str | Layout) -> Layout | None:
        """The layout as it runs under the claimed policies, or None when it does not apply."""
        found = layout if isinstance(layout, Layout) else LAYOUTS[layout]
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
        budget only where it sets one; no deadline."""
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
        return 0 if self.hypothesis_settings().derandomize else random.getrandbits(32)

    def machine_options(self) -> MachineOptions:
        return MachineOptions(mode=self.mode, checks=self.checks, waivers=self.waivers, features=self.features,
                              bad_inputs=self.bad_inputs, rejection=(Exception,))


def _claimed(own: Any, claimed: Any, default: Any) -> Any:
    """The value of a layout's policy under a claim: its own when the claim is None (both) or
    the same; the claimed one when the layout has the default; else None (it does not apply)."""
    if claimed is None or own == claimed:
        return own
    return claimed if own == default else None


class ConformanceError(AssertionError):
    """A manager departed from the spec. ``names``: the failed checks; ``details``: one line
    per failure; ``steps``: the shrunk operation sequence (Python lines, as Hypothesis prints
    them); ``seed``: replays the run with ``ConformanceConfig(seed=...)``."""

    def __init__(self, layout: str, names: Sequence[str], details: Sequence[str], steps: Sequence[str],
                 seed: int) -> None:
        self.layout: str = layout
        self.names: list[str] = list(names)
        self.details: list[str] = list(details)
        self.steps: list[str] = list(steps)
        self.seed: int = seed
        shown = [_clip(line) for line in self.details[:MAX_DETAIL_LINES]]
        if len(self.details) > MAX_DETAIL_LINES:
            shown.append(f"... {len(self.details) - MAX_DETAIL_LINES} more")
        super().__init__("\n".join([f"layout {layout!r}, seed {seed}: {', '.join(self.names)}", *shown,
                                    "Minimal failing sequence (shrunk by Hypothesis):",
                                    *(f"  {step}" for step in self.steps)]))


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


def _run(test_factory: Callable[[], Any], layout: str, config: ConformanceConfig,
         failure_type: type[AssertionError], names_of: Callable[[Any], list[str]]) -> None:
    """Run one state machine with the config's settings and seed; a failure becomes a
    `ConformanceError` (raised without the Hypothesis traceback chained to it)."""
    __tracebackhide__ = True
    run_seed = config.run_seed()
    seeded = hypothesis_seed(run_seed)(test_factory)
    error: ConformanceError | None = None
    try:
        # Hypothesis takes any zero-argument factory (its docstring); its annotation says a class
        run_state_machine_as_test(seeded, settings=config.hypothesis_settings())  # type: ignore[arg-type]
    except failure_type as failure:
        error = ConformanceError(layout, names_of(failure), str(failure).splitlines(), _steps(failure), run_seed)
    except Exception as exc:
        error = ConformanceError(layout, [f"crash:{type(exc).__name__}"], [f"{type(exc).__name__}: {exc}"],
                                 _steps(exc), run_seed)
    if error is not None:
        raise error


def check_conformance(adapter_factory: AdapterFactory, layout: str | Layout,
                      config: ConformanceConfig = ConformanceConfig(),
                      machine: type[ManagerMachine] = ManagerMachine) -> None:
    """Run one layout; raise `ConformanceError` (names, details, shrunk steps, seed) on a
    departure. An exception escaping the machine is reported as ``crash:<type>``."""
    __tracebackhide__ = True
    chosen = config.resolve(layout)
    if chosen is None:
        raise InvalidArgumentError(f"layout {layout!r} tests a free-order policy or EAGLE rule the implementation "
                                   f"does not claim")
    factory = machine_factory(chosen, adapter_factory, config.machine_options(), machine)
    _run(factory, chosen.name, config, ConformanceFailure, lambda failure: failure.names)


def check_pool_conformance(pool_factory: Callable[[int, str], Any],
                           config: ConformanceConfig = ConformanceConfig()) -> None:
    """Run the pool machine (`verikv.testing.pool_machine`) against pools built by
    ``pool_factory(num_pages, free_order)`` (e.g. the page pool of an engine's own manager,
    behind the id-level API), under the policy ``config.free_order`` claims (both when None)
    and the waivers of ``config.waivers`` that concern a pool (``usage-formula``,
    ``null-page-free``); raise `ConformanceError` on a departure. This is where a double
    free, a freed null page or a re-keyed page shows: the manager protocol never frees twice."""
    __tracebackhide__ = True
    from verikv.testing.pool_machine import POOL_WAIVERS, PoolCheckFailure, make_pool_machine

    orders = tuple(sorted(FREE_ORDERS)) if config.free_order is None else (config.free_order,)
    _run(make_pool_machine(pool_factory, orders, config.waivers & POOL_WAIVERS), "pool", config, PoolCheckFailure,
         lambda failure: failure.checks)


def conformance_test(adapter_factory: AdapterFactory,
                     config: ConformanceConfig = ConformanceConfig()) -> type[unittest.TestCase]:
    """A `unittest.TestCase` class with one ``test_<layout>`` method per configured layout.

    Assign it to a module-level name starting with ``Test`` so pytest collects it::

        TestMyManager = conformance_test(MyAdapter, ConformanceConfig(mode="black-box"))
    """
    methods: dict[str, Any] = {}
    for layout in config.resolved_layouts():
        def test(self: unittest.TestCase, layout: Layout = layout) -> None:
            __tracebackhide__ = True
            check_conformance(adapter_factory, layout, config)
        slug = re.sub(r"\W+", "_", layout.name.replace("<=", " le ").replace(">", " gt ")).strip("_")
        test.__name__ = next(f"test_{slug}{suffix}" for suffix in ("", *range(2, len(methods) + 2))
                             if f"test_{slug}{suffix}" not in methods)
        test.__doc__ = f"The manager conforms to the spec on layout {layout.name!r}."
        methods[test.__name__] = test
    name = getattr(adapter_factory, "__name__", "Adapter")
    return type(f"Conformance_{name}", (unittest.TestCase,), methods)
