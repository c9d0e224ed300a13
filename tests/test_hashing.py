"""Page hashing: schemes, per-instance seeds, salt and extra-key placement, chain rules."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from verikv.errors import InvalidArgumentError
from verikv.hashing import (
    SCHEMES,
    MMFeature,
    PageHash,
    PageHasher,
    PageHashWithGroupId,
    default_hasher,
    hash_page_tokens,
    hash_request_tokens,
)


def request(tokens, **extra):
    return SimpleNamespace(all_token_ids=list(tokens), **extra)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_full_pages_only_and_chained(scheme: str) -> None:
    hasher = PageHasher(scheme, seed=7)
    keys = hasher.hash_request(request(range(10)), 4)
    assert [k.token_ids for k in keys] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert keys[1] == hasher.hash_page(keys[0].hash_value, (4, 5, 6, 7))
    other_first = hasher.hash_request(request([9, 1, 2, 3, 4, 5, 6, 7]), 4)
    assert other_first[1].token_ids == keys[1].token_ids
    assert other_first[1].hash_value != keys[1].hash_value  # the chain carries the prefix


@pytest.mark.parametrize("scheme", SCHEMES)
def test_seed_is_per_instance(scheme: str) -> None:
    tokens = request(range(8))
    a, b, c = PageHasher(scheme, seed=1), PageHasher(scheme, seed=2), PageHasher(scheme, seed=1)
    assert a.hash_request(tokens, 4) == c.hash_request(tokens, 4)
    assert a.hash_request(tokens, 4)[0].hash_value != b.hash_request(tokens, 4)[0].hash_value
    default_root = default_hasher(scheme).root
    PageHasher(scheme, seed=99)
    assert default_hasher(scheme).root == default_root  # no shared global is re-seeded


def test_unseeded_hashers_are_private() -> None:
    assert PageHasher().root != PageHasher().root


def test_sha256_is_sha256_of_a_canonical_encoding() -> None:
    hasher = PageHasher("sha256", seed=0)
    page = hasher.hash_page(None, [1, 2])
    message = (b"verikv-page\x00" + _int(hasher.root) + (2).to_bytes(4, "little")
               + (1).to_bytes(8, "little") + (2).to_bytes(8, "little") + b"N")
    assert page.hash_value == int.from_bytes(hashlib.sha256(message).digest(), "little")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_token_ids_are_unsigned_64_bit(scheme: str) -> None:
    hasher = PageHasher(scheme, seed=0)
    top = hasher.hash_request(request([2**64 - 1, 0]), 2)  # the largest id is a valid token
    assert top[0].token_ids == (2**64 - 1, 0)
    for bad in ([-1, 0], [2**64, 0], [1.0, 0], ["a", 0]):
        with pytest.raises(InvalidArgumentError):
            hasher.hash_request(request(bad), 2)
        with pytest.raises(InvalidArgumentError):
            hasher.hash_page(None, bad)  # type: ignore[arg-type]


def _int(value: int) -> bytes:
    size = (value.bit_length() + 8) // 8
    return size.to_bytes(4, "little") + value.to_bytes(size, "little", signed=True)


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
    assert keys == default_hasher("xxh3_128").hash_request(request(range(5)), 2)
    with pytest.raises(InvalidArgumentError):
        hash_request_tokens("md5", 2, request(range(5)))
    with pytest.raises(InvalidArgumentError):
        PageHasher("sha1")


def test_salt_only_on_the_first_page_but_isolates_the_whole_chain() -> None:
    hasher = PageHasher(seed=3)
    plain = hasher.hash_request(request(range(8)), 4)
    salted = hasher.hash_request(request(range(8), cache_salt="tenant-a"), 4)
    other = hasher.hash_request(request(range(8), cache_salt="tenant-b"), 4)
    assert salted[0].extra_keys == (("salt", "tenant-a"),)
    assert salted[1].extra_keys is None
    assert len({plain[1].hash_value, salted[1].hash_value, other[1].hash_value}) == 3


def test_lora_on_every_page() -> None:
    keys = PageHasher(seed=0).hash_request(request(range(8), lora_id=7), 4)
    assert [k.extra_keys for k in keys] == [(("lora", 7),), (("lora", 7),)]


def test_multimodal_keys_only_on_overlapping_pages_with_offsets() -> None:
    features = [("img-a", 2, 4), SimpleNamespace(mm_hash="img-b", offset=9, length=2)]
    keys = PageHasher(seed=0).hash_request(request(range(12), mm_features=features), 4)
    assert keys[0].extra_keys == (("mm", "img-a", 2),)
    assert keys[1].extra_keys == (("mm", "img-a", -2),)
    assert keys[2].extra_keys == (("mm", "img-b", 1),)
    assert MMFeature("h", 0, 1) == ("h", 0, 1)


def test_same_image_elsewhere_gives_another_key() -> None:
    hasher = PageHasher(seed=0)
    a = hasher.hash_request(request(range(4), mm_features=[("img", 0, 2)]), 4)
    b = hasher.hash_request(request(range(4), mm_features=[("img", 1, 2)]), 4)
    c = hasher.hash_request(request(range(4), mm_features=[("other", 0, 2)]), 4)
    assert len({a[0].hash_value, b[0].hash_value, c[0].hash_value}) == 3


@pytest.mark.parametrize("features", [[("img", -1, 2)], [("img", 0, 0)], [("img", 1)], [object()], [(1.5, 0, 1)]])
def test_malformed_mm_features_are_rejected(features) -> None:
    with pytest.raises(InvalidArgumentError):
        PageHasher(seed=0).hash_request(request(range(4), mm_features=features), 4)


def test_incremental_hashing_matches_the_full_chain() -> None:
    hasher = PageHasher(seed=11)
    req = request(range(3), cache_salt="s", lora_id=1)
    grown: list[PageHash] = []
    for token in range(3, 20):
        hasher.extend(req, 4, grown)
        req.all_token_ids.append(token)
    hasher.extend(req, 4, grown)
    assert grown == hasher.hash_request(req, 4)
    middle = hasher.hash_request(req, 4, start=2, parent=grown[1], stop=4)
    assert middle == grown[2:4]
    assert hasher.hash_request(req, 4, start=2, parent=grown[1].hash_value) == grown[2:]


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
