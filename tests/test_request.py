"""Request: construction checks, token views, progress and status."""

from __future__ import annotations

import numpy as np
import pytest

from verikv import InvalidArgumentError, Request, RequestStatus
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
