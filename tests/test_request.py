"""Request: construction checks, token views, progress and status."""

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
    InvalidArgumentError,
    PageHasher,
    Request,
    RequestStatus,
    request as request_module,
)
from verikv.hashing import MMFeature
from verikv.request import TokenView


def test_tokens_and_counts():
    r = Request("a", [1, 2, 3])
    assert r.num_tokens == 3 and r.num_prompt_tokens == 3 and r.num_output_tokens == 0
    r.append_output_token_ids(7)
    r.append_output_token_ids([8, np.int64(9)])
    assert list(r.all_token_ids) == [1, 2, 3, 7, 8, 9]
    assert r.all_token_ids[3:5] == [7, 8]
    assert r.num_tokens == 6 and r.num_output_tokens == 3
    assert list(r.output_token_ids) == [7, 8, 9] and list(r.prompt_token_ids) == [1, 2, 3]
    assert all(type(t) is int for t in r.all_token_ids)


def test_all_token_ids_is_a_live_read_only_view():
    r = Request("a", (1, 2))
    view = r.all_token_ids
    assert isinstance(view, TokenView)
    r.append_output_token_ids([5])
    assert len(view) == 3 and view[-1] == 5
    with pytest.raises(TypeError):
        view[0] = 9  # type: ignore[index]
    assert view == [1, 2, 5] and view == (1, 2, 5)


def test_prompt_is_copied():
    prompt = [1, 2, 3]
    r = Request("a", prompt)
    prompt.append(4)
    prompt[0] = 9  # (a list is packed without a copy of its own: the request's array is the copy)
    assert r.num_tokens == 3 and list(r.all_token_ids) == [1, 2, 3] and list(r.prompt_token_ids) == [1, 2, 3]
    added = [5, 6]
    r.append_output_token_ids(added)
    added[0] = 9
    assert list(r.output_token_ids) == [5, 6]


def test_token_views_read_as_lists_do():
    tokens = [4, 0, 2**64 - 1, 7]
    r = Request("a", tokens)
    r.append_output_token_ids([8, 9])
    full = [*tokens, 8, 9]
    view = r.all_token_ids
    assert len(view) == 6 and list(view) == full and list(reversed(view)) == full[::-1]
    assert [view[i] for i in range(-6, 6)] == [full[i] for i in range(-6, 6)]
    assert all(type(view[i]) is int for i in range(6)) and all(type(t) is int for t in view)
    for part in (slice(1, 3), slice(None), slice(None, None, -2), slice(4, 99), slice(3, 1)):
        assert view[part] == full[part] and type(view[part]) is list
    for past in (6, -7):
        with pytest.raises(IndexError):
            view[past]
    for bad in ("1", 1.0, None):
        with pytest.raises(InvalidArgumentError):
            view[bad]  # type: ignore[call-overload]
    assert 2**64 - 1 in view and 3 not in view and view.index(7) == 3 and view.count(9) == 1
    assert repr(view) == f"TokenView({full!r})"
    assert repr(r.prompt_token_ids) == f"TokenView({tokens!r})" and repr(r.output_token_ids) == "TokenView([8, 9])"


def test_token_views_compare_as_lists_do():
    r = Request("a", [1, 2])
    view = r.all_token_ids
    assert view == [1, 2] and view == (1, 2) and view == Request("b", (1, 2)).all_token_ids
    assert view == [1.0, 2.0]  # (element by element, as [1, 2] == [1.0, 2.0])
    assert view != [1, 2, 3] and view != (2, 1) and view != [] and view != Request("b", [1, 3]).all_token_ids
    assert view != "12" and view != {1, 2} and view != 12  # not a list or tuple: never equal
    assert r.prompt_token_ids == view and r.output_token_ids == [] and r.output_token_ids == ()
    with pytest.raises(TypeError):
        hash(view)


def test_prompt_and_output_views_are_copies_taken_when_read():
    r = Request("a", [1, 2])
    prompt, output = r.prompt_token_ids, r.output_token_ids
    r.append_output_token_ids([3])
    assert list(prompt) == [1, 2] and list(output) == [] and list(r.output_token_ids) == [3]
    assert r.num_prompt_tokens == 2 and r.num_output_tokens == 1 and r.num_tokens == 3


class _Int(int):
    pass


@pytest.mark.parametrize(
    "tokens, expected",
    [
        ([1, 2**64 - 1, 0], [1, 2**64 - 1, 0]),
        ((1, 2**64 - 1, 0), [1, 2**64 - 1, 0]),
        (range(3), [0, 1, 2]),
        (lambda: iter([5, 6]), [5, 6]),  # (made per run: an iterator is used up by one)
        (lambda: (t for t in [7, 8]), [7, 8]),
        ([np.int64(3), np.uint64(2**64 - 1), _Int(4)], [3, 2**64 - 1, 4]),
        (np.array([1, 2], dtype=np.int32), [1, 2]),
        (bytearray(b"\x01\x02"), [1, 2]),
    ],
    ids=["list", "tuple", "range", "iterator", "generator", "integral types", "numpy array", "bytearray"],
)
def test_any_iterable_of_integers_is_a_prompt_of_plain_ints(tokens, expected):
    r = Request("a", tokens() if callable(tokens) else tokens)
    assert list(r.all_token_ids) == expected and all(type(t) is int for t in r.all_token_ids)
    assert r.token_array.typecode == "Q" and r.token_array.tolist() == expected


@pytest.mark.parametrize(
    "tokens, message",
    [
        ([1, 2**64], r"prompt_token_ids\[1\] must be in \[0, 2\*\*64\)"),
        ([3, -1], r"prompt_token_ids\[1\] must be in \[0, 2\*\*64\)"),
        ((3, 4, -1), r"prompt_token_ids\[2\] must be in \[0, 2\*\*64\)"),
        ([np.int64(1), -5], r"prompt_token_ids\[1\] must be in \[0, 2\*\*64\)"),
        ([1, True], r"prompt_token_ids\[1\] must be an integer, got bool"),
        (lambda: (t for t in [1, 2, False]), r"prompt_token_ids\[2\] must be an integer, got bool"),
        ([1, 2.0], r"prompt_token_ids\[1\] must be an integer, got float"),
        ([[1]], r"prompt_token_ids\[0\] must be an integer, got list"),
        ("12", r"prompt_token_ids must be an iterable of ints, got str"),
        (b"12", r"prompt_token_ids must be an iterable of ints, got bytes"),
        (12, r"prompt_token_ids must be an iterable of ints, got int"),
        (np.array(3), r"prompt_token_ids must be an iterable of ints"),
    ],
)
def test_a_bad_token_is_named_by_its_index(tokens, message):
    with pytest.raises(InvalidArgumentError, match=message):
        Request("a", tokens() if callable(tokens) else tokens)


def test_num_computed_tokens_and_status():
    r = Request("a", [1])
    assert r.num_computed_tokens == 0 and r.status is RequestStatus.WAITING and not r.is_finished()
    r.num_computed_tokens += 5
    assert r.num_computed_tokens == 5
    r.num_computed_tokens = np.int32(2)
    assert r.num_computed_tokens == 2 and type(r.num_computed_tokens) is int
    for bad in (-1, 1.0, True, "3"):
        with pytest.raises(InvalidArgumentError):
            r.num_computed_tokens = bad
    assert r.num_computed_tokens == 2
    r.status = RequestStatus.RUNNING
    assert not r.is_finished()
    r.status = RequestStatus.FINISHED_ABORTED
    assert r.is_finished() and RequestStatus.is_finished(RequestStatus.FINISHED_IGNORED)
    assert not RequestStatus.is_finished(RequestStatus.PREEMPTED)
    with pytest.raises(InvalidArgumentError):
        r.status = 3  # type: ignore[assignment]


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((1, [1]), {}),
        (("", [1]), {}),
        (("a", []), {}),
        (("a", "abc"), {}),
        (("a", [1, -2]), {}),
        (("a", [1, 2**64]), {}),
        (("a", [1, np.int64(-2)]), {}),
        (("a", [1, 2.0]), {}),
        (("a", [True]), {}),
        (("a", 5), {}),
        (("a", [1]), {"cache_salt": 3}),
        (("a", [1]), {"lora_id": -1}),
        (("a", [1]), {"lora_id": "x"}),
        (("a", [1]), {"prompt_logprobs": None}),
        (("a", [1]), {"mm_features": ["img"]}),
        (("a", [1, 2]), {"mm_features": [MMFeature("h", 1, 2)]}),
        (("a", [1, 2]), {"mm_features": [("", 0, 1)]}),
        (("a", [1, 2]), {"mm_features": [("h", -1, 1)]}),
        (("a", [1, 2]), {"mm_features": [("h", 0, 0)]}),
        (("a", [1, 2]), {"mm_features": [(1.5, 0, 1)]}),
        (("a", [1, 2]), {"mm_features": "h01"}),
    ],
)
def test_bad_construction(args, kwargs):
    with pytest.raises(InvalidArgumentError):
        Request(*args, **kwargs)


def test_append_is_all_or_nothing():
    r = Request("a", [1])
    with pytest.raises(InvalidArgumentError):
        r.append_output_token_ids([2, -3])
    with pytest.raises(InvalidArgumentError):
        r.append_output_token_ids(-1)
    with pytest.raises(InvalidArgumentError):
        r.append_output_token_ids([2, "x"])
    with pytest.raises(InvalidArgumentError):
        r.append_output_token_ids([2**64])
    with pytest.raises(InvalidArgumentError):
        r.append_output_token_ids([-1])  # (a decode step's one token: the array's append is its range check)
    with pytest.raises(InvalidArgumentError):
        r.append_output_token_ids(2**64)
    assert list(r.all_token_ids) == [1] and r.token_array.tolist() == [1]
    r.append_output_token_ids([2**64 - 1])  # the largest token id (encoded as uint64)
    assert list(r.all_token_ids) == [1, 2**64 - 1]


def test_multimodal_features_are_validated_and_sorted():
    a, b = MMFeature("b", 4, 2), ("a", 0, 3)
    r = Request("a", range(8), mm_features=[a, b], cache_salt="t", lora_id=3, prompt_logprobs=True)
    assert (r.mm_features == (MMFeature(*b), a) and isinstance(r.mm_features[0], MMFeature) and r.cache_salt == "t"
            and r.lora_id == 3 and r.prompt_logprobs)


def test_token_array_is_the_validated_tokens_kept_in_step() -> None:
    r = Request("a", [5, 2**64 - 1, 0])
    r.append_output_token_ids([7])
    r.append_output_token_ids(8)
    r.append_output_token_ids(np.array([9, 10], dtype=np.uint64))
    assert r.token_array.typecode == "Q"
    assert r.token_array.tolist() == list(r.all_token_ids) == [5, 2**64 - 1, 0, 7, 8, 9, 10]
    with pytest.raises(InvalidArgumentError):
        r.append_output_token_ids([11, True])  # rejected whole: neither view grows
    assert r.token_array.tolist() == list(r.all_token_ids) and r.num_tokens == 7


class _ClaimsToBeInt(type):
    """A metaclass whose classes compare equal to ``int`` (so ``countOf(map(type, ...), int)``
    counts their instances as ints)."""

    def __eq__(cls, other: object) -> bool:
        return other is int or type.__eq__(cls, other)

    def __hash__(cls) -> int:
        return type.__hash__(cls)


class _NotAnInt(metaclass=_ClaimsToBeInt):
    pass


def test_a_token_whose_type_claims_to_equal_int_is_refused_by_name() -> None:
    with pytest.raises(InvalidArgumentError, match=r"prompt_token_ids\[1\] must be an integer, got _NotAnInt"):
        Request("r", [1, _NotAnInt(), 3])  # type: ignore[list-item]
    r = Request("r", [1, 2])
    with pytest.raises(InvalidArgumentError, match=r"must be an integer, got _NotAnInt"):
        r.append_output_token_ids([4, _NotAnInt()])  # type: ignore[list-item]
    assert list(r.all_token_ids) == [1, 2] and r.num_tokens == 2


# ---- Checks written for mutants of impl/request.py that the suite let through (tools/mutation/triage.toml)
#
# They pin what `Request`'s docstrings promise and the suite never exercised: identity fields
# (id, salt, LoRA, multimodal items) can be set on a request that holds no pages, and a second
# change invalidates a manager's kept keys as the first does; multimodal items are tuples kept in
# offset order and may end exactly at the prompt's end; token ids are plain ints from 0; a
# preempted request is not finished. Expected values come from the arguments.


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
