"""The adapter protocol between the conformance machine and a page manager, and verikv's own adapter.

The machine (`verikv.testing.manager_machine`) reaches a page manager only through these
methods, so another engine's manager is tested by writing one small class. Mapping onto the
two common API families:

- ``factory(config)``: eSurge ``CacheManager(num_pages, groups, max_model_len, ...)``;
  vLLM ``KVCacheManager(kv_cache_config, max_model_len, ...)``;
- ``lookup``: ``get_computed_pages(request)`` / ``get_computed_blocks(request)``;
- ``allocate``: ``allocate_slots(request, n, hit_tokens, hit, lookahead, delay)`` (both);
- ``free``: ``free(request)`` (both); ``finish``: eSurge ``free_page_hashes(request)``, vLLM
  nothing (its hashes live on the request);
- ``cache``: ``cache_pages(request, n)`` / ``cache_blocks(request, n)``;
- ``reset``: ``reset_prefix_cache()``; ``usage``: ``usage`` (both);
- ``num_free_pages``: ``page_pool.get_num_free_pages()`` / ``block_pool.get_num_free_blocks()``;
- ``page_ids``: ``get_page_ids(request_id)`` / ``get_block_ids(request_id)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypedDict, cast, runtime_checkable

from verikv.errors import InvalidArgumentError, describe
from verikv.spec.abstraction import ManagerLike
from verikv.spec.manager import GroupLayout, ManagerConfig, RequestView
from verikv.testing._arguments import checked_factory, checked_instance, is_int

PageIds = Sequence[Sequence[int]]
"""Page ids per cache group, in group order (0 = the null placeholder)."""


@runtime_checkable
class PageManagerAdapter(Protocol):
    """What a page manager offers the harness: one instance per manager, built by a factory.

    The factory receives a `verikv.spec.manager.ManagerConfig` (pages, cache groups as
    `GroupLayout`, ``max_model_len``, caching, EAGLE, data-parallel size, free-order policy).
    ``request`` arguments are the engine's own requests, made by `new_request`. An exception
    means "rejected": the harness then expects the manager's state to be unchanged (an adapter
    may narrow that to its manager's own error types with a ``rejection_types`` attribute).
    """

    def new_request(self, view: RequestView) -> Any:
        """The engine's request for ``view`` (id, tokens, salt, LoRA id, multimodal items,
        prompt logprobs); it must accept ``append_output_token_ids`` and a settable
        ``num_computed_tokens``."""
        ...

    def lookup(self, request: Any, dp_shard_hint: int | None = None,
               data_parallel_size: int | None = None) -> tuple[Any, int]:
        """The prefix-cache hit (page ids per group or an object with ``get_page_ids()``) and
        its length in tokens; no state change. The DP arguments (passed by keyword) are
        eSurge's: both None without data parallelism."""
        ...

    def allocate(self, request: Any, num_new_tokens: int, num_new_computed_tokens: int, hit: Any,
                 num_lookahead_tokens: int, delay_cache: bool, dp_shard_hint: int | None = None,
                 data_parallel_size: int | None = None) -> Any:
        """Claim the hit (as `lookup` returned it, or None) and allocate the new pages; the new
        pages (ids per group or an object with ``get_page_ids()``), or None when they do not fit."""
        ...

    def free(self, request: Any) -> None:
        """Release every page the request holds (it may come back: keep its content keys)."""
        ...

    def finish(self, request: Any) -> None:
        """The request is gone for good (called after `free`): forget its content keys."""
        ...

    def cache(self, request: Any, num_tokens: int) -> None:
        """Register the request's full pages up to ``num_tokens`` tokens in the prefix cache."""
        ...

    def reset(self) -> bool:
        """Reset the prefix cache; False (and no change) while any page is held."""
        ...

    def usage(self) -> float:
        """The usage the manager reports (the spec: held usable pages / (num_pages - 1))."""
        ...

    def num_free_pages(self) -> int:
        """The free page count the manager reports."""
        ...

    def page_ids(self, request_id: str) -> PageIds:
        """The request's page table per group; raises for a request that holds no pages."""
        ...


@runtime_checkable
class WhiteBoxAdapter(PageManagerAdapter, Protocol):
    """An adapter that also exposes the manager's state for the white-box mode."""

    def abstraction(self) -> ManagerLike:
        """A read-only view with the members of `verikv.spec.abstraction.ManagerLike`."""
        ...


AdapterFactory = Callable[[ManagerConfig], PageManagerAdapter]


def page_ids_of(result: Any) -> tuple[tuple[int, ...], ...]:
    """Page ids per group of a hit or allocation result: ids, or an object with
    ``get_page_ids()`` (eSurge) or ``get_block_ids()`` (vLLM). `InvalidArgumentError` when
    they are not a collection of page lists of integers (a string, a number, a mapping)."""
    getter = getattr(result, "get_page_ids", None) or getattr(result, "get_block_ids", None)
    ids = getter() if getter is not None else result
    groups = tuple(_items(group, result) for group in _items(ids, result))
    if not all(is_int(page) for group in groups for page in group):
        raise InvalidArgumentError(f"{_NOT_PAGE_IDS}, got {describe(result)}")
    return groups


_NOT_PAGE_IDS = "page ids must be a collection of page lists (ints) per group"


def _items(value: Any, result: Any) -> tuple[Any, ...]:
    """The items of ``value`` (part of ``result``), a collection that is neither text nor a mapping."""
    if isinstance(value, str | bytes | bytearray | Mapping):
        raise InvalidArgumentError(f"{_NOT_PAGE_IDS}, got {describe(result)}")
    try:
        return tuple(value)
    except TypeError:  # not iterable (a number, a 0-d array)
        raise InvalidArgumentError(f"{_NOT_PAGE_IDS}, got {describe(result)}") from None


class _AttentionGeometry(TypedDict):
    """The keyword arguments every attention spec takes (`build_cache_manager`'s geometry)."""

    page_size: int
    num_kv_heads: int
    head_size: int
    dtype: str
    use_mla: bool


def build_cache_manager(config: ManagerConfig, **options: Any) -> Any:
    """A `verikv.CacheManager` for a spec configuration (a `ManagerConfig`; small made-up layer
    geometry); ``options`` go to the constructor (e.g. ``hash_scheme``)."""
    checked_instance(config, ManagerConfig, "config")
    from verikv import (
        CacheGroupSpec,
        CacheManager,
        ChunkedLocalAttentionSpec,
        FullAttentionSpec,
        MambaSpec,
        SlidingWindowSpec,
    )

    def kv_spec(g: GroupLayout) -> Any:
        geometry = _AttentionGeometry(page_size=g.page_size, num_kv_heads=1, head_size=8, dtype="float16",
                                      use_mla=False)
        if g.kind == "full":
            return FullAttentionSpec(**geometry)
        if g.kind == "sliding":
            return SlidingWindowSpec(**geometry, sliding_window=g.span)
        if g.kind == "chunked":
            return ChunkedLocalAttentionSpec(**geometry, attention_chunk_size=g.span)
        return MambaSpec(page_size=g.page_size, shapes=((4,),), dtype="float32")

    if any(g.kind == "mamba_align" for g in config.groups):
        options.setdefault("mamba_cache_mode", "align")
    return CacheManager(config.num_pages, [CacheGroupSpec(kv_spec(g)) for g in config.groups],
                        config.max_model_len, enable_caching=config.enable_caching,
                        use_eagle=config.use_eagle, free_order=config.free_order,
                        skip_unreachable_sliding_pages=config.skip_unreachable_sliding_pages,
                        eagle_rule=config.eagle_rule,
                        data_parallel_size=config.data_parallel_size, **options)


_MANAGER_METHODS = ("get_computed_pages", "allocate_slots", "free", "free_page_hashes", "cache_pages",
                    "reset_prefix_cache", "get_page_ids")
"""The methods `CacheManagerAdapter` calls on the manager ``make_manager`` builds."""


class CacheManagerAdapter:
    """`verikv.CacheManager` as a `WhiteBoxAdapter` (the reference the harness must accept).

    ``config`` is a `ManagerConfig`; ``make_manager`` builds the manager for it (default: a
    small made-up layer geometry per group); pass another to test a subclass or a differently
    configured manager.
    """

    rejection_types: tuple[type[BaseException], ...] = (InvalidArgumentError,)
    """What counts as a rejection (`verikv.testing.manager_machine.MachineOptions`): verikv
    rejects every invalid call with a typed error, so anything else is a crash."""

    def __init__(self, config: ManagerConfig,
                 make_manager: Callable[[ManagerConfig], Any] = build_cache_manager) -> None:
        checked_instance(config, ManagerConfig, "config")
        self.manager: Any = checked_factory(make_manager, "make_manager")(config)

    def new_request(self, view: RequestView) -> Any:
        from verikv.request import Request

        salt = cast("str | bytes | None", view.cache_salt)  # Request rejects any other salt, typed
        return Request(view.request_id, view.tokens, cache_salt=salt, lora_id=view.lora_id,
                       lora_name=view.lora_name, lora_path=view.lora_path,
                       mm_features=view.mm_features, prompt_logprobs=view.prompt_logprobs)

    def lookup(self, request: Any, dp_shard_hint: int | None = None,
               data_parallel_size: int | None = None) -> tuple[Any, int]:
        return self.manager.get_computed_pages(request, dp_shard_hint=dp_shard_hint,  # type: ignore[no-any-return]
                                               data_parallel_size=data_parallel_size)

    def allocate(self, request: Any, num_new_tokens: int, num_new_computed_tokens: int, hit: Any,
                 num_lookahead_tokens: int, delay_cache: bool, dp_shard_hint: int | None = None,
                 data_parallel_size: int | None = None) -> Any:
        return self.manager.allocate_slots(request, num_new_tokens, num_new_computed_tokens, hit,
                                           num_lookahead_tokens, delay_cache, dp_shard_hint=dp_shard_hint,
                                           data_parallel_size=data_parallel_size)

    def free(self, request: Any) -> None:
        self.manager.free(request)

    def finish(self, request: Any) -> None:
        self.manager.free_page_hashes(request)

    def cache(self, request: Any, num_tokens: int) -> None:
        self.manager.cache_pages(request, num_tokens)

    def reset(self) -> bool:
        return bool(self.manager.reset_prefix_cache())

    def usage(self) -> float:
        return float(self.manager.usage)

    def num_free_pages(self) -> int:
        return int(self.manager.page_pool.get_num_free_pages())

    def page_ids(self, request_id: str) -> PageIds:
        return self.manager.get_page_ids(request_id)  # type: ignore[no-any-return]

    def abstraction(self) -> ManagerLike:
        return self.manager  # type: ignore[no-any-return]


class KeyFailure(RuntimeError):
    """Raised by `ArmableHash` when armed: a key computation that fails (an engine's hasher
    can raise, e.g. on a value it cannot encode)."""


class ArmableHash:
    """A ``hash_scheme`` callable that raises `KeyFailure` on demand: `arm(after)` makes the
    ``after``-th next call raise (1 = the very next). Otherwise it computes the default
    scheme's digest (SHA-256 over the canonical encoding), so values that scheme cannot encode
    still fail as they would by default."""

    def __init__(self) -> None:
        from verikv.hashing import PageHasher

        self.countdown: int = 0
        self.inner: PageHasher = PageHasher("sha256", seed=0)

    def arm(self, after: int) -> None:
        self.countdown = after

    def disarm(self) -> None:
        self.countdown = 0

    def __call__(self, message: tuple[int, tuple[int, ...], Any]) -> int:
        if self.countdown:
            self.countdown -= 1
            if not self.countdown:
                raise KeyFailure("armed key computation failure")
        parent, tokens, extra = message
        return self.inner.hash_page(parent, tokens, extra).hash_value


class KeyFailingAdapter(CacheManagerAdapter):
    """`CacheManagerAdapter` whose manager hashes with an `ArmableHash`, so the machine's
    failing-key-computation rule can make key computation fail at a chosen call."""

    def __init__(self, config: ManagerConfig) -> None:
        checked_instance(config, ManagerConfig, "config")
        self.hasher: ArmableHash = ArmableHash()
        super().__init__(config, lambda cfg: build_cache_manager(cfg, hash_scheme=self.hasher))

    def arm_key_failure(self, after: int) -> None:
        self.hasher.arm(after)

    def disarm_key_failure(self) -> None:
        self.hasher.disarm()
