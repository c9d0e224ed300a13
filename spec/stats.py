"""Prefix-cache statistics as a function of the calls a manager served.

The counters a manager reports for one interval (`verikv.events.PrefixCacheStats`): lookups
made (``requests``), tokens queried (``queries``: the request's token count per lookup), tokens
hit (``hits``: the hit's token count) and whether the prefix cache was reset during the
interval. A lookup that is skipped (caching off, or the request wants prompt logprobs) counts
nothing; taking the statistics starts a new interval.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from verikv.spec.manager import Hit, ManagerState, RequestView


@dataclass(frozen=True)
class PrefixCacheStats:
    """The counters of one interval."""

    requests: int = 0
    queries: int = 0
    hits: int = 0
    reset: bool = False


def record_lookup(stats: PrefixCacheStats, s: ManagerState, req: RequestView, hit: Hit) -> PrefixCacheStats:
    """``stats`` after `verikv.spec.manager.lookup` returned ``hit`` for ``req`` in ``s``."""
    if not s.config.enable_caching or req.prompt_logprobs:
        return stats
    return replace(stats, requests=stats.requests + 1, queries=stats.queries + req.num_tokens,
                   hits=stats.hits + hit.num_tokens)


def record_reset(stats: PrefixCacheStats, done: bool) -> PrefixCacheStats:
    """``stats`` after a `reset_prefix_cache` that happened (``done``) or was refused."""
    return replace(stats, reset=True) if done else stats


def take(stats: PrefixCacheStats) -> tuple[PrefixCacheStats, PrefixCacheStats]:
    """What taking the statistics returns, and the counters of the interval that starts."""
    return stats, PrefixCacheStats()
