"""The invariant catalogue: every normative INV-* name mapped to its predicate.

``POOL_INVARIANTS`` holds the predicates over `PoolState` (defined in `verikv.spec.pool`);
manager invariants over ``ManagerState`` are added to the catalogue beside them. Checkers
(Hypothesis machines, proofs, conformance harnesses) iterate over a catalogue so a failure
is always reported by its INV-* name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from verikv.spec import events, manager, pool

POOL_INVARIANTS: Mapping[str, Callable[[pool.PoolState], bool]] = {
    "INV-NULL": pool.inv_null,
    "INV-FREE-IFF-ZERO": pool.inv_free_iff_zero,
    "INV-FREE-DISTINCT": pool.inv_free_distinct,
    "INV-REF-NONNEG": pool.inv_ref_nonneg,
    "INV-CONSERVE": pool.inv_conserve,
    "INV-KEY-BIJ": pool.inv_key_bij,
    "INV-USAGE": pool.inv_usage,
}

INVARIANTS: dict[str, Callable[[Any], bool]] = dict(POOL_INVARIANTS)



def _on_pool(holds: Callable[[pool.PoolState], bool]) -> Callable[[manager.ManagerState], bool]:
    """The pool predicate ``holds`` read on a manager state's pool."""
    return lambda s: holds(s.pool)


MANAGER_INVARIANTS: Mapping[str, Callable[[manager.ManagerState], bool]] = {
    **{name: _on_pool(holds) for name, holds in POOL_INVARIANTS.items()},
    "INV-REF-COUNT": manager.inv_ref_count,
}
"""Predicates over one `ManagerState`: the pool invariants lifted to its pool, and INV-REF-COUNT.
INV-HIT-SAFE's state form (`manager.inv_hit_safe_state`), INV-KEYED-COMPUTED and
INV-WINDOW-LIVE read ghost state, so they are listed in `GHOST_INVARIANTS` and only apply to
spec states (a checker of an implementation evaluates INV-WINDOW-LIVE with the requests' own
computed counts, and keyed-implies-computed per held page: see `verikv.proofs.refinement.exhaustive`)."""

GHOST_INVARIANTS: Mapping[str, Callable[[manager.ManagerState], bool]] = {
    "INV-HIT-SAFE": manager.inv_hit_safe_state,
    "INV-KEYED-COMPUTED": manager.inv_keyed_computed,
    "INV-WINDOW-LIVE": manager.inv_window_live,
}

LOOKUP_INVARIANTS: Mapping[str, Callable[[manager.ManagerState, manager.RequestView, manager.Hit], bool]] = {
    "INV-HIT-SAFE": manager.inv_hit_safe,
    "INV-HIT-SHAPE": manager.inv_hit_shape,
}
"""Predicates over (state the lookup ran in, request, hit returned)."""

TRANSITION_INVARIANTS: Mapping[str, Callable[[manager.ManagerState, manager.ManagerState, object], bool]] = {
    "INV-ATOMIC": manager.inv_atomic,
    "INV-EVENTS-REPLAY": events.inv_events_replay_step,
}
"""Predicates over (pre-state, post-state, result) of one manager call: INV-ATOMIC over an
`manager.allocate_slots` and its result, INV-EVENTS-REPLAY over any call and the KV events it
emitted (`verikv.spec.events`)."""


def violated_manager_invariants(s: manager.ManagerState, ghost: bool = False) -> list[str]:
    """Names of the manager invariants ``s`` breaks (with the ghost ones when ``ghost``)."""
    if not manager.well_formed(s):
        return ["well-formed"]
    checks = {**MANAGER_INVARIANTS, **(GHOST_INVARIANTS if ghost else {})}
    return [name for name, holds in checks.items() if not holds(s)]


def violated_pool_invariants(s: pool.PoolState) -> list[str]:
    """Names of the pool invariants ``s`` breaks, in catalogue order (empty when all hold).

    A malformed state (sizes disagreeing) is reported as ``"well-formed"`` alone, since the
    predicates presuppose the shape.
    """
    if not pool.well_formed(s):
        return ["well-formed"]
    return [name for name, holds in POOL_INVARIANTS.items() if not holds(s)]
