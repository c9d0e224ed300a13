"""Checks written for mutants of impl/request.py that the suite let through (tools/mutation/triage.toml).

They pin what `Request`'s docstrings promise and the suite never exercised: identity fields
(id, salt, LoRA, multimodal items) can be set on a request that holds no pages, and a second
change invalidates a manager's kept keys as the first does; multimodal items are tuples kept in
offset order and may end exactly at the prompt's end; token ids are plain ints from 0; a
preempted request is not finished. Expected values come from the arguments.
"""

from __future__ import annotations

import inspect
import re
from array import array
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from reexecuted import reexecuted

from verikv import (
    CacheGroupSpec,
    CacheManager,
    FullAttentionSpec,
    PageHasher,
    Request,
    RequestStatus,
    request as request_module,
)
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
    assert TokenView(array("Q", [1, 2])) == TokenView(array("Q", [1, 2]))
    assert not TokenView(array("Q", [1, 2])) == TokenView(array("Q", [2, 1]))


def test_bytes_are_not_a_token_list() -> None:
    with pytest.raises(InvalidArgumentError):
        Request("r", b"\x01\x02")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        _request().append_output_token_ids(b"\x01")  # type: ignore[arg-type]


# --- import-time code and the LoRA fields (run on ecbc580) ----------------------------------------
# `Request`'s fields are properties built by `_field` / `_identity_field` when the module is
# imported; a second execution of the module's file builds them again, so what it builds is
# checked here (a mutation tool that activates a change after the import sees it too).


def test_fields_built_at_import_read_assign_check_and_are_documented() -> None:
    fresh = reexecuted(request_module).Request
    req = fresh("a", [1, 2, 3], cache_salt="s", lora_id=1, lora_name="n", lora_path="/p")
    assert (req.request_id, req.cache_salt, req.lora_id, req.lora_name, req.lora_path) == ("a", "s", 1, "n", "/p")
    req.request_id, req.cache_salt, req.lora_id = "b", "t", 2
    req.num_computed_tokens = 2
    assert (req.request_id, req.cache_salt, req.lora_id, req.num_computed_tokens) == ("b", "t", 2, 2)
    with pytest.raises(InvalidArgumentError, match="lora_id"):
        req.lora_id = -1
    with pytest.raises(InvalidArgumentError, match="request_id"):
        req.request_id = ""
    assert (req.request_id, req.lora_id) == ("b", 2)
    for name in ("request_id", "cache_salt", "lora_id", "lora_name", "lora_path", "num_computed_tokens", "status"):
        # help(Request) shows each field's own text (the source's, as the first import built it)
        doc = inspect.getdoc(getattr(fresh, name))
        assert doc and doc == inspect.getdoc(getattr(Request, name)), name
        assert not doc.startswith("attrgetter"), name


@pytest.mark.parametrize("field", ["lora_name", "lora_path"])
@pytest.mark.parametrize("bad", ["", 3, b"n"])
def test_a_lora_name_or_path_must_be_a_non_empty_str_named_in_the_error(field: str, bad: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=rf"\b{field}\b"):
        Request("a", [1, 2], **{"lora_name": "n", field: bad})
    req = Request("a", [1, 2], lora_name="n", lora_path="/p")
    with pytest.raises(InvalidArgumentError, match=rf"\b{field}\b"):
        setattr(req, field, bad)
    assert (req.lora_name, req.lora_path) == ("n", "/p")


def test_a_lora_name_and_path_are_stored_as_plain_str() -> None:
    class Name(str):
        pass

    req = Request("a", [1, 2], lora_name=Name("n"), lora_path=Name("/p"))
    assert (req.lora_name, req.lora_path) == ("n", "/p")
    assert type(req.lora_name) is str and type(req.lora_path) is str
    req.lora_name, req.lora_path = Name("m"), Name("/q")
    assert (req.lora_name, req.lora_path) == ("m", "/q") and type(req.lora_name) is str and type(req.lora_path) is str


def test_a_lora_path_needs_a_name_and_a_name_is_kept_while_a_path_is_set() -> None:
    with pytest.raises(InvalidArgumentError, match="lora_path"):
        Request("a", [1, 2], lora_path="/p")
    assert Request("a", [1, 2], lora_name="n").lora_path is None
    req = Request("a", [1, 2])
    with pytest.raises(InvalidArgumentError, match="lora_path"):
        req.lora_path = "/p"
    req.lora_name = "n"
    req.lora_path = "/p"
    with pytest.raises(InvalidArgumentError, match="lora_name"):
        req.lora_name = None
    assert (req.lora_name, req.lora_path) == ("n", "/p")
    req.lora_path = None
    req.lora_name = None
    assert (req.lora_name, req.lora_path) == (None, None)


def test_changing_the_lora_identity_changes_the_page_keys() -> None:
    hasher = PageHasher("sha256", seed=1)
    req = Request("a", list(range(8)), lora_name="n")
    named = hasher.hash_request(req, 4)
    req.lora_path = "/p"
    with_path = hasher.hash_request(req, 4)
    req.lora_path = None
    req.lora_name = "m"
    renamed = hasher.hash_request(req, 4)
    assert len({tuple(named), tuple(with_path), tuple(renamed)}) == 3


@pytest.mark.parametrize("field", ["lora_name", "lora_path"])
def test_a_lora_text_with_a_lone_surrogate_is_rejected_by_name(field: str) -> None:
    with pytest.raises(InvalidArgumentError, match=rf"\b{field}\b"):
        options: dict[str, Any] = {"lora_name": "n", field: "bad\ud800"}
        Request("a", [1, 2], **options)


def test_multimodal_features_given_as_a_tuple_are_kept() -> None:
    req = Request("a", list(range(4)), mm_features=(("img", 1, 2),))
    assert [tuple(f) for f in req.mm_features] == [("img", 1, 2)]


def test_one_token_of_any_integral_type_is_appended_as_one_element_list_would_be() -> None:
    req = Request("a", [1, 2])
    five: Any = np.int64(5)  # (typed Any: the API is annotated with int)
    six: Any = np.int64(6)
    req.append_output_token_ids(five)
    req.append_output_token_ids([six])
    assert list(req.all_token_ids) == [1, 2, 5, 6] and all(type(t) is int for t in req.all_token_ids)
    for bad in (True, [True]):
        with pytest.raises(InvalidArgumentError):
            req.append_output_token_ids(bad)  # a bool is not a token id
    assert list(req.all_token_ids) == [1, 2, 5, 6]
