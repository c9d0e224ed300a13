"""Lookup and query options in vLLM 0.33's shapes: ``max_cache_hit_length`` on
`CacheManager.get_computed_pages`, ``get_num_common_prefix_pages(running_request_id)`` and
`CachePages.get_page_ids(allow_none=..., group_ids=...)` / ``get_unhashed_page_ids_all_groups()``.

Expected values are worked out by hand (page size 4, pages handed out from 1 upward); the
hit cap is also checked against the spec's `verikv.spec.manager.lookup`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from verikv import (
    CacheGroupSpec,
    CacheManager,
    CachePages,
    FullAttentionSpec,
    Request,
    RequestStatus,
    SlidingWindowSpec,
)
from verikv.errors import InvalidArgumentError, UnknownRequestError
from verikv.spec import manager as m
from verikv.spec.pool import PreconditionError

KW: dict[str, Any] = dict(num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False)
FULL = CacheGroupSpec(FullAttentionSpec(page_size=4, **KW))
SLIDING = CacheGroupSpec(SlidingWindowSpec(page_size=4, sliding_window=4, **KW))


def cached_manager() -> CacheManager:
    """12 tokens cached in pages 1, 2, 3 (request "a", still held)."""
    mgr = CacheManager(12, [FULL], 32)
    mgr.allocate_slots(Request("a", list(range(13))), 13)
    return mgr


@pytest.mark.parametrize("cap, expected", [(None, 12), (100, 12), (11, 8), (8, 8), (3, 0), (0, 0)])
def test_max_cache_hit_length_caps_the_hit_at_a_page_boundary(cap: int | None, expected: int) -> None:
    mgr = cached_manager()
    hit, n = mgr.get_computed_pages(Request("b", list(range(16))), max_cache_hit_length=cap)
    assert n == expected and hit.get_page_ids() == ([1, 2, 3][:expected // 4],)
    s = m.init(m.ManagerConfig((m.GroupLayout("full", 4),), 12, 32))
    s, _ = m.allocate_slots(s, m.RequestView("a", tuple(range(13))), 13)
    assert m.lookup(s, m.RequestView("b", tuple(range(16))), max_cache_hit_length=cap).num_tokens == expected


@pytest.mark.parametrize("cap", [-1, 2.0, "4", True])
def test_bad_max_cache_hit_length_is_rejected(cap: Any) -> None:
    mgr = cached_manager()
    with pytest.raises(InvalidArgumentError):
        mgr.get_computed_pages(Request("b", list(range(16))), max_cache_hit_length=cap)
    s = m.init(m.ManagerConfig((m.GroupLayout("full", 4),), 12, 32))
    with pytest.raises(PreconditionError):
        m.lookup(s, m.RequestView("b", tuple(range(16))), max_cache_hit_length=cap)


def test_common_prefix_pages_in_vllm_shape_counts_every_request_holding_pages() -> None:
    mgr = CacheManager(16, [FULL, SLIDING], 32)
    a = Request("a", list(range(10)))
    mgr.allocate_slots(a, 10)
    assert mgr.get_num_common_prefix_pages("a") == [3, 0]  # alone: all its pages (windowed: 0)
    b = Request("b", list(range(9)) + [77])
    hit, n = mgr.get_computed_pages(b)
    mgr.allocate_slots(b, 10 - n, n, hit)
    assert mgr.get_num_common_prefix_pages("a") == [2, 0] == mgr.get_num_common_prefix_pages("b")
    c = Request("c", [5] * 6)
    mgr.allocate_slots(c, 6)
    assert mgr.get_num_common_prefix_pages("a") == [0, 0]  # a third request shares nothing
    a.status = RequestStatus.RUNNING  # (the eSurge shape requires it)
    assert mgr.get_num_common_prefix_pages(a, 2) == [2, 0]  # eSurge's shape: held by >= 2
    with pytest.raises(UnknownRequestError):
        mgr.get_num_common_prefix_pages("nobody")


def test_page_ids_allow_none_and_unhashed_pages_of_every_group() -> None:
    mgr = CacheManager(16, [FULL, SLIDING], 32)
    assert mgr.create_empty_page_list().get_page_ids(allow_none=True) is None
    assert mgr.create_empty_page_list().get_page_ids() == ([], [])
    a = Request("a", list(range(10)))
    new = mgr.allocate_slots(a, 10)  # full pages 1, 2, 3; sliding 4, 5, 6; two of each cached
    assert new is not None and new.get_page_ids(allow_none=True) == ([1, 2, 3], [4, 5, 6])
    assert new.get_unhashed_page_ids_all_groups() == [[3], [6]]
    with_null = CachePages([[1], [0, 5]], mgr.page_pool)
    assert with_null.get_unhashed_page_ids_all_groups() == [[], []]  # null placeholders left out
    with pytest.raises(InvalidArgumentError):
        new.get_page_ids(allow_none=1)  # type: ignore[call-overload]


def test_page_ids_of_selected_groups_in_the_order_asked() -> None:
    mgr = CacheManager(16, [FULL, SLIDING], 32)
    new = mgr.allocate_slots(Request("a", list(range(10))), 10)  # full pages 1, 2, 3; sliding 4, 5, 6
    assert new is not None
    assert new.get_page_ids(group_ids=[1]) == ([4, 5, 6],)
    assert new.get_page_ids(group_ids=(1, 0)) == ([4, 5, 6], [1, 2, 3])
    assert new.get_page_ids(group_ids=[]) == ()
    assert new.get_page_ids(True, group_ids=[]) is None  # every selected group (none) is empty
    selected = new.get_page_ids(group_ids=[0])
    selected[0].append(99)  # a copy: the result itself is unchanged
    assert new.get_page_ids() == ([1, 2, 3], [4, 5, 6])
    empty = mgr.create_empty_page_list()
    assert empty.get_page_ids(True, group_ids=[1]) is None
    assert empty.get_page_ids(group_ids=[1]) == ([],)


@pytest.mark.parametrize("group_ids", [[2], [-1], [True], [0.0], "01", 1, [np.int64(0), None]])
def test_bad_group_selection_is_rejected(group_ids: Any) -> None:
    new = CacheManager(16, [FULL, SLIDING], 32).allocate_slots(Request("a", list(range(10))), 10)
    assert new is not None
    with pytest.raises(InvalidArgumentError):
        new.get_page_ids(group_ids=group_ids)
    assert new.get_page_ids() == ([1, 2, 3], [4, 5, 6])


def test_the_decode_steps_shared_empty_result_selects_its_one_group() -> None:
    a = Request("a", list(range(13)))
    mgr = CacheManager(12, [FULL], 32)
    assert mgr.allocate_slots(a, 13) is not None
    a.num_computed_tokens = 13
    a.append_output_token_ids(1)
    step = mgr.allocate_slots(a, 1)  # 14 tokens fit in the 4 pages held: no new page
    assert step is not None and step.get_page_ids() == ([],)
    assert step.get_page_ids(group_ids=[0]) == ([],)
    assert step.get_page_ids(True, group_ids=[0]) is None
    with pytest.raises(InvalidArgumentError):
        step.get_page_ids(group_ids=[1])
