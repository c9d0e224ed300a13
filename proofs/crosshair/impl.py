"""CrossHair checks of the implementation against the spec, and the mutants they must catch.

Every check is one ``crosshair check`` run (see `verikv.proofs.crosshair.common`) of one target in
`verikv.proofs.crosshair.targets`: a free-queue or pool method driven on a factory-built object
in any valid small state and compared with the model through the abstraction, or a pure
spec-vs-impl equivalence (hit rules, DP shard selection, hash-chain key identity). The bound
column states the state/input domain and the search budget: "Not confirmed" means no
counterexample within them (reported "no-counterexample"), never a proof; "confirmed" needs
every path confirmed; a target that enumerates its domain and runs the method concretely is
reported "passed", bounded-exhaustive over that domain.

``mutants()`` reruns the checks of the role a mutant replaces with that mutant installed
(``$VERIKV_CROSSHAIR_MUTANT``) and returns the names of the checks that failed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from verikv.proofs.crosshair.common import Budget, run_check
from verikv.proofs.crosshair.targets import (
    APPEND_CAPACITY,
    KEYS,
    MAX_POOL_PAGES,
    MAX_QUEUE_CAPACITY,
    MAX_REF,
    MUTANT_ENV,
    MUTANTS,
    SMALL_QUEUE_CAPACITY,
)
from verikv.proofs.runner.registry import Check, Mutant, Outcome

TARGETS = "verikv.proofs.crosshair.targets"
_QUEUE = f"queue ids < {MAX_QUEUE_CAPACITY}"
_SMALL_QUEUE = f"queue ids < {SMALL_QUEUE_CAPACITY}, every id 0..capacity"
_POOL = f"pool <= {MAX_POOL_PAGES} pages, ref <= {MAX_REF}, {KEYS} keys"


@dataclass(frozen=True)
class Spec:
    """One CrossHair check: its targets (one run), role (which mutants it faces), labels, budget."""

    name: str
    targets: tuple[str, ...]
    role: str
    invariant: str
    transition: str
    domain: str
    budget: Budget
    enumerated: bool = False
    """The target realises its inputs by branching and runs the method concretely (`untraced`):
    a confirmed run is bounded-exhaustive over ``domain`` ("passed"), not symbolic."""

    def run(self, mutant: str | None = None) -> Outcome:
        """One ``crosshair check`` run; an exhaustive budget (no iteration cap) must end in
        "confirmed" (anything less is "unknown", a failure)."""
        return run_check(self.targets, self.budget, plugin=True, env={MUTANT_ENV: mutant} if mutant else None,
                         require_confirmed=self.budget.iterations is None,
                         enumerated=self.domain if self.enumerated else None)

    def check(self) -> Check:
        exhaustive = "bounded-exhaustive: " if self.enumerated else ""
        return Check(self.name, "crosshair", self.invariant, self.transition,
                     f"{exhaustive}{self.domain}; {self.budget.describe()}", self.run)


def _target(function: str, role: str, invariant: str, transition: str, domain: str, iterations: int | None,
            enumerated: bool = False) -> Spec:
    """A check of one function of `verikv.proofs.crosshair.targets`."""
    return Spec(f"crosshair:{function}", (f"{TARGETS}.{function}",), role, invariant, transition, domain,
                _budget(iterations), enumerated)


def _budget(iterations: int | None) -> Budget:
    """``iterations`` uninteresting iterations, capped at 10 CPU s per condition, 2 s per path;
    None: until every path is explored (a domain small enough to exhaust), capped at 60 CPU s."""
    if iterations is None:
        return Budget(per_condition=60, iterations=None, per_path=10)
    return Budget(per_condition=10, iterations=iterations, per_path=2)


_QUEUE_METHODS = ("popleft_ids", "popleft", "remove_id", "append_ids", "prepend_ids")
_POOL_METHODS = ("get_new_page_ids", "touch_ids", "free_page_ids", "cache_page_id", "reset_prefix_cache")

SPECS: tuple[Spec, ...] = (
    Spec("crosshair:contracts:free_queue", tuple(f"verikv.free_queue.FreeCachePageQueue.{m}" for m in _QUEUE_METHODS),
         "queue", "refines-spec", "FreeCachePageQueue: " + ", ".join(_QUEUE_METHODS) + " (PEP 316 contracts)",
         _QUEUE, _budget(8)),
    Spec("crosshair:contracts:page_pool", tuple(f"verikv.page_pool.PagePool.{m}" for m in _POOL_METHODS),
         "pool", "refines-spec", "PagePool: " + ", ".join(_POOL_METHODS) + " (PEP 316 contracts)",
         _POOL, _budget(8)),
    _target("queue_popleft_ids", "queue", "refines-spec", "FreeCachePageQueue.popleft_ids", _QUEUE, 40),
    _target("queue_remove_id", "queue", "INV-FREE-DISTINCT", "FreeCachePageQueue.remove_id (links consistent)",
            _SMALL_QUEUE, None, enumerated=True),
    _target("queue_append_ids", "queue", "refines-spec", "FreeCachePageQueue.append_ids",
            f"queue ids < {APPEND_CAPACITY}, every id 0..capacity, 2 ids", None, enumerated=True),
    _target("pool_get_new_page_ids", "pool", "refines-spec", "PagePool.get_new_page_ids (pool.allocate)", _POOL, 30),
    _target("pool_free_page_ids", "pool", "refines-spec", "PagePool.free_page_ids (pool.free)", _POOL + ", 2 ids", 60),
    _target("full_hit", "full", "hit-rule:full", "FullAttentionManager.find_longest_cache_hit",
            "<= 4 pages, page size <= 3, max_length <= 12", 20),
    _target("sliding_hit", "sliding", "hit-rule:sliding", "SlidingWindowManager.find_longest_cache_hit",
            "<= 4 pages, page size <= 3, max_length <= 12, window <= 8", 20),
    _target("chunked_hit", "chunked", "hit-rule:chunked", "ChunkedLocalAttentionManager.find_longest_cache_hit",
            "<= 4 pages, page size <= 3, max_length <= 12, chunk <= 8", 20),
    _target("shard_bounds_agree", "dp", "dp-shard", "PagePool lookup shard selection (manager.call_shard)",
            _POOL + ", dp in -1..5, hint in -2..5", 30),
    _target("same_keys", "hasher", "INV-HIT-SAFE", "PageHasher.hash_request / extend (key identity)",
            "<= 4 tokens in {0,1}, 3 salts, 2 LoRA ids, page size <= 2, ideal hash", 20),
)


def checks() -> list[Check]:
    """Every CrossHair check of the implementation."""
    return [spec.check() for spec in SPECS]


def _detector(mutant: str, role: str) -> Callable[[], list[str]]:
    def detect() -> list[str]:
        return [spec.name for spec in SPECS if spec.role == role and spec.run(mutant).status == "failed"]
    return detect


def mutants() -> list[Mutant]:
    """Every CrossHair mutant, named ``crosshair:<Class>``, with the invariant it breaks."""
    return [Mutant(name=f"crosshair:{name}", kind="impl", invariant=invariant,
                   description=(cls.__doc__ or "").strip(), detect=_detector(name, role))
            for name, (role, cls, invariant) in MUTANTS.items()]
