"""Deliberately broken page pools, one or more per pool invariant, and how each is caught.

Each mutant is a `PagePool` subclass that reintroduces one plausible bug (several are the
eSurge quirks: a null page that is touched or hashed, double free accepted,
pages lost when an allocation fails). ``mutants()`` exposes them to ``verikv prove
--mutants``; ``detect`` runs the pool state machine of `verikv.testing.pool_machine` against
the mutant (bounded, derandomized) and returns the names of the checks that failed. A mutant
that survives (empty list) means the checks are too weak.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from verikv.errors import NullPageError, OutOfPagesError
from verikv.page_pool import PagePool
from verikv.proofs.runner.registry import Mutant


class NullPageHandedOut(PagePool):
    """The free list is built from page 0 instead of page 1 (off by one)."""

    def __init__(self, num_pages: int, enable_caching: bool = True, **kwargs: object) -> None:
        super().__init__(num_pages, enable_caching, **kwargs)  # type: ignore[arg-type]
        self._free.link_front(0, [0])


class NullPageHashed(PagePool):
    """Caching does not exclude the null page (eSurge Q3)."""

    def check_cacheable(self, page_ids: Sequence[int]) -> None:
        real = [pid for pid in page_ids if pid != 0]
        super().check_cacheable(real)


class NullPageTouched(PagePool):
    """touch takes a reference on the null placeholder too (eSurge's drifting null ref)."""

    def touch_ids(self, page_ids: Sequence[int]) -> None:
        self._check_in_range(page_ids)
        for pid in page_ids:
            if pid != 0 and self._ref[pid] == 0:
                self._free.unlink(0, pid)
                if self._shards is not None:
                    self._shards.unlink(pid // self._pps, pid)
            self._ref[pid] += 1


class MissingDecrement(PagePool):
    """free links a page that reaches zero but never stores the decremented count."""

    def free_page_ids(self, page_ids: Iterable[int]) -> None:
        ids = list(page_ids)
        zeroed = [pid for pid in ids if self._ref[pid] - 1 == 0]
        super().free_page_ids(ids)
        for pid in zeroed:
            self._ref[pid] = 1


class RevivedPageStaysFree(PagePool):
    """touch bumps the count of a free cached page but leaves it in the free list."""

    def touch_ids(self, page_ids: Sequence[int]) -> None:
        self._check_in_range(page_ids)
        for pid in page_ids:
            if pid != 0:
                self._ref[pid] += 1


class MiscountedFreePages(PagePool):
    """touch unlinks a revived page by hand and forgets to decrement the free count."""

    def touch_ids(self, page_ids: Sequence[int]) -> None:
        self._check_in_range(page_ids)
        links = self._free
        for pid in page_ids:
            if pid == 0:
                continue
            if self._ref[pid] == 0:
                before, after = links.prev[pid], links.next[pid]
                links.next[before], links.prev[after] = after, before
                links.next[pid] = links.prev[pid] = -1
                if self._shards is not None:
                    self._shards.unlink(pid // self._pps, pid)
            self._ref[pid] += 1


class DoubleFreeAccepted(PagePool):
    """free rejects the null page but decrements without checking that a page is held (eSurge Q6)."""

    def free_page_ids(self, page_ids: Iterable[int]) -> None:
        ids = list(page_ids)
        if 0 in ids:
            raise NullPageError("the null page is never freed")
        zeroed = []
        for pid in ids:
            self._ref[pid] -= 1
            if self._ref[pid] == 0:
                zeroed.append(pid)
        self._link([], zeroed)


class PagesLostOnFailedAllocation(PagePool):
    """An over-large allocation unlinks the free pages before failing (eSurge Q6)."""

    def get_new_page_ids(self, num_pages: int, **kwargs: int | None) -> list[int]:
        free = self.get_num_free_pages()
        if kwargs.get("dp_shard_hint") is None and isinstance(num_pages, int) and num_pages > free:
            self._free.pop_front(0, free)
            raise OutOfPagesError(f"Cannot get {num_pages} free pages from the pool")
        return super().get_new_page_ids(num_pages, **kwargs)  # type: ignore[arg-type]


class EvictionKeepsKey(PagePool):
    """Reusing a cached page removes it from the cached map but not its key."""

    def _claim(self, ids: list[int]) -> None:  # where every reused page is evicted (inline or by `_evict`)
        keys = [self._key[pid] for pid in ids]
        super()._claim(ids)
        for pid, key in zip(ids, keys):
            self._key[pid] = key


class UsageCountsNullPage(PagePool):
    """Usage divides by all pages, so an idle pool reports 1/N (eSurge Q26)."""

    def get_usage(self) -> float:
        return 1.0 - self.get_num_free_pages() / self.num_pages


class FreedPagesReversed(PagePool):
    """Freed pages join the tail in reverse of the given order (wrong eviction order)."""

    def _link(self, front: Sequence[int], back: Sequence[int]) -> None:
        super()._link(front[::-1], back[::-1])


class FreeOrderPolicyIgnored(PagePool):
    """``free_order="unhashed-first"`` is accepted but every freed page goes to the tail."""

    def _by_free_order(self, zeroed: list[int]) -> tuple[list[int], list[int]]:
        return [], zeroed


class LookupReturnsNewest(PagePool):
    """A lookup returns the most recently cached page of a key instead of the oldest."""

    def _resolve(self, entry: int | dict[int, None], bounds: tuple[int, int] | None) -> int | None:
        ids = [entry] if isinstance(entry, int) else list(entry)
        inside = [pid for pid in ids if bounds is None or bounds[0] <= pid < bounds[1]]
        return inside[-1] if inside else None


class FailedFreeNotAtomic(PagePool):
    """free releases the pages before a bad one, then rejects the call."""

    def free_page_ids(self, page_ids: Iterable[int]) -> None:
        ids = list(page_ids)
        for index, pid in enumerate(ids):
            if not (type(pid) is int and 0 < pid < self.num_pages and self._ref[pid] >= 1):
                super().free_page_ids(ids[:index])
                break
        super().free_page_ids(ids)


_CATALOGUE: list[tuple[type[PagePool], str]] = [
    (NullPageHandedOut, "INV-NULL"),
    (NullPageHashed, "INV-NULL"),
    (NullPageTouched, "INV-NULL"),
    (MissingDecrement, "INV-FREE-IFF-ZERO"),
    (RevivedPageStaysFree, "INV-FREE-IFF-ZERO"),
    (MiscountedFreePages, "INV-FREE-DISTINCT"),
    (DoubleFreeAccepted, "INV-REF-NONNEG"),
    (PagesLostOnFailedAllocation, "INV-CONSERVE"),
    (EvictionKeepsKey, "INV-KEY-BIJ"),
    (UsageCountsNullPage, "INV-USAGE"),
    (FreedPagesReversed, "refines-spec"),
    (FreeOrderPolicyIgnored, "refines-spec"),
    (LookupReturnsNewest, "result:lookup"),
    (FailedFreeNotAtomic, "INV-ATOMIC"),
]


def factory_for(cls: type[PagePool]) -> Callable[[int, str], PagePool]:
    """A pool-machine factory building ``cls`` pools."""
    def build(num_pages: int, free_order: str) -> PagePool:
        return cls(num_pages, free_order=free_order)
    build.__name__ = cls.__name__
    return build


def _detector(cls: type[PagePool]) -> Callable[[], list[str]]:
    def detect() -> list[str]:
        from verikv.testing.pool_machine import find_pool_failure  # needs the "testing" extra
        return find_pool_failure(factory_for(cls))
    return detect


def mutants() -> list[Mutant]:
    """Every broken pool, named ``pool:<ClassName>``, with the check expected to catch it."""
    return [Mutant(name=f"pool:{cls.__name__}", kind="impl", invariant=invariant,
                   description=(cls.__doc__ or "").strip(), detect=_detector(cls))
            for cls, invariant in _CATALOGUE]
