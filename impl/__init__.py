"""verikv: a paged KV-cache page manager verified against a formal specification.

Public names are resolved lazily (PEP 562) so ``import verikv`` stays cheap and only loads
the modules a caller actually uses. ``_EXPORTS`` maps each public name to its module.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

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
