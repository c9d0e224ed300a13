"""Page hashing: schemes, per-instance seeds, salt and extra-key placement, chain rules."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
from types import SimpleNamespace

import pytest
import xxhash

from verikv.errors import HashingError, InvalidArgumentError
from verikv.hashing import (
    SCHEMES,
    MMFeature,
    PageHash,
    PageHasher,
    PageHashWithGroupId,
    PageKey,
    default_hasher,
    hash_page_tokens,
    hash_request_tokens,
)
from verikv.request import Request


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
