"""verikv: a paged KV-cache page manager verified against a formal specification.

Public names are resolved lazily (PEP 562) so ``import verikv`` stays cheap and only loads
the modules a caller actually uses. ``_EXPORTS`` maps each public name to its module; the
``TYPE_CHECKING`` block imports the same names for type checkers, so ``from verikv import
CacheManager`` is typed (tests/test_packaging.py keeps the two lists equal).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

_EXPORTS: dict[str, str] = {
    # errors
    "VeriKVError": "errors",
    "InvalidArgumentError": "errors",
    "UnknownRequestError": "errors",
    "ForeignPageError": "errors",
    "CacheSpecError": "errors",
    "OutOfPagesError": "errors",
    "PageStateError": "errors",
    "DoubleFreeError": "errors",
    "NullPageError": "errors",
    "CorruptedStateError": "errors",
    "HashingError": "errors",
    "SizingError": "errors",
    "DoesNotFitError": "errors",
    "KVCacheDoesNotFitError": "errors",
    # free queue
    "CachePage": "free_queue",
    "FreeCachePageQueue": "free_queue",
    # hashing
    "PageHash": "hashing",
    "PageHashWithGroupId": "hashing",
    "PageHasher": "hashing",
    "hash_page_tokens": "hashing",
    "hash_request_tokens": "hashing",
    "MMFeature": "hashing",
    "default_hasher": "hashing",
    # pool
    "PagePool": "page_pool",
    "PrefixCacheStats": "events",
    "KVEvent": "events",
    "PageStored": "events",
    "PageRemoved": "events",
    "AllPagesCleared": "events",
    # requests
    "Request": "request",
    "RequestStatus": "request",
    # cache specs
    "CacheSpec": "cache_specs",
    "AttentionSpec": "cache_specs",
    "FullAttentionSpec": "cache_specs",
    "SlidingWindowSpec": "cache_specs",
    "ChunkedLocalAttentionSpec": "cache_specs",
    "MambaSpec": "cache_specs",
    "CacheGroupSpec": "cache_specs",
    "CacheGroupsConfig": "cache_specs",
    "RuntimePageBudgetEstimate": "cache_specs",
    "create_kv_cache_specs_from_config": "cache_specs",
    "estimate_runtime_page_budget": "cache_specs",
    "split_cache_groups": "cache_specs",
    "AttentionTypeGroups": "cache_specs",
    "dtype_size_bytes": "cache_specs",
    # managers
    "SingleTypeCacheManager": "single_type_managers",
    "FullAttentionManager": "single_type_managers",
    "SlidingWindowManager": "single_type_managers",
    "ChunkedLocalAttentionManager": "single_type_managers",
    "MambaManager": "single_type_managers",
    "CacheCoordinator": "coordinators",
    "CacheCoordinatorNoPrefixCache": "coordinators",
    "UnitaryCacheCoordinator": "coordinators",
    "HybridCacheCoordinator": "coordinators",
    "get_kv_cache_coordinator": "coordinators",
    "CacheManager": "cache_manager",
    "CachePages": "cache_manager",
    # data-parallel sharding
    "usable_pages_count": "dp_sharding",
    "pages_per_dp_shard": "dp_sharding",
    "dp_shard_for_page_id": "dp_sharding",
    "dp_shard_page_bounds": "dp_sharding",
    # page table
    "PageTable": "page_table",
    "MultiGroupPageTable": "page_table",
    "PAGE_TABLE_PADDING_VAL": "page_table",
    # sizing
    "plan_kv_cache": "sizing",
    "KVCachePlan": "sizing",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # the same names, imported eagerly for type checkers only
    from verikv.cache_manager import CacheManager as CacheManager, CachePages as CachePages
    from verikv.cache_specs import (
        AttentionSpec as AttentionSpec,
        AttentionTypeGroups as AttentionTypeGroups,
        CacheGroupsConfig as CacheGroupsConfig,
        CacheGroupSpec as CacheGroupSpec,
        CacheSpec as CacheSpec,
        ChunkedLocalAttentionSpec as ChunkedLocalAttentionSpec,
        FullAttentionSpec as FullAttentionSpec,
        MambaSpec as MambaSpec,
        RuntimePageBudgetEstimate as RuntimePageBudgetEstimate,
        SlidingWindowSpec as SlidingWindowSpec,
        create_kv_cache_specs_from_config as create_kv_cache_specs_from_config,
        dtype_size_bytes as dtype_size_bytes,
        estimate_runtime_page_budget as estimate_runtime_page_budget,
        split_cache_groups as split_cache_groups,
    )
    from verikv.coordinators import (
        CacheCoordinator as CacheCoordinator,
        CacheCoordinatorNoPrefixCache as CacheCoordinatorNoPrefixCache,
        HybridCacheCoordinator as HybridCacheCoordinator,
        UnitaryCacheCoordinator as UnitaryCacheCoordinator,
        get_kv_cache_coordinator as get_kv_cache_coordinator,
    )
    from verikv.dp_sharding import (
        dp_shard_for_page_id as dp_shard_for_page_id,
        dp_shard_page_bounds as dp_shard_page_bounds,
        pages_per_dp_shard as pages_per_dp_shard,
        usable_pages_count as usable_pages_count,
    )
    from verikv.errors import (
        CacheSpecError as CacheSpecError,
        CorruptedStateError as CorruptedStateError,
        DoesNotFitError as DoesNotFitError,
        DoubleFreeError as DoubleFreeError,
        ForeignPageError as ForeignPageError,
        HashingError as HashingError,
        InvalidArgumentError as InvalidArgumentError,
        KVCacheDoesNotFitError as KVCacheDoesNotFitError,
        NullPageError as NullPageError,
        OutOfPagesError as OutOfPagesError,
        PageStateError as PageStateError,
        SizingError as SizingError,
        UnknownRequestError as UnknownRequestError,
        VeriKVError as VeriKVError,
    )
    from verikv.events import (
        AllPagesCleared as AllPagesCleared,
        KVEvent as KVEvent,
        PageRemoved as PageRemoved,
        PageStored as PageStored,
        PrefixCacheStats as PrefixCacheStats,
    )
    from verikv.free_queue import CachePage as CachePage, FreeCachePageQueue as FreeCachePageQueue
    from verikv.hashing import (
        MMFeature as MMFeature,
        PageHash as PageHash,
        PageHasher as PageHasher,
        PageHashWithGroupId as PageHashWithGroupId,
        default_hasher as default_hasher,
        hash_page_tokens as hash_page_tokens,
        hash_request_tokens as hash_request_tokens,
    )
    from verikv.page_pool import PagePool as PagePool
    from verikv.page_table import (
        PAGE_TABLE_PADDING_VAL as PAGE_TABLE_PADDING_VAL,
        MultiGroupPageTable as MultiGroupPageTable,
        PageTable as PageTable,
    )
    from verikv.request import Request as Request, RequestStatus as RequestStatus
    from verikv.single_type_managers import (
        ChunkedLocalAttentionManager as ChunkedLocalAttentionManager,
        FullAttentionManager as FullAttentionManager,
        MambaManager as MambaManager,
        SingleTypeCacheManager as SingleTypeCacheManager,
        SlidingWindowManager as SlidingWindowManager,
    )
    from verikv.sizing import KVCachePlan as KVCachePlan, plan_kv_cache as plan_kv_cache


def __getattr__(name: str) -> Any:
    """Import the module that defines ``name`` on first use and cache the attribute."""
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'verikv' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"verikv.{module_name}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
