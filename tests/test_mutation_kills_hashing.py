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

from verikv.errors import InvalidArgumentError
from verikv.hashing import encode_canonical

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
    with pytest.raises(InvalidArgumentError, match=r"(?<!\w)string(?!\w)"):
        encode_canonical("\ud800", bytearray())
