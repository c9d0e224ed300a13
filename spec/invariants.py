"""The invariant catalogue: every normative INV-* name mapped to its predicate.

``POOL_INVARIANTS`` holds the predicates over `PoolState` (defined in `verikv.spec.pool`);
manager invariants over ``ManagerState`` are added to the catalogue beside them. Checkers
(Hypothesis machines, proofs, conformance harnesses) iterate over a catalogue so a failure
is always reported by its DESIGN name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from verikv.spec import pool

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


def violated_pool_invariants(s: pool.PoolState) -> list[str]:
    """Names of the pool invariants ``s`` breaks, in catalogue order (empty when all hold).

    A malformed state (sizes disagreeing) is reported as ``"well-formed"`` alone, since the
    predicates presuppose the shape.
    """
    if not pool.well_formed(s):
        return ["well-formed"]
    return [name for name, holds in POOL_INVARIANTS.items() if not holds(s)]
