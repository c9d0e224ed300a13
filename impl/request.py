"""The request as the cache manager sees it: token ids, progress, status and cache identity.

`Request` carries what the page manager reads (eSurge's ``EngineRequest`` fields used by the
cache code): the prompt and output token ids, ``num_computed_tokens``, the status, and what
goes into page keys besides the tokens (``cache_salt``, the LoRA identity ``lora_name`` /
``lora_path`` or ``lora_id``, ``mm_features``).
Sampling parameters are not the manager's business; only ``prompt_logprobs`` matters (such
requests never read the prefix cache, but their pages are still cached).

The request's content keys are kept by the `CacheManager` that hashes it (keys depend on that
manager's hash scheme and seed); they grow one full page at a time and are never recomputed.

Every field is validated on assignment as well as at construction, and what enters page keys
(``cache_salt``, ``lora_id``, ``lora_name``, ``lora_path``, ``mm_features``) is stored as
exact builtin values (a ``str`` subclass becomes a plain ``str``; a lone surrogate is
rejected), so a key never holds a user object whose hash could change. The identity fields
(``request_id`` and those five) cannot
change while a manager holds pages for the request; changing them otherwise makes a manager
drop the content keys it kept for the object (they describe the old identity).
"""

from __future__ import annotations

import enum
import numbers
import operator
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import attrgetter, countOf
from typing import Any, ClassVar, overload

from verikv.dp_sharding import checked_int
from verikv.errors import InvalidArgumentError, describe
from verikv.hashing import (
    TOKEN_ID_LIMIT,
    MMFeature,
    key_atom,
    key_text,
    mm_feature,
)
from verikv.typed_property import Field, ReadOnly


class RequestStatus(enum.IntEnum):
    """Lifecycle of a request, eSurge's order: every value above PREEMPTED is a finished state
    (`LAST_UNFINISHED`)."""

    WAITING = enum.auto()
    WAITING_FOR_FSM = enum.auto()
    WAITING_FOR_REMOTE_KVS = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    FINISHED_STOPPED = enum.auto()
    FINISHED_LENGTH_CAPPED = enum.auto()
    FINISHED_ABORTED = enum.auto()
    FINISHED_IGNORED = enum.auto()

    @staticmethod
    def is_finished(status: RequestStatus) -> bool:
        """True for the FINISHED_* states."""
        if not isinstance(status, RequestStatus):
            raise InvalidArgumentError(f"status must be a RequestStatus, got {describe(status)}")
        return status > RequestStatus.PREEMPTED


#: every status above this one is a finished request's
LAST_UNFINISHED = RequestStatus.PREEMPTED


class TokenView(Sequence[int]):
    """Read-only view of a request's token ids (no copy of the request's ``array('Q')``):
    an index gives an int, a slice a new list."""

    __slots__ = ("_tokens",)

    def __init__(self, tokens: array[int]) -> None:
        self._tokens = tokens

    def __len__(self) -> int:
        return len(self._tokens)

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:
        """As a list: an int index (IndexError past the end, as the sequence protocol wants)
        or a slice (a new list); any other index is an `InvalidArgumentError`."""
        try:
            item: Any = self._tokens[index]  # an int, or for a slice an array
        except TypeError:
            raise InvalidArgumentError(f"token index must be an int or a slice, got {type(index).__name__}") from None
        return item if type(item) is int else item.tolist()

    def __iter__(self) -> Iterator[int]:
        return iter(self._tokens)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenView):
            return self._tokens == other._tokens
        if isinstance(other, (list, tuple)):
            return self._tokens.tolist() == list(other)  # (element by element, as two lists compare)
        return NotImplemented

    __hash__: ClassVar[None] = None  # type: ignore[assignment]  # the view tracks a growing array

    def __repr__(self) -> str:
        return f"TokenView({self._tokens.tolist()!r})"


def _checked_tokens(tokens: object, what: str) -> array[int]:
    """The token ids as a new ``array('Q')`` (the caller's list is never kept): exact Python
    ints, or integers converted by `operator.index`, in ``[0, 2**64)``; or InvalidArgumentError."""
    if type(tokens) is list:
        items: list[Any] = tokens  # packed without a copy: the array built below is the copy
    elif isinstance(tokens, (str, bytes)) or not isinstance(tokens, Iterable):
        raise InvalidArgumentError(f"{what} must be an iterable of ints, got {type(tokens).__name__}")
    else:
        try:
            items = list(tokens)
        except (TypeError, ValueError) as exc:  # e.g. iterating a 0-d NumPy array
            raise InvalidArgumentError(f"{what} must be an iterable of ints: {describe(exc)}") from None
    if countOf(map(type, items), int) == len(items):  # exact ints (no bools): the range is checked at C speed
        try:
            return array("Q", items)  # OverflowError for an id outside [0, 2**64)
        except (OverflowError, TypeError):  # (TypeError: a type whose metaclass claims to equal int)
            pass  # the loop below names the id
    return _converted_tokens(items, what)


def _converted_tokens(items: list[Any], what: str) -> array[int]:
    """`_checked_tokens` one id at a time: bools and non-integers refused, other integers
    (int subclasses, NumPy integers) converted, the first bad id named by its index."""
    packed = array("Q")
    for i, t in enumerate(items):
        if type(t) is not int:
            if isinstance(t, bool) or not isinstance(t, numbers.Integral):  # (no repr: it may be deep)
                raise InvalidArgumentError(f"{what}[{i}] must be an integer, got {type(t).__name__}")
            t = operator.index(t)
        if not 0 <= t < TOKEN_ID_LIMIT:
            raise InvalidArgumentError(f"{what}[{i}] must be in [0, 2**64), got {describe(t)}")
        packed.append(t)
    return packed


def _checked_features(features: object, num_prompt_tokens: int) -> tuple[MMFeature, ...]:
    """Multimodal items as `MMFeature` tuples of exact builtins sorted by offset, each inside
    the prompt."""
    if isinstance(features, (str, bytes)) or not isinstance(features, Iterable):
        raise InvalidArgumentError("mm_features must be an iterable of (mm_hash, offset, length)")
    try:
        items = list(features)
    except (TypeError, ValueError) as exc:  # e.g. iterating a 0-d NumPy array
        raise InvalidArgumentError(f"mm_features must be an iterable: {describe(exc)}") from None
    out = []
    for item in items:
        if not isinstance(item, tuple) or len(item) != 3:
            raise InvalidArgumentError(f"mm_features items must be (mm_hash, offset, length), got {describe(item)}")
        feature = mm_feature(*item)
        if feature.offset + feature.length > num_prompt_tokens:
            raise InvalidArgumentError(
                f"multimodal item {describe(feature.mm_hash)} spans positions {describe(feature.offset)}.."
                f"{describe(feature.offset + feature.length - 1)}, beyond the {num_prompt_tokens}-token prompt"
            )
        out.append(feature)
    return tuple(sorted(out, key=lambda f: f.offset))


def _checked_request_id(value: object) -> str:
    """A non-empty ``str`` (a subclass becomes a plain copy: the id is a dict key)."""
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"request_id must be a non-empty str, got {describe(value)}")
    return value if type(value) is str else str.__str__(value)


def _checked_salt(value: object) -> str | bytes | None:
    if value is None:
        return None
    if not isinstance(value, (str, bytes)):
        raise InvalidArgumentError(f"cache_salt must be str, bytes or None, got {type(value).__name__}")
    salt = key_atom(value, "cache_salt")
    if isinstance(salt, int):  # (key_atom accepts ints; a salt is text or bytes, checked above)
        raise InvalidArgumentError("cache_salt must be str or bytes")
    return salt


def _checked_lora(value: object) -> int | None:
    return None if value is None else checked_int(value, "lora_id", minimum=0)


def _checked_lora_text(value: object, what: str) -> str | None:
    """A LoRA name or path: ``None`` or a non-empty ``str`` (a subclass becomes a plain copy)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{what} must be a non-empty str or None, got {describe(value)}")
    return key_text(value, what)


def _field(slot: str, setter: Callable[[Any, Any], None] | None, doc: str) -> Any:
    """A `Request` property (typed by a `Field` or `ReadOnly` annotation): read at C level from
    ``slot`` (an attrgetter, no Python frame: schedulers read these every step), assigned
    through ``setter`` (which validates), if any."""
    return property(attrgetter(slot), setter, doc=doc)


def _identity_field(slot: str, checked: Callable[[Any], object], doc: str) -> Any:
    """A `_field` for an identity field: the value ``checked`` returns is stored by
    `Request._set_identity`."""
    def set_checked(request: Request, value: object) -> None:
        request._set_identity(slot, checked(value))
    return _field(slot, set_checked, doc)


class Request:
    """A generation request: prompt, generated tokens, progress, status, cache identity.

    ``request_id`` (a non-empty str, fixed while a manager holds pages for the request),
    ``status`` (a `RequestStatus`, where the request is in its lifecycle) and
    ``num_computed_tokens`` (an int >= 0: tokens whose KV is in the cache or being computed this
    step, set by the scheduler) are plain attributes, read as fast as any, and validated as they
    are assigned (`__setattr__`). ``append_output_token_ids`` adds sampled tokens. ``cache_salt``
    (per-tenant isolation), the LoRA adapter and ``mm_features`` enter page keys, so requests
    that differ in them never share pages. The adapter is named as vLLM's ``LoRARequest``
    names it: ``lora_name`` and ``lora_path`` (both enter the keys, so pointing a name at other
    weights changes them; ``lora_id`` then stays out of the keys, being only an instance's
    number for the adapter), or by ``lora_id`` alone.
    """

    __slots__ = {
        "_cache_salt": None,
        "_holders": None,
        "_identity_version": None,
        "_lora_id": None,
        "_lora_name": None,
        "_lora_path": None,
        "_mm_features": None,
        "_num_prompt_tokens": None,
        "_prompt_logprobs": None,
        "_tokens": None,
        "_view": None,
        "num_computed_tokens": "Tokens whose KV is computed (or scheduled this step); set by the scheduler "
                               "(validated).",
        "request_id": "The request's id (a non-empty str); fixed while it holds pages (validated).",
        "status": "Where the request is in its lifecycle, a RequestStatus (validated).",
    }
    # (slots: a read costs what reading any attribute costs; assignments go through `__setattr__`)
    request_id: str
    status: RequestStatus
    num_computed_tokens: int
    #: every token id, prompt then output: the one store of them (``array('Q')``, 8 bytes per id
    #: and no int objects; page hashing reads its bytes, the views read its items)
    _tokens: array[int]
    _num_prompt_tokens: int
    _cache_salt: str | bytes | None
    _lora_id: int | None
    _lora_name: str | None
    _lora_path: str | None
    _mm_features: tuple[MMFeature, ...]
    _prompt_logprobs: bool
    _view: TokenView
    #: how many managers hold pages for this object (each `CacheManager` counts itself in while
    #: it holds pages for it); the identity fields are frozen while it is > 0
    _holders: int
    #: bumped by every change of an identity field: a manager's kept keys for this object are
    #: valid only for the version they were computed at
    _identity_version: int

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: Iterable[int],
        *,
        cache_salt: str | bytes | None = None,
        lora_id: int | None = None,
        lora_name: str | None = None,
        lora_path: str | None = None,
        mm_features: Iterable[MMFeature | tuple[str | bytes | int, int, int]] = (),
        prompt_logprobs: bool = False,
    ) -> None:
        rid = _checked_request_id(request_id)
        tokens = _checked_tokens(prompt_token_ids, "prompt_token_ids")
        if not tokens:
            raise InvalidArgumentError(f"request {rid!r}: the prompt must have at least one token")
        salt = _checked_salt(cache_salt)
        lora = _checked_lora(lora_id)
        name = _checked_lora_text(lora_name, "lora_name")
        path = _checked_lora_text(lora_path, "lora_path")
        if path is not None and name is None:
            raise InvalidArgumentError(f"request {rid!r}: lora_path {path!r} needs a lora_name")
        # (no items, the default: no ABC check, no list, no sort)
        features = () if type(mm_features) is tuple and not mm_features else _checked_features(mm_features, len(tokens))
        if not isinstance(prompt_logprobs, bool):
            raise InvalidArgumentError(f"prompt_logprobs must be a bool, got {type(prompt_logprobs).__name__}")
        # every field stored as it is (all are valid), past `__setattr__`, which checks later assignments
        _store_field(self, "request_id", rid)
        _store_field(self, "num_computed_tokens", 0)
        _store_field(self, "status", RequestStatus.WAITING)
        _store_field(self, "_tokens", tokens)
        _store_field(self, "_num_prompt_tokens", len(tokens))
        _store_field(self, "_cache_salt", salt)
        _store_field(self, "_lora_id", lora)
        _store_field(self, "_lora_name", name)
        _store_field(self, "_lora_path", path)
        _store_field(self, "_mm_features", features)
        _store_field(self, "_prompt_logprobs", prompt_logprobs)
        _store_field(self, "_view", TokenView(tokens))
        _store_field(self, "_holders", 0)
        _store_field(self, "_identity_version", 0)

    # ---- identity: what names the request and what enters its page keys ----------------------

    def __setattr__(self, name: str, value: object) -> None:
        """Assign a field: the plain fields (``request_id``, ``status``, ``num_computed_tokens``)
        are validated here; the other public fields by their properties."""
        if name == "num_computed_tokens" and type(value) is int and value >= 0:
            _store_num_computed_tokens(self, value)  # the scheduler's write at every step: checked, stored at C level
            return
        checked = _CHECKED_FIELDS.get(name)
        if checked is None:
            _store_field(self, name, value)
        else:
            checked(self, value)

    def __delattr__(self, name: str) -> None:
        """The plain fields cannot be deleted (as the other fields, properties without a deleter)."""
        if name in _CHECKED_FIELDS:
            raise AttributeError(f"cannot delete the field {name!r} of a Request")
        object.__delattr__(self, name)

    def __setstate__(self, state: tuple[None, dict[str, Any]]) -> None:
        """Restore a pickled or copied request as it was (its fields were valid when it was saved)."""
        for name, value in state[1].items():
            _store_field(self, name, value)

    def _set_identity(self, slot: str, value: object) -> None:
        """Store an (already validated) identity field, unless a manager holds pages for us."""
        if self._holders:
            raise InvalidArgumentError(
                f"request {self.request_id!r} holds pages: its {slot.lstrip('_')} cannot change until it is freed")
        _store_field(self, slot, value)
        self._identity_version += 1

    cache_salt: Field[str | bytes | None, str | bytes | None] = _identity_field(
        "_cache_salt", _checked_salt,
        "Per-tenant isolation salt (str, bytes or None), mixed into the first page's key.")
    lora_id: Field[int | None, int | None] = _identity_field(
        "_lora_id", _checked_lora, "The LoRA adapter id (an int >= 0, or None), part of every page's key.")

    def _set_lora_name(self, value: str | None) -> None:
        name = _checked_lora_text(value, "lora_name")
        if name is None and self._lora_path is not None:
            raise InvalidArgumentError("lora_name cannot be None while lora_path is set")
        self._set_identity("_lora_name", name)

    lora_name: Field[str | None, str | None] = _field(
        "_lora_name", _set_lora_name, "The LoRA adapter's name (a non-empty str, or None), part of every page's key.")

    def _set_lora_path(self, value: str | None) -> None:
        path = _checked_lora_text(value, "lora_path")
        if path is not None and self._lora_name is None:
            raise InvalidArgumentError("lora_path needs a lora_name")
        self._set_identity("_lora_path", path)

    lora_path: Field[str | None, str | None] = _field(
        "_lora_path", _set_lora_path,
        "Where the named adapter's weights are (a non-empty str, or None), part of the keys.")

    def _set_mm_features(self, value: Iterable[MMFeature | tuple[str | bytes | int, int, int]]) -> None:
        self._set_identity("_mm_features", _checked_features(value, self._num_prompt_tokens))

    mm_features: Field[tuple[MMFeature, ...], Iterable[MMFeature | tuple[str | bytes | int, int, int]]] = _field(
        "_mm_features", _set_mm_features, "Multimodal items as `MMFeature` tuples sorted by offset, inside the prompt.")

    def _set_prompt_logprobs(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"prompt_logprobs must be a bool, got {type(value).__name__}")
        self._prompt_logprobs = value

    prompt_logprobs: Field[bool, bool] = _field(
        "_prompt_logprobs", _set_prompt_logprobs,
        "Whether prompt logprobs are wanted (such requests skip the prefix lookup).")
    all_token_ids: ReadOnly[TokenView] = _field(
        "_view", None, "Prompt followed by the generated tokens, as a read-only view.")
    token_array: ReadOnly[array[int]] = _field("_tokens", None, (
        "Internal API for page hashing: every token id (prompt then output) as the request's "
        "own ``array('Q')``, each validated to be an int in [0, 2**64). Not a copy: read it, "
        "never change it (the request appends to it as tokens are added)."))

    @property
    def prompt_token_ids(self) -> TokenView:
        """The prompt tokens (a read-only view over a copy of them)."""
        return TokenView(self._tokens[: self._num_prompt_tokens])

    @property
    def output_token_ids(self) -> TokenView:
        """The generated tokens so far (a read-only view over a copy)."""
        return TokenView(self._tokens[self._num_prompt_tokens :])

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens (speculative tokens are not included)."""
        return len(self._tokens)

    @property
    def num_prompt_tokens(self) -> int:
        """Length of the prompt."""
        return self._num_prompt_tokens

    @property
    def num_output_tokens(self) -> int:
        """Number of generated tokens."""
        return len(self._tokens) - self._num_prompt_tokens

    def _set_num_computed_tokens(self, value: object) -> None:
        count = value if type(value) is int else checked_int(value, "num_computed_tokens")
        if count < 0:
            raise InvalidArgumentError(f"num_computed_tokens must be >= 0, got {describe(count)}")
        _store_field(self, "num_computed_tokens", count)

    def _set_status(self, value: object) -> None:
        if not isinstance(value, RequestStatus):
            raise InvalidArgumentError(f"status must be a RequestStatus, got {describe(value)}")
        _store_field(self, "status", value)

    def _set_request_id(self, value: object) -> None:
        self._set_identity("request_id", _checked_request_id(value))

    def is_finished(self) -> bool:
        """True once the request reached a FINISHED_* status."""
        return self.status > LAST_UNFINISHED

    def append_output_token_ids(self, token_ids: int | Iterable[int]) -> None:
        """Append one sampled token or several; all are validated before any is added."""
        if type(token_ids) is list and len(token_ids) == 1:  # the decode step: one plain int
            token = token_ids[0]
            if type(token) is int:
                try:  # the array's append is the range check: it appends nothing outside [0, 2**64)
                    self._tokens.append(token)
                except OverflowError:
                    pass  # the general path below raises the error naming the id
                else:
                    return
        if type(token_ids) is int or (isinstance(token_ids, numbers.Integral) and not isinstance(token_ids, bool)):
            token = operator.index(token_ids)  # (a plain int skips the ABC check: a sampled token, each step)
            if not 0 <= token < TOKEN_ID_LIMIT:
                raise InvalidArgumentError(f"token id must be in [0, 2**64), got {describe(token)}")
            self._tokens.append(token)
            return
        self._tokens.extend(_checked_tokens(token_ids, "token_ids"))

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, num_tokens={self.num_tokens}, "
            f"num_computed_tokens={self.num_computed_tokens}, status={self.status.name})"
        )


# ---- what a cache manager reads and counts (not part of the scheduler's API) ---------------------

#: a field's store, past `Request.__setattr__` (for values already checked)
_store_field: Callable[[Request, str, object], None] = object.__setattr__

#: the store of a checked ``num_computed_tokens`` (its slot's own setter)
_store_num_computed_tokens: Callable[[Request, int], None] = Request.__dict__["num_computed_tokens"].__set__
#: the plain fields' checks (`Request.__setattr__`): each validates and stores its value
_CHECKED_FIELDS: dict[str, Callable[[Request, object], None]] = {
    "request_id": Request._set_request_id,
    "status": Request._set_status,
    "num_computed_tokens": Request._set_num_computed_tokens,
}


def identity_version(request: Request) -> int:
    """The version of ``request``'s identity fields, bumped whenever one of them changes: content
    keys a manager kept for the object are valid only at the version they were computed at."""
    return request._identity_version


def has_extra_keys(request: Request) -> bool:
    """Whether ``request``'s pages are keyed with more than their tokens: a LoRA adapter, a cache
    salt or multimodal items (its ``lora_path`` is never set without its ``lora_name``)."""
    return not (request._lora_id is None and request._lora_name is None and request._cache_salt is None
                and not request._mm_features)


def count_holder(request: Request, change: int) -> None:
    """A cache manager starts (``change=1``) or stops (``-1``) holding pages for ``request``; its
    identity fields are frozen while any manager does."""
    request._holders += change
