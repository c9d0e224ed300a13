"""Checks written for mutants of impl/request.py that the suite let through (mutation/triage.toml).

They pin what `Request`'s docstrings promise and the suite never exercised: identity fields
(id, salt, LoRA, multimodal items) can be set on a request that holds no pages, and a second
change invalidates a manager's kept keys as the first does; multimodal items are tuples kept in
offset order and may end exactly at the prompt's end; token ids are plain ints from 0; a
preempted request is not finished. Expected values come from the arguments.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from verikv import CacheGroupSpec, CacheManager, FullAttentionSpec, Request, RequestStatus
from verikv.errors import InvalidArgumentError
from verikv.request import TokenView

KW: dict[str, Any] = dict(num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False)


def _named(name: str) -> str:
    """``name`` as a whole word: a renamed or re-cased name does not match."""
    return rf"(?<![\w]){re.escape(name)}(?![\w])"


def _request(**kw: Any) -> Request:
    return Request("r", [1, 2, 3, 4], **kw)


def _set(request: Request, field: str, value: object) -> Callable[[], None]:
    return lambda: setattr(request, field, value)


NAMED_ERRORS: list[tuple[str, Callable[[], object], str]] = [
    ("prompt_token_ids", lambda: Request("r", 5), "prompt_token_ids"),  # type: ignore[arg-type]
    ("lora_id", lambda: _request(lora_id=-1), "lora_id"),
    ("cache_salt", lambda: _request(cache_salt="\ud800"), "cache_salt"),
    ("num_computed_tokens", lambda: _set(_request(), "num_computed_tokens", 1.5)(), "num_computed_tokens"),
    ("token_ids", lambda: _request().append_output_token_ids("ab"), "token_ids"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("call", "name"), [(c, n) for _, c, n in NAMED_ERRORS], ids=[i for i, _, _ in NAMED_ERRORS])
def test_the_error_names_what_it_rejects(call: Callable[[], object], name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        call()


def test_identity_fields_can_be_set_while_no_pages_are_held() -> None:
    request = _request()
    request.request_id = "s"
    request.cache_salt = b"tenant"
    request.lora_id = 0
    request.mm_features = [("img", 1, 2)]
    assert (request.request_id, request.cache_salt, request.lora_id) == ("s", b"tenant", 0)
    assert [tuple(f) for f in request.mm_features] == [("img", 1, 2)]


def test_a_str_subclass_id_becomes_a_plain_str() -> None:
    class Name(str):
        pass

    assert type(Request(Name("r"), [1]).request_id) is str


def test_prompt_logprobs_is_settable_and_checked() -> None:
    request = _request()
    request.prompt_logprobs = True
    assert request.prompt_logprobs is True
    with pytest.raises(InvalidArgumentError):
        request.prompt_logprobs = 1  # type: ignore[assignment]


def test_a_second_identity_change_invalidates_a_managers_kept_keys() -> None:
    manager = CacheManager(16, [CacheGroupSpec(FullAttentionSpec(page_size=4, **KW))], 64, hash_seed=0)
    request = Request("a", list(range(10)), cache_salt="first")
    request.cache_salt = "second"
    hits, n = manager.get_computed_pages(request)
    assert manager.allocate_slots(request, request.num_tokens - n, n, hits) is not None
    request.num_computed_tokens = request.num_tokens
    manager.free(request)  # pages stay cached under "second"; the manager keeps the keys
    request.cache_salt = "third"
    request.num_computed_tokens = 0
    _, n = manager.get_computed_pages(request)
    assert n == 0  # a different salt shares no page


def test_multimodal_items_must_be_triples() -> None:
    with pytest.raises(InvalidArgumentError):
        _request(mm_features=[("img", 0)])
    with pytest.raises(InvalidArgumentError):
        _request(mm_features=[["img", 0, 1]])


def test_multimodal_items_may_end_at_the_prompt_end_and_are_kept_in_offset_order() -> None:
    # a 4-token prompt: "a" at positions 2..3, "b" at 0; by offset "b" comes first, by hash it would not
    request = _request(mm_features=[("a", 2, 2), ("b", 0, 1)])
    assert [f.offset for f in request.mm_features] == [0, 2]
    assert [f.mm_hash for f in request.mm_features] == ["b", "a"]


def test_token_zero_is_valid_on_every_path() -> None:
    request = Request("r", [np.int64(0), 1])  # type: ignore[list-item]  # NumPy ints take the checked path
    assert list(request.all_token_ids) == [0, 1]
    request.append_output_token_ids(0)
    request.append_output_token_ids([0])
    assert list(request.output_token_ids) == [0, 0]


def test_appended_numpy_tokens_become_plain_ints() -> None:
    request = _request()
    request.append_output_token_ids([np.int64(5)])  # type: ignore[list-item]
    assert request.all_token_ids[-1] == 5
    assert type(request.all_token_ids[-1]) is int


def test_a_preempted_request_is_not_finished() -> None:
    request = _request()
    request.status = RequestStatus.PREEMPTED
    assert request.is_finished() is False
    request.status = RequestStatus.FINISHED_STOPPED
    assert request.is_finished() is True


def test_token_views_of_equal_tokens_are_equal() -> None:
    assert TokenView([1, 2]) == TokenView([1, 2])
    assert not TokenView([1, 2]) == TokenView([2, 1])


def test_bytes_are_not_a_token_list() -> None:
    with pytest.raises(InvalidArgumentError):
        Request("r", b"\x01\x02")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        _request().append_output_token_ids(b"\x01")  # type: ignore[arg-type]
