"""The spec as a conformance test for any page manager: an adapter protocol and a TestCase factory.

An engine author wraps their page manager in a small adapter (`PageManagerAdapter`) and calls
`conformance_test(factory, config)`. The result is a `unittest.TestCase` class (pytest collects it
too) with one test per group layout. Each test runs verikv's scheduler-shaped state machine
(`verikv.testing.manager_machine`) against the adapter and the spec (`verikv.spec.manager`) side
by side. A departure fails the test with a `ConformanceError`: the check names, for example
``INV-REF-COUNT`` or ``INV-ATOMIC``, the details, and the shortest operation sequence Hypothesis
found.

Two modes:

- **white-box**: the adapter also returns a read-only view of its internal state
  (`WhiteBoxAdapter.abstraction`, the protocol of `verikv.spec.abstraction`), and the machine
  compares the abstract state with the spec's after every step;
- **black-box**: only what a scheduler sees is compared: returned page ids, hit lengths, free
  page counts, usage and each request's page table.

Requests: the harness keeps one request of the adapted engine per request id, made by
`PageManagerAdapter.new_request` from a `RequestView`, and brings it up to date before every call
the way eSurge's and vLLM's schedulers do: ``append_output_token_ids(tokens)`` for sampled tokens
and ``request.num_computed_tokens = n``. Hit and allocation results may be page ids per group or
the engine's own result object with ``get_page_ids()`` (or vLLM's ``get_block_ids()``); a hit is
handed back to ``allocate`` as it was returned.

Mapping onto the two common API families:

- ``factory(config)``: eSurge ``CacheManager(num_pages, groups, max_model_len, ...)``;
  vLLM ``KVCacheManager(kv_cache_config, max_model_len, ...)``;
- ``lookup``: ``get_computed_pages(request)`` / ``get_computed_blocks(request)``;
- ``allocate``: ``allocate_slots(request, n, hit_tokens, hit, lookahead, delay)`` (both);
- ``free``: ``free(request)`` (both); ``finish``: eSurge ``free_page_hashes(request)``, vLLM
  nothing (its hashes live on the request);
- ``cache``: ``cache_pages(request, n)`` / ``cache_blocks(request, n)``;
- ``reset``: ``reset_prefix_cache()``; ``usage``: ``usage`` (both);
- ``num_free_pages``: ``page_pool.get_num_free_pages()`` / ``block_pool.get_num_free_blocks()``;
- ``page_ids``: ``get_page_ids(request_id)`` / ``get_block_ids(request_id)``.
"""

from __future__ import annotations

import re
import unittest
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol, runtime_checkable

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from verikv.errors import InvalidArgumentError
from verikv.spec import invariants as inv
from verikv.spec.abstraction import ManagerLike
from verikv.spec.manager import ManagerConfig, RequestView
from verikv.spec.pool import FREE_ORDERS, NULL_PAGE, FreeOrder
from verikv.testing.manager_machine import (
    LAYOUTS,
    ConformanceFailure,
    Layout,
    build_cache_manager,
    manager_machine,
    view_of,
)

PageIds = Sequence[Sequence[int]]
"""Page ids per cache group, in group order (0 = the null placeholder)."""

Mode = Literal["white-box", "black-box"]

CHECK_NAMES: frozenset[str] = frozenset(
    {*inv.MANAGER_INVARIANTS, *inv.GHOST_INVARIANTS, *inv.LOOKUP_INVARIANTS, *inv.TRANSITION_INVARIANTS,
     "REFINEMENT"})
"""Every name a conformance run can report: the ``INV-*`` catalogue and ``REFINEMENT`` (a
return value, an error or the state differs from the spec's)."""


@runtime_checkable
class PageManagerAdapter(Protocol):
    """What a page manager offers the harness: one instance per manager, built by a factory.

    The factory receives a `verikv.spec.manager.ManagerConfig` (pages, cache groups as
    `GroupLayout`, ``max_model_len``, caching, EAGLE, data-parallel size, free-order policy).
    ``request`` arguments are the engine's own requests, made by `new_request`. Any exception
    means "rejected": the harness then expects the manager's state to be unchanged.
    """

    def new_request(self, view: RequestView) -> Any:
        """The engine's request for ``view`` (id, tokens, salt, LoRA id, multimodal items,
        prompt logprobs); it must accept ``append_output_token_ids`` and a settable
        ``num_computed_tokens``."""
        ...

    def lookup(self, request: Any, dp_shard_hint: int | None = None,
               data_parallel_size: int | None = None) -> tuple[Any, int]:
        """The prefix-cache hit (page ids per group or an object with ``get_page_ids()``) and
        its length in tokens; no state change. The DP arguments (passed by keyword) are
        eSurge's: both None without data parallelism."""
        ...

    def allocate(self, request: Any, num_new_tokens: int, num_new_computed_tokens: int, hit: Any,
                 num_lookahead_tokens: int, delay_cache: bool, dp_shard_hint: int | None = None,
                 data_parallel_size: int | None = None) -> Any:
        """Claim the hit (as `lookup` returned it, or None) and allocate the new pages; the new
        pages (ids per group or an object with ``get_page_ids()``), or None when they do not fit."""
        ...

    def free(self, request: Any) -> None:
        """Release every page the request holds (it may come back: keep its content keys)."""
        ...

    def finish(self, request: Any) -> None:
        """The request is gone for good (called after `free`): forget its content keys."""
        ...

    def cache(self, request: Any, num_tokens: int) -> None:
        """Register the request's full pages up to ``num_tokens`` tokens in the prefix cache."""
        ...

    def reset(self) -> bool:
        """Reset the prefix cache; False (and no change) while any page is held."""
        ...

    def usage(self) -> float:
        """The usage the manager reports (the spec: held usable pages / (num_pages - 1))."""
        ...

    def num_free_pages(self) -> int:
        """The free page count the manager reports."""
        ...

    def page_ids(self, request_id: str) -> PageIds:
        """The request's page table per group; raises for a request that holds no pages."""
        ...


@runtime_checkable
class WhiteBoxAdapter(PageManagerAdapter, Protocol):
    """An adapter that also exposes the manager's state for the white-box mode."""

    def abstraction(self) -> ManagerLike:
        """A read-only view with the members of `verikv.spec.abstraction.ManagerLike`."""
        ...


AdapterFactory = Callable[[ManagerConfig], PageManagerAdapter]


@dataclass(frozen=True)
class ConformanceConfig:
    """How a conformance run is set up.

    ``layouts``: group layouts to test, names of `manager_machine.LAYOUTS` or `Layout`
    objects (default: every layout that applies); ``skip_layouts``: names left out (features
    the implementation does not have, e.g. ``"dp2"``). ``free_order``: the free-order policy the
    implementation follows. Layouts with the default policy ``"esurge"`` run with it, and
    layouts built for another policy run only if it is the one claimed. ``None`` means the
    implementation supports both, and each layout runs with its own policy (the factory
    reads it from ``config.free_order``). ``mode``: ``"white-box"`` needs `WhiteBoxAdapter`.
    ``checks``: the names to enforce (default: all of `CHECK_NAMES`); a failure of any other
    name is ignored. ``bad_inputs``: also check that invalid calls are rejected without a
    state change. ``max_examples`` / ``stateful_step_count``: the Hypothesis budget per
    layout. ``shrink``: minimise a failing sequence (slower, much easier to read).
    ``profile``: a registered Hypothesis settings profile to start from (default: the
    loaded one).
    """

    layouts: tuple[str | Layout, ...] | None = None
    skip_layouts: tuple[str, ...] = ()
    free_order: FreeOrder | None = "esurge"
    mode: Mode = "white-box"
    checks: frozenset[str] | None = None
    bad_inputs: bool = True
    max_examples: int = 100
    stateful_step_count: int = 50
    shrink: bool = True
    profile: str | None = None

    def __post_init__(self) -> None:
        if self.free_order is not None and self.free_order not in FREE_ORDERS:
            raise InvalidArgumentError(f"free_order must be one of {sorted(FREE_ORDERS)} or None, "
                                       f"got {self.free_order!r}")
        if self.mode not in ("white-box", "black-box"):
            raise InvalidArgumentError(f"mode must be 'white-box' or 'black-box', got {self.mode!r}")
        unknown = set(self.checks or ()) - CHECK_NAMES
        if unknown:
            raise InvalidArgumentError(f"unknown check names {sorted(unknown)}; known: {sorted(CHECK_NAMES)}")
        for name in self.skip_layouts:
            if name not in LAYOUTS:
                raise InvalidArgumentError(f"unknown layout {name!r} in skip_layouts; known: {sorted(LAYOUTS)}")
        for layout in self.layouts or ():
            if not isinstance(layout, Layout) and layout not in LAYOUTS:
                raise InvalidArgumentError(f"unknown layout {layout!r}; known: {sorted(LAYOUTS)}")
            if self.resolve(layout) is None:
                raise InvalidArgumentError(f"layout {layout!r} tests a free-order policy other than "
                                           f"the claimed {self.free_order!r}")
        if self.max_examples < 1 or self.stateful_step_count < 1:
            raise InvalidArgumentError("max_examples and stateful_step_count must be >= 1")

    def resolve(self, layout: str | Layout) -> Layout | None:
        """The layout as it runs under the claimed policy, or None when it does not apply."""
        found = layout if isinstance(layout, Layout) else LAYOUTS[layout]
        own = found.config.free_order
        if self.free_order is None or own == self.free_order:
            return found
        if own != "esurge":
            return None
        return replace(found, config=replace(found.config, free_order=self.free_order))

    def resolved_layouts(self) -> list[Layout]:
        """The layouts to run, each with its free-order policy."""
        chosen = (self.resolve(layout) for layout in (self.layouts or tuple(LAYOUTS)))
        return [layout for layout in chosen if layout is not None and layout.name not in self.skip_layouts]

    def hypothesis_settings(self) -> settings:
        """Settings for one layout's run: the profile plus this budget, no deadline."""
        parent = settings.get_profile(self.profile) if self.profile else settings()
        phases = parent.phases if self.shrink else tuple(p for p in parent.phases if p != Phase.shrink)
        return settings(parent, max_examples=self.max_examples, stateful_step_count=self.stateful_step_count,
                        deadline=None, phases=phases, report_multiple_bugs=False,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class ConformanceError(AssertionError):
    """A manager departed from the spec. ``names``: the failed checks; ``steps``: the shrunk
    operation sequence (Python lines, as Hypothesis prints them)."""

    def __init__(self, layout: str, names: Sequence[str], detail: str, steps: Sequence[str]) -> None:
        self.layout = layout
        self.names = list(names)
        self.steps = list(steps)
        super().__init__(f"layout {layout!r}: {', '.join(self.names)}\n{detail}\n"
                         "Minimal failing sequence (shrunk by Hypothesis):\n  " + "\n  ".join(self.steps))


# --- the bridge: an adapter seen through the method names the manager machine drives --------

def _page_ids(result: Any) -> tuple[tuple[int, ...], ...]:
    """Page ids per group of a hit or allocation result: ids, or an object with
    ``get_page_ids()`` (eSurge) or ``get_block_ids()`` (vLLM)."""
    getter = getattr(result, "get_page_ids", None) or getattr(result, "get_block_ids", None)
    ids = getter() if getter is not None else result
    return tuple(tuple(group) for group in ids)


class _Pages:
    """An adapter's result as the machine sees it (``get_page_ids()``), keeping the original."""

    def __init__(self, native: Any) -> None:
        self.native = native
        self.ids = _page_ids(native)

    def get_page_ids(self) -> tuple[tuple[int, ...], ...]:
        return self.ids


_VIEW_MEMBERS = frozenset({"page_pool", "max_model_len", "enable_caching", "use_eagle", "data_parallel_size",
                           "group_layouts", "request_ids", "num_cached_pages", "request_shard"})


class _Bridge:
    """Presents an adapter with eSurge's method names (what the machine calls) and, in
    white-box mode, the adapter's abstraction members. Keeps the engine's requests up to date.
    Every adapter error becomes an `InvalidArgumentError` (the machine's "rejected")."""

    def __init__(self, adapter: PageManagerAdapter) -> None:
        self.adapter = adapter
        self.native: dict[str, Any] = {}
        self.sizes: dict[str, int] = {}
        self.last_result: tuple[tuple[int, ...], ...] | None = None

    def __getattr__(self, name: str) -> Any:
        if name in _VIEW_MEMBERS:
            return getattr(self.adapter.abstraction(), name)  # type: ignore[attr-defined]
        raise AttributeError(name)

    @staticmethod
    def _call(op: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except InvalidArgumentError:
            raise
        except Exception as exc:  # any error of the adapted manager is a rejection
            raise InvalidArgumentError(f"{op}: {type(exc).__name__}: {exc}") from exc

    def request(self, request: Any) -> Any:
        """The engine's request for the machine's ``request``, brought up to date."""
        view = view_of(request)
        rid = view.request_id
        if rid not in self.native:
            self.native[rid] = self._call("new_request", lambda: self.adapter.new_request(view))
            self.sizes[rid] = view.num_tokens
        native = self.native[rid]
        if view.num_tokens > self.sizes[rid]:
            self._call("append_output_token_ids",
                       lambda: native.append_output_token_ids(list(view.tokens[self.sizes[rid]:])))
            self.sizes[rid] = view.num_tokens
        native.num_computed_tokens = view.num_computed_tokens
        return native

    def table(self, rid: str) -> tuple[tuple[int, ...], ...]:
        """The request's page table as the adapter reports it (empty if it holds no pages)."""
        if rid not in self.native:
            return ()
        try:
            return _page_ids(self.adapter.page_ids(rid))
        except Exception:  # the protocol: page_ids raises for a request without pages
            return ()

    def get_page_ids(self, rid: str) -> tuple[tuple[int, ...], ...]:
        return self._call("page_ids", lambda: _page_ids(self.adapter.page_ids(rid)))

    def get_computed_pages(self, request: Any, dp_shard_hint: int | None = None,
                           data_parallel_size: int | None = None) -> tuple[_Pages, int]:
        native = self.request(request)
        hit, num_tokens = self._call("lookup", lambda: self.adapter.lookup(
            native, dp_shard_hint=dp_shard_hint, data_parallel_size=data_parallel_size))
        return _Pages(hit), num_tokens

    def allocate_slots(self, request: Any, num_new_tokens: int, num_new_computed_tokens: int = 0,
                       new_computed_pages: Any = None, num_lookahead_tokens: int = 0,
                       delay_cache_pages: bool = False, dp_shard_hint: int | None = None,
                       data_parallel_size: int | None = None) -> _Pages | None:
        native = self.request(request)
        hit = new_computed_pages.native if isinstance(new_computed_pages, _Pages) else new_computed_pages
        self.last_result = None
        result = self._call("allocate", lambda: self.adapter.allocate(
            native, num_new_tokens, num_new_computed_tokens, hit, num_lookahead_tokens, delay_cache_pages,
            dp_shard_hint=dp_shard_hint, data_parallel_size=data_parallel_size))
        if result is None:
            return None
        pages = _Pages(result)
        self.last_result = pages.ids
        return pages

    def free(self, request: Any) -> None:
        if request.request_id in self.native:
            self._call("free", lambda: self.adapter.free(self.native[request.request_id]))

    def free_page_hashes(self, request: Any) -> None:
        native = self.native.pop(request.request_id, None)
        if native is not None:
            self._call("finish", lambda: self.adapter.finish(native))

    def cache_pages(self, request: Any, num_tokens: int) -> None:
        native = self.request(request)
        self._call("cache", lambda: self.adapter.cache(native, num_tokens))

    def reset_prefix_cache(self) -> bool:
        return self._call("reset", self.adapter.reset)

    @property
    def usage(self) -> float:
        return self._call("usage", self.adapter.usage)


@dataclass(frozen=True)
class Observation:
    """What a scheduler sees of a manager: free count, usage, each live request's page table."""

    num_free: int
    usage: float
    tables: tuple[tuple[str, tuple[tuple[int, ...], ...]], ...] = ()


def conformance_machine(adapter_factory: AdapterFactory, layout: Layout,
                        config: ConformanceConfig) -> type[RuleBasedStateMachine]:
    """The manager machine for one layout, driving adapters built by ``adapter_factory``."""
    enforced = CHECK_NAMES if config.checks is None else config.checks
    base = manager_machine(layout, lambda cfg: _Bridge(adapter_factory(cfg)))
    black_box = config.mode == "black-box"
    num_pages = layout.config.num_pages
    full_groups = [g for g, group in enumerate(layout.config.groups) if group.kind == "full"]

    class Conformance(base):  # type: ignore[misc, valid-type]
        """The manager machine with the chosen checks and, for black-box, observation only."""

        if not config.bad_inputs:
            bad_input = None

        def fail(self, name: str, detail: str) -> None:
            if name in enforced:
                super().fail(name, detail)

        def observe(self) -> Observation:
            bridge = self.impl
            tables = tuple((rid, bridge.table(rid)) for rid in sorted(self.requests))
            return Observation(bridge.adapter.num_free_pages(), bridge.adapter.usage(), tables)

        def impl_state(self, renamed: bool = True) -> Any:
            return self.observe() if black_box else super().impl_state(renamed)

        def allocate(self, rid: str, *args: Any, **kwargs: Any) -> bool:
            """The machine's allocation; in black-box mode also check the pages handed out: never
            the null page, and each held by this request alone, once (a fresh page was free)."""
            done = super().allocate(rid, *args, **kwargs)
            new = [p for pages in self.impl.last_result or () for p in pages] if black_box else []
            if NULL_PAGE in new:
                self.fail("INV-NULL", f"{rid}: allocation handed out the null page: {self.impl.last_result}")
            holders = Counter(p for _, table in self.observe().tables for group in table for p in group) if new else {}
            shared = sorted(p for p in set(new) if p != NULL_PAGE and holders[p] > 1)
            if shared:
                self.fail("INV-FREE-IFF-ZERO", f"{rid}: allocation handed out pages {shared} that are also "
                                               f"held elsewhere (they were free while in use)")
            return done

        def check(self) -> None:
            if not black_box:
                super().check()
                return
            seen = self.observe()
            want = self.spec
            spec_tables = {rid: e.pages for rid, e in want.entries}
            for rid, table in seen.tables:
                if any(table) and rid not in spec_tables or rid in spec_tables and table != spec_tables[rid]:
                    self.fail("REFINEMENT", f"page table of {rid}: implementation {table} != "
                                            f"spec {spec_tables.get(rid, ())}")
                for g in full_groups:
                    if g < len(table) and NULL_PAGE in table[g]:
                        self.fail("INV-NULL", f"{rid}: null page in the full-attention table {table[g]}")
            if seen.num_free != len(want.pool.free):
                self.fail("REFINEMENT", f"free pages: implementation {seen.num_free} != spec {len(want.pool.free)}")
            held = {p for _, table in seen.tables for group in table for p in group if p != NULL_PAGE}
            if seen.num_free + len(held) != num_pages - 1:
                self.fail("INV-CONSERVE", f"{seen.num_free} free + {len(held)} held != {num_pages - 1} usable pages")
            expected_usage = 0.0 if num_pages <= 1 else 1.0 - seen.num_free / (num_pages - 1)
            if abs(seen.usage - expected_usage) > 1e-9:
                self.fail("INV-USAGE", f"usage {seen.usage} != 1 - free/(N-1) = {expected_usage}")
            for name in inv.violated_manager_invariants(want, ghost=True):
                self.fail(name, "broken in the spec state (a spec defect)")
            if self.failures:
                failures, self.failures = self.failures, []
                raise ConformanceFailure(failures)

    Conformance.__name__ = Conformance.__qualname__ = f"Conformance[{layout.name}]"
    return Conformance


def _steps(error: BaseException) -> list[str]:
    """The operation sequence Hypothesis attached to a failure (its notes), without headers."""
    notes: Iterable[str] = getattr(error, "__notes__", ())
    return [line.strip() for note in notes for line in note.splitlines() if line.lstrip().startswith(("state", "Draw"))]


def check_conformance(adapter_factory: AdapterFactory, layout: str | Layout,
                      config: ConformanceConfig = ConformanceConfig()) -> None:
    """Run one layout; raise `ConformanceError` (names, details, shrunk steps) on a departure.

    An exception escaping the machine (not a named check) is reported as ``crash:<type>``.
    """
    chosen = config.resolve(layout)
    if chosen is None:
        raise InvalidArgumentError(f"layout {layout!r} tests a free-order policy the implementation does not claim")
    machine = conformance_machine(adapter_factory, chosen, config)
    try:
        run_state_machine_as_test(machine, settings=config.hypothesis_settings())
    except ConformanceFailure as failure:
        raise ConformanceError(chosen.name, failure.names, str(failure), _steps(failure)) from failure
    except Exception as exc:
        name = f"crash:{type(exc).__name__}"
        raise ConformanceError(chosen.name, [name], f"{type(exc).__name__}: {exc}", _steps(exc)) from exc


def conformance_test(adapter_factory: AdapterFactory,
                     config: ConformanceConfig = ConformanceConfig()) -> type[unittest.TestCase]:
    """A `unittest.TestCase` class with one ``test_<layout>`` method per configured layout.

    Assign it to a module-level name starting with ``Test`` so pytest collects it::

        TestMyManager = conformance_test(MyAdapter, ConformanceConfig(mode="black-box"))
    """
    methods: dict[str, Any] = {}
    for layout in config.resolved_layouts():
        def test(self: unittest.TestCase, layout: Layout = layout) -> None:
            check_conformance(adapter_factory, layout, config)
        slug = re.sub(r"\W+", "_", layout.name.replace("<=", " le ").replace(">", " gt ")).strip("_")
        test.__name__ = next(f"test_{slug}{suffix}" for suffix in ("", *range(2, len(methods) + 2))
                             if f"test_{slug}{suffix}" not in methods)
        test.__doc__ = f"The manager conforms to the spec on layout {layout.name!r}."
        methods[test.__name__] = test
    name = getattr(adapter_factory, "__name__", "Adapter")
    return type(f"Conformance_{name}", (unittest.TestCase,), methods)


# --- verikv's own CacheManager behind the protocol ---------------------------------------------

class CacheManagerAdapter:
    """`verikv.CacheManager` as a `WhiteBoxAdapter` (the reference the harness must accept).

    ``make_manager`` builds the manager for a configuration (default: a small made-up layer
    geometry per group); pass another to test a subclass or a differently configured manager.
    """

    def __init__(self, config: ManagerConfig,
                 make_manager: Callable[[ManagerConfig], Any] = build_cache_manager) -> None:
        self.manager = make_manager(config)

    def new_request(self, view: RequestView) -> Any:
        from verikv.request import Request

        return Request(view.request_id, view.tokens, cache_salt=view.cache_salt, lora_id=view.lora_id,
                       mm_features=view.mm_features, prompt_logprobs=view.prompt_logprobs)

    def lookup(self, request: Any, dp_shard_hint: int | None = None,
               data_parallel_size: int | None = None) -> tuple[Any, int]:
        return self.manager.get_computed_pages(request, dp_shard_hint=dp_shard_hint,
                                               data_parallel_size=data_parallel_size)

    def allocate(self, request: Any, num_new_tokens: int, num_new_computed_tokens: int, hit: Any,
                 num_lookahead_tokens: int, delay_cache: bool, dp_shard_hint: int | None = None,
                 data_parallel_size: int | None = None) -> Any:
        return self.manager.allocate_slots(request, num_new_tokens, num_new_computed_tokens, hit,
                                           num_lookahead_tokens, delay_cache, dp_shard_hint=dp_shard_hint,
                                           data_parallel_size=data_parallel_size)

    def free(self, request: Any) -> None:
        self.manager.free(request)

    def finish(self, request: Any) -> None:
        self.manager.free_page_hashes(request)

    def cache(self, request: Any, num_tokens: int) -> None:
        self.manager.cache_pages(request, num_tokens)

    def reset(self) -> bool:
        return self.manager.reset_prefix_cache()

    def usage(self) -> float:
        return self.manager.usage

    def num_free_pages(self) -> int:
        return self.manager.page_pool.get_num_free_pages()

    def page_ids(self, request_id: str) -> PageIds:
        return self.manager.get_page_ids(request_id)

    def abstraction(self) -> ManagerLike:
        return self.manager
