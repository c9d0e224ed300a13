"""Checks written for mutants of impl/hashing.py that the suite let through (mutation/triage.toml).

`encode_canonical` promises an unambiguous encoding: each value a type tag plus a
length-prefixed payload, "so different values never encode alike", for None, bool, int, float,
str, bytes and nested tuples/lists. The suite never encoded a float, a bool or None on their own,
so mutants that drop or corrupt those encodings survived. These tests check the promise itself:
every supported value encodes, deterministically, distinct values encode differently, and the
output buffer must be a bytearray.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from verikv import Request, hashing
from verikv.errors import HashingError, InvalidArgumentError
from verikv.hashing import PageHasher, default_hasher, encode_canonical, key_atom, key_value


def _named(name: str) -> str:
    """``name`` as a whole word: a renamed or re-cased name does not match."""
    return rf"(?<![\w]){name}(?![\w])"


# Pairwise different values (as typed values: 1, 1.0 and True are different keys).
VALUES: list[object] = [
    None, True, False, 0, 1, -1, 255, 256, 2**70, -(2**70), 0.0, 1.0, -2.5, float("inf"),
    "", "a", "ab", "é", b"", b"a", b"ab",
    (), ("a",), (None,), (True,), (False,), (1,), (1.0,), ((),), (None, None), ("a", "b"), ("ab",),
    [[1], 2], [1, [2]], [b"a", "a"], [None, 1.0, True, "x", b"y", (2,)],
]


def _encoded(value: object) -> bytes:
    out = bytearray()
    encode_canonical(value, out)
    return bytes(out)


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_every_supported_value_encodes_deterministically(value: object) -> None:
    first = _encoded(value)
    assert first  # a type tag at least
    assert _encoded(value) == first


def test_different_values_never_encode_alike() -> None:
    encodings = {repr(v): _encoded(v) for v in VALUES}
    for (a, ea), (b, eb) in itertools.combinations(encodings.items(), 2):
        assert ea != eb, f"{a} and {b} encode alike"


def test_an_encoding_is_appended_to_the_buffer() -> None:
    out = bytearray(b"prefix")
    encode_canonical((1, None, 2.0), out)
    assert out.startswith(b"prefix")
    assert bytes(out[len(b"prefix"):]) == _encoded((1, None, 2.0))


def test_equal_integers_encode_alike_whatever_their_type() -> None:
    assert _encoded(np.int64(5)) == _encoded(5)
    assert _encoded((np.int32(-3),)) == _encoded((-3,))


@pytest.mark.parametrize("out", [b"", [], None], ids=["bytes", "list", "None"])
def test_the_buffer_must_be_a_bytearray(out: object) -> None:
    with pytest.raises(InvalidArgumentError):
        encode_canonical(1, out)  # type: ignore[arg-type]


def test_an_unencodable_string_is_named() -> None:
    with pytest.raises(InvalidArgumentError, match=_named("string")):
        encode_canonical("\ud800", bytearray())


# --- the page span of hash_request (start / stop) ---------------------------------------------

def _six_token_request() -> Request:
    return Request("r", [5, 6, 7, 8, 9, 10])  # page size 2: three full pages


def test_hash_request_spans_start_to_stop() -> None:
    hasher = PageHasher("sha256", seed=1)
    request = _six_token_request()
    full = hasher.hash_request(request, 2)
    assert len(full) == 3
    assert hasher.hash_request(request, 2, start=1, parent=full[0]) == full[1:]
    assert hasher.hash_request(request, 2, stop=3) == full  # stop may equal the full pages
    assert hasher.hash_request(request, 2, start=1, parent=full[0], stop=1) == []
    assert hasher.hash_request(request, 2, start=np.int64(0), stop=np.int64(2)) == full[:2]  # type: ignore[arg-type]


@pytest.mark.parametrize(("start", "stop", "name"), [
    (-1, None, "start"), (1.5, None, "start"), (0, 4, "stop"), (0, 1.5, "stop"), (2, 1, "stop"),
], ids=["start negative", "start float", "stop beyond", "stop float", "stop before start"])
def test_hash_request_names_a_bad_span(start: object, stop: object, name: str) -> None:
    hasher = PageHasher("sha256", seed=1)
    request = _six_token_request()
    parent = hasher.hash_request(request, 2)[0]
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        hasher.hash_request(request, 2, start=start, parent=parent, stop=stop)  # type: ignore[arg-type]


# --- default_hasher: one deterministic hasher per scheme --------------------------------------

@pytest.mark.parametrize("scheme", ["sha256", "xxh3_128"])
def test_default_hasher_is_one_deterministic_instance_per_scheme(scheme: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hashing, "_DEFAULT_HASHERS", {})  # build it here, not in an earlier test
    hasher = default_hasher(scheme)
    assert default_hasher(scheme) is hasher
    expected = PageHasher(scheme, seed=hashing.DEFAULT_SEED).hash_request(_six_token_request(), 2)
    assert hasher.hash_request(_six_token_request(), 2) == expected


def test_the_default_scheme_is_sha256(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hashing, "_DEFAULT_HASHERS", {})
    assert default_hasher().scheme == "sha256"


# --- key_atom: exact builtins ------------------------------------------------------------------

def test_a_bytes_subclass_atom_becomes_plain_bytes() -> None:
    class Salt(bytes):
        pass

    atom = key_atom(Salt(b"ab"), "cache_salt")
    assert atom == b"ab"
    assert type(atom) is bytes


def test_an_unencodable_text_atom_is_named() -> None:
    with pytest.raises(InvalidArgumentError, match=_named("cache_salt")):
        key_atom("\ud800", "cache_salt")


# --- key_value: extra keys as exact builtins ---------------------------------------------------

def _nested(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = (value,)
    return value


def test_key_value_keeps_builtin_atoms_and_normalizes_the_rest() -> None:
    class Text(str):
        pass

    class Real(float):
        pass

    for atom in (None, True, False, 7, b"x"):
        assert key_value(atom) is atom
    assert type(key_value(Text("a"))) is str
    assert key_value(1.5) == 1.5 and type(key_value(Real(1.5))) is float
    assert key_value(np.int64(3)) == 3 and type(key_value(np.int64(3))) is int
    assert key_value([1, ["a", b"b"]]) == (1, ("a", b"b"))


def test_key_value_allows_max_key_depth_levels_of_nesting() -> None:
    assert key_value(_nested(hashing.MAX_KEY_DEPTH)) == _nested(hashing.MAX_KEY_DEPTH)
    with pytest.raises(InvalidArgumentError):
        key_value(_nested(hashing.MAX_KEY_DEPTH + 1))


@pytest.mark.parametrize("value", ["\ud800", ("a", "\ud800"), float("nan"), (1.0, float("nan")), object()],
                         ids=["surrogate", "nested surrogate", "nan", "nested nan", "object"])
def test_key_value_names_a_bad_extra_key(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match=_named("extra key")):
        key_value(value)


def test_a_hasher_keeps_its_scheme_and_seed_and_names_a_bad_seed() -> None:
    hasher = PageHasher("xxh3_128", seed=7)
    assert (hasher.scheme, hasher.seed) == ("xxh3_128", 7)
    with pytest.raises(InvalidArgumentError, match=_named("seed")):
        PageHasher("sha256", seed=1.5)  # type: ignore[arg-type]


# --- mm_feature and token ids: the docstrings' bounds, names and rejected types ---------------


def test_mm_feature_accepts_its_documented_edges() -> None:
    for identity in ("h", b"XXXX", b"\x00", 0):  # any non-empty str / bytes, or an int
        feature = hashing.mm_feature(identity, 0, 1)  # offset >= 0 and length >= 1: both edges
        assert (feature.mm_hash, feature.offset, feature.length) == (identity, 0, 1)


@pytest.mark.parametrize(("mm_hash", "offset", "length", "name"), [
    ("", 0, 1, "mm_hash"), (b"", 0, 1, "mm_hash"), (1.5, 0, 1, "mm_hash"),
    ("h", -1, 1, "mm offset"), ("h", 0, 0, "mm length"),
])
def test_mm_feature_names_what_it_rejects(mm_hash: object, offset: object, length: object, name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        hashing.mm_feature(mm_hash, offset, length)


def test_token_ids_take_any_iterable_of_ints() -> None:
    assert hashing.token_list([1, 2, 2**64 - 1]) == [1, 2, 2**64 - 1]
    assert hashing.token_list(np.array([3, 4])) == [3, 4]
    assert list(hashing.token_array(iter([5, 6]))) == [5, 6]


@pytest.mark.parametrize("token_ids", ["ab", bytes(8), bytearray(8), 5, [1.5], [-1], [2**64]])
def test_token_ids_reject_what_is_not_an_iterable_of_ints_and_name_it(token_ids: object) -> None:
    with pytest.raises(InvalidArgumentError, match=_named("token ids")):
        hashing.token_list(token_ids)
    with pytest.raises(InvalidArgumentError, match=_named("prompt")):
        hashing.token_list(token_ids, "prompt")
    with pytest.raises(InvalidArgumentError, match=_named("token ids")):
        hashing.token_array(token_ids)


# --- the incremental form agrees with one pass; user hash functions' results ------------------


@pytest.mark.parametrize(("start", "stop"), [(0, None), (3, None), (10, 30), (29, 40)])
def test_hash_request_from_any_page_agrees_with_hashing_one_page_at_a_time(start: int, stop: int | None) -> None:
    """The documented incremental form: resuming from page ``start - 1``'s key gives the keys a
    page-by-page walk gives (one page per call), for spans long and short."""
    hasher, page_size = PageHasher("sha256", seed=3), 4
    request = Request("r", list(range(40 * page_size + 2)))  # 40 full pages and a partial one
    walked: list[bytes] = []
    for k in range(40):
        walked += hasher.hash_request(request, page_size, k, walked[-1] if walked else None, k + 1)
    parent = walked[start - 1] if start else None
    assert hasher.hash_request(request, page_size, start, parent, stop) == walked[start:stop]


def test_a_user_hash_function_may_return_any_integral_type_as_an_exact_int() -> None:
    page = PageHasher(lambda args: np.int64(7)).hash_page(None, [1, 2])  # type: ignore[arg-type, return-value]
    assert page.hash_value == 7
    assert type(page.hash_value) is int


@pytest.mark.parametrize("result", [[1], (1, [2]), {1: 2}, object()])
def test_a_user_hash_function_returning_a_mutable_or_user_value_is_a_hashing_error(result: object) -> None:
    with pytest.raises(HashingError):
        PageHasher(lambda args: result).hash_page(None, [1, 2])  # type: ignore[arg-type, return-value]


def test_a_user_hash_function_may_return_a_value_of_builtin_immutables() -> None:
    value = (1, ("a", b"b", 2.5, None, True))
    assert PageHasher(lambda args: value).hash_page(None, [1, 2]).hash_value == value  # type: ignore[arg-type, return-value]
