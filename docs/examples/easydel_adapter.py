"""EasyDeL 0.3.0's eSurge page manager behind verikv's conformance harness.

`EasyDeLAdapter` puts EasyDeL's own `CacheManager` behind the manager protocol
(`verikv.testing.adapter.PageManagerAdapter`, black-box); `EasyDeLPoolAdapter` puts the page
pool of such a manager behind the page-level protocol of `check_pool_conformance`, which is
where a double free shows. `load_esurge()` imports eSurge's core without EasyDeL's heavy package
initialisation (JAX, Flax, Ray), which the page manager does not need. `ESURGE_CONFIG` and
`ESURGE_POOL_CONFIG` are the run configurations of docs/model-testing.md ("What it finds in
EasyDeL's eSurge"); tests/test_easydel_conformance.py runs them when EasyDeL is installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
import types
from typing import Any

import numpy as np

from verikv.errors import OutOfPagesError
from verikv.testing.conformance import ConformanceConfig


def load_esurge() -> tuple[Any, Any]:
    """``easydel.inference.esurge.core`` and ``.request``, imported under empty parent packages
    and import-time stand-ins for ``jax`` (numpy: only dtypes and annotations are read at
    import) and ``eformer.loggings``; the stand-ins are removed again afterwards."""
    if "easydel.inference.esurge.core" in sys.modules:
        return sys.modules["easydel.inference.esurge.core"], sys.modules["easydel.inference.esurge.request"]
    spec = importlib.util.find_spec("easydel")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("easydel is not installed")
    root = next(iter(spec.submodule_search_locations))
    for name, sub in (("easydel", ""), ("easydel.inference", "inference"),
                      ("easydel.inference.esurge", "inference/esurge")):
        shell = types.ModuleType(name)
        shell.__path__ = [os.path.join(root, sub)]
        sys.modules[name] = shell
    jax, loggings = types.ModuleType("jax"), types.ModuleType("eformer.loggings")
    jax.numpy, jax.Array = np, np.ndarray  # type: ignore[attr-defined]
    loggings.get_logger = logging.getLogger  # type: ignore[attr-defined]
    sampling = types.ModuleType("easydel.inference.sampling_params")
    sampling.SamplingParams = type("SamplingParams", (), {})  # type: ignore[attr-defined]
    stand_ins = {"jax": jax, "jax.numpy": np, "eformer": types.ModuleType("eformer"), "eformer.loggings": loggings}
    saved = {name: sys.modules.get(name) for name in stand_ins}
    sys.modules.update(stand_ins)
    sys.modules["easydel.inference.sampling_params"] = sampling
    try:
        return (importlib.import_module("easydel.inference.esurge.core"),
                importlib.import_module("easydel.inference.esurge.request"))
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


# ---- the manager adapter (the lines a user writes, up to the "end of adapter" line) -----------

core, esurge_request = load_esurge()
LAYER = dict(num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False)  # any geometry will do
SPECS = {"full": lambda g: core.FullAttentionSpec(g.page_size, **LAYER),
         "sliding": lambda g: core.SlidingWindowSpec(g.page_size, **LAYER, sliding_window=g.span),
         "chunked": lambda g: core.ChunkedLocalAttentionSpec(g.page_size, **LAYER, attention_chunk_size=g.span),
         "mamba": lambda g: core.MambaSpec(g.page_size, shapes=((4,),), dtype=np.float32)}


class EasyDeLAdapter:
    """EasyDeL's `CacheManager` behind the manager protocol (black-box; DP size is per call)."""

    def __init__(self, config: Any) -> None:
        groups = [core.CacheGroupSpec(SPECS[g.kind](g)) for g in config.groups]
        self.manager = core.CacheManager(config.num_pages, groups, config.max_model_len,
                                         config.enable_caching, config.use_eagle)

    def new_request(self, view: Any) -> Any:  # no salt, LoRA id or logprobs: see ESURGE_CONFIG
        return esurge_request.EngineRequest(view.request_id, list(view.tokens), None, None)

    def lookup(self, request: Any, **dp: Any) -> Any:
        return self.manager.get_computed_pages(request, **dp)

    def allocate(self, request: Any, num_new: int, num_hit: int, hit: Any, lookahead: int, delay: bool,
                 **dp: Any) -> Any:
        return self.manager.allocate_slots(request, num_new, num_hit, hit, lookahead, delay, **dp)

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

    def page_ids(self, request_id: str) -> Any:
        return self.manager.get_page_ids(request_id)
# ---- end of adapter --------------------------------------------------------------------------


ESURGE_CONFIG = ConformanceConfig(
    mode="black-box", features=frozenset(), bad_inputs=False,
    waivers=frozenset({"usage-formula", "per-call-dp-size", "shard-inference", "window-free-on-failure"}))
"""EasyDeL's `EngineRequest` has no salt or LoRA id, images need its own feature objects and
prompt logprobs its sampling parameters; the ``cache-calls`` feature is left out because the
first ``cache_pages`` call already fails (Q4), and bad inputs because a negative count is
accepted in every layout (each would mask the search for the rest). The waivers declare the
departures already known: usage counts the null page (Q26), DP size per call, the shard
inferred from held pages, out-of-window pages freed by a failed allocation."""


# ---- the page-level adapter (for check_pool_conformance) --------------------------------------

class EasyDeLPoolAdapter:
    """The page pool of an EasyDeL `CacheManager` behind the id-level pool protocol."""

    free_order = "esurge"

    def __init__(self, num_pages: int, free_order: str) -> None:
        groups = [core.CacheGroupSpec(core.FullAttentionSpec(4, **LAYER))]
        self.pool = core.CacheManager(num_pages, groups, 8).page_pool
        self.num_pages = num_pages

    def ref_count(self, p: int) -> int:
        return int(self.pool.pages[p].ref_cnt)

    def key_of(self, p: int) -> Any:
        return self.pool.pages[p].page_hash

    def free_list_ids(self) -> list[int]:
        return [page.page_id for page in self.pool.free_page_queue.get_all_free_pages()]

    def cached_items(self) -> list[tuple[Any, list[int]]]:
        return [(key, list(pages)) for key, pages in self.pool.cached_page_hash_to_page.items() if pages]

    def touch_ids(self, ids: list[int]) -> None:
        self.pool.touch(([self.pool.pages[p] for p in ids],))

    def free_page_ids(self, ids: list[int]) -> None:
        self.pool.free_pages([self.pool.pages[p] for p in ids])

    def reset_prefix_cache(self) -> bool:
        return bool(self.pool.reset_prefix_cache())

    def get_new_page_ids(self, n: int, **dp: Any) -> list[int]:
        try:
            return [page.page_id for page in self.pool.get_new_pages(n, **dp)]
        except ValueError as exc:  # eSurge's error for an exhausted pool or shard
            raise OutOfPagesError(str(exc)) from exc

    def cache_page_id(self, p: int, key: Any) -> None:
        """Register one page the way eSurge's ``cache_full_pages`` does (it caches whole requests only)."""
        page = self.pool.pages[p]
        page.page_hash = key
        self.pool.cached_page_hash_to_page[key][p] = page

    def lookup_id(self, key: Any, **dp: Any) -> int | None:
        found = self.pool.get_cached_page(key.page_hash, [key.group_id], **dp)
        return found[0].page_id if found else None

    def get_num_free_pages(self, dp_shard_hint: int | None = None, data_parallel_size: int | None = None) -> int:
        ids = self.free_list_ids()
        if dp_shard_hint is None or not data_parallel_size or data_parallel_size == 1 \
                or self.num_pages % data_parallel_size:
            return len(ids)
        per, shard = self.num_pages // data_parallel_size, dp_shard_hint % data_parallel_size
        return sum(max(1, shard * per) <= p < (shard + 1) * per for p in ids)

    def get_usage(self) -> float:
        return float(self.pool.get_usage())


ESURGE_POOL_CONFIG = ConformanceConfig(waivers=frozenset({"usage-formula", "null-page-free"}))
"""The page-level run: the ``"esurge"`` policy, the active profile's budget, and the departures
already known declared: usage counts the null page (Q26), and a free of the null page is
accepted (the first thing a run without the waiver reports; Q6's unchecked count, on page 0)."""
