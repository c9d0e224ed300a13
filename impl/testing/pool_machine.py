"""The pool spec as a reusable Hypothesis state machine: any pool implementation vs the spec.

`make_pool_machine(factory)` returns a `RuleBasedStateMachine` class that drives a pool made
by ``factory(num_pages, free_order)`` and the spec (`verikv.spec.pool`) side by side:
allocation (whole pool and data-parallel shards), prefix-cache hits claimed with touch,
caching pages, freeing requests in reverse or forward order, resets with and without held
pages, and bad inputs (double free, freeing or hashing the null page, over-allocation,
re-keying a keyed page). After every step it checks that the abstraction of the pool
(`verikv.spec.abstraction.abstract_pool`) equals the spec state and that every pool
invariant holds; a failure raises `PoolCheckFailure` naming each failed check.

Check names: the ``INV-*`` names of `verikv.spec.invariants` (evaluated on the abstracted
implementation state; reported usage and free count are checked as ``INV-USAGE`` and
``INV-FREE-DISTINCT``); ``INV-ATOMIC`` (a rejected call changed the state);
``refines-spec`` (abstract state differs from the spec's); ``result:<op>`` (a return value
differs); ``rejects:<reason>`` (bad input was accepted or raised the wrong error);
``raises:<op>`` (a valid call raised).

The pool must offer the read-only protocol of `verikv.spec.abstraction` and the id-level
API of docs/architecture.md (``get_new_page_ids``, ``touch_ids``, ``free_page_ids``,
``cache_page_id``, ``lookup_id``, ``reset_prefix_cache``, ``get_num_free_pages`` (taking
the shard keywords), ``get_usage``); ``lookup_run_ids``, ``count_free_ids`` and eSurge's
object-level methods are exercised too when present.

Use it from pytest as ``TestMyPool = make_pool_machine(my_factory).TestCase`` (settings via
``TestMyPool.settings``) or call ``run_state_machine_as_test(make_pool_machine(f), settings=...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verikv.testing import _missing_extra

try:
    from hypothesis import HealthCheck, Phase, settings, strategies as st
    from hypothesis.stateful import (
        RuleBasedStateMachine,
        initialize,
        invariant,
        precondition,
        rule,
        run_state_machine_as_test,
    )
except ModuleNotFoundError as missing:  # pragma: no cover - exercised in a subprocess
    raise _missing_extra(missing) from missing

from verikv.errors import DoubleFreeError, ForeignPageError, NullPageError, OutOfPagesError, PageStateError
from verikv.hashing import PageHash, PageHashWithGroupId
from verikv.spec import pool as spec
from verikv.spec.abstraction import abstract_pool
from verikv.spec.invariants import POOL_INVARIANTS
from verikv.testing._arguments import (
    built_with,
    checked_choices,
    checked_count,
    checked_factory,
    checked_flag,
    checked_instance,
    checked_names,
    lacking,
)

PoolFactory = Callable[[int, str], Any]

EXPECTED_ERROR: dict[str, type[Exception]] = {
    "null-page": NullPageError,
    "double-free": DoubleFreeError,
    "out-of-pages": OutOfPagesError,
    "out-of-range": ForeignPageError,
    "already-keyed": PageStateError,
}
# Small pools hit eviction, exhaustion and key sharing often; the larger ones exercise long
# free lists and data-parallel shards with several pages each.
POOL_SIZES = st.one_of(st.integers(min_value=1, max_value=10), st.sampled_from([12, 64, 257]))
DP_SIZES = st.sampled_from([None, 2, 3, 4])
# A tiny key domain, so several pages share a key and lookups hit often.
BAD_INPUTS = ["over-allocate", "double-free", "free-null", "cache-null", "recache", "out-of-range"]
KEYS = [PageHashWithGroupId(PageHash(k, (k,), None), 0) for k in range(5)]


class PoolCheckFailure(AssertionError):
    """The implementation departed from the spec; ``checks`` names every failed check."""

    def __init__(self, checks: list[str], detail: str) -> None:
        super().__init__(f"{', '.join(checks)}: {detail}")
        self.checks = checks


POOL_WAIVERS: frozenset[str] = frozenset({"usage-formula", "null-page-free"})
"""The waivers of `verikv.testing.manager_machine.WAIVERS` the pool machine honours: the
reported usage is not checked, and freeing the null page is not sent as a bad input."""


_READ_METHODS = ("ref_count", "key_of", "free_list_ids", "cached_items", "get_num_free_pages", "get_usage")
"""The read-only protocol of `verikv.spec.abstraction` and the reported counts, which the checks read."""
_POOL_METHODS = ("get_new_page_ids", "touch_ids", "free_page_ids", "cache_page_id", "lookup_id",
                 "reset_prefix_cache", *_READ_METHODS)
"""What the machine calls on every pool (the id-level API and `_READ_METHODS`)."""
_PROBE_PAGES = 4
"""The size of the pool built once to see that a factory builds pools, before a machine runs."""


def pool_invariant_failures(pool: Any, state: spec.PoolState, check_usage: bool = True) -> list[str]:
    """Failed checks of ``pool`` against the expected spec ``state`` (a `verikv.spec.pool.PoolState`;
    empty when it conforms); ``check_usage``: compare the reported usage with the spec's formula.
    A pool without the read-only protocol, or arguments of other types, are an `InvalidArgumentError`."""
    lacking(pool, _READ_METHODS, "pool (verikv.spec.abstraction.PoolLike)")
    checked_instance(state, spec.PoolState, "state")
    return _failures(pool, state, checked_flag(check_usage, "check_usage"))


def _failures(pool: Any, state: spec.PoolState, check_usage: bool) -> list[str]:
    """`pool_invariant_failures` of a pool the machine built (its arguments are known good)."""
    actual = abstract_pool(pool)
    failed = [name for name, holds in POOL_INVARIANTS.items() if not spec.well_formed(actual) or not holds(actual)]
    if pool.get_num_free_pages() != len(actual.free) and "INV-FREE-DISTINCT" not in failed:
        failed.append("INV-FREE-DISTINCT")
    if check_usage and pool.get_usage() != spec.usage(actual) and "INV-USAGE" not in failed:
        failed.append("INV-USAGE")
    if actual != state:
        failed.append("refines-spec")
    return failed


def make_pool_machine(factory: PoolFactory, free_orders: tuple[str, ...] = tuple(sorted(spec.FREE_ORDERS)),
                      waivers: frozenset[str] = frozenset()) -> type[RuleBasedStateMachine]:
    """A state machine class checking pools built by ``factory(num_pages, free_order)``, for
    each policy of ``free_orders`` (an engine with one policy passes only that one), with
    the declared ``waivers`` (those of `POOL_WAIVERS`; others do not concern the pool).

    A ``factory`` that cannot be called or builds something without the pool methods (one pool
    is built to see), an unknown policy or waiver are an `InvalidArgumentError`; a factory that
    raises is left to the run."""
    free_orders = checked_choices(free_orders, "free_orders", spec.FREE_ORDERS)
    waivers = checked_names(waivers, "waivers", POOL_WAIVERS)
    built_with(checked_factory(factory, "factory"), (_PROBE_PAGES, free_orders[0]), _POOL_METHODS, "pool")
    check_usage = "usage-formula" not in waivers
    bad_inputs = [kind for kind in BAD_INPUTS if not (kind == "free-null" and "null-page-free" in waivers)]

    class PoolMachine(RuleBasedStateMachine):
        """One pool and its spec state, driven by the same operations."""

        def __init__(self) -> None:
            super().__init__()
            self.pool: Any = None
            # None only until the @initialize rule `build` runs, which Hypothesis does before any
            # rule or invariant (`conforms` still checks); typing it optional would make every
            # rule narrow a value that cannot be None there.
            self.state: spec.PoolState = None  # type: ignore[assignment]
            self.requests: list[list[int]] = []
            self.dp: int | None = None
            self.steps: int = 0

        # --- helpers -------------------------------------------------------------------

        def fail(self, checks: list[str], detail: str) -> None:
            raise PoolCheckFailure(checks, f"{detail} (pool of {self.state.num_pages}, "
                                           f"{self.state.free_order!r}, dp={self.dp})")

        def expect_ok(self, op: str, call: Callable[[], Any]) -> Any:
            try:
                return call()
            except Exception as exc:  # the spec allows this call: any error is a departure
                self.fail([f"raises:{op}"], f"{op} raised {type(exc).__name__}: {exc}")

        def expect_rejected(self, op: str, reason: str, call: Callable[[], Any]) -> None:
            """The spec rejects this call for ``reason``: the pool must raise and not change."""
            before = abstract_pool(self.pool)
            try:
                call()
            except EXPECTED_ERROR[reason]:
                pass
            except Exception as exc:
                self.fail([f"rejects:{reason}"], f"{op}: expected {EXPECTED_ERROR[reason].__name__}, "
                                                 f"got {type(exc).__name__}: {exc}")
            else:
                failed = _failures(self.pool, self.state, check_usage)
                self.fail([f"rejects:{reason}", *failed], f"{op} was accepted")
            if abstract_pool(self.pool) != before:
                broken = [name for name in _failures(self.pool, self.state, check_usage)
                          if name != "refines-spec"]
                self.fail(["INV-ATOMIC", *broken], f"{op} raised but changed the pool")

        def bounds(self, hint: int | None) -> tuple[int, int] | None:
            """eSurge's shard rule, restated independently of the implementation."""
            n = self.state.num_pages
            if hint is None or self.dp is None or self.dp == 1 or n % self.dp:
                return None
            pps, shard = n // self.dp, hint % self.dp
            return (1 if shard == 0 else shard * pps, (shard + 1) * pps)

        def dp_kwargs(self, hint: int | None) -> dict[str, int | None]:
            return {} if hint is None else {"dp_shard_hint": hint, "data_parallel_size": self.dp}

        def held_pages(self) -> list[int]:
            return [p for pages in self.requests for p in pages]

        # --- rules ---------------------------------------------------------------------

        @initialize(num_pages=POOL_SIZES, free_order=st.sampled_from(free_orders), dp=DP_SIZES)
        def build(self, num_pages: int, free_order: str, dp: int | None) -> None:
            self.pool = factory(num_pages, free_order)
            self.state = spec.init(num_pages, free_order)  # type: ignore[arg-type]
            self.dp = dp

        @rule(data=st.data(), hint=st.one_of(st.none(), st.integers(0, 7)), views=st.booleans())
        def allocate(self, data: st.DataObject, hint: int | None, views: bool) -> None:
            bounds = self.bounds(hint)
            available = sum(1 for p in self.state.free if bounds is None or bounds[0] <= p < bounds[1])
            n = data.draw(st.integers(0, min(available, 6)), label="n")
            self.state, expected = spec.allocate(self.state, n, bounds)
            if views and hasattr(self.pool, "get_new_pages"):
                got = [pg.page_id for pg in self.expect_ok(
                    "allocate", lambda: self.pool.get_new_pages(n, **self.dp_kwargs(hint)))]
            else:
                got = list(self.expect_ok("allocate", lambda: self.pool.get_new_page_ids(n, **self.dp_kwargs(hint))))
            if tuple(got) != expected:
                self.fail(["result:allocate"], f"allocate({n}, hint={hint}) gave {got}, spec {list(expected)}")
            if got:
                self.requests.append(got)

        @rule(key=st.sampled_from(KEYS), hint=st.one_of(st.none(), st.integers(0, 7)),
              placeholder=st.booleans(), views=st.booleans())
        def touch_cache_hit(self, key: Any, hint: int | None, placeholder: bool, views: bool) -> None:
            expected = spec.lookup(self.state, key, self.bounds(hint))
            if views and hasattr(self.pool, "get_cached_page"):
                pages = self.expect_ok("lookup", lambda: self.pool.get_cached_page(key.page_hash, [key.group_id],
                                                                                    **self.dp_kwargs(hint)))
                got = None if pages is None else pages[0].page_id
            else:
                got = self.expect_ok("lookup", lambda: self.pool.lookup_id(key, **self.dp_kwargs(hint)))
            if got != expected:
                self.fail(["result:lookup"], f"lookup({key.get_hash_value()}, hint={hint}) gave {got}, spec {expected}")
            if expected is None:
                return
            ids = (0, expected) if placeholder else (expected,)
            self.state = spec.touch(self.state, ids)
            if views and hasattr(self.pool, "touch"):
                self.expect_ok("touch", lambda: self.pool.touch(([self.pool.page(p) for p in ids],)))
            else:
                self.expect_ok("touch", lambda: self.pool.touch_ids(list(ids)))
            self.requests.append([expected])

        @rule(keys=st.lists(st.sampled_from(KEYS), max_size=4), hint=st.one_of(st.none(), st.integers(0, 7)),
              ids=st.lists(st.integers(0, 11), max_size=4))
        def observe(self, keys: list[Any], hint: int | None, ids: list[int]) -> None:
            """Read-only queries: prefix-run lookups, free counts of ids and of a shard."""
            bounds = self.bounds(hint)
            if hasattr(self.pool, "lookup_run_ids"):
                expected_run: list[int] = []
                for key in keys:
                    page = spec.lookup(self.state, key, bounds)
                    if page is None:
                        break
                    expected_run.append(page)
                got_run = self.expect_ok("lookup_run", lambda: self.pool.lookup_run_ids(keys, **self.dp_kwargs(hint)))
                if got_run != expected_run:
                    self.fail(["result:lookup"], f"lookup_run_ids gave {got_run}, spec {expected_run}")
            if hasattr(self.pool, "count_free_ids"):
                ids = [p % self.state.num_pages for p in ids]
                expected_count = sum(1 for p in ids if p != 0 and self.state.ref[p] == 0)
                got_count = self.expect_ok("count_free", lambda: self.pool.count_free_ids(ids))
                if got_count != expected_count:
                    self.fail(["result:count_free_ids"],
                              f"count_free_ids({ids}) gave {got_count}, spec {expected_count}")
            if bounds is not None:
                expected_free = sum(1 for p in self.state.free if bounds[0] <= p < bounds[1])
                got_free = self.expect_ok("num_free", lambda: self.pool.get_num_free_pages(**self.dp_kwargs(hint)))
                if got_free != expected_free:
                    self.fail(["INV-FREE-DISTINCT"], f"shard free count {got_free}, spec {expected_free}")

        @precondition(lambda self: any(self.state.key_of[p] is None for p in self.held_pages()))
        @rule(data=st.data(), key=st.sampled_from(KEYS))
        def cache_page(self, data: st.DataObject, key: Any) -> None:
            page = data.draw(st.sampled_from(sorted({p for p in self.held_pages() if self.state.key_of[p] is None})),
                             label="page")
            self.state = spec.cache(self.state, page, key)
            self.expect_ok("cache", lambda: self.pool.cache_page_id(page, key))

        @precondition(lambda self: self.requests)
        @rule(data=st.data(), reverse=st.booleans(), views=st.booleans())
        def free_request(self, data: st.DataObject, reverse: bool, views: bool) -> None:
            index = data.draw(st.integers(0, len(self.requests) - 1), label="request")
            pages = self.requests.pop(index)
            order = pages[::-1] if reverse else list(pages)
            self.state = spec.free(self.state, tuple(order))
            if views and hasattr(self.pool, "free_pages"):
                self.expect_ok("free", lambda: self.pool.free_pages([self.pool.page(p) for p in order]))
            else:
                self.expect_ok("free", lambda: self.pool.free_page_ids(order))

        @rule(kind=st.sampled_from(bad_inputs), data=st.data())
        def bad_input(self, kind: str, data: st.DataObject) -> None:
            """One call the spec rejects; the pool must raise the matching error and not change."""
            held = [self.requests[0][0]] if bool(self.requests) and data.draw(st.booleans(), label="with held") else []
            if kind == "over-allocate":
                hint = data.draw(st.one_of(st.none(), st.integers(0, 7)), label="hint")
                bounds = self.bounds(hint)
                n = sum(1 for p in self.state.free if bounds is None or bounds[0] <= p < bounds[1])
                n += data.draw(st.integers(1, 3), label="extra")
                self.expect_rejected(f"allocate({n}, hint={hint})", "out-of-pages",
                                     lambda: self.pool.get_new_page_ids(n, **self.dp_kwargs(hint)))
            elif kind == "double-free" and self.state.free:
                ids = held + [data.draw(st.sampled_from(self.state.free), label="free page")]
                self.expect_rejected(f"free({ids})", "double-free", lambda: self.pool.free_page_ids(ids))
            elif kind == "free-null":
                ids = held + [0]
                self.expect_rejected(f"free({ids})", "null-page", lambda: self.pool.free_page_ids(ids))
            elif kind == "cache-null":
                key = data.draw(st.sampled_from(KEYS), label="key")
                self.expect_rejected("cache(0)", "null-page", lambda: self.pool.cache_page_id(0, key))
            elif kind == "recache" and any(k is not None for k in self.state.key_of):
                page = data.draw(st.sampled_from([p for p, k in enumerate(self.state.key_of) if k is not None]),
                                 label="keyed page")
                key = data.draw(st.sampled_from(KEYS), label="key")
                self.expect_rejected(f"cache({page})", "already-keyed", lambda: self.pool.cache_page_id(page, key))
            elif kind == "out-of-range":
                bad = self.state.num_pages + data.draw(st.integers(0, 2), label="offset")
                self.expect_rejected(f"touch([{bad}])", "out-of-range", lambda: self.pool.touch_ids(held + [bad]))

        @rule(release_all=st.booleans())
        def reset_prefix_cache(self, release_all: bool) -> None:
            if release_all:
                while self.requests:
                    pages = self.requests.pop()[::-1]
                    self.state = spec.free(self.state, tuple(pages))
                    self.expect_ok("free", lambda: self.pool.free_page_ids(pages))  # noqa: B023 (called at once)
            self.state, done = spec.reset_prefix_cache(self.state)
            got = self.expect_ok("reset_prefix_cache", self.pool.reset_prefix_cache)
            if got is not done:
                self.fail(["result:reset_prefix_cache"], f"reset_prefix_cache() gave {got}, spec {done}")

        # --- after every step ------------------------------------------------------------

        @invariant()
        def conforms(self) -> None:
            if self.state is None:
                return
            self.steps += 1
            failed = _failures(self.pool, self.state, check_usage)
            if failed:
                self.fail(failed, f"after step {self.steps}: implementation {abstract_pool(self.pool)} "
                                  f"vs spec {self.state}")

    PoolMachine.__name__ = PoolMachine.__qualname__ = f"PoolMachine[{getattr(factory, '__name__', 'factory')}]"
    return PoolMachine


def detection_settings(max_examples: int = 300, steps: int = 50) -> settings:
    """Bounded, derandomized settings for showing that a broken pool is caught (no shrinking);
    the counts are ints >= 1."""
    return settings(max_examples=checked_count(max_examples, "max_examples"),
                    stateful_step_count=checked_count(steps, "steps"), derandomize=True, database=None,
                    deadline=None, report_multiple_bugs=False, print_blob=False,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=list(HealthCheck))


def find_pool_failure(factory: PoolFactory, run_settings: settings | None = None) -> list[str]:
    """Run the pool machine against ``factory``; the names of the checks that failed, or [].

    An unexpected exception escaping the machine is reported as ``crash:<type>``; a ``factory``
    `make_pool_machine` refuses, or ``run_settings`` that are not Hypothesis settings, are an
    `InvalidArgumentError` before anything runs.
    """
    if run_settings is not None:
        checked_instance(run_settings, settings, "run_settings")
    machine = make_pool_machine(factory)
    try:
        run_state_machine_as_test(machine, settings=run_settings or detection_settings())
    except PoolCheckFailure as failure:
        return failure.checks
    except Exception as exc:  # a crash is a detection too; report it by type
        return [f"crash:{type(exc).__name__}"]
    return []
