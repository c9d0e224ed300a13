"""Cache-group builders and small helpers shared by the manager-level test files."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from verikv import (
    CacheGroupSpec,
    CacheManager,
    CachePages,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    Request,
    RequestStatus,
    SlidingWindowSpec,
)

KW: dict[str, Any] = dict(num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False)
"""The attention fields every test spec shares (their values do not matter to the manager)."""


def full(ps: int = 4) -> CacheGroupSpec:
    return CacheGroupSpec(FullAttentionSpec(page_size=ps, **KW))


def sliding(ps: int, window: int) -> CacheGroupSpec:
    return CacheGroupSpec(SlidingWindowSpec(page_size=ps, sliding_window=window, **KW))


def chunked(ps: int, chunk: int) -> CacheGroupSpec:
    return CacheGroupSpec(ChunkedLocalAttentionSpec(page_size=ps, attention_chunk_size=chunk, **KW))


def mamba(ps: int) -> CacheGroupSpec:
    return CacheGroupSpec(MambaSpec(page_size=ps, shapes=((2, 2),), dtype=np.float16))


def named(name: str) -> str:
    """``name`` as a whole word: a renamed or re-cased name does not match."""
    return rf"(?<![\w]){re.escape(name)}(?![\w])"


def ids(pages: CachePages | None) -> tuple[list[int], ...]:
    """The page ids of an allocation's result, which must not be None."""
    assert pages is not None
    return pages.get_page_ids()


def running(m: CacheManager, rid: str, tokens: list[int], **kw: Any) -> Request:
    """A request whose prompt ``tokens`` got pages and were computed, now RUNNING."""
    req = Request(rid, tokens)
    pages = m.allocate_slots(req, len(tokens), **kw)  # (not inside the assert: the suite also runs under -O)
    assert pages is not None
    req.num_computed_tokens = len(tokens)
    req.status = RequestStatus.RUNNING
    return req
