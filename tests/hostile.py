"""The hostile-input harness: hostile values, full-state snapshots, invariant checks, one runner.

A `Case` builds a fresh *world* (a dict of live verikv objects), performs one call on it and
says what a correct library does with that call: ``"accept"`` (must succeed), ``"reject"``
(must raise a `verikv.errors.VeriKVError` subclass) or ``"either"`` (a legitimate value the
library may accept or refuse with a typed error). `run_case` reports every problem found, by
the names of these outcomes:

- ``untyped``: an exception outside the `VeriKVError` hierarchy escaped;
- ``silent acceptance``: a bad value was accepted;
- ``wrongly rejected``: a legitimate call raised;
- ``state changed``: a rejected call left the world's full snapshot different;
- ``corruption``: an invariant (spec catalogue, free-queue links) is broken afterwards;
- ``hang``: no answer within `HANG_SECONDS` (a hang detector, not a speed assertion).

The suite is `all_cases`: the ``CASES`` of `tests.test_hostile_inputs` and of every
``tests/hostile_*_cases.py`` module. ``python tests/hostile.py`` runs them all and prints the
counts per outcome; it exits 1 when any case has a problem.
"""

from __future__ import annotations

import faulthandler
import importlib
import math
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import astuple, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np

from verikv.errors import VeriKVError

HANG_SECONDS = 20
"""Generous bound after which a call counts as hung (hang detection only)."""

World = dict[str, Any]
OUTCOMES = ("untyped", "silent acceptance", "wrongly rejected", "state changed", "corruption", "hang")


# --- hostile values -------------------------------------------------------------------------

class HashFlipStr(str):
    """A str whose hash and equality change when ``flip`` is set (after it was used as a key)."""

    flip = 0

    def __hash__(self) -> int:
        return hash((str(self), self.flip))

    def __eq__(self, other: object) -> bool:
        return str.__eq__(self, other) is True and getattr(other, "flip", self.flip) == self.flip

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)


class HashFlipInt(int):
    """An int whose hash changes when ``flip`` is set."""

    flip = 0

    def __hash__(self) -> int:
        return hash((int(self), self.flip))

    def __eq__(self, other: object) -> bool:
        return int.__eq__(self, other) is True and getattr(other, "flip", self.flip) == self.flip

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)


class BadIndex:
    """An object whose ``__index__`` raises (it claims to be an integer)."""

    def __index__(self) -> int:
        raise RuntimeError("__index__ exploded")


class BadInt:
    """An object whose ``__int__`` / ``__float__`` raise."""

    def __int__(self) -> int:
        raise RuntimeError("__int__ exploded")

    def __float__(self) -> float:
        raise RuntimeError("__float__ exploded")


def _nested(depth: int) -> list[Any]:
    value: list[Any] = [1]
    for _ in range(depth):
        value = [value]
    return value


HOSTILE: dict[str, Callable[[], Any]] = {
    "None": lambda: None,
    "True": lambda: True,
    "False": lambda: False,
    "np_bool": lambda: np.bool_(True),
    "zero": lambda: 0,
    "neg1": lambda: -1,
    "2**31": lambda: 2**31,
    "2**63": lambda: 2**63,
    "10**100": lambda: 10**100,
    "-10**100": lambda: -(10**100),
    "1.5": lambda: 1.5,
    "2.0": lambda: 2.0,
    "nan": lambda: math.nan,
    "inf": lambda: math.inf,
    "-inf": lambda: -math.inf,
    "np_int": lambda: np.int64(3),
    "np_neg": lambda: np.int64(-1),
    "np_float": lambda: np.float64(2.0),
    "np_array": lambda: np.array([1, 2]),
    "np_array2d": lambda: np.array([[1, 2], [3, 4]]),
    "np_array0d": lambda: np.array(3),  # iterable by its type, not by its shape; unhashable
    "str": lambda: "x",
    "empty_str": lambda: "",
    "surrogate": lambda: "\ud800",
    "bytes": lambda: b"x",
    "list": lambda: [1, 2],
    "empty_list": list,
    "nested": lambda: _nested(5000),
    "ragged": lambda: [[1], [1, 2]],
    "dict": lambda: {"a": 1},
    "object": lambda: object(),
    "hashflip_str": lambda: HashFlipStr("x"),
    "hashflip_int": lambda: HashFlipInt(3),
    "bad_index": lambda: BadIndex(),
    "bad_int": lambda: BadInt(),
    "callable": lambda: (lambda *a: 0),
}
"""Name -> factory (a fresh value per case: some values are mutable or change their hash)."""

# Acceptance profiles: for a parameter of this kind, which hostile values a correct library
# must accept and which it may accept or reject; every other value must be rejected.
INT_LIKE = frozenset({"np_int", "hashflip_int"})  # integers of another type, converted exactly
BIG = frozenset({"2**31", "2**63", "10**100"})
PROFILES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # kind: (accept, either)
    "count0": (frozenset({"zero"}), INT_LIKE | BIG),            # int >= 0
    "count1": (frozenset(), INT_LIKE | BIG),                      # int >= 1
    "opt_count0": (frozenset({"None", "zero"}), INT_LIKE | BIG),  # None or int >= 0
    "opt_count1": (frozenset({"None"}), INT_LIKE | BIG),          # None or int >= 1
    "bounded": (frozenset(), INT_LIKE | {"zero"}),               # an int with a small valid range
    "bool": (frozenset({"True", "False"}), frozenset({"np_bool"})),
    "object": (frozenset(), frozenset()),                         # one specific type: all reject
    "rid": (frozenset(), frozenset({"str", "empty_str", "surrogate", "hashflip_str"})),  # unknown ids
    "ids": (frozenset({"empty_list"}), frozenset({"list", "np_array"})),  # a list of page ids
    "key": (frozenset({"zero", "neg1", "2**31", "2**63", "10**100", "-10**100", "1.5", "2.0",
                       "inf", "-inf", "np_int", "np_neg", "np_float", "str", "empty_str",
                       "surrogate", "bytes", "True", "False", "np_bool", "object", "callable",
                       "bad_index", "bad_int"}),
            frozenset({"nan", "hashflip_str", "hashflip_int"})),  # an opaque hashable key
}


@dataclass(frozen=True)
class Param:
    """One parameter of an entry point: a valid value and its acceptance profile.

    ``reject`` / ``accept`` / ``either`` override the profile for the names they list.
    """

    valid: Callable[[], Any]
    kind: str
    accept: frozenset[str] = frozenset()
    either: frozenset[str] = frozenset()
    reject: frozenset[str] = frozenset()

    def expectation(self, value_name: str) -> str:
        """The parameter's own sets take precedence over its profile's."""
        base_accept, base_either = PROFILES[self.kind]
        for names, expect in ((self.reject, "reject"), (self.accept, "accept"), (self.either, "either"),
                              (base_accept, "accept"), (base_either, "either")):
            if value_name in names:
                return expect
        return "reject"


def P(valid: Any, kind: str, accept: Iterable[str] = (), either: Iterable[str] = (),
      reject: Iterable[str] = ()) -> Param:
    """A `Param`; ``valid`` is a value (copied per case when it is a list) or a zero-arg factory."""
    factory = valid if callable(valid) and not isinstance(valid, type) else (lambda v=valid: _fresh(v))
    return Param(factory, kind, frozenset(accept), frozenset(either), frozenset(reject))


def _fresh(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


@dataclass(frozen=True)
class Case:
    """One hostile call: build a world, act on it, expect ``"accept"|"reject"|"either"``."""

    id: str
    build: Callable[[], World]
    act: Callable[[World], Any]
    expect: str
    isolate: bool = False  # run in a child process (work that could sit in C code for minutes)


def substitution_cases(name: str, build: Callable[[], World],
                       call: Callable[..., Any], params: dict[str, Param], *,
                       isolate: bool = False) -> list[Case]:
    """One case with every parameter valid (it must succeed, so rejections are not vacuous), then
    one case per (parameter, hostile value): that parameter hostile, the others valid.

    ``call(world, **kwargs)`` performs the call.
    """
    def valid_call(world: World) -> Any:
        return call(world, **{k: p.valid() for k, p in params.items()})

    cases = [Case(f"{name}[valid]", build, valid_call, "accept", isolate)]  # the baseline must work
    for pname, param in params.items():
        for vname, factory in HOSTILE.items():
            def act(world: World, pname: str = pname, factory: Callable[[], Any] = factory) -> Any:
                kwargs = {k: (factory() if k == pname else p.valid()) for k, p in params.items()}
                return call(world, **kwargs)
            cases.append(Case(f"{name}[{pname}={vname}]", build, act, param.expectation(vname), isolate))
    return cases


class W:
    """A parameter value taken from the world (``W("a")`` is ``world["a"]``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self) -> W:
        return self


class WList:
    """A list of world values (``WList("a", "c")`` is ``[world["a"], world["c"]]``)."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def __call__(self) -> WList:
        return self


def resolve(world: World, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: (world[v.name] if isinstance(v, W) else [world[n] for n in v.names] if isinstance(v, WList) else v)
            for k, v in kwargs.items()}


# --- snapshots --------------------------------------------------------------------------------

def snapshot(obj: Any) -> Any:
    """A comparable deep copy of everything observable about ``obj`` (and its internals).

    Reading a snapshot changes nothing (events are copied, not drained).
    """
    from verikv import (
        CacheManager,
        CachePage,
        CachePages,
        FreeCachePageQueue,
        MultiGroupPageTable,
        PagePool,
        PageTable,
        PrefixCacheStats,
        Request,
    )
    from verikv.events import EventLog
    from verikv.hashing import PageHasher

    if isinstance(obj, dict):
        return {k: snapshot(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(snapshot(v) for v in obj)
    if isinstance(obj, CacheManager):
        return _manager_snapshot(obj)
    if isinstance(obj, PagePool):
        return _pool_snapshot(obj)
    if isinstance(obj, FreeCachePageQueue):
        return _queue_snapshot(obj)
    if isinstance(obj, CachePage):
        return ("CachePage", obj.page_id, obj.ref_cnt, obj.page_hash, obj.is_null,
                _records_snapshot(obj._records))
    if isinstance(obj, CachePages):
        return ("CachePages", obj.get_page_ids())
    if isinstance(obj, Request):
        return ("Request", obj.request_id, list(obj._tokens), obj.num_prompt_tokens, obj.num_computed_tokens,
                obj.status, obj.cache_salt, obj.lora_id, obj.lora_name, obj.lora_path, obj.mm_features,
                obj.prompt_logprobs)
    if isinstance(obj, PageTable):
        return ("PageTable", obj._table.tobytes(), obj._num_pages.tobytes(), obj.cpu_version)
    if isinstance(obj, MultiGroupPageTable):
        return ("MultiGroupPageTable", obj.page_sizes, tuple(snapshot(t) for t in obj.page_tables))
    if isinstance(obj, PrefixCacheStats):
        return ("PrefixCacheStats", astuple(obj))
    if isinstance(obj, PageHasher):
        return ("PageHasher", obj.scheme, obj.seed, obj.root)
    if isinstance(obj, EventLog):
        return ("EventLog", obj.medium, list(obj._events), list(obj._pending), obj._depth, obj._context)
    if type(obj).__name__ == "ZmqEventPublisher":  # (verikv.kv_events needs the events extra)
        return ("ZmqEventPublisher", obj.next_seq, list(obj._channel.buffer), obj.endpoint, obj.replay_endpoint)
    if isinstance(obj, np.ndarray):
        return ("ndarray", obj.dtype.str, obj.shape, obj.tobytes())
    if is_dataclass(obj) and not isinstance(obj, type):
        return (type(obj).__name__, tuple(snapshot(getattr(obj, f.name)) for f in fields(obj)))
    return obj


def _records_snapshot(records: Any) -> Any:
    return (dict(records.ref) if isinstance(records.ref, dict) else list(records.ref),
            dict(records.key) if isinstance(records.key, dict) else list(records.key),
            records.null_id, records.owned)


def _queue_snapshot(queue: Any) -> Any:
    links = queue.links
    return ("FreeCachePageQueue", links.ids(0), list(links.prev), list(links.next), list(links.lengths),
            _records_snapshot(queue._records))


def _pool_snapshot(pool: Any) -> Any:
    from verikv.spec.abstraction import abstract_pool

    shards = pool._shards
    events = None if pool._events is None else list(pool._events._events)
    return (
        "PagePool", abstract_pool(pool), pool.free_list_ids(), list(pool._ref), list(pool._key),
        [(k, v if isinstance(v, int) else list(v)) for k, v in pool._cached.items()],
        pool.key_version, pool._dp, pool._pps,
        None if shards is None else [shards.ids(s) for s in range(len(shards.lengths))],
        astuple(pool.prefix_cache_stats), events, pool.get_usage(), pool.enable_caching, pool.free_order,
    )


def _request_state_snapshot(state: Any) -> Any:
    """Every field of one record (a `RequestState`, or a `HeldState` holding pages; the request
    object by identity)."""
    request = state.request
    held = type(state).__name__ == "HeldState"
    return (
        type(state).__name__, id(request), None if state.keys is None else list(state.keys), state.keys_version,
        state.last_lookup,
        [list(p) for p in state.pages] if held else None, list(state.num_cached) if held else None,
        state.shard if held else None, state.cache_at if held else None,
        [list(s) for s in state.states] if held else None,
        None if request is None else (request._holders, request._identity_version),
    )


def _manager_snapshot(m: Any) -> Any:
    from verikv.spec.abstraction import abstract_manager

    return (
        "CacheManager", abstract_manager(m), _pool_snapshot(m.page_pool),
        {rid: _request_state_snapshot(state) for rid, state in m.coordinator.records.items()},
        astuple(m.prefix_cache_stats), m.usage, m.data_parallel_size, m._dp_open,
        ("PageHasher", m.hasher.scheme, m.hasher.seed, m.hasher.root),
    )


# --- invariants -------------------------------------------------------------------------------

def broken_invariants(obj: Any) -> list[str]:
    """Names of the invariants ``obj`` (or anything inside a world dict) breaks."""
    from verikv import (
        CacheManager,
        FreeCachePageQueue,
        MultiGroupPageTable,
        PagePool,
        PageTable,
    )
    from verikv.spec.abstraction import abstract_manager, abstract_pool
    from verikv.spec.invariants import (
        violated_manager_invariants,
        violated_pool_invariants,
    )

    if isinstance(obj, dict):
        return [f"{k}: {name}" for k, v in obj.items() for name in broken_invariants(v)]
    if isinstance(obj, CacheManager):
        found = violated_manager_invariants(abstract_manager(obj))
        return found + _manager_table_problems(obj) + _queue_problems(obj.page_pool.free_page_queue)
    if isinstance(obj, PagePool):
        return violated_pool_invariants(abstract_pool(obj)) + _queue_problems(obj.free_page_queue) \
            + _shard_problems(obj)
    if isinstance(obj, FreeCachePageQueue):
        return _queue_problems(obj)
    if isinstance(obj, PageTable):
        return _page_table_problems(obj)
    if isinstance(obj, MultiGroupPageTable):
        return [p for t in obj.page_tables for p in _page_table_problems(t)]
    return []


def _queue_problems(queue: Any) -> list[str]:
    """The free queue's link invariants (its PEP 316 ``inv``) and that every id is a page."""
    links = queue.links
    ids = links.ids(0)
    problems = []
    chain = [links.capacity, *ids]
    if [links.prev[p] for p in [*ids, links.capacity + 1]] != chain:
        problems.append("queue: backward links disagree")
    if len(ids) != links.lengths[0] or len(set(ids)) != len(ids):
        problems.append("queue: length or distinctness")
    records = queue._records
    if any(not (p in records.ref if isinstance(records.ref, dict) else 0 <= p < len(records.ref)) for p in ids):
        problems.append("queue: links an id that is not one of its pages")
    if records.null_id is not None and records.null_id in ids:
        problems.append("queue: INV-NULL")
    return problems


def _shard_problems(pool: Any) -> list[str]:
    if pool._shards is None:
        return []
    merged = sorted(p for s in range(len(pool._shards.lengths)) for p in pool._shards.ids(s))
    return [] if merged == sorted(pool.free_list_ids()) else ["pool: shard lists disagree with the free list"]


def _manager_table_problems(m: Any) -> list[str]:
    problems = []
    groups = len(m.coordinator.single_type_managers)
    for rid, state in m.coordinator.records.items():
        pages = state.pages if type(state).__name__ == "HeldState" else None
        if pages is None and state.keys is None:
            problems.append(f"manager: the record of {rid!r} holds neither pages nor keys")
        if pages is not None and (len(pages) != groups or len(state.num_cached) != groups):
            problems.append(f"manager: the record of {rid!r} has no page list per group")
    return problems


def _page_table_problems(t: Any) -> list[str]:
    counts = t._num_pages
    if int(counts.min(initial=0)) < 0 or int(counts.max(initial=0)) > t.max_num_pages_per_req:
        return ["page table: row count out of range"]
    for row, n in enumerate(counts.tolist()):
        if (t._table[row, n:] != 0).any():
            return [f"page table: row {row} has entries past its count"]
    return []


# --- running a case ---------------------------------------------------------------------------

class Hang(Exception):
    """Raised by the alarm handler: the call did not answer within HANG_SECONDS."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise Hang(f"no answer within {HANG_SECONDS} s")


@dataclass
class Result:
    """What happened: ``raised`` (exception type name or None) and the problems found."""

    raised: str | None
    problems: list[tuple[str, str]]


def run_case(case: Case) -> Result:
    """Run one case (in a child process when ``case.isolate``) and classify what happened."""
    if case.isolate:
        return _run_isolated(case)
    world = case.build()
    before = snapshot(world)
    error: BaseException | None = None
    in_main = threading.current_thread() is threading.main_thread()  # only it receives signals
    previous = signal.signal(signal.SIGALRM, _on_alarm) if in_main else None
    if in_main:
        signal.alarm(HANG_SECONDS)
    faulthandler.dump_traceback_later(3 * HANG_SECONDS, exit=True)  # backstop for C-level hangs
    try:
        case.act(world)
    except Hang as exc:
        return Result("Hang", [("hang", str(exc))])
    except Exception as exc:  # classifying every exception is the point
        error = exc
    finally:
        faulthandler.cancel_dump_traceback_later()
        if in_main:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
    return Result(None if error is None else type(error).__name__, _classify(case, world, before, error))


def _classify(case: Case, world: World, before: Any, error: BaseException | None) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if error is not None and not isinstance(error, VeriKVError):
        problems.append(("untyped", f"{type(error).__name__}: {str(error)[:200]}"))
    if error is None and case.expect == "reject":
        problems.append(("silent acceptance", "the call succeeded"))
    if error is not None and case.expect == "accept":
        problems.append(("wrongly rejected", f"{type(error).__name__}: {str(error)[:200]}"))
    try:
        if error is not None and snapshot(world) != before:
            problems.append(("state changed", "the snapshot differs after a rejected call"))
        broken = broken_invariants(world)
    except Exception as exc:
        broken = [f"unreadable state: {type(exc).__name__}: {exc}"]
    if broken:
        problems.append(("corruption", "; ".join(broken)))
    return problems


_CHILD = """
import sys
from hostile import run_case, Case, cases_by_id
case = cases_by_id()[sys.argv[1]]
case = Case(case.id, case.build, case.act, case.expect, isolate=False)
result = run_case(case)
print(repr((result.raised, result.problems)))
"""


CHILD_MEMORY_BYTES = 4 * 2**30
"""Address-space limit of a child (a runaway allocation fails there instead of swapping the host)."""


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY_BYTES, CHILD_MEMORY_BYTES))


def _run_isolated(case: Case) -> Result:
    """Run ``case`` in a child interpreter (same flags, e.g. ``-O``); kill it after the bound."""
    from pathlib import Path

    here = Path(__file__).resolve().parent  # the child imports the case table from tests/
    flags = ["-O"] if sys.flags.optimize else []
    try:
        proc = subprocess.run([sys.executable, *flags, "-c", _CHILD, case.id], cwd=here,
                              capture_output=True, text=True, timeout=HANG_SECONDS, preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired:
        return Result("Hang", [("hang", f"no answer within {HANG_SECONDS} s (child killed)")])
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return Result("crash", [("untyped", f"child exited {proc.returncode}: {proc.stderr[-300:]}")])
    raised, problems = eval(lines[-1])
    return Result(raised, [tuple(p) for p in problems])


# --- the suite -----------------------------------------------------------------------------------

def case_modules() -> list[str]:
    """The modules holding cases: `test_hostile_inputs` and every ``hostile_*_cases`` module
    beside this file, in name order."""
    here = Path(__file__).resolve().parent
    return ["test_hostile_inputs", *sorted(path.stem for path in here.glob("hostile_*_cases.py"))]


def all_cases() -> list[Case]:
    """Every case of the suite, module by module (`case_modules`); ids are unique across it."""
    cases = [case for name in case_modules() for case in importlib.import_module(name).CASES]
    repeated = [cid for cid, n in Counter(case.id for case in cases).items() if n > 1]
    if repeated:
        raise RuntimeError(f"case ids must be unique across the suite: {sorted(repeated)[:5]}")
    return cases


def cases_by_id() -> dict[str, Case]:
    return {case.id: case for case in all_cases()}


def subject(case: Case) -> str:
    """The entry point a case calls: its id before ``[``."""
    return case.id.split("[")[0]


def known_open_still_fail(failing: Iterable[Case]) -> list[str]:
    """The `KNOWN_OPEN` subjects none of ``failing`` belongs to (their entries can go)."""
    from hostile_known_open import KNOWN_OPEN

    return sorted(set(KNOWN_OPEN) - {subject(case) for case in failing})


def main() -> int:
    """Print the outcome counts over every case (``python tests/hostile.py``): the counts over
    the cases outside `KNOWN_OPEN` subjects, then those subjects' failing cases. Exit status 1
    if a case outside them fails or a listed subject no longer fails."""
    from hostile_known_open import KNOWN_OPEN

    cases = all_cases()
    counts: Counter[str] = Counter()
    failing: list[Case] = []
    for case in cases:
        result = run_case(case)
        if result.problems:
            failing.append(case)
            if subject(case) not in KNOWN_OPEN:
                counts.update({k for k, _ in result.problems})
    unexpected = [case.id for case in failing if subject(case) not in KNOWN_OPEN]
    print(f"{len(cases)} cases from {', '.join(case_modules())}; {len(unexpected)} with a problem "
          f"outside the {len(KNOWN_OPEN)} known-open entry points")
    for kind in OUTCOMES:
        print(f"  {kind:<18} {counts[kind]}")
    for cid in unexpected:
        print("  PROBLEM:", cid)
    open_counts = Counter(subject(case) for case in failing if subject(case) in KNOWN_OPEN)
    for name, reason in KNOWN_OPEN.items():
        print(f"  known open: {name}: {open_counts[name]} failing cases ({reason})")
    fixed = known_open_still_fail(failing)
    for name in fixed:
        print("  NO LONGER FAILS (delete from KNOWN_OPEN):", name)
    return 1 if unexpected or fixed else 0


if __name__ == "__main__":
    sys.exit(main())
