"""Page hashing: schemes, per-instance seeds, salt and extra-key placement, chain rules."""

from __future__ import annotations

import hashlib
import itertools
import os
import struct
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import xxhash

from verikv import Request, hashing
from verikv.errors import HashingError, InvalidArgumentError
from verikv.hashing import (
    SCHEMES,
    MMFeature,
    PageHash,
    PageHasher,
    PageHashWithGroupId,
    PageKey,
    default_hasher,
    encode_canonical,
    hash_page_tokens,
    hash_request_tokens,
    key_atom,
    key_value,
)


def request(tokens, **extra):
    return SimpleNamespace(all_token_ids=list(tokens), **extra)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_full_pages_only_and_chained(scheme: str) -> None:
    hasher = PageHasher(scheme, seed=7)
    keys = hasher.hash_request(request(range(10)), 4)
    assert len(keys) == 2 and all(type(k) is bytes for k in keys)
    records = hasher.page_hashes(request(range(10)), 4)
    assert [r.token_ids for r in records] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [r.hash_value for r in records] == [hasher.key_hash_value(k) for k in keys]
    assert records[1] == hasher.hash_page(records[0].hash_value, (4, 5, 6, 7))  # eSurge's chain, same values
    other_first = hasher.hash_request(request([9, 1, 2, 3, 4, 5, 6, 7]), 4)
    assert other_first[1] != keys[1]  # the chain carries the prefix


@pytest.mark.parametrize("scheme", SCHEMES)
def test_seed_is_per_instance(scheme: str) -> None:
    tokens = request(range(8))
    a, b, c = PageHasher(scheme, seed=1), PageHasher(scheme, seed=2), PageHasher(scheme, seed=1)
    assert a.hash_request(tokens, 4) == c.hash_request(tokens, 4)
    assert a.hash_request(tokens, 4)[0] != b.hash_request(tokens, 4)[0]
    default_root = default_hasher(scheme).root
    PageHasher(scheme, seed=99)
    assert default_hasher(scheme).root == default_root  # no shared global is re-seeded


def test_unseeded_hashers_are_private() -> None:
    assert PageHasher().root != PageHasher().root


# The expected keys below are written out from the documented format (module docstring),
# independently of the implementation's helpers.
SEED0 = b"I" + (1).to_bytes(4, "little") + b"\x00"  # the canonical encoding of the int 0
ROOT0 = hashlib.sha256(b"verikv-root\x00" + SEED0).digest()
LORA7 = (b"L" + (1).to_bytes(4, "little") + b"L" + (2).to_bytes(4, "little")
         + b"S" + (4).to_bytes(4, "little") + b"lora" + b"I" + (1).to_bytes(4, "little") + b"\x07")
LORA7_SUFFIX = LORA7 + bytes(7) + (25).to_bytes(4, "little")  # 25 bytes, padded to 4 mod 8


def _le64(*tokens: int) -> bytes:
    return b"".join(t.to_bytes(8, "little") for t in tokens)


def test_sha256_is_sha256_of_a_canonical_encoding() -> None:
    hasher = PageHasher("sha256", seed=0)
    first, second = hasher.hash_request(request([1, 2, 3, 4]), 2)
    assert hasher.root_key == ROOT0 and len(LORA7) == 25
    assert first == hashlib.sha256(ROOT0 + _le64(1, 2)).digest()
    assert second == hashlib.sha256(first + _le64(3, 4)).digest()
    lora = hasher.hash_request(request([1, 2], lora_id=7), 2)[0]
    assert lora == hashlib.sha256(ROOT0 + _le64(1, 2) + LORA7_SUFFIX).digest()
    assert hasher.hash_page(None, [1, 2]).hash_value == int.from_bytes(first, "little")


def test_xxh3_and_builtin_key_layouts() -> None:
    xx = PageHasher("xxh3_128", seed=0)
    assert xx.hash_request(request([1, 2]), 2) == [xxhash.xxh3_128_digest(ROOT0[:16] + _le64(1, 2))]
    builtin = PageHasher("builtin", seed=0)  # root hash(0) == 0; the key keeps value and tokens
    value = hash((0, (1, 2), None))
    assert builtin.hash_request(request([1, 2]), 2) == [b"q" + struct.pack("<q", value) + _le64(1, 2)]
    with_lora = builtin.hash_request(request([1, 2], lora_id=7), 2)[0]
    assert with_lora == b"q" + struct.pack("<q", hash((0, (1, 2), (("lora", 7),)))) + _le64(1, 2) + LORA7_SUFFIX


@pytest.mark.parametrize("scheme", SCHEMES)
def test_token_ids_are_unsigned_64_bit(scheme: str) -> None:
    hasher = PageHasher(scheme, seed=0)
    top = hasher.page_hashes(request([2**64 - 1, 0]), 2)  # the largest id is a valid token
    assert top[0].token_ids == (2**64 - 1, 0)
    for bad in ([-1, 0], [2**64, 0], [1.0, 0], ["a", 0]):
        with pytest.raises(InvalidArgumentError):
            hasher.hash_request(request(bad), 2)
        with pytest.raises(InvalidArgumentError):
            hasher.hash_page(None, bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_request_and_its_duck_typed_copy_get_the_same_keys(scheme: str) -> None:
    hasher = PageHasher(scheme, seed=3)
    req = Request("r", list(range(40)), lora_id=2, cache_salt="t")
    req.append_output_token_ids([41, 42, 43, 44])
    duck = request(req.all_token_ids, lora_id=2, cache_salt="t", mm_features=())
    assert hasher.hash_request(req, 4) == hasher.hash_request(duck, 4)  # the packed array is kept in step


@pytest.mark.parametrize("identity", [
    {"lora_id": 2}, {"lora_name": "a"}, {"lora_name": "a", "lora_path": "/w"}, {"cache_salt": "t"},
    {"cache_salt": b"t"}, {"mm_features": [("img", 4, 4)]},
])
def test_each_identity_field_of_a_request_enters_its_keys(identity: dict[str, object]) -> None:
    # `verikv.Request` objects are told plain (no extra keys) from their slots, duck-typed
    # requests from their attributes: one field alone must make both non-plain, alike
    hasher = PageHasher("sha256", seed=3)
    tokens = list(range(16))
    req = Request("r", tokens, **identity)  # type: ignore[arg-type]
    duck = request(tokens, **{"lora_id": None, "lora_name": None, "lora_path": None, "cache_salt": None,
                              "mm_features": req.mm_features, **{k: getattr(req, k) for k in identity}})
    plain = hasher.hash_request(Request("p", tokens), 4)
    assert hasher.hash_request(req, 4) == hasher.hash_request(duck, 4) != plain


def test_parent_must_be_a_key_of_the_scheme() -> None:
    sha, builtin = PageHasher("sha256", seed=0), PageHasher("builtin", seed=0)
    keys = sha.hash_request(request(range(8)), 4)
    assert sha.hash_request(request(range(8)), 4, start=1, parent=keys[0]) == keys[1:]
    for bad in (keys[0][:16], b"", bytearray(keys[0]), -1, 2**256, "k"):
        with pytest.raises(InvalidArgumentError):
            sha.hash_request(request(range(8)), 4, start=1, parent=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        builtin.hash_request(request(range(8)), 4, start=1, parent=b"x" + keys[0])


def test_callable_values_of_builtins_chain_exactly() -> None:
    ideal = PageHasher(lambda args: args, seed=0)  # an injective "hash": the value is its argument
    keys = ideal.hash_request(request([1, 2, 3, 4]), 2)
    assert ideal.key_hash_value(keys[1]) == ((0, (1, 2), None), (3, 4), None)
    assert ideal.hash_request(request([1, 2, 3, 4]), 2, start=1, parent=keys[0]) == keys[1:]
    with pytest.raises(HashingError):
        PageHasher(lambda args: object(), seed=0).hash_request(request([1, 2]), 2)  # type: ignore[arg-type, return-value]
    with pytest.raises(HashingError):
        PageHasher(lambda args: 1 // 0, seed=0).hash_request(request([1, 2]), 2)


def test_builtin_scheme_is_esurge_compatible() -> None:
    page = hash_page_tokens(hash, 123, [1, 2, 3])
    assert page == PageHash(hash((123, (1, 2, 3), None)), (1, 2, 3), None)
    assert PageHasher("builtin", seed=5).root == 5  # eSurge: none_hash = hash(int(PYTHONHASHSEED))
    assert hash_page_tokens("builtin", 4, [1]) == page._replace(hash_value=hash((4, (1,), None)), token_ids=(1,))


def test_callable_and_scheme_name_call_shapes() -> None:
    calls = []

    def fn(value):
        calls.append(value)
        return 42

    assert hash_page_tokens(fn, 9, [1, 2], ("x",)) == PageHash(42, (1, 2), ("x",))
    assert calls == [(9, (1, 2), ("x",))]
    keys = hash_request_tokens("xxh3_128", 2, request(range(5)))
    assert keys == default_hasher("xxh3_128").page_hashes(request(range(5)), 2)
    assert [k.hash_value for k in keys] == [
        int.from_bytes(k, "little") for k in default_hasher("xxh3_128").hash_request(request(range(5)), 2)]
    with pytest.raises(InvalidArgumentError):
        hash_request_tokens("md5", 2, request(range(5)))
    with pytest.raises(InvalidArgumentError):
        PageHasher("sha1")


def test_salt_only_on_the_first_page_but_isolates_the_whole_chain() -> None:
    hasher = PageHasher(seed=3)
    plain = hasher.hash_request(request(range(8)), 4)
    salted = hasher.hash_request(request(range(8), cache_salt="tenant-a"), 4)
    other = hasher.hash_request(request(range(8), cache_salt="tenant-b"), 4)
    records = hasher.page_hashes(request(range(8), cache_salt="tenant-a"), 4)
    assert records[0].extra_keys == (("salt", "tenant-a"),)
    assert records[1].extra_keys is None
    assert len({plain[1], salted[1], other[1]}) == 3


def test_lora_on_every_page() -> None:
    hasher = PageHasher(seed=0)
    records = hasher.page_hashes(request(range(8), lora_id=7), 4)
    assert [k.extra_keys for k in records] == [(("lora", 7),), (("lora", 7),)]
    assert hasher.hash_request(request(range(8), lora_id=7), 4)[1] != hasher.hash_request(request(range(8)), 4)[1]


def test_multimodal_keys_only_on_overlapping_pages_with_offsets() -> None:
    features = [("img-a", 2, 4), SimpleNamespace(mm_hash="img-b", offset=9, length=2)]
    keys = PageHasher(seed=0).page_hashes(request(range(12), mm_features=features), 4)
    assert keys[0].extra_keys == (("mm", "img-a", 2),)
    assert keys[1].extra_keys == (("mm", "img-a", -2),)
    assert keys[2].extra_keys == (("mm", "img-b", 1),)
    assert MMFeature("h", 0, 1) == ("h", 0, 1)


def test_same_image_elsewhere_gives_another_key() -> None:
    hasher = PageHasher(seed=0)
    a = hasher.hash_request(request(range(4), mm_features=[("img", 0, 2)]), 4)
    b = hasher.hash_request(request(range(4), mm_features=[("img", 1, 2)]), 4)
    c = hasher.hash_request(request(range(4), mm_features=[("other", 0, 2)]), 4)
    assert len({a[0], b[0], c[0]}) == 3


@pytest.mark.parametrize("features", [[("img", -1, 2)], [("img", 0, 0)], [("img", 1)], [object()], [(1.5, 0, 1)]])
def test_malformed_mm_features_are_rejected(features) -> None:
    with pytest.raises(InvalidArgumentError):
        PageHasher(seed=0).hash_request(request(range(4), mm_features=features), 4)


def test_incremental_hashing_matches_the_full_chain() -> None:
    hasher = PageHasher(seed=11)
    req = request(range(3), cache_salt="s", lora_id=1)
    grown: list[PageKey] = []
    for token in range(3, 20):
        hasher.extend(req, 4, grown)
        req.all_token_ids.append(token)
    hasher.extend(req, 4, grown)
    assert grown == hasher.hash_request(req, 4)
    middle = hasher.hash_request(req, 4, start=2, parent=grown[1], stop=4)
    assert middle == grown[2:4]
    assert hasher.hash_request(req, 4, start=2, parent=hasher.key_hash_value(grown[1])) == grown[2:]
    assert hasher.hash_request(req, 4, start=2, parent=hasher.page_hashes(req, 4)[1]) == grown[2:]


def test_incremental_argument_errors() -> None:
    hasher = PageHasher(seed=0)
    req = request(range(8))
    with pytest.raises(InvalidArgumentError):
        hasher.hash_request(req, 4, start=1)  # parent missing
    with pytest.raises(InvalidArgumentError):
        hasher.hash_request(req, 4, stop=3)  # only two full pages
    with pytest.raises(InvalidArgumentError):
        hasher.hash_request(req, 0)


def test_extra_keys_are_encoded_canonically_not_pickled() -> None:
    hasher = PageHasher(seed=0)
    assert hasher.hash_page(None, [1], ("a", 1)) != hasher.hash_page(None, [1], ("a", "1"))
    assert hasher.hash_page(None, [1], (("a", 1),)) != hasher.hash_page(None, [1], ("a", 1))
    with pytest.raises(InvalidArgumentError):
        hasher.hash_page(None, [1], (object(),))
    with pytest.raises(InvalidArgumentError):
        hasher.hash_page(None, [2**70])


def test_group_id_key() -> None:
    key = PageHashWithGroupId(PageHash(5, (1,), None), 2)
    assert key.get_hash_value() == 5
    assert key != PageHashWithGroupId(PageHash(5, (1,), None), 3)
    assert PageHashWithGroupId(b"\x05\x01", 0).get_hash_value() == 0x105


SNIPPET = (
    "from types import SimpleNamespace as R; from verikv.hashing import hash_request_tokens as h; "
    "r = R(all_token_ids=list(range(9)), cache_salt='t', mm_features=[('i', 1, 2)]); "
    "print([k.hash_value for k in h('sha256', 4, r)], [k.hash_value for k in h('xxh3_128', 4, r)]); "
    "h('builtin', 4, r)"
)


def test_keys_do_not_depend_on_pythonhashseed() -> None:
    outputs = set()
    for seed in ("0", "12345", "random"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run([sys.executable, "-c", SNIPPET], env=env, capture_output=True, text=True, check=True)
        outputs.add(done.stdout)
    assert len(outputs) == 1


def test_extend_rejects_more_keys_than_full_pages() -> None:
    hasher = PageHasher(seed=0)
    keys = hasher.hash_request(request(range(8)), 4)
    assert hasher.extend(request(range(8)), 4, keys) == [] and len(keys) == 2
    with pytest.raises(InvalidArgumentError):
        hasher.extend(request(range(4)), 4, keys)  # the request has one full page, not two


# ---- Checks written for mutants of impl/hashing.py that the suite let through (tools/mutation/triage.toml)
#
# `encode_canonical` promises an unambiguous encoding: each value a type tag plus a
# length-prefixed payload, "so different values never encode alike", for None, bool, int, float,
# str, bytes and nested tuples/lists. The suite never encoded a float, a bool or None on their own,
# so mutants that drop or corrupt those encodings survived. These tests check the promise itself:
# every supported value encodes, deterministically, distinct values encode differently, and the
# output buffer must be a bytearray.


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


# --- per-page extra keys of a duck-typed request (LoRA, multimodal items, salt) ---------------
#
# The module docstring fixes their shape: ``("lora", name, path)`` (``("lora", name)`` without
# a path, ``("lora", id)`` for an adapter known by its id) on every page, ``("mm", mm_hash,
# offset - page_start)`` on each page an item overlaps, ``("salt", cache_salt)`` on page 0.


def _duck(**attributes: object) -> SimpleNamespace:
    """A duck-typed request of 16 tokens with ``attributes``."""
    return SimpleNamespace(all_token_ids=list(range(100, 116)), **attributes)


@pytest.mark.parametrize(("attributes", "lora"), [
    ({"lora_name": "adapter", "lora_path": "/w/a"}, ("lora", "adapter", "/w/a")),
    ({"lora_name": "adapter"}, ("lora", "adapter")),
    ({"lora_name": "adapter", "lora_id": 9}, ("lora", "adapter")),  # the id only numbers it
    ({"lora_id": 3}, ("lora", 3)),
    ({"lora_id": 0}, ("lora", 0)),  # id >= 0: the edge is an adapter
    ({"lora_id": np.int64(5)}, ("lora", 5)),
], ids=["name and path", "name", "name and id", "id", "id 0", "numpy id"])
def test_a_lora_identity_is_an_extra_key_of_every_page(attributes: dict[str, object],
                                                       lora: tuple[object, ...]) -> None:
    hasher = PageHasher("sha256", seed=1)
    request = _duck(**attributes)
    for page in range(2):
        extra = hasher.page_extra_keys(request, page, 4)
        assert extra == (lora,)
        assert all(type(part) in (str, int) for part in extra[0])  # exact builtins in the key


@pytest.mark.parametrize(("attributes", "name"), [
    ({"lora_id": -1}, "lora_id"), ({"lora_id": "3"}, "lora_id"),
    ({"lora_name": ""}, "lora_name"), ({"lora_name": 5}, "lora_name"), ({"lora_name": "\ud800"}, "lora_name"),
    ({"lora_name": "a", "lora_path": ""}, "lora_path"), ({"lora_name": "a", "lora_path": 5}, "lora_path"),
    ({"lora_name": "a", "lora_path": "\ud800"}, "lora_path"), ({"lora_path": "/w/a"}, "lora_path"),
], ids=["id negative", "id str", "name empty", "name int", "name surrogate", "path empty", "path int",
        "path surrogate", "path without name"])
def test_a_bad_lora_identity_is_refused_by_name(attributes: dict[str, object], name: str) -> None:
    hasher = PageHasher("sha256", seed=1)
    request = _duck(**attributes)
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        hasher.page_extra_keys(request, 0, 4)
    with pytest.raises(InvalidArgumentError, match=_named(name)):
        hasher.hash_request(request, 4)


def test_a_lora_name_subclass_enters_the_key_as_plain_text() -> None:
    class Name(str):
        pass

    extra = PageHasher("sha256", seed=1).page_extra_keys(_duck(lora_name=Name("a"), lora_path=Name("/p")), 0, 4)
    assert extra == (("lora", "a", "/p"),)
    assert type(extra[0][1]) is str and type(extra[0][2]) is str


@pytest.mark.parametrize("attributes", [{"lora_name": "a"}, {"lora_name": "a", "lora_path": "/p"}, {"lora_id": 2},
                                        {"cache_salt": "tenant"}, {"mm_features": [("img", 1, 2)]}],
                         ids=["name", "name and path", "id", "salt", "mm"])
def test_a_request_with_extra_keys_is_keyed_with_them(attributes: dict[str, object]) -> None:
    """Each page's key is the key `hash_page` gives its tokens and extra keys (chained by value);
    a request without extra keys gets other keys."""
    hasher, page_size = PageHasher("sha256", seed=1), 4
    request = _duck(**attributes)
    keys = hasher.hash_request(request, page_size)
    parent = None
    for k, key in enumerate(keys):
        tokens = request.all_token_ids[k * page_size:(k + 1) * page_size]
        record = hasher.hash_page(parent, tokens, hasher.page_extra_keys(request, k, page_size))
        assert hasher.key_hash_value(key) == record.hash_value
        parent = record.hash_value
    assert keys != hasher.hash_request(_duck(), page_size)
    assert [r.extra_keys for r in hasher.page_hashes(request, page_size)] == [
        hasher.page_extra_keys(request, k, page_size) for k in range(len(keys))]


def test_mm_items_are_placed_by_offset_on_the_pages_they_overlap() -> None:
    hasher = PageHasher("sha256", seed=1)
    # given out of offset order, with hashes whose own order is the reverse of their offsets
    request = _duck(mm_features=[("a", 8, 4), ("b", 0, 4), ("c", 6, 1)])
    assert hasher.page_extra_keys(request, 0, 4) == (("mm", "b", 0),)  # "a" starts at the next page's start
    assert hasher.page_extra_keys(request, 1, 4) == (("mm", "c", 2),)  # "b" ends where page 1 starts
    assert hasher.page_extra_keys(request, 2, 4) == (("mm", "a", 0),)
    assert hasher.page_extra_keys(request, 3, 4) is None
    spanning = _duck(mm_features=[SimpleNamespace(mm_hash=b"v", offset=2, length=7)])
    assert [hasher.page_extra_keys(spanning, k, 4) for k in range(4)] == [
        (("mm", b"v", 2),), (("mm", b"v", -2),), (("mm", b"v", -6),), None]


def test_the_salt_is_on_the_first_page_only_and_named_when_bad() -> None:
    hasher = PageHasher("sha256", seed=1)
    request = _duck(cache_salt="tenant", lora_id=1)
    assert hasher.page_extra_keys(request, 0, 4) == (("lora", 1), ("salt", "tenant"))
    assert hasher.page_extra_keys(request, 1, 4) == (("lora", 1),)
    with pytest.raises(InvalidArgumentError, match=_named("cache_salt")):
        hasher.hash_request(_duck(cache_salt="\ud800"), 4)


@pytest.mark.parametrize("features", [5, "ab", b"ab"], ids=["int", "str", "bytes"])
def test_mm_features_that_are_not_a_collection_are_refused(features: object) -> None:
    with pytest.raises(InvalidArgumentError, match=_named("mm_features")):
        PageHasher("sha256", seed=1).hash_request(_duck(mm_features=features), 4)


def test_page_extra_keys_checks_its_arguments_by_name() -> None:
    hasher = PageHasher("sha256", seed=1)
    request = _duck(lora_id=1)
    assert hasher.page_extra_keys(request, np.int64(0), np.int64(1)) == (("lora", 1),)  # type: ignore[arg-type]
    for index, size, name in ((-1, 4, "page_index"), (1.5, 4, "page_index"), (0, 0, "page_size"),
                              (0, "4", "page_size")):
        with pytest.raises(InvalidArgumentError, match=_named(name)):
            hasher.page_extra_keys(request, index, size)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="all_token_ids"):
        hasher.page_extra_keys(SimpleNamespace(lora_id=1), 0, 4)


def test_duck_typed_token_ids_are_checked_by_name() -> None:
    with pytest.raises(InvalidArgumentError, match=_named("all_token_ids")):
        PageHasher("sha256", seed=1).hash_request(SimpleNamespace(all_token_ids=[1, "x"]), 1)


# --- page_size of hash_request / page_hashes / extend -----------------------------------------


def test_a_page_size_of_any_integral_type_is_taken_and_a_bad_one_named() -> None:
    hasher = PageHasher("sha256", seed=1)
    request = _six_token_request()
    assert hasher.hash_request(request, np.int64(2)) == hasher.hash_request(request, 2)  # type: ignore[arg-type]
    assert hasher.hash_request(request, np.int64(1)) == hasher.hash_request(request, 1)  # type: ignore[arg-type]
    assert len(hasher.page_hashes(request, 1)) == 6
    for size in (0, -1, "2", 1.5):
        with pytest.raises(InvalidArgumentError, match=_named("page_size")):
            hasher.hash_request(request, size)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match=_named("page_size")):
            hasher.extend(request, size, [])  # type: ignore[arg-type]


def test_extend_appends_the_keys_of_pages_that_filled() -> None:
    hasher = PageHasher("sha256", seed=1)
    request = Request("r", [1, 2, 3, 4, 5])
    keys: list[bytes] = []
    assert hasher.extend(request, 2, keys) == keys == hasher.hash_request(request, 2)
    assert len(keys) == 2
    assert hasher.extend(request, 2, keys) == []  # nothing filled since
    request.append_output_token_ids(6)
    assert hasher.extend(request, 2, keys) == keys[2:] and len(keys) == 3
    assert keys == hasher.hash_request(request, 2)


# --- parents: every documented form, the scheme's range, named when bad -----------------------


def test_a_digest_parent_is_any_value_of_its_width() -> None:
    hasher = PageHasher("sha256", seed=1)
    request = _six_token_request()
    for value in (0, 2**256 - 1, 12345):
        as_key = value.to_bytes(32, "little")  # a digest key read as a little-endian unsigned int
        assert hasher.hash_request(request, 2, start=1, parent=value) == hasher.hash_request(
            request, 2, start=1, parent=as_key)
    for bad in (-1, 2**256, "1"):
        with pytest.raises(InvalidArgumentError, match=_named("parent")):
            hasher.hash_request(request, 2, start=1, parent=bad)  # type: ignore[arg-type]


def test_a_value_parent_of_the_builtin_scheme_is_range_checked_and_named() -> None:
    hasher = PageHasher("builtin", seed=1)
    request = _six_token_request()
    for value in (-(2**63), 2**63 - 1, 2**256 - 1):
        keys = hasher.hash_request(request, 2, start=1, parent=value)
        assert hasher.key_hash_value(keys[0]) == hash((value, (7, 8), None))  # eSurge's builtin value
    bad_parents: list[object] = [-(2**63) - 1, 2**256, "1", PageHash(2**256, (1,), None),
                                 PageHash([1], (1,), None)]  # type: ignore[arg-type]
    for bad in bad_parents:
        with pytest.raises(InvalidArgumentError, match=_named("parent")):
            hasher.hash_request(request, 2, start=1, parent=bad)  # type: ignore[arg-type]


def test_a_callable_schemes_page_hash_parent_resumes_its_chain() -> None:
    hasher = PageHasher(lambda args: ("v", args[0], args[1]), seed=1)  # type: ignore[arg-type, return-value]
    request = _six_token_request()
    records = hasher.page_hashes(request, 2)
    first = ("v", hasher.root, (5, 6))  # the root of an int seed is hash(seed)
    second = ("v", first, (7, 8))
    assert hasher.root == hash(1)
    assert [r.hash_value for r in records] == [first, second, ("v", second, (9, 10))]
    keys = hasher.hash_request(request, 2)
    assert hasher.hash_request(request, 2, start=1, parent=records[0]) == keys[1:]


def test_a_truncated_key_is_not_a_parent_of_a_value_scheme() -> None:
    hasher = PageHasher(lambda args: "v", seed=1)  # type: ignore[arg-type, return-value]
    key = hasher.hash_request(_six_token_request(), 2)[0]
    assert hasher.key_hash_value(key) == "v"
    truncated = b"E" + b"S" + (10).to_bytes(4, "little") + b"v"  # a 10-byte string holding 1 byte
    with pytest.raises(InvalidArgumentError):
        hasher.key_hash_value(truncated)


def test_a_callable_schemes_large_int_values_read_back_exactly() -> None:
    for value in (2**70 + 1, -(2**70) - 3, 2**200):
        assert PageHasher(lambda args, v=value: v, seed=1).hash_page(None, [1, 2]).hash_value == value  # type: ignore[misc]


def test_an_injective_callable_nests_one_level_per_page_beyond_the_extra_key_depth() -> None:
    hasher = PageHasher(lambda args: args, seed=0)  # type: ignore[arg-type, return-value]
    request = Request("r", list(range(3 * hashing.MAX_KEY_DEPTH)))
    records = hasher.page_hashes(request, 1)
    assert len(records) == 3 * hashing.MAX_KEY_DEPTH
    last: Any = records[-1].hash_value
    assert last[1] == (3 * hashing.MAX_KEY_DEPTH - 1,)


def test_a_callable_object_without_a_hash_is_a_scheme() -> None:
    class Fn:
        __hash__ = None  # type: ignore[assignment]

        def __eq__(self, other: object) -> bool:
            return self is other

        def __call__(self, args: object) -> int:
            return 7

    assert PageHasher(Fn(), seed=1).hash_page(None, [1]).hash_value == 7


def test_the_builtin_scheme_is_esurges_value_for_every_page_size() -> None:
    """``hash((parent value, tokens, extra keys))`` page by page, for 80 page sizes (more than
    the hasher keeps prepared at once)."""
    hasher = PageHasher("builtin", seed=1)
    for size in range(1, 81):
        request = Request("r", list(range(2 * size)))
        records = hasher.page_hashes(request, size)
        first = hash((hasher.root, tuple(range(size)), None))
        assert [r.hash_value for r in records] == [first, hash((first, tuple(range(size, 2 * size)), None))]


def test_a_sha256_key_is_the_digest_of_parent_tokens_and_suffix() -> None:
    hasher = PageHasher("sha256", seed=1)
    for tokens in ([], [5, 6]):
        message = hasher.root_key + struct.pack(f"<{len(tokens)}Q", *tokens)
        assert hasher.hash_page(None, tokens).hash_value == int.from_bytes(hashlib.sha256(message).digest(), "little")
    assert hasher.hash_page(None, [1], ("x",)).hash_value != hasher.hash_page(None, [1]).hash_value


@pytest.mark.parametrize("scheme", ["sha256", "xxh3_128"])
def test_a_digest_root_is_its_root_key_read_little_endian(scheme: str) -> None:
    hasher = PageHasher(scheme, seed=5)
    assert hasher.root == int.from_bytes(hasher.root_key, "little") == hasher.key_hash_value(hasher.root_key)


def test_the_function_api_hashes_a_callable_with_the_default_seed() -> None:
    def fn(args: object) -> int:
        return hash(("f", args))

    first = hashing.hash_page_tokens(fn, None, [1, 2])
    assert hashing.hash_page_tokens(fn, None, [1, 2]) == first
    assert first == PageHasher(fn, seed=hashing.DEFAULT_SEED).hash_page(None, [1, 2])


_FRESH = """
import sys
from verikv.hashing import PageHasher
from types import SimpleNamespace
hasher = PageHasher("builtin", seed=sys.argv[1])
keys = hasher.hash_request(SimpleNamespace(all_token_ids=[1, 2, 3, 4]), 2)
print(hasher.root, len(keys))
"""


def test_a_fresh_process_hashes_and_the_root_ignores_pythonhashseed() -> None:
    """The first call of a process keys a duck-typed request, and a str seed's root does not
    read ``PYTHONHASHSEED``: two processes agree on it."""
    outputs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        run = subprocess.run([sys.executable, "-c", _FRESH, "tenant"], env=env, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        outputs.add(run.stdout)
    assert len(outputs) == 1
    root, num_keys = map(int, outputs.pop().split())
    hasher = PageHasher("builtin", seed="tenant")  # the same, in this process
    assert (root, num_keys) == (hasher.root, len(hasher.hash_request(SimpleNamespace(all_token_ids=[1, 2, 3, 4]), 2)))
    assert 0 <= root < 2**64  # a 64-bit value, as builtin hash values are


def _byteswapped(token: int) -> int:
    return int.from_bytes(token.to_bytes(8, "little"), "big")


@pytest.mark.parametrize(("start", "stop"), [(0, None), (3, 5), (2, 14)], ids=["all", "short span", "long span"])
def test_on_a_big_endian_host_token_words_are_swapped_to_little_endian(
        start: int, stop: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a big-endian host ``array('Q')`` holds big-endian words, which the hasher swaps into
    the little-endian message. Simulated here (a little-endian host): the swap then turns each
    token id into its byte-reversed value, and exactly the pages of the span are hashed."""
    hasher, page_size = PageHasher("sha256", seed=2), 3
    tokens = list(range(1, 16 * page_size + 1))
    swapped = Request("s", [_byteswapped(t) for t in tokens])
    expected_all = hasher.hash_request(swapped, page_size)
    parent = expected_all[start - 1] if start else None
    expected = hasher.hash_request(swapped, page_size, start, parent, stop)
    monkeypatch.setattr(hashing, "_BIG_ENDIAN", True)
    assert hasher.hash_request(Request("r", tokens), page_size, start, parent, stop) == expected


# --- found by the run on ecbc580 ------------------------------------------------------------------


def test_the_pool_key_of_a_page_names_its_group_except_group_zeros_bytes_keys() -> None:
    key = hashing.PageHasher("sha256", seed=1).hash_request(Request("a", list(range(4))), 4)[0]
    assert hashing.group_pool_key(key, 0) is key  # group 0 keeps the content key itself
    for group in (1, 2):
        pool_key = hashing.group_pool_key(key, group)
        assert isinstance(pool_key, hashing.PageHashWithGroupId) and tuple(pool_key) == (key, group)
    assert len({hashing.group_pool_key(key, g) for g in (0, 1, 2)}) == 3  # one page per group, no collision


@pytest.mark.parametrize("pages", [2, 12])  # a short run, and one past the NumPy threshold
def test_a_callable_scheme_sees_a_duck_typed_requests_tokens_as_ints(pages: int) -> None:
    """The scheme's function gets (parent value, token tuple, extra keys), the tokens as the
    request's checked ids: plain ints, whatever integral type the request holds them in."""
    seen: list[tuple[Any, ...]] = []

    def scheme(obj: Any) -> int:
        seen.append(obj[1])
        return hash(repr(obj[1]))  # (the value depends on how the tokens print)

    tokens = list(range(4 * pages))
    duck = SimpleNamespace(all_token_ids=[np.int64(t) for t in tokens])
    keys = PageHasher(scheme, seed=1).hash_request(duck, 4)
    assert all(type(t) is int for page in seen for t in page)
    assert keys == PageHasher(scheme, seed=1).hash_request(Request("a", tokens), 4)
