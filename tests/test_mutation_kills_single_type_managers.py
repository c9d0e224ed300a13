"""Checks written for mutants of impl/single_type_managers.py that the suite let through
(mutation/triage.toml).

They pin the validation the managers' docstrings promise for token counts (``_count``: an
integer >= 0, any integral type, returned as an exact int, anything else an
`InvalidArgumentError` naming the argument) and for request keys (``_key_list``: a sequence of
`PageKey`, list or not). Expected values come from the arguments: a count of ``n`` tokens needs
``ceil(n / page_size)`` pages.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from verikv import FullAttentionSpec, InvalidArgumentError, PagePool, Request
from verikv.hashing import PageHasher
from verikv.single_type_managers import SingleTypeCacheManager, get_manager_for_kv_cache_spec

PAGE_SIZE = 4
KW: dict[str, Any] = dict(num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False)


def _named(name: str) -> str:
    """``name`` as a whole word: a renamed or re-cased name does not match."""
    return rf"(?<![\w]){re.escape(name)}(?![\w])"


def _manager() -> SingleTypeCacheManager:
    return get_manager_for_kv_cache_spec(FullAttentionSpec(page_size=PAGE_SIZE, **KW), PagePool(16), 0)


@pytest.mark.parametrize("num_tokens", [0, 1, 4, 5, 9, np.int64(0), np.int64(7)])
def test_a_token_count_of_any_integral_type_needs_its_pages(num_tokens: Any) -> None:
    needed = _manager().get_num_pages_to_allocate([], num_tokens, [])
    assert needed == -(-int(num_tokens) // PAGE_SIZE)
    assert type(needed) is int  # the count was taken as an exact int


@pytest.mark.parametrize("num_tokens", [-1, np.int64(-1), "5", 2.0])
def test_a_bad_token_count_is_rejected_by_name(num_tokens: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=_named("num_tokens")):
        _manager().get_num_pages_to_allocate([], num_tokens, [])


def test_a_lookup_takes_keys_as_any_sequence_of_page_keys() -> None:
    manager = _manager()
    keys = PageHasher("sha256", seed=7).hash_request(Request("r", list(range(8))), PAGE_SIZE)
    assert manager.find_longest_cache_hit(list(keys), 8, (0,)) == ([],)  # nothing cached yet
    assert manager.find_longest_cache_hit(tuple(keys), 8, (0,)) == ([],)


@pytest.mark.parametrize("keys", ["ab", b"ab", (b"k", "not a key"), [b"k", 1], 5])
def test_a_lookup_rejects_keys_that_are_not_page_keys(keys: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=_named("keys")):
        _manager().find_longest_cache_hit(keys, 8, (0,))
