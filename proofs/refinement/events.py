"""KV events of the real `CacheManager`, checked exhaustively against `verikv.spec.events`.

The exhaustive refinement of `verikv.proofs.refinement.exhaustive` drives a manager built with
``enable_kv_events=True`` through every operation sequence of a case, and after every
operation this checker takes the manager's events and judges them by name:

- ``EVENTS-PER-CALL``: the operation's events, translated to the spec's terms (wire hashes
  renamed to contents through the renaming learnt from the pool and from the requests' key
  lists), are exactly `verikv.spec.events.call_events` of the spec's state change: the evicted
  keys, then one stored run per group and request with its parent, page size, tokens and LoRA
  identity, one batch per call; nothing for a lookup, a free, a rejected call or a refused reset;
- ``INV-EVENTS-REPLAY``: replaying every event since the manager was built gives the pool's
  cached-key multiset.

The mutants below plant event bugs in a correct manager (a dropped ``BlockRemoved``, a wrong
parent hash, per-page instead of per-call events, an ``AllBlocksCleared`` on a refused reset)
and are shown to be caught here.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any, cast

from verikv.proofs.mutants.manager import _base, _override
from verikv.proofs.refinement.exhaustive import FULL, MAMBA_ALIGN, SLIDING, Case, failed_checks, run_case
from verikv.proofs.runner.registry import Check, Mutant
from verikv.spec import events as spec_events, manager as spec

CASES: tuple[Case, ...] = (
    Case("events(full+sliding)", (FULL, SLIDING), 8, 4),
    Case("events(delayed-caching)", (FULL,), 6, 4, delay=True),
    Case("events(full+mamba(align))", (FULL, MAMBA_ALIGN), 8, 4),
)
"""Evictions across two groups with null placeholders, caching by separate ``cache_pages``
calls, and Mamba state pages (one page per run)."""
EVENT_CHECKS = frozenset({"EVENTS-PER-CALL", "INV-EVENTS-REPLAY"})


def make_manager(config: spec.ManagerConfig) -> Any:
    """The real manager of a case, with KV events on."""
    from verikv.testing.adapter import build_cache_manager

    return build_cache_manager(config, enable_kv_events=True)


def _seen_lora(lora: Any) -> Any:
    """What an event shows of a LoRA identity: the name of a named adapter, else the id."""
    return lora[0] if isinstance(lora, tuple) else lora


@functools.cache
def machine_class() -> type:
    """`ManagerMachine` whose ``check`` also judges the operation's KV events (built on first
    use: the machine imports Hypothesis)."""
    from verikv.events import PageRemoved, PageStored, split_group, wire_hash
    from verikv.testing.manager_machine import ManagerMachine

    class EventCheckingMachine(ManagerMachine):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.enforced = self.enforced | EVENT_CHECKS
            self.replayed: spec_events.CachedKeys | None = Counter()
            self.wire: dict[bytes, spec.Content] = {}
            self.call_pre: spec.ManagerState = self.spec
            self.call_new: tuple[int, ...] = ()
            self.call_reset = False
            self.batch_events: list[Any] | None = None
            """The spec's events of a batched step just made (element by element), else None."""

        def check_new_pages(self, rid: str, new: tuple[tuple[int, ...], ...]) -> None:
            self.call_new = self.call_new + tuple(p for pages in new for p in pages)
            super().check_new_pages(rid, new)

        def apply_reset(self) -> None:
            self.call_reset = spec.reset_prefix_cache(self.spec)[1]
            super().apply_reset()

        def learn_wire(self) -> None:
            """Wire hash -> content, from keyed pages and from the live requests' key lists."""
            manager, s = self.impl.manager, self.spec
            pairs = [(split_group(manager.page_pool.key_of(p))[0], cast(spec.PoolKey, s.pool.key_of[p])[0])
                     for p in range(1, self.config.num_pages)
                     if manager.page_pool.key_of(p) is not None and s.pool.key_of[p] is not None]
            base = self.config.base_page_size
            for rid, tracked in self.requests.items():
                if tracked.native is not None:
                    pairs += [(key, spec.content_of(tracked.view, (i + 1) * base, base))
                              for i, key in enumerate(manager.page_hashes_of(rid))]
            for key, content in pairs:
                if self.wire.setdefault(wire_hash(key), content) != content:
                    self.fail("REFINEMENT", f"one wire hash stands for two contents: {content!r}")

        def content(self, h: bytes) -> Any:
            return self.wire.get(h, ("unknown wire hash", h.hex()))

        def translate(self, event: Any) -> spec_events.Event:
            if not isinstance(event, (PageRemoved, PageStored)):
                return spec_events.Cleared()
            group = -1 if event.group_id is None else event.group_id  # (a manager always sets it)
            if isinstance(event, PageRemoved):
                return spec_events.Removed(group, tuple(map(self.content, event.page_hashes)))
            parent = None if event.parent_page_hash is None else self.content(event.parent_page_hash)
            if event.medium != "GPU":
                parent = ("medium", event.medium)  # (shown as a difference in the parent)
            lora = event.lora_name if event.lora_name is not None else event.lora_id
            return spec_events.Stored(group, tuple(map(self.content, event.page_hashes)), parent,
                                      event.page_size or 0, event.token_ids, lora)

        def allocate(self, rid: str, *args: Any, **kwargs: Any) -> bool:
            """Judge an allocation's events at the call: a Hypothesis ``schedule`` rule makes
            several calls between two checks, and each call is its own batch."""
            done: bool = super().allocate(rid, *args, **kwargs)
            self.check_events()
            return done

        def allocate_batch(self, rids: list[str], counts: list[int], lookahead: int, delay: bool) -> None:
            """A batch records each element as the single call it stands for: its events are
            the elements' events in order, judged against the spec's fold element by element."""
            pre, views = self.spec, [self.view(rid) for rid in rids]
            super().allocate_batch(rids, counts, lookahead, delay)
            if self.spec is pre:
                return  # rejected (or nothing changed): no events
            want: list[Any] = []
            s = pre
            for view, n in zip(views, counts):
                t, new = spec.allocate_slots(s, view, n, 0, None, lookahead, delay, None, self.dp)
                flat = () if new is None else tuple(p for pages in new for p in pages)
                want += spec_events.call_events(s, t, flat, False)
                s = t
            self.batch_events = want
            self.check_events()

        def check(self) -> None:
            self.check_events()
            super().check()

        def check_events(self) -> None:
            """EVENTS-PER-CALL and INV-EVENTS-REPLAY for the events since the last judgement."""
            self.learn_wire()
            got = [self.translate(e) for e in self.impl.manager.take_events()]
            of_call = self.batch_events if self.batch_events is not None else spec_events.call_events(
                self.call_pre, self.spec, self.call_new, self.call_reset)
            self.batch_events = None
            want = [replace(e, lora=_seen_lora(e.lora)) if isinstance(e, spec_events.Stored) else e
                    for e in of_call]
            if got != want:
                self.fail("EVENTS-PER-CALL", f"events {got!r} != spec {want!r}")
            self.replayed = None if self.replayed is None else spec_events.replay(self.replayed, got)
            step_ok = spec_events.inv_events_replay_step(self.call_pre, self.spec, got)
            if not (step_ok and spec_events.inv_events_replay(self.spec, self.replayed)):
                self.fail("INV-EVENTS-REPLAY", f"replayed {self.replayed!r} != cached "
                                               f"{spec_events.cached_keys(self.spec.pool)!r}")
                self.replayed = Counter(spec_events.cached_keys(self.spec.pool))  # report once
            self.call_pre, self.call_new, self.call_reset = self.spec, (), False

    return EventCheckingMachine


def check_name(case: Case) -> str:
    return f"refine-events:{case.name}:N<={case.num_pages},depth<={case.depth} exhaustive"


def checks() -> list[Check]:
    """One exhaustive events check per case."""
    return [Check(name=check_name(case), kind="refinement",
                  invariant="INV-EVENTS-REPLAY", transition="manager.*", bound=case.bound,
                  run=lambda case=case: run_case(case, make_manager, machine_class()))  # type: ignore[misc]
            for case in CASES]


# --- mutants ------------------------------------------------------------------------------------

def drop_removed(manager: Any) -> None:
    """The event log forgets evictions: no ``BlockRemoved`` is ever emitted."""
    def removed(self: Any, page_id: int, key: Any) -> None:
        return None
    _override(manager.page_pool.event_log, removed=removed)


def parent_is_first_page(manager: Any) -> None:
    """A stored run names its own first page as its parent (the parent hash off by one page)."""
    def described(self: Any, context: Any, hashes: tuple[bytes, ...], group_id: int | None,
                  ids: tuple[int, ...]) -> Any:
        event = _base(self)._described(self, context, hashes, group_id, ids)
        return replace(event, parent_page_hash=hashes[0])
    _override(manager.page_pool.event_log, _described=described)


def per_page_events(manager: Any) -> None:
    """Calls are not bracketed: every page report is an event of its own (not batched per call)."""
    def no_op(self: Any) -> None:
        return None
    _override(manager.page_pool.event_log, begin_call=no_op, end_call=no_op)


def cleared_on_refused_reset(manager: Any) -> None:
    """A refused ``reset_prefix_cache`` (pages still held) still emits ``AllBlocksCleared``."""
    def reset_prefix_cache(self: Any) -> bool:
        done = bool(_base(self).reset_prefix_cache(self))
        if not done:
            self.event_log.cleared()
        return done
    _override(manager.page_pool, reset_prefix_cache=reset_prefix_cache)


_MUTANTS: tuple[tuple[str, str, Callable[[Any], None]], ...] = (
    ("events_drop_removed", "INV-EVENTS-REPLAY", drop_removed),
    ("events_parent_is_first_page", "EVENTS-PER-CALL", parent_is_first_page),
    ("events_per_page", "EVENTS-PER-CALL", per_page_events),
    ("events_cleared_on_refused_reset", "INV-EVENTS-REPLAY", cleared_on_refused_reset),
)


def _detect(plant: Callable[[Any], None]) -> list[str]:
    def make_mutant(config: spec.ManagerConfig) -> Any:
        manager = make_manager(config)
        plant(manager)
        return manager
    case = CASES[0]
    return [f"{check_name(case)}: {name}" for name in failed_checks(case, make_mutant, machine_class())]


def _spec_forgets_evictions() -> list[str]:
    """spec: `call_events` emits no removal (an evicted key stays in every router's index)."""
    original = spec_events._removed
    spec_events._removed = lambda pre, new_pages: []
    try:
        return _detect(lambda manager: None)
    finally:
        spec_events._removed = original


def mutants() -> list[Mutant]:
    """The event bugs, each caught by ``refine-events:events(full+sliding)``; the spec mutant
    disagrees with the correct implementation (EVENTS-PER-CALL)."""
    spec_mutant = Mutant(name="spec:events-forget-evictions", kind="spec", invariant="EVENTS-PER-CALL",
                         description=" ".join((_spec_forgets_evictions.__doc__ or "").split()),
                         detect=_spec_forgets_evictions)
    return [spec_mutant] + [Mutant(name=f"impl:{name}", kind="impl", invariant=invariant,
                   description=" ".join((plant.__doc__ or "").split()) + f" [refine-events: {CASES[0].name}]",
                   detect=lambda plant=plant: _detect(plant))  # type: ignore[misc]
            for name, invariant, plant in _MUTANTS]
