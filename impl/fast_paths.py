"""The manager's two fast paths: decode steps that need nothing, found without running the call.

Most calls of a serving loop are decode steps of running requests whose pages already hold the
next token: ``allocate_slots(request, n)`` (plain arguments) then takes no page, frees none,
caches nothing and returns the shared "no new page" result. `DecodeFastPaths` recognises such a
step from the request's record in a few comparisons (`DecodeFastPaths.covered`); the manager
then returns that result without running the pipeline (snapshot, checks, plan, apply).

A step is *covered* when all of these hold: the manager has one cache group, of a kind that never
drops pages (its coverage is then ``len(pages) * page_size`` tokens); this very `Request` object
holds pages (`verikv.coordinators.HeldState`); it is not finished; and the step's end
``num_computed_tokens + n`` is below the record's next caching point (``HeldState.cache_at``,
at most ``max_model_len + 1``: so the step is within ``max_model_len`` and caching is not due)
and within the pages' coverage.

Equivalence with the single calls:

- **A covered step** is exactly what the pipeline would do for it: its checks pass (a plain int
  count >= 1, a running holder, within ``max_model_len``, no hits, no DP arguments), its plan
  frees nothing (one group that never drops pages) and needs no page (covered), its caching is
  not due (below ``cache_at``), so its application changes nothing and its result is the shared
  "no new page" one. Any step that is not covered runs the pipeline.
- **A batch** (`DecodeFastPaths.batch_work`): ``allocate_slots_batch(requests, counts)`` in its
  plain form (a list of `Request`, plain int counts >= 1, distinct ids, no lookahead, no delayed
  caching, no DP size) is the single calls in order. Its covered positions get the shared result
  without a call; the others (its *work*) run the pipeline, every one checked first, then applied
  in order. Leaving the covered calls out changes nothing: they change no state, and what each
  other call checks and plans reads only its own record (the ids are distinct) and the pool,
  which a covered call does not touch.

The refinement checker and the Hypothesis machine compare each path with the pipeline
(`verikv.proofs.refinement`, `verikv.testing.manager_machine`).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import countOf
from typing import TYPE_CHECKING

from verikv.coordinators import HeldState
from verikv.request import LAST_UNFINISHED, Request, progress_of, request_id_of

if TYPE_CHECKING:
    from verikv.coordinators import CacheCoordinator, RequestState


class DecodeFastPaths:
    """The covered-step test of one manager's coordinator (see the module docstring)."""

    __slots__ = ("page_size", "records")

    def __init__(self, coordinator: CacheCoordinator) -> None:
        managers = coordinator.single_type_managers
        #: the coordinator's records (the same dict: read, never changed here)
        self.records: dict[str, RequestState] = coordinator.records
        #: the one group's page size when its coverage is ``len(pages) * page_size``; 0 (no step
        #: is covered) with several groups, or one that drops pages
        self.page_size: int = (managers[0].page_size
                               if len(managers) == 1 and not managers[0].frees_skipped_pages else 0)

    def covered(self, request: Request, num_new_tokens: int) -> bool:
        """Whether ``allocate_slots(request, num_new_tokens)`` (a plain int >= 1, every other
        argument its default) is a covered step: no new page, nothing changed."""
        request_id, status, computed = progress_of(request)
        rec = self.records.get(request_id)
        if type(rec) is not HeldState or rec.request is not request or status > LAST_UNFINISHED:
            return False
        num_tokens = computed + num_new_tokens
        return num_tokens < rec.cache_at and num_tokens <= len(rec.pages[0]) * self.page_size

    def batch_work(self, requests: object, num_new_tokens: object) -> list[int] | None:
        """The positions of a plain batch whose steps are not covered (in order), or None when
        the batch is not in its plain form (a list of `Request`, plain int counts >= 1, one per
        request or one for all, distinct ids): the checked path then runs every element."""
        if type(requests) is not list or countOf(map(type, requests), Request) != len(requests):
            return None
        counts = _plain_counts(num_new_tokens, len(requests))
        if counts is None or len(set(map(request_id_of, requests))) != len(requests):
            return None
        if not self.page_size:
            return list(range(len(requests)))
        if isinstance(counts, int):  # one count for all: no second sequence to walk
            return [i for i, request in enumerate(requests) if not self.covered(request, counts)]
        return [i for i, (request, n) in enumerate(zip(requests, counts)) if not self.covered(request, n)]


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
