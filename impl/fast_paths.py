"""The manager's fast paths: the check stage of a plain decode step, and of a batch of them.

Most calls of a serving loop are decode steps of running requests: ``allocate_slots(request,
n)`` with every other argument at its default. `DecodeFastPaths.step` is the check stage of
that call shape (docs/architecture.md: snapshot -> check -> plan -> apply), specialised: one
read of the request and its record, a few comparisons, the keys caching needs. It answers with

- ``True``: the step is *covered*: it takes no page, frees none and caches nothing (the manager
  returns its shared "no new page" result without planning);
- a `DecodeStep`: the fields of the very step the general check stage
  (`CacheManager._checked_allocation`) builds for these arguments, and its plan, which the
  coordinator carries out with `CacheCoordinator.extend`, the part of `CacheCoordinator.apply`
  that follows the frees (a decode step of this shape frees nothing);
- ``False``: another shape (not held by this very object, finished, past ``max_model_len``, a DP
  shard, several groups or a group that drops pages): the general check stage decides, and
  raises where it must.

A step is covered when the manager has one cache group, of a kind that never drops pages (its
coverage is then ``len(pages) * page_size`` tokens), this very `Request` object holds pages
(`verikv.coordinators.HeldState`), it is not finished, and the step's end ``num_computed_tokens
+ n`` is below the record's next caching point (``HeldState.cache_at``, at most ``max_model_len
+ 1``: so the step is within ``max_model_len`` and caching is not due) and within the coverage.

Equivalence with the single call's pipeline:

- **A covered step**: the general checks pass (a plain int count >= 1, a running holder whose
  identity is frozen, so its kept keys are its own; within ``max_model_len``; no hits, no DP
  arguments), the plan frees nothing (one group that never drops pages) and needs no page
  (covered), and caching is not due (below ``cache_at``): applying it changes nothing, and the
  result is the shared "no new page" one.
- **Another step of a holder** (one group that never drops pages, no shard, within
  ``max_model_len``): the same checks pass, for the same reasons; the step's fields are those the
  general stage computes (no lookahead: its slots are its tokens; the keys caching needs when
  its end reaches ``cache_at``, from the same `CacheManager` key function).
- **A batch** (`DecodeFastPaths.batch_steps`): ``allocate_slots_batch(requests, counts)`` in its
  plain form (a list of `Request`, plain int counts >= 1, distinct ids, no lookahead, no delayed
  caching, no DP size) is the single calls in order. Covered positions get the shared result
  without a call; every other one is checked first (here, or by the general stage), then each is
  planned and applied in order. Leaving the covered calls out changes nothing: they change no
  state, and what every other call checks and plans reads only its own record (the ids are
  distinct) and the pool, which a covered call does not touch.

The refinement checker and the Hypothesis machine drive both paths and the pipeline
(`verikv.proofs.refinement.exhaustive`, `verikv.testing.manager_machine`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import countOf
from typing import TYPE_CHECKING, TypeAlias

from verikv.coordinators import AllocationStep, HeldState
from verikv.request import LAST_UNFINISHED, Request

if TYPE_CHECKING:
    from verikv.coordinators import CacheCoordinator, RequestState
    from verikv.hashing import PageKey
    from verikv.page_pool import PagePool

#: a checked and planned decode step (`DecodeFastPaths.step`): the record, the request's computed
#: tokens, the step's end, the keys caching needs (None: none) and the tokens it caches up to, and
#: the plan (the group's new pages, or None when they do not fit)
DecodeStep: TypeAlias = "tuple[HeldState, int, int, list[PageKey] | None, int, tuple[int] | None]"

#: the general check stage's caching of an allocation (`CacheManager._caching`): ``(request,
#: record, held record, the step's end, whether the kept keys are stale) -> (keys, tokens)``
Caching = Callable[[Request, "RequestState | None", "HeldState | None", int, bool],
                   "tuple[list[PageKey] | None, int]"]


class DecodeFastPaths:
    """The decode step's check stage for one manager (see the module docstring)."""

    __slots__ = ("caching", "max_model_len", "page_size", "pool", "records")

    def __init__(self, coordinator: CacheCoordinator, caching: Caching) -> None:
        managers = coordinator.single_type_managers
        #: the coordinator's records (the same dict: read, never changed here)
        self.records: dict[str, RequestState] = coordinator.records
        self.max_model_len: int = coordinator.max_model_len
        self.pool: PagePool = coordinator.page_pool
        #: the general check stage's caching: the same keys
        self.caching: Caching = caching
        #: the one group's page size when its coverage is ``len(pages) * page_size``; 0 (never a
        #: fast step) with several groups, or one that drops pages
        self.page_size: int = (managers[0].page_size
                               if len(managers) == 1 and not managers[0].frees_skipped_pages else 0)

    def step(self, request: Request, num_new_tokens: int) -> DecodeStep | bool:
        """``allocate_slots(request, num_new_tokens)`` (a plain int >= 1, every other argument its
        default), checked and planned: True when covered; False when the general check stage
        decides; else the checked step as the values `CacheCoordinator.extend` takes (the record,
        the request's computed tokens, the step's end, the keys caching needs and the tokens it
        caches up to) and its plan (the group's new pages; None: the pool has too few free pages,
        the call changes nothing). Pure."""
        rec = self.records.get(request.request_id)
        if type(rec) is not HeldState or rec.request is not request or request.status > LAST_UNFINISHED:
            return False
        computed = request.num_computed_tokens
        num_tokens = computed + num_new_tokens
        page_size = self.page_size
        if num_tokens < rec.cache_at and num_tokens <= len(rec.pages[0]) * page_size:
            return True
        if not page_size or rec.shard is not None or num_tokens > self.max_model_len:
            return False
        cache_keys, cache_tokens = (None, 0) if num_tokens < rec.cache_at else self.caching(
            request, rec, rec, num_tokens, False)
        # the plan (`CacheCoordinator._plan` for this shape: nothing freed, no hits, the whole pool)
        need = -(-num_tokens // page_size) - len(rec.pages[0])
        plan = (0,) if need <= 0 else (need,) if need <= self.pool.get_num_free_pages() else None
        return rec, computed, num_tokens, cache_keys, cache_tokens, plan

    def batch_steps(self, requests: object, num_new_tokens: object
                    ) -> list[tuple[int, AllocationStep | None]] | None:
        """For a plain batch, each position that is not covered with its checked step (None: the
        general check stage decides), in order; None when the batch is not in its plain form (a
        list of `Request`, plain int counts >= 1, one per request or one for all, distinct ids).
        Pure."""
        if type(requests) is not list or countOf(map(type, requests), Request) != len(requests):
            return None
        counts = _plain_counts(num_new_tokens, len(requests))
        if counts is None or len({request.request_id for request in requests}) != len(requests):
            return None
        step = self.step
        if isinstance(counts, int):  # one count for all: no second sequence to walk
            checked = [(i, s) for i, request in enumerate(requests) if (s := step(request, counts)) is not True]
        else:
            checked = [(i, s) for i, (request, n) in enumerate(zip(requests, counts))
                       if (s := step(request, n)) is not True]
        return [(i, None if s is False else _allocation_step(requests[i], s)) for i, s in checked]


def _allocation_step(request: Request, checked: DecodeStep) -> AllocationStep:
    """The `AllocationStep` of a checked decode step (its plan left out: a batch plans each
    element when it applies it, after the elements before it)."""
    rec, computed, num_tokens, cache_keys, cache_tokens, _ = checked
    return AllocationStep(request.request_id, request, rec, computed, num_tokens, num_tokens, None, None, None,
                          cache_keys, cache_tokens, False)


def _plain_counts(num_new_tokens: object, num_requests: int) -> int | Sequence[int] | None:
    """One plain int >= 1 for all, or a list of them (one per request; equal ones become one
    int), else None."""
    if type(num_new_tokens) is int:
        return num_new_tokens if num_new_tokens >= 1 else None
    if (type(num_new_tokens) is not list or len(num_new_tokens) != num_requests
            or countOf(map(type, num_new_tokens), int) != num_requests):
        return None
    if num_new_tokens and min(num_new_tokens) < 1:
        return None
    if num_new_tokens and num_new_tokens.count(num_new_tokens[0]) == num_requests:
        return int(num_new_tokens[0])
    return num_new_tokens
