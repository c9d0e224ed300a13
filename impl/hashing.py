"""Content keys for full pages: chained page hashes with salt and per-page extra keys.

A page's key stands for the exact token prefix ending at that page: its own tokens, its
extra keys, and (through ``parent``) everything before it. `PageHasher` computes keys with a
chosen scheme:

- ``"sha256"`` (default): SHA-256 over a canonical byte encoding (no pickle, no ``repr``):
  token ids as fixed-width little-endian uint64 arrays, extra keys through a tagged, length-prefixed
  encoding. Collisions are not a practical concern (eSurge §3 Q14).
- ``"xxh3_128"``: the same bytes through xxHash3-128, much cheaper, not adversary-proof.
- ``"builtin"``: eSurge's ``hash((parent, tokens, extra_keys))``, for compatibility only.
  It is not collision resistant and its value for ``str`` extra keys depends on
  ``PYTHONHASHSEED``. A callable ``hash_function`` behaves the same way.

Each hasher holds its own parent-of-first-page value (``root``) derived from its ``seed``,
so two hashers never disturb each other and no module global is re-seeded; the value never
reads ``PYTHONHASHSEED``. Per-page extra keys are tagged tuples: ``("lora", id)`` on every
page of a LoRA request, ``("mm", mm_hash, offset - page_start)`` on each page a multimodal
item overlaps, and ``("salt", cache_salt)`` on the first page only (the salt isolates
tenants; the chain carries it to later pages).
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
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeAlias

import xxhash

from verikv.dp_sharding import checked_int
from verikv.errors import HashingError, InvalidArgumentError, describe

SCHEMES: tuple[str, ...] = ("sha256", "xxh3_128", "builtin")
_PAGE_TAG = b"verikv-page\x00"
_ROOT_TAG = b"verikv-root\x00"
_BIG_ENDIAN = sys.byteorder == "big"
_pack_u32 = struct.Struct("<I").pack
#: token ids are ints in ``[0, TOKEN_ID_LIMIT)``: they are encoded as unsigned 64-bit integers
TOKEN_ID_LIMIT = 1 << 64
#: nesting allowed inside an extra key (tuples in tuples); deeper values are rejected, not recursed
MAX_KEY_DEPTH = 8


class PageHash(NamedTuple):
    """A full page's key: the chained hash value, the page's own tokens, its extra keys.

    The whole tuple is the cache key, so equal hash values with different tokens or extra
    keys never share an entry.
    """

    hash_value: int
    token_ids: tuple[int, ...]
    extra_keys: Any | None = None


#: The prefix cache's key for one full page, as the manager, coordinator, group managers and
#: pool handle it: opaque, hashable, equal exactly when the content (the whole prefix up to
#: and including the page, with its extra keys) is equal. Code outside this module must not
#: look inside a key; it only compares, hashes and stores keys.
PageKey: TypeAlias = PageHash


class PageHashWithGroupId(NamedTuple):
    """A page key within one cache group: identical tokens in two groups are two entries."""

    page_hash: PageHash
    group_id: int

    def get_hash_value(self) -> int:
        """The chained hash value of the page."""
        return self.page_hash.hash_value


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


def encode_canonical(obj: Any, out: bytearray, _depth: int = 0) -> None:
    """Append a canonical, unambiguous encoding of ``obj`` to ``out``.

    Supported: None, bool, int, float, str, bytes, and tuples/lists of those (nested at most
    `MAX_KEY_DEPTH` deep). Each value is a type tag plus a length-prefixed payload, so
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
        if _depth >= MAX_KEY_DEPTH:
            raise InvalidArgumentError(f"cannot encode values nested deeper than {MAX_KEY_DEPTH} levels")
        out += b"L" + struct.pack("<I", len(obj))
        for item in obj:
            encode_canonical(item, out, _depth + 1)
    elif isinstance(obj, numbers.Integral):
        out += b"I" + _int_bytes(operator.index(obj))
    else:
        raise InvalidArgumentError(f"cannot encode {type(obj).__name__} {describe(obj)} canonically")


def _token_array(token_ids: Sequence[int]) -> array[int]:
    """Tokens as a little-endian uint64 array (`InvalidArgumentError` for a non-int or an id
    outside ``[0, 2**64)``)."""
    try:
        packed = array("Q", token_ids)
    except (TypeError, OverflowError, ValueError) as exc:
        raise InvalidArgumentError(f"token ids must be integers in [0, 2**64): {describe(exc)}") from None
    if _BIG_ENDIAN:
        packed.byteswap()
    return packed


def token_list(token_ids: object, what: str = "token ids") -> list[int]:
    """Token ids (any iterable of integers, NumPy arrays included) as a list of exact ints in
    ``[0, 2**64)``; `InvalidArgumentError` otherwise (nested lists, floats, strings, ...)."""
    if isinstance(token_ids, (str, bytes)) or not hasattr(token_ids, "__iter__"):
        raise InvalidArgumentError(f"{what} must be an iterable of ints, got {type(token_ids).__name__}")
    try:
        return array("Q", token_ids).tolist()
    except (TypeError, OverflowError, ValueError) as exc:  # a non-int, an id out of range, a 0-d array
        raise InvalidArgumentError(f"{what} must be integers in [0, 2**64): {describe(exc)}") from None


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


class CheckedTokens:
    """Marker base of request types whose token ids are always ints in ``[0, 2**64)``
    (`verikv.Request` checks them on entry), so hashing need not check them again.

    Such a request keeps ``all_token_ids`` as the list ``_tokens`` (hashing reads it without
    the view) and has the attributes ``lora_id``, ``cache_salt`` and ``mm_features``."""

    __slots__ = ()
    _tokens: list[int]  # declared for type checkers; the subclass holds the slot


class PageHasher:
    """Computes chained page keys with one scheme and one per-instance seed.

    ``scheme`` is ``"sha256"``, ``"xxh3_128"``, ``"builtin"`` or a callable taking
    ``(parent, token_tuple, extra_keys)`` (eSurge's ``hash_function``). ``seed`` (int, str or
    bytes) fixes ``root``, the parent value of a chain's first page; ``None`` draws a fresh
    random seed, so keys are private to the instance.
    """

    def __init__(self, scheme: str | Callable[[Any], int] = "sha256", seed: int | str | bytes | None = None) -> None:
        if not callable(scheme) and (not isinstance(scheme, str) or scheme not in SCHEMES):
            raise InvalidArgumentError(
                f"unknown hash scheme {describe(scheme)}; expected one of {SCHEMES} or a callable")
        if seed is None:
            seed = os.urandom(32)
        else:
            seed = key_atom(seed, "seed")
        self.scheme: str | Callable[[Any], int] = scheme
        self.seed: int | str | bytes = seed
        digest = hashlib.sha256(_ROOT_TAG + _seed_bytes(seed)).digest()
        if scheme == "sha256":
            self.root: int = int.from_bytes(digest, "little")
        elif scheme == "xxh3_128":
            self.root = int.from_bytes(digest[:16], "little")
        else:
            # Compatibility: with an int seed the root is hash(seed), as eSurge's none_hash
            # was hash(int(PYTHONHASHSEED)); other seeds are reduced through SHA-256.
            self.root = hash(seed) if isinstance(seed, int) else int.from_bytes(digest[:8], "little")
        #: the function of ``(parent, tokens, extra)`` for the builtin/callable schemes (None:
        #: a byte-level digest), called directly by `hash_request`
        self._tuple_hash: Callable[[Any], int] | None = (
            None if scheme in ("sha256", "xxh3_128")
            else hash if scheme == "builtin" else _guarded(scheme))  # type: ignore[arg-type]
        self._digest: Callable[[int, bytes, Sequence[int], Any], int] = self._make_digest()

    def _make_digest(self) -> Callable[[int, bytes, Sequence[int], Any], int]:
        """The function (parent, token bytes, tokens, extra) -> hash value for the scheme."""
        scheme = self.scheme
        if scheme == "sha256":
            def digest(parent: int, tokens: bytes, ids: Sequence[int], extra: Any) -> int:
                return int.from_bytes(hashlib.sha256(_message(parent, tokens, extra)).digest(), "little")
        elif scheme == "xxh3_128":
            def digest(parent: int, tokens: bytes, ids: Sequence[int], extra: Any) -> int:
                return xxhash.xxh3_128_intdigest(_message(parent, tokens, extra))
        else:
            fn: Callable[[Any], int] = self._tuple_hash  # type: ignore[assignment]

            def digest(parent: int, tokens: bytes, ids: Sequence[int], extra: Any) -> int:
                return fn((parent, tuple(ids), extra))
        return digest

    def hash_page(self, parent: int | None, token_ids: Sequence[int], extra_keys: Any = None) -> PageHash:
        """The key of one full page whose predecessor's hash value is ``parent``.

        ``parent=None`` means the page is the first of its chain (its parent is ``root``).
        """
        parent_value = self.root if parent is None else _parent_value(parent)
        tokens = tuple(token_list(token_ids))
        extra = key_value(extra_keys)
        return PageHash(self._digest(parent_value, _token_array(tokens).tobytes(), tokens, extra), tokens, extra)

    def page_extra_keys(self, request: Any, page_index: int, page_size: int) -> tuple[Any, ...] | None:
        """The extra keys of page ``page_index`` of ``request`` (``None`` when it has none)."""
        _require_request(request)
        index = checked_int(page_index, "page_index", minimum=0)
        size = checked_int(page_size, "page_size", minimum=1)
        return _ExtraKeys(request).for_page(index, size)

    def hash_request(self, request: Any, page_size: int, start: int = 0,
                     parent: PageHash | int | None = None, stop: int | None = None) -> list[PageHash]:
        """Keys of the full pages ``start .. stop-1`` of ``request.all_token_ids``.

        ``parent`` is the key (or hash value) of page ``start - 1`` and is required when
        ``start > 0``; ``stop`` defaults to the number of full pages and may not exceed it.
        This is the incremental form: a manager hashes each page once as it fills.
        """
        ps = page_size if type(page_size) is int and page_size > 0 else checked_int(page_size, "page_size", minimum=1)
        checked = isinstance(request, CheckedTokens)
        tokens = request._tokens if checked else _request_tokens(request)
        full = len(tokens) // ps
        first = start if type(start) is int and start >= 0 else checked_int(start, "start", minimum=0)
        if stop is None:
            last = full
        elif type(stop) is int and first <= stop <= full:
            last = stop
        else:
            last = checked_int(stop, "stop", minimum=first, maximum=full)
        if first > last:
            raise InvalidArgumentError(f"start {describe(first)} is beyond the {full} full pages of the request")
        if first > 0 and parent is None:
            raise InvalidArgumentError("parent is required when hashing from a page other than the first")
        value: int | None = parent.hash_value if isinstance(parent, PageHash) else (
            None if parent is None else _parent_value(parent))
        if first == last:
            return []
        ids = tokens[first * ps:last * ps]
        tuple_hash = self._tuple_hash
        data = b""
        if tuple_hash is None:
            data = _token_array(ids).tobytes()  # encodes (the ids are exact ints in [0, 2**64))
        if checked:
            plain = request.lora_id is None and request.cache_salt is None and not request.mm_features
        else:
            plain = _plain(request)
        extra = None if plain else _ExtraKeys(request)
        if value is None:
            value = self.root
        make = tuple.__new__  # PageHash(...) without the NamedTuple's Python __new__
        if tuple_hash is not None and extra is None:  # the common builtin case, specialised
            if last - first == 1:  # one page (a decode step filled it)
                page_ids = tuple(ids)
                return [make(PageHash, (tuple_hash((value, page_ids, None)), page_ids, None))]
            out: list[PageHash] = []
            append = out.append
            for page_ids in zip(*[iter(ids)] * ps):  # the page token tuples, sliced at C speed
                value = tuple_hash((value, page_ids, None))
                append(make(PageHash, (value, page_ids, None)))
            return out
        out = []
        append = out.append
        digest = self._digest
        width = 8 * ps
        for k, page_ids in enumerate(zip(*[iter(ids)] * ps)):
            keys = None if extra is None else extra.for_page(first + k, ps)
            if tuple_hash is not None:
                value = tuple_hash((value, page_ids, keys))
            else:
                value = digest(value, data[k * width:(k + 1) * width], page_ids, keys)
            append(make(PageHash, (value, page_ids, keys)))
        return out

    def extend(self, request: Any, page_size: int, hashes: list[PageHash]) -> list[PageHash]:
        """Append to ``hashes`` (the request's keys so far) the keys of newly full pages.

        Returns the pages added (possibly none). O(new pages), so calling it after every
        decode step costs one hash per page that filled.
        """
        if not isinstance(hashes, list):
            raise InvalidArgumentError(f"hashes must be the list of the request's keys, got {type(hashes).__name__}")
        if hashes and not isinstance(hashes[-1], PageHash):  # only the last key is read: the parent
            raise InvalidArgumentError(f"hashes must hold PageHash keys, the last is {describe(hashes[-1])}")
        if (isinstance(request, CheckedTokens) and type(page_size) is int and page_size > 0
                and len(request._tokens) // page_size == len(hashes)):
            return []  # no page filled since the last call (the common decode step)
        parent = hashes[-1] if hashes else None
        new = self.hash_request(request, page_size, start=len(hashes), parent=parent)
        hashes.extend(new)
        return new

    def __repr__(self) -> str:
        return f"PageHasher(scheme={self.scheme!r}, root={self.root:#x})"


def _message(parent: int, tokens: bytes, extra: Any) -> bytes:
    """The canonical bytes hashed for one page: tag, parent, token count, tokens, extra keys."""
    if extra is None:
        tail: bytes | bytearray = b"N"  # encode_canonical(None)
    else:
        tail = bytearray()
        encode_canonical(extra, tail)
    return b"".join((_PAGE_TAG, _int_bytes(parent), _pack_u32(len(tokens) // 8), tokens, tail))


def _require_request(request: Any) -> Any:
    """A duck-typed request's ``all_token_ids`` (anything without them is not a request)."""
    try:
        return request.all_token_ids
    except AttributeError:
        raise InvalidArgumentError(f"{type(request).__name__} has no all_token_ids") from None


def _request_tokens(request: Any) -> list[int]:
    """A duck-typed request's ``all_token_ids`` as validated exact ints."""
    return token_list(_require_request(request), "all_token_ids")


#: the hash values a parent can have: builtin ``hash`` is a signed 64-bit int, sha256 digests
#: are read as 256-bit unsigned ints (xxh3_128 as 128-bit)
_PARENT_MIN, _PARENT_MAX = -(2**63), 2**256 - 1


def _parent_value(parent: object) -> int:
    """A parent hash value given as an int, checked to be one a scheme can produce."""
    return checked_int(parent, "parent", minimum=_PARENT_MIN, maximum=_PARENT_MAX)


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
    """True if the request has no per-page extra keys (no LoRA, salt or multimodal items)."""
    return (getattr(request, "lora_id", None) is None and getattr(request, "cache_salt", None) is None
            and not getattr(request, "mm_features", None))


class _ExtraKeys:
    """The per-page extra keys of one request, read once from its duck-typed attributes."""

    __slots__ = ("lora", "mm", "salt")

    def __init__(self, request: Any) -> None:
        lora = getattr(request, "lora_id", None)
        self.lora = None if lora is None else checked_int(lora, "lora_id", minimum=0)
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
            keys.append(("lora", self.lora))
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
    return _resolve(hash_function).hash_request(request, page_size)
