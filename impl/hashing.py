"""Content keys for full pages: chained page keys with salt and per-page extra keys.

A page's key stands for the exact token prefix ending at that page: its own tokens, its
extra keys, and (through its parent, the previous page's key) everything before it. The key
is a `PageKey`, a ``bytes`` object (Python caches a bytes object's hash, so a prefix-cache
probe costs one cached hash and, on a hit, one ``memcmp``). `PageHasher` computes keys with a
chosen scheme:

- ``"sha256"`` (default): the key is the 32-byte SHA-256 digest of one canonical message,
  ``parent key || tokens || suffix`` (no pickle, no ``repr``): token ids as little-endian
  uint64, and for a page with extra keys a suffix that holds their tagged, length-prefixed
  encoding (`page_suffix`). Collisions are not a practical concern (unlike eSurge's
  builtin-hash chain: docs/differences.md, Q14).
- ``"xxh3_128"``: the same message through xxHash3-128 (a 16-byte key); much cheaper, not
  adversary-proof.
- ``"builtin"``: eSurge's ``hash((parent value, tokens, extra_keys))``, for compatibility
  only. That 64-bit value is not collision resistant, so the key also holds the page's exact
  tokens and extra keys: ``value || tokens || suffix``. A callable ``hash_function`` keys the
  same way. The value of ``str`` extra keys depends on ``PYTHONHASHSEED``.

Each hasher holds its own parent-of-first-page key (``root_key``) derived from its ``seed``,
so two hashers never disturb each other and no module global is re-seeded; the value never
reads ``PYTHONHASHSEED``. Per-page extra keys are tagged tuples: ``("lora", name, path)``
(``("lora", id)`` for an adapter known only by its id) on every page of a LoRA request,
``("mm", mm_hash, offset - page_start)`` on each page a multimodal
item overlaps, and ``("salt", cache_salt)`` on the first page only (the salt isolates
tenants; the chain carries it to later pages).

`PageHash` ``(hash_value, token_ids, extra_keys)`` is eSurge's key record; verikv builds it
only where eSurge's API hands keys out (`PageHasher.hash_page`, `hash_page_tokens`,
`hash_request_tokens`); the manager keeps `PageKey` bytes.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import operator
import os
import struct
import sys
from array import array
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from itertools import repeat
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import numpy as np
import xxhash

from verikv.dp_sharding import checked_int
from verikv.errors import HashingError, InvalidArgumentError, describe

if TYPE_CHECKING:
    from verikv.request import Request

SCHEMES: tuple[str, ...] = ("sha256", "xxh3_128", "builtin")
_ROOT_TAG = b"verikv-root\x00"
_BIG_ENDIAN = sys.byteorder == "big"
_pack_u32 = struct.Struct("<I").pack
_unpack_u32 = struct.Struct("<I").unpack_from
_unpack_f64 = struct.Struct("<d").unpack_from
#: token ids are ints in ``[0, TOKEN_ID_LIMIT)``: they are encoded as unsigned 64-bit integers
TOKEN_ID_LIMIT = 1 << 64
#: nesting allowed inside an extra key (tuples in tuples); deeper values are rejected, not recursed
MAX_KEY_DEPTH = 8


class PageHash(NamedTuple):
    """eSurge's record of a full page's key: the chained hash value, the page's own tokens,
    its extra keys (public API of `PageHasher.hash_page`, `hash_page_tokens` and
    `hash_request_tokens`; the manager itself keys pages by `PageKey`).

    ``hash_value`` is what `PageHasher.key_hash_value` reads from the page's `PageKey`.
    """

    hash_value: int
    token_ids: tuple[int, ...]
    extra_keys: Any | None = None


#: The prefix cache's key for one full page, as the manager, coordinator, group managers and
#: pool handle it: a ``bytes`` object, equal exactly when the content (the whole prefix up to
#: and including the page, with its extra keys) is equal (see the module docstring for the
#: layout per scheme). Code outside this module must not look inside a key; it only compares,
#: hashes and stores keys.
PageKey: TypeAlias = bytes


class PageHashWithGroupId(NamedTuple):
    """A page key within one cache group: identical tokens in two groups are two entries."""

    page_hash: PageKey | PageHash
    group_id: int

    def get_hash_value(self) -> Any:
        """The page's hash value: a `PageHash`'s ``hash_value``, or a `PageKey` read as a
        little-endian unsigned int."""
        key = self.page_hash
        return key.hash_value if isinstance(key, PageHash) else int.from_bytes(key, "little")


#: The pool key of a page of cache group 0 holding a `PageKey` is that key itself; any other
#: page (group g > 0, or an eSurge `PageHash` key) is keyed ``PageHashWithGroupId(key, g)``
#: (`group_pool_key`). The common single-group manager thus probes its pool with ``bytes`` keys,
#: whose hash is computed once and cached by the object (a tuple's hash is recomputed at every
#: probe); a ``bytes`` key never equals a tuple, so identical content in two groups still gives
#: two entries, and a bare ``bytes`` pool key reads back as group 0 (`verikv.events.split_group`).
PoolKey: TypeAlias = PageKey | PageHashWithGroupId


def group_pool_key(key: PageKey | PageHash, group_id: int) -> PoolKey:
    """The pool key of a page of cache group ``group_id`` holding the content ``key``."""
    if group_id == 0 and type(key) is bytes:
        return key
    return tuple.__new__(PageHashWithGroupId, (key, group_id))  # (no NamedTuple __new__ frame)


class MMFeature(NamedTuple):
    """A multimodal item of a request: its content hash and the token span it occupies."""

    mm_hash: str | bytes | int
    offset: int
    length: int


# ---- key values: exact builtins, fixed at the boundary ----------------------------------------
#
# Everything reachable from a cache key is an exact builtin immutable value (int, str, bytes,
# float, bool, None, tuples of those), so a key's hash and equality cannot change after it is
# inserted: a str or int subclass with its own __hash__ / __eq__ never enters a key.


def key_text(value: str, what: str) -> str:
    """``value`` as an exact ``str`` that UTF-8 can encode; a lone surrogate (what
    ``json.loads('"\\ud800"')`` returns) is rejected, since no canonical encoding exists."""
    text = value if type(value) is str else str.__str__(value)  # a subclass becomes its plain copy
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgumentError(f"{what} is not encodable Unicode (lone surrogate): {describe(text)}") from None
    return text


def key_atom(value: object, what: str) -> str | bytes | int:
    """A str, bytes or integer identity (salt, multimodal hash, seed) as an exact builtin value."""
    if isinstance(value, str):
        return key_text(value, what)
    if isinstance(value, bytes):
        return value if type(value) is bytes else bytes.__add__(b"", value)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return operator.index(value)  # always an exact int
    raise InvalidArgumentError(f"{what} must be str, bytes or an int, got {type(value).__name__} {describe(value)}")


def key_value(value: object, what: str = "extra key", depth: int = 0) -> Any:
    """An extra key as exact builtins: None, bool, int, float (not NaN), str, bytes, and
    tuples of those (lists become tuples), nested at most `MAX_KEY_DEPTH` deep."""
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is bytes:
        return value
    if kind is str:
        return key_text(value, what)  # type: ignore[arg-type]
    if isinstance(value, (tuple, list)):
        if depth >= MAX_KEY_DEPTH:
            raise InvalidArgumentError(f"{what} is nested deeper than {MAX_KEY_DEPTH} levels")
        return tuple([key_value(item, what, depth + 1) for item in value])
    if isinstance(value, float):
        if math.isnan(value):
            raise InvalidArgumentError(f"{what} contains NaN, which is not equal to itself")
        return float.__float__(value)
    return key_atom(value, what)


def _int_bytes(value: int) -> bytes:
    """A signed int as a little-endian u32 byte count followed by its minimal two's complement."""
    size = (value.bit_length() + 8) // 8
    return _pack_u32(size) + value.to_bytes(size, "little", signed=True)


def encode_canonical(obj: Any, out: bytearray, _depth: int = 0, *, max_depth: int = MAX_KEY_DEPTH) -> None:
    """Append a canonical, unambiguous encoding of ``obj`` to ``out``.

    Supported: None, bool, int, float, str, bytes, and tuples/lists of those (nested at most
    ``max_depth`` deep, `MAX_KEY_DEPTH` by default). Each value is a type tag plus a length-prefixed payload, so
    different values never encode alike. Anything else is rejected (`InvalidArgumentError`)
    rather than pickled.
    """
    if _depth == 0 and not isinstance(out, bytearray):
        raise InvalidArgumentError(f"out must be a bytearray, got {type(out).__name__}")
    if obj is None:
        out += b"N"
    elif isinstance(obj, bool):
        out += b"T" if obj else b"F"
    elif isinstance(obj, int):
        out += b"I" + _int_bytes(int(obj))
    elif isinstance(obj, float):
        out += b"D" + struct.pack("<d", obj)
    elif isinstance(obj, str):
        data = key_text(obj, "string").encode("utf-8")
        out += b"S" + struct.pack("<I", len(data)) + data
    elif isinstance(obj, (bytes, bytearray)):
        out += b"B" + struct.pack("<I", len(obj)) + bytes(obj)
    elif isinstance(obj, (tuple, list)):
        if _depth >= max_depth:
            raise InvalidArgumentError(f"cannot encode values nested deeper than {max_depth} levels")
        out += b"L" + struct.pack("<I", len(obj))
        for item in obj:
            encode_canonical(item, out, _depth + 1, max_depth=max_depth)
    elif isinstance(obj, numbers.Integral):
        out += b"I" + _int_bytes(operator.index(obj))
    else:
        raise InvalidArgumentError(f"cannot encode {type(obj).__name__} {describe(obj)} canonically")


def token_array(token_ids: object, what: str = "token ids") -> array[int]:
    """Token ids (any iterable of integers, NumPy arrays included) as an ``array('Q')``;
    `InvalidArgumentError` for anything else (nested lists, floats, strings, bytes, an id
    outside ``[0, 2**64)``)."""
    if isinstance(token_ids, (str, bytes, bytearray)) or not hasattr(token_ids, "__iter__"):
        raise InvalidArgumentError(f"{what} must be an iterable of ints, got {type(token_ids).__name__}")
    try:
        return array("Q", token_ids)
    except (TypeError, OverflowError, ValueError) as exc:  # a non-int, an id out of range, a 0-d array
        raise InvalidArgumentError(f"{what} must be integers in [0, 2**64): {describe(exc)}") from None


def token_list(token_ids: object, what: str = "token ids") -> list[int]:
    """`token_array` as a list of exact ints."""
    return token_array(token_ids, what).tolist()


def _seed_bytes(seed: int | str | bytes) -> bytes:
    """The canonical encoding of a seed."""
    out = bytearray()
    encode_canonical(seed, out)
    return bytes(out)


def _mm_items(features: Any) -> list[MMFeature]:
    """A request's ``mm_features`` as validated `MMFeature` tuples (tuples or attribute objects)."""
    if not features:
        return []
    if isinstance(features, (str, bytes)) or not hasattr(features, "__iter__"):
        raise InvalidArgumentError(f"mm_features must be an iterable of (mm_hash, offset, length), "
                                   f"got {describe(features)}")
    items: list[MMFeature] = []
    for feature in features:
        if isinstance(feature, (tuple, list)):
            if len(feature) != 3:
                raise InvalidArgumentError(
                    f"mm_features item must be (mm_hash, offset, length), got {describe(feature)}")
            mm_hash, offset, length = feature
        else:
            try:
                mm_hash, offset, length = feature.mm_hash, feature.offset, feature.length
            except AttributeError:
                raise InvalidArgumentError(
                    f"mm_features item needs mm_hash, offset and length: {describe(feature)}") from None
        items.append(mm_feature(mm_hash, offset, length))
    return items


def mm_feature(mm_hash: object, offset: object, length: object) -> MMFeature:
    """A validated `MMFeature` of exact builtins: a non-empty str / bytes or an int hash, an
    offset >= 0 and a length >= 1."""
    identity = key_atom(mm_hash, "mm_hash")
    if identity == "" or identity == b"":
        raise InvalidArgumentError("mm_hash must not be empty")
    return MMFeature(identity, checked_int(offset, "mm offset", minimum=0), checked_int(length, "mm length", minimum=1))


def page_suffix(extra: Any) -> bytes:
    """What follows a page's tokens in its key or message: nothing for a page without extra
    keys, else their canonical encoding, zero padding and the encoding's length as a u32,
    4 (mod 8) bytes in all. A message ``parent || tokens || suffix`` is then decodable: its
    length after the fixed-width parent tells whether a suffix is present (a multiple of 8:
    tokens only), and the suffix's last 4 bytes where the tokens end."""
    if extra is None:
        return b""
    out = bytearray()
    encode_canonical(extra, out)
    size = len(out)
    out += bytes(-size % 8)
    out += _pack_u32(size)
    return bytes(out)


#: nesting allowed inside a callable scheme's hash value (an injective "hash" returning its
#: argument nests one level per page)
MAX_VALUE_DEPTH = 256
_pack_int_value = struct.Struct("<cq").pack  # b"q" + a signed 64-bit value
_unpack_int_value = struct.Struct("<q").unpack_from
_INT_VALUE, _OTHER_VALUE = ord("q"), ord("E")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _value_bytes(value: Any) -> bytes:
    """The prefix of a builtin/callable scheme's key that stands for its hash value: ``q`` and
    the signed 64-bit int (builtin ``hash``), or ``E`` and the canonical encoding of any other
    value (one encoding per value, and prefix-free)."""
    if type(value) is int and _INT64_MIN <= value <= _INT64_MAX:
        return _pack_int_value(b"q", value)
    out = bytearray(b"E")
    try:
        encode_canonical(value, out, max_depth=MAX_VALUE_DEPTH)
    except (InvalidArgumentError, RecursionError) as exc:
        raise HashingError(f"hash value {describe(value)} has no canonical encoding: {describe(exc)}") from None
    return bytes(out)


def _decode(data: bytes, pos: int) -> tuple[Any, int]:
    """The value `encode_canonical` wrote at ``data[pos:]`` (lists come back as tuples) and
    the position after it."""
    tag = data[pos]
    pos += 1
    if tag in _CONSTANTS:
        return _CONSTANTS[tag], pos
    if tag == 0x44:  # "D"
        return _unpack_f64(data, pos)[0], pos + 8
    size = _unpack_u32(data, pos)[0]
    pos += 4
    if tag == 0x4C:  # "L": size items follow
        items = []
        for _ in range(size):
            item, pos = _decode(data, pos)
            items.append(item)
        return tuple(items), pos
    raw = data[pos:pos + size]
    if len(raw) != size or tag not in _DECODERS:
        raise ValueError(f"bad canonical encoding at byte {pos}")
    return _DECODERS[tag](raw), pos + size


_CONSTANTS: dict[int, Any] = {ord("N"): None, ord("T"): True, ord("F"): False}
_DECODERS: dict[int, Callable[[bytes], Any]] = {
    ord("I"): lambda raw: int.from_bytes(raw, "little", signed=True),
    ord("S"): lambda raw: raw.decode("utf-8"),
    ord("B"): bytes,
}


def _tuple_key_value(key: bytes) -> Any:
    """The hash value at the start of a builtin/callable scheme's key (`InvalidArgumentError`
    if ``key`` does not start with one)."""
    try:
        if key[0] == _INT_VALUE:
            return _unpack_int_value(key, 1)[0]
        if key[0] == _OTHER_VALUE:
            return _decode(key, 1)[0]
    except (ValueError, IndexError, struct.error):
        pass
    raise InvalidArgumentError(f"parent {describe(key)} is not a key of this hasher's scheme")


#: a scheme's chain function: (parent key, each page's body, each page's extra keys, each page's
#: token ids as a tuple or None) -> the pages' keys, each chained from the one before. A page's
#: body is its tokens as little-endian uint64 bytes followed by its `page_suffix` (nothing for a
#: page without extra keys), so a digest scheme's message ``parent || tokens || suffix`` is
#: ``parent + body``. The loop over pages lives in these functions, one per scheme, so a page
#: costs no Python call of its own (a call per page would cost more than the digest of a page).
ChainFunction: TypeAlias = Callable[[bytes, Iterable[bytes], Iterable[Any], Iterable[tuple[int, ...]] | None],
                                    list[bytes]]
#: a scheme's page-key function: (parent key, the page's body, its extra keys, its token ids as a
#: tuple or None) -> its key; the chain function's step for one page, called as such when one
#: page is keyed (a decode step's filled page), without the chain call's set-up.
PageKeyFunction: TypeAlias = Callable[[bytes, bytes, Any, "tuple[int, ...] | None"], bytes]
_sha256 = hashlib.sha256
_xxh3_128 = xxhash.xxh3_128_digest


def _sha256_chain(parent: bytes, bodies: Iterable[bytes], extras: Iterable[Any],
                  ids: Iterable[tuple[int, ...]] | None) -> list[bytes]:
    """SHA-256 keys: each the digest of ``parent key || body``."""
    return [parent := _sha256(parent + body).digest() for body in bodies]


def _sha256_page(parent: bytes, body: bytes, extra: Any, ids: tuple[int, ...] | None) -> bytes:
    """`_sha256_chain` over one page."""
    return _sha256(parent + body).digest()


def _xxh3_chain(parent: bytes, bodies: Iterable[bytes], extras: Iterable[Any],
                ids: Iterable[tuple[int, ...]] | None) -> list[bytes]:
    """xxHash3-128 keys of the same messages as `_sha256_chain`."""
    return [parent := _xxh3_128(parent + body) for body in bodies]


def _xxh3_page(parent: bytes, body: bytes, extra: Any, ids: tuple[int, ...] | None) -> bytes:
    """`_xxh3_chain` over one page."""
    return _xxh3_128(parent + body)


def _unpacker(size: int) -> Callable[[bytes], tuple[int, ...]]:
    """The struct call that reads ``size`` bytes of little-endian uint64 tokens as a tuple."""
    unpack = _UNPACKERS.get(size)
    if unpack is None:
        if len(_UNPACKERS) >= 64:  # bounded: one entry per page size seen
            _UNPACKERS.clear()
        unpack = _UNPACKERS[size] = struct.Struct(f"<{size >> 3}Q").unpack
    return unpack


_UNPACKERS: dict[int, Callable[[bytes], tuple[int, ...]]] = {}


def _tuple_scheme(fn: Callable[[Any], Any], encode: Callable[[Any], bytes]) -> tuple[ChainFunction, PageKeyFunction]:
    """The chain and page-key functions of a scheme that hashes eSurge's ``(parent value, token
    tuple, extra keys)`` with ``fn``: a key is that value (``encode``d) followed by the page's body
    (its exact content). The value is carried to the next page as ``fn`` returned it, which is
    what decoding the key would give back (`_tuple_key_value`)."""
    def value_of(parent: bytes) -> Any:
        return _unpack_int_value(parent, 1)[0] if parent[0] == _INT_VALUE else _tuple_key_value(parent)

    def chain(parent: bytes, bodies: Iterable[bytes], extras: Iterable[Any],
              ids: Iterable[tuple[int, ...]] | None) -> list[bytes]:
        value = value_of(parent)
        keys: list[bytes] = []
        for body, extra, page_ids in zip(bodies, extras, ids):  # type: ignore[arg-type]  # (ids given)
            value = fn((value, page_ids, extra))
            keys.append(encode(value) + body)
        return keys

    def page(parent: bytes, body: bytes, extra: Any, ids: tuple[int, ...] | None) -> bytes:
        return encode(fn((value_of(parent), ids, extra))) + body
    return chain, page


_DIGEST_WIDTHS = {"sha256": 32, "xxh3_128": 16}
#: above this many pages a call cuts its token bytes into pages with one NumPy call
_NUMPY_PAGES = 8


def _page_bytes(packed: array[int], first: int, last: int, page_size: int) -> list[bytes]:
    """Pages ``first .. last-1`` of ``packed`` as one little-endian bytes object each."""
    if _BIG_ENDIAN:
        packed = packed[first * page_size:last * page_size]
        packed.byteswap()
        first, last = 0, last - first
    if last - first > _NUMPY_PAGES:  # C speed: a view of fixed-width records, then a list of bytes
        pages: list[bytes] = np.frombuffer(packed, dtype=f"V{8 * page_size}", count=last - first,
                                           offset=8 * page_size * first).tolist()
        return pages
    if last - first == 1:  # the page a decode step fills (no comprehension frame)
        return [packed[first * page_size:last * page_size].tobytes()]
    return [packed[k * page_size:(k + 1) * page_size].tobytes() for k in range(first, last)]


def _request_type() -> type[Request]:
    """`verikv.request.Request` (imported on first use: that module imports this one)."""
    global _REQUEST, _has_extra_keys
    if _REQUEST is None:
        from verikv.request import Request, has_extra_keys
        _REQUEST, _has_extra_keys = Request, has_extra_keys
    return _REQUEST


def _extra_keys_unknown(request: Request) -> bool:
    """Stands for `verikv.request.has_extra_keys` until `_request_type` imports it."""
    raise RuntimeError("verikv.request is not imported yet")


_REQUEST: type[Request] | None = None
_has_extra_keys: Callable[[Request], bool] = _extra_keys_unknown


def _packed_tokens(request: Any) -> array[int]:
    """The request's token ids as ``array('Q')``: a `verikv.Request`'s own validated array
    (no copy), or a duck-typed request's ``all_token_ids`` checked and packed."""
    if isinstance(request, _request_type()):
        packed: array[int] = request.token_array
        return packed
    return token_array(_require_request(request), "all_token_ids")


def _page_span(full: int, start: object, stop: object) -> tuple[int, int]:
    """``(first, last)``: the pages ``start .. stop-1`` of a request with ``full`` full pages."""
    first = start if type(start) is int and start >= 0 else checked_int(start, "start", minimum=0)
    if stop is None:
        last = full
    elif type(stop) is int and first <= stop <= full:
        last = stop
    else:
        last = checked_int(stop, "stop", minimum=first, maximum=full)
    if first > last:
        raise InvalidArgumentError(f"start {describe(first)} is beyond the {full} full pages of the request")
    return first, last


class PageHasher:
    """Computes chained page keys (`PageKey`) with one scheme and one per-instance seed.

    ``scheme`` is ``"sha256"``, ``"xxh3_128"``, ``"builtin"`` or a callable taking
    ``(parent value, token_tuple, extra_keys)`` (eSurge's ``hash_function``). ``seed`` (int,
    str or bytes) fixes ``root`` (the parent value of a chain's first page) and ``root_key``
    (its key); ``None`` draws a fresh random seed, so keys are private to the instance.
    """

    def __init__(self, scheme: str | Callable[[Any], int] = "sha256", seed: int | str | bytes | None = None) -> None:
        if not callable(scheme) and (not isinstance(scheme, str) or scheme not in SCHEMES):
            raise InvalidArgumentError(
                f"unknown hash scheme {describe(scheme)}; expected one of {SCHEMES} or a callable")
        seed = os.urandom(32) if seed is None else key_atom(seed, "seed")
        self.scheme: str | Callable[[Any], int] = scheme
        self.seed: int | str | bytes = seed
        digest = hashlib.sha256(_ROOT_TAG + _seed_bytes(seed)).digest()
        #: the key width of a digest scheme (0: the builtin/callable schemes, variable keys)
        self._width: int = _DIGEST_WIDTHS.get(scheme, 0) if isinstance(scheme, str) else 0
        if self._width:
            self.root_key: PageKey = digest[:self._width]
            self.root: int = int.from_bytes(self.root_key, "little")
        else:
            # Compatibility: with an int seed the root is hash(seed), as eSurge's none_hash
            # was hash(int(PYTHONHASHSEED)); other seeds are reduced through SHA-256.
            self.root = hash(seed) if isinstance(seed, int) else int.from_bytes(digest[:8], "little")
            self.root_key = _value_bytes(self.root)
        self._chain_keys: ChainFunction
        self._one_key: PageKeyFunction
        self._chain_keys, self._one_key = (
            (_sha256_chain, _sha256_page) if scheme == "sha256" else (_xxh3_chain, _xxh3_page) if scheme == "xxh3_128"
            else _tuple_scheme(hash, partial(_pack_int_value, b"q")) if scheme == "builtin"  # (always int64)
            else _tuple_scheme(_guarded(scheme), _value_bytes))  # type: ignore[arg-type]

    def hash_request(self, request: Any, page_size: int, start: int = 0,
                     parent: PageKey | PageHash | int | None = None, stop: int | None = None) -> list[PageKey]:
        """Keys of the full pages ``start .. stop-1`` of ``request.all_token_ids``.

        ``parent`` is the key of page ``start - 1`` (or its `PageHash`, or its hash value)
        and is required when ``start > 0``; ``stop`` defaults to the number of full pages and
        may not exceed it. This is the incremental form: a manager hashes each page once as it
        fills, resuming from the previous page's key alone.
        """
        ps = page_size if type(page_size) is int and page_size > 0 else checked_int(page_size, "page_size", minimum=1)
        packed = _packed_tokens(request)
        first, last = _page_span(len(packed) // ps, start, stop)
        if first > 0 and parent is None:
            raise InvalidArgumentError("parent is required when hashing from a page other than the first")
        parent_key = self.root_key if parent is None else self._parent_key(parent)
        if first == last:
            return []
        pages = _page_bytes(packed, first, last, ps)
        extras = None if _plain(request) else _ExtraKeys(request)
        return self._chain(parent_key, pages, extras, first, ps)

    def page_key(self, request: Any, page_size: int, index: int, parent: PageKey | PageHash | int | None) -> PageKey:
        """The key of full page ``index`` of ``request`` from ``parent``, the key of page
        ``index - 1`` (None for page 0): ``hash_request(request, page_size, index, parent,
        index + 1)[0]``, without that call's set-up for a run of pages when ``request`` is a
        `verikv.Request` with no extra keys and ``parent`` a key (a decode step fills one page at a
        time)."""
        if (type(request) is _REQUEST and type(page_size) is int and type(index) is int and page_size > 0
                and index >= 0 and type(parent) is bytes and _plain(request)):
            packed: array[int] = request.token_array
            if (index + 1) * page_size <= len(packed):
                page = _page_bytes(packed, index, index + 1, page_size)[0] if _BIG_ENDIAN else \
                    packed[index * page_size:(index + 1) * page_size].tobytes()
                if self._width:  # a digest key: its width is all there is to check
                    return self._page_key(parent if len(parent) == self._width else self._parent_key(parent), page,
                                          None, b"")
                return self._tuple_page_key(parent, page)
        first = checked_int(index, "index", minimum=0)
        return self.hash_request(request, page_size, first, parent, first + 1)[0]

    def _tuple_page_key(self, parent: bytes, page: bytes) -> PageKey:
        """`_page_key` of a builtin/callable scheme, which decodes ``parent`` (the value it
        starts with) itself: a parent that does not start with one is the error `_parent_key`
        raises, without decoding it twice."""
        try:
            return self._page_key(parent, page, None, b"")
        except (ValueError, IndexError, struct.error):
            self._parent_key(parent)  # raises, as for any malformed parent
            raise

    def _chain(self, parent: PageKey, pages: list[bytes], extras: _ExtraKeys | None,
               first: int, page_size: int) -> list[PageKey]:
        """The one path from pages to keys: the keys of ``pages`` (the pages ``first ..`` of a
        request, their token bytes; at least one) chained from ``parent``, with the request's
        ``extras``. Each page's body (tokens and suffix) goes to the scheme's chain function; the
        tuple schemes also get each page's tokens as a tuple of ints, unpacked from its bytes."""
        bodies: Iterable[bytes] = pages
        page_extras: Iterable[Any] = repeat(None)
        if extras is not None:
            page_extras = [extras.for_page(first + k, page_size) for k in range(len(pages))]
            encoded: dict[Any, bytes] = {}  # a LoRA request has the same extra keys on every page
            suffixes = [encoded[e] if e in encoded else encoded.setdefault(e, page_suffix(e)) for e in page_extras]
            bodies = list(map(bytes.__add__, pages, suffixes))
        ids = None if self._width else map(_unpacker(len(pages[0])), pages)
        return self._chain_keys(parent, bodies, page_extras, ids)

    def _page_key(self, parent: PageKey, tokens: bytes, extra: Any, suffix: bytes) -> PageKey:
        """The key of one page (its tokens as little-endian uint64 bytes, its extra keys and
        their `page_suffix`) from its parent's key: the scheme's page-key function (its chain's step)."""
        return self._one_key(parent, tokens + suffix, extra, None if self._width else _unpacker(len(tokens))(tokens))

    def _parent_key(self, parent: object) -> PageKey:
        """The parent as a key of this hasher: a `PageKey` (checked to be one this scheme can
        produce), or the key a `PageHash` or a hash value stands for."""
        if type(parent) is bytes:
            if not self._width:
                _tuple_key_value(parent)  # raises unless the key starts with a hash value
            elif len(parent) != self._width:
                raise InvalidArgumentError(f"parent {describe(parent)} is not a {self._width}-byte key of this scheme")
            return parent
        value = parent.hash_value if isinstance(parent, PageHash) else parent
        if self._width:  # a digest key read as a little-endian unsigned int
            top = (1 << (8 * self._width)) - 1
            return checked_int(value, "parent", minimum=0, maximum=top).to_bytes(self._width, "little")
        if isinstance(parent, PageHash) and type(value) is not int and _is_stable(value):
            return _value_bytes(value)  # a callable scheme's non-int value, as it returned it
        return _value_bytes(checked_int(value, "parent", minimum=_PARENT_MIN, maximum=_PARENT_MAX))

    def key_hash_value(self, key: PageKey) -> Any:
        """The hash value ``key`` stands for (eSurge's ``PageHash.hash_value``): a digest read
        as a little-endian unsigned int, or the builtin/callable scheme's value."""
        if type(key) is not bytes:
            raise InvalidArgumentError(f"key must be a PageKey (bytes), got {describe(key)}")
        parent_key = self._parent_key(key)  # validates it as a key of this scheme
        return int.from_bytes(parent_key, "little") if self._width else _tuple_key_value(parent_key)

    def hash_page(self, parent: int | None, token_ids: Sequence[int], extra_keys: Any = None) -> PageHash:
        """eSurge's key record of one full page whose predecessor's hash value is ``parent``.

        ``parent=None`` means the page is the first of its chain (its parent is ``root``).
        """
        parent_key = self.root_key if parent is None else self._parent_key(parent)
        packed = token_array(token_ids)
        extra = key_value(extra_keys)
        page = _page_bytes(packed, 0, 1, len(packed))[0] if packed else b""
        key = self._page_key(parent_key, page, extra, page_suffix(extra))
        return PageHash(self.key_hash_value(key), tuple(packed.tolist()), extra)

    def page_hashes(self, request: Any, page_size: int) -> list[PageHash]:
        """eSurge's key records of every full page of ``request`` (the keys of `hash_request`
        with their hash values, tokens and extra keys)."""
        keys = self.hash_request(request, page_size)
        tokens = _packed_tokens(request).tolist()
        extras = None if _plain(request) else _ExtraKeys(request)
        ps = checked_int(page_size, "page_size", minimum=1)
        return [PageHash(self.key_hash_value(key), tuple(tokens[k * ps:(k + 1) * ps]),
                         None if extras is None else extras.for_page(k, ps)) for k, key in enumerate(keys)]

    def page_extra_keys(self, request: Any, page_index: int, page_size: int) -> tuple[Any, ...] | None:
        """The extra keys of page ``page_index`` of ``request`` (``None`` when it has none)."""
        _require_request(request)
        index = checked_int(page_index, "page_index", minimum=0)
        size = checked_int(page_size, "page_size", minimum=1)
        return _ExtraKeys(request).for_page(index, size)

    def extend(self, request: Any, page_size: int, hashes: list[PageKey]) -> list[PageKey]:
        """Append to ``hashes`` (the request's keys so far) the keys of newly full pages.

        Returns the pages added (possibly none). O(new pages), so calling it after every
        decode step costs one hash per page that filled.
        """
        if not isinstance(hashes, list):
            raise InvalidArgumentError(f"hashes must be the list of the request's keys, got {type(hashes).__name__}")
        if hashes and type(hashes[-1]) is not bytes:  # only the last key is read: the parent
            raise InvalidArgumentError(f"hashes must hold PageKey (bytes) keys, the last is {describe(hashes[-1])}")
        if (type(page_size) is int and page_size > 0 and isinstance(request, _request_type())
                and len(request.token_array) // page_size == len(hashes)):
            return []  # no page filled since the last call (the common decode step)
        parent = hashes[-1] if hashes else None
        new = self.hash_request(request, page_size, start=len(hashes), parent=parent)
        hashes.extend(new)
        return new

    def __repr__(self) -> str:
        return f"PageHasher(scheme={self.scheme!r}, root={self.root:#x})"


def _require_request(request: Any) -> Any:
    """A duck-typed request's ``all_token_ids`` (anything without them is not a request)."""
    try:
        return request.all_token_ids
    except AttributeError:
        raise InvalidArgumentError(f"{type(request).__name__} has no all_token_ids") from None


#: the int parent values a builtin/callable scheme accepts (builtin ``hash`` is a signed 64-bit
#: int; a callable may return larger ints)
_PARENT_MIN, _PARENT_MAX = -(2**63), 2**256 - 1


_STABLE_ATOMS = (int, str, bytes, float, bool, type(None))


def _is_stable(value: object) -> bool:
    """True if ``value`` is built from exact builtin immutable values only (tuples of them,
    nested to any depth; checked without recursion), so its hash can never change."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is tuple:
            stack.extend(item)  # type: ignore[arg-type]
        elif kind not in _STABLE_ATOMS:
            return False
    return True


def _guarded(fn: Callable[[Any], object]) -> Callable[[Any], int]:
    """A user hash function whose failures are `HashingError` and whose results are exact ints
    (an integer of another type is converted) or values built from exact builtins (e.g. the
    injective "hash" that returns its argument, used by the proofs): a key's hash value must
    not be a user object, whose hash could change."""
    def call(args: Any) -> int:
        try:
            value = fn(args)
        except Exception as exc:  # any failure of user code becomes one typed error
            raise HashingError(f"hash function {describe(fn)} failed: {describe(exc)}") from exc
        if type(value) is int:
            return value
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return operator.index(value)
        if not _is_stable(value):
            raise HashingError(f"hash function {describe(fn)} returned {type(value).__name__}, "
                               f"not an int or a value of builtin immutables")
        return value  # type: ignore[return-value]
    return call


def _plain(request: Any) -> bool:
    """True if the request has no per-page extra keys (no LoRA, salt or multimodal items); a
    stray ``lora_path`` is not plain, so `_ExtraKeys` reports it."""
    if type(request) is _REQUEST:  # a `verikv.Request` answers without its properties' checks
        return not _has_extra_keys(request)
    return (getattr(request, "lora_id", None) is None and getattr(request, "lora_name", None) is None
            and getattr(request, "lora_path", None) is None and getattr(request, "cache_salt", None) is None
            and not getattr(request, "mm_features", None))


def _lora_key(request: Any) -> tuple[Any, ...] | None:
    """The LoRA extra key of a request: ``("lora", name, path)`` for an adapter named as vLLM's
    ``LoRARequest`` names it (``("lora", name)`` without a path), so pointing a name at other
    weights changes the keys, and the int id is left out (it only numbers the adapter in one
    instance); ``("lora", id)`` for an adapter known by its id alone; ``None`` without one."""
    name = getattr(request, "lora_name", None)
    path = getattr(request, "lora_path", None)
    if name is None:
        if path is not None:
            raise InvalidArgumentError(f"lora_path {describe(path)} needs a lora_name")
        lora = getattr(request, "lora_id", None)
        return None if lora is None else ("lora", checked_int(lora, "lora_id", minimum=0))
    for value, what in ((name, "lora_name"), (path, "lora_path")):
        if value is not None and (not isinstance(value, str) or not value):
            raise InvalidArgumentError(f"{what} must be a non-empty str, got {describe(value)}")
    text = key_text(name, "lora_name")
    return ("lora", text) if path is None else ("lora", text, key_text(path, "lora_path"))


class _ExtraKeys:
    """The per-page extra keys of one request, read once from its duck-typed attributes."""

    __slots__ = ("lora", "mm", "salt")

    def __init__(self, request: Any) -> None:
        self.lora = _lora_key(request)
        salt = getattr(request, "cache_salt", None)
        if salt is not None and not isinstance(salt, (str, bytes)):
            raise InvalidArgumentError(f"cache_salt must be str or bytes, got {describe(salt)}")
        self.salt = None if salt is None else key_atom(salt, "cache_salt")
        features = getattr(request, "mm_features", None)
        self.mm = sorted(_mm_items(features), key=lambda f: f.offset) if features else []

    def for_page(self, page_index: int, page_size: int) -> tuple[Any, ...] | None:
        start = page_index * page_size
        end = start + page_size
        keys: list[Any] = []
        if self.lora is not None:
            keys.append(self.lora)
        for item in self.mm:
            if item.offset >= end:
                break
            if item.offset + item.length > start:
                keys.append(("mm", item.mm_hash, item.offset - start))
        if page_index == 0 and self.salt is not None:
            keys.append(("salt", self.salt))
        return tuple(keys) if keys else None


_DEFAULT_HASHERS: dict[str, PageHasher] = {}
DEFAULT_SEED = 0


def default_hasher(scheme: str = "sha256") -> PageHasher:
    """The process-wide hasher of ``scheme`` used by the function API, seeded with ``DEFAULT_SEED``.

    Deterministic across processes (the seed is a constant, not ``PYTHONHASHSEED``). Create a
    `PageHasher` with your own seed to keep keys private to one deployment.
    """
    if not isinstance(scheme, str) or scheme not in SCHEMES:
        raise InvalidArgumentError(f"unknown hash scheme {describe(scheme)}; expected one of {SCHEMES}")
    hasher = _DEFAULT_HASHERS.get(scheme)
    if hasher is None:
        hasher = _DEFAULT_HASHERS[scheme] = PageHasher(scheme, seed=DEFAULT_SEED)
    return hasher


def _resolve(hash_function: str | Callable[[Any], int] | PageHasher) -> PageHasher:
    if isinstance(hash_function, PageHasher):
        return hash_function
    if isinstance(hash_function, str):
        if hash_function not in SCHEMES:
            raise InvalidArgumentError(f"unknown hash scheme {describe(hash_function)}; expected one of {SCHEMES}")
        return default_hasher(hash_function)
    if callable(hash_function):
        if hash_function is hash:
            return default_hasher("builtin")
        return PageHasher(hash_function, seed=DEFAULT_SEED)
    raise InvalidArgumentError(
        f"hash_function must be a scheme name, a callable or a PageHasher, got {describe(hash_function)}")


def hash_page_tokens(hash_function: str | Callable[[Any], int] | PageHasher, parent_page_hash: int | None,
                     curr_page_token_ids: Sequence[int], extra_keys: Any = None) -> PageHash:
    """eSurge's call shape: the key of one full page given its parent's hash value.

    ``hash_function`` is a scheme name, a callable (eSurge's builtin ``hash`` style) or a
    `PageHasher`; names and callables use the default seed.
    """
    return _resolve(hash_function).hash_page(parent_page_hash, curr_page_token_ids, extra_keys)


def hash_request_tokens(hash_function: str | Callable[[Any], int] | PageHasher, page_size: int,
                        request: Any) -> list[PageHash]:
    """eSurge's call shape: the keys of every full page of ``request.all_token_ids``.

    The request is duck-typed: ``all_token_ids`` and optionally ``cache_salt``, ``lora_id``,
    ``mm_features``. Extra keys are per page (see the module docstring).
    """
    return _resolve(hash_function).page_hashes(request, page_size)
