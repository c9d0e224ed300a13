"""Per-page costs of a long prompt, each next to its floor measured in the same run.

For each prompt size (default 870 pages, ~14k tokens, and 6,000 pages, ~96k tokens) and each
hash scheme, ns per page of:

- keys: `PageHasher.hash_request` over the prompt's full pages (skipped if the API is gone);
- prefix path, miss / hit: `CacheManager.get_computed_pages` on a fresh `Request` whose pages
  are not cached (hashing every page, one probe) / are all cached (hashing, walking every page);
- lookup per hit page: (hit - miss) / pages, the walk alone;
- allocate: `allocate_slots` of the whole prompt with ``delay_cache_pages=True`` (no caching);
  allocate + cache: the same with caching on (the keys were computed by a lookup before);
- free: `CacheManager.free` of those pages (double-free detection included), and
  `PagePool.free_page_ids` alone, timed exactly as EasyDeL's `PagePool.free_pages` (a fresh pool,
  all pages held once, freed in reverse);

and ns per token of `Request` creation. Floors: one `hashlib.sha256` call and one
`xxhash.xxh3_128_intdigest` call per page over the page's 128 packed token bytes,
`array('q', tokens)` per token (sampled alternately with `Request` creation, over the same
tokens; each object is dropped after its clock read), and EasyDeL's per-page free (its
`PagePool.free_pages`, and its `CacheManager.free` for reference; from the anchors venv,
skipped elsewhere). The ratios are printed beside their targets (docs/performance.md). Every
timed region excludes its setup; the figure is the median over ``--repeats`` runs. Nothing here
asserts a time.

    python -m benchmarks.per_page [--pages 870,6000] [--repeats 5] [--clock wall] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import sys
from array import array
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from benchmarks import micro
from benchmarks.measure import clock_ns, use_clock
from benchmarks.peers import DEFAULT_ANCHORS, load_adapters
from benchmarks.report import print_table
from benchmarks.workload import make_manager

PAGE_SIZE = micro.PAGE_SIZE
SCHEMES = ("sha256", "xxh3_128", "builtin")
MAX_MODEL_LEN = 131072  # the long-context profile's
# (row, floor, target ratio): the per-page targets; the builtin scheme is held to the sha256 floor
PREFIX_TARGETS = {"sha256": ("sha256 call", 2.0), "xxh3_128": ("xxh3_128 call", 3.0), "builtin": ("sha256 call", 2.0)}
FREE_TARGET = 1.2
REQUEST_TARGET = 1.5
ARRAY_FLOOR = "array('q', tokens) per token"
OPERATIONS = ("keys (hash_request)", "prefix path, miss", "prefix path, hit", "lookup per hit page (hit - miss)",
              "allocate (no caching)", "allocate + cache", "free", "free (PagePool.free_page_ids)")


def median_ns(once: Callable[[], int], repeats: int) -> float:
    """Median of `repeats` calls of `once()`, which sets up, times its own region and returns
    the nanoseconds of that region."""
    samples = []
    for _ in range(repeats):
        gc.collect()
        samples.append(once())
    return float(np.median(samples))


def timed_ns(fn: Callable[[], object]) -> int:
    """Nanoseconds of one `fn()` on the selected clock."""
    t = clock_ns()
    fn()
    return clock_ns() - t


def prompt_tokens(num_pages: int, seed: int) -> list[int]:
    """A prompt of `num_pages` full pages plus one token (so every page can be a hit)."""
    tokens: list[int] = np.random.default_rng(seed).integers(0, 32000, size=num_pages * PAGE_SIZE + 1).tolist()
    return tokens


def floors(num_pages: int, repeats: int) -> dict[str, float]:
    """ns per page of one bare digest call over each page's packed tokens."""
    tokens = prompt_tokens(num_pages, 0)
    pages = [array("q", tokens[i * PAGE_SIZE:(i + 1) * PAGE_SIZE]).tobytes() for i in range(num_pages)]
    return {f"{scheme} call": median_ns(partial(timed_ns, micro._calls(pages, micro._raw_digest(scheme))), repeats)
            / num_pages for scheme in ("sha256", "xxh3_128")}


def created_ns(make: Callable[[], object]) -> int:
    """Nanoseconds of creating one object with `make()`; the object is dropped after the clock
    is read (its deallocation is not part of creating it)."""
    t = clock_ns()
    made = make()
    ns = clock_ns() - t
    del made
    return ns


def request_cost(num_pages: int, repeats: int) -> tuple[float, float]:
    """ns per token of `verikv.Request(request_id, tokens)` and of its floor, `array('q', tokens)`,
    over the same token list, their samples alternated (each after a `gc.collect()`), so that
    both see the same allocator and cache state: the median of each."""
    from verikv.request import Request

    tokens = prompt_tokens(num_pages, 0)
    request, floor = [], []
    for _ in range(repeats):
        gc.collect()
        floor.append(created_ns(lambda: array("q", tokens)))
        gc.collect()
        request.append(created_ns(lambda: Request("per-token", tokens)))
    return float(np.median(request)) / len(tokens), float(np.median(floor)) / len(tokens)


def scheme_costs(scheme: str, num_pages: int, repeats: int) -> dict[str, float]:
    """ns per page of each operation in `OPERATIONS` for one hash scheme (see the module doc)."""
    from verikv import hashing
    from verikv.request import Request

    # every repeat gets fresh prompts, so no run finds pages an earlier one cached
    pool_pages = num_pages * (2 * repeats + 2) + 64
    manager = make_manager(pool_pages, max_model_len=MAX_MODEL_LEN, hash_scheme=scheme)
    seeds = iter(range(1000, 1000 + 4 * repeats + 1))
    cached_tokens = prompt_tokens(num_pages, next(seeds))
    cached = Request("cached", cached_tokens)
    manager.allocate_slots(cached, len(cached_tokens))
    manager.free(cached)  # its pages stay cached (evictable) for the hit runs
    out: dict[str, float] = {}
    if hasattr(hashing, "PageHasher") and hasattr(hashing.PageHasher, "hash_request"):
        hasher = hashing.PageHasher(scheme, seed=0)
        out["keys (hash_request)"] = median_ns(lambda: timed_ns(lambda: hasher.hash_request(cached, PAGE_SIZE)),
                                               repeats)

    def lookup(tokens: list[int]) -> int:
        req = Request("lookup", tokens)
        ns = timed_ns(lambda: manager.get_computed_pages(req))
        manager.free_page_hashes(req)
        return ns

    out["prefix path, miss"] = median_ns(lambda: lookup(prompt_tokens(num_pages, next(seeds))), repeats)
    out["prefix path, hit"] = median_ns(lambda: lookup(cached_tokens), repeats)
    out["lookup per hit page (hit - miss)"] = out["prefix path, hit"] - out["prefix path, miss"]
    frees: list[int] = []

    def allocate(delay: bool) -> int:
        req = Request("allocate", prompt_tokens(num_pages, next(seeds)))
        if not delay:
            manager.get_computed_pages(req)  # the keys, computed outside the timed region
        ns = timed_ns(lambda: manager.allocate_slots(req, req.num_tokens, delay_cache_pages=delay))
        frees.append(timed_ns(lambda: manager.free(req)))
        manager.free_page_hashes(req)
        return ns

    out["allocate (no caching)"] = median_ns(lambda: allocate(True), repeats)
    out["allocate + cache"] = median_ns(lambda: allocate(False), repeats)
    out["free"] = float(np.median(frees))
    out["free (PagePool.free_page_ids)"] = median_ns(partial(pool_free_ns, num_pages), repeats)
    return {name: ns / num_pages for name, ns in out.items()}


def pool_free_ns(num_pages: int) -> int:
    """ns of verikv's `PagePool.free_page_ids` freeing `num_pages` held pages in reverse order, set
    up as `easydel_free` sets up EasyDeL's pool (a fresh pool, every page held once)."""
    from verikv.page_pool import PagePool

    pool = PagePool(num_pages + 1)
    ids = pool.get_new_page_ids(num_pages)
    ids.reverse()
    return timed_ns(lambda: pool.free_page_ids(ids))


def easydel_free(adapters: ModuleType, num_pages: int, repeats: int) -> dict[str, float]:
    """ns per page of EasyDeL freeing `num_pages` held pages: its `PagePool.free_pages` (the
    floor) and its `CacheManager.free` (the same call verikv's row times)."""
    pool_module = importlib.import_module("easydel.inference.esurge.core.page_pool")

    def pool_free() -> int:
        pool = pool_module.PagePool(num_pages + 1, True)
        pages = pool.get_new_pages(num_pages)
        return timed_ns(lambda: pool.free_pages(reversed(pages)))

    def manager_free() -> int:
        ad = adapters.make("easydel", num_pages + 1, PAGE_SIZE, max_model_len=MAX_MODEL_LEN)
        req = ad.new_request("free", prompt_tokens(num_pages, 7)[:-1])
        ad.allocate(req, num_pages * PAGE_SIZE)
        return timed_ns(lambda: ad.m.free(req))

    return {"EasyDeL PagePool.free_pages": median_ns(pool_free, repeats) / num_pages,
            "EasyDeL CacheManager.free": median_ns(manager_free, repeats) / num_pages}


def measure(page_counts: Sequence[int], schemes: Sequence[str], repeats: int, anchors: Path | None) -> dict[str, Any]:
    """Every cost and floor per prompt size, and the ratios against the targets."""
    adapters = load_adapters(anchors, ("easydel",)) if anchors is not None else None
    results: dict[str, Any] = {"easydel": adapters is not None}
    for n in page_counts:
        floor = floors(n, repeats)
        if adapters is not None:
            floor.update(easydel_free(adapters, n, repeats))
        costs = {s: scheme_costs(s, n, repeats) for s in schemes}
        request_ns, floor[ARRAY_FLOOR] = request_cost(n, repeats)
        ratios: dict[str, dict[str, float]] = {}
        for s, c in costs.items():
            floor_name, _ = PREFIX_TARGETS[s]
            ratios[s] = {"prefix hit / floor": c["prefix path, hit"] / floor[floor_name],
                         "prefix miss / floor": c["prefix path, miss"] / floor[floor_name]}
            if "keys (hash_request)" in c:
                ratios[s]["keys / floor"] = c["keys (hash_request)"] / floor[floor_name]
            if "EasyDeL PagePool.free_pages" in floor:
                ratios[s]["pool free / EasyDeL pool"] = (c["free (PagePool.free_page_ids)"]
                                                         / floor["EasyDeL PagePool.free_pages"])
                ratios[s]["free / EasyDeL manager"] = c["free"] / floor["EasyDeL CacheManager.free"]
        results[str(n)] = {"floors_ns": floor, "ns_per_page": costs, "request_ns_per_token": request_ns,
                           "request_ratio": request_ns / floor[ARRAY_FLOOR], "ratios": ratios}
    return results


def print_results(results: dict[str, Any], schemes: Sequence[str]) -> None:
    """One table per prompt size: costs per scheme, floors, ratios with their targets."""
    for n, r in results.items():
        if n == "easydel":
            continue
        costs, floor, ratios = r["ns_per_page"], r["floors_ns"], r["ratios"]
        rows: list[list[str]] = [[op, *(f"{costs[s][op]:,.0f}" if op in costs[s] else "-" for s in schemes)]
                                 for op in OPERATIONS]
        rows += [[f"floor: {name}", *(f"{v:,.1f}",) * len(schemes)] for name, v in floor.items() if name != ARRAY_FLOOR]
        rows.append(["prefix hit / floor (target)", *(
            f"{ratios[s]['prefix hit / floor']:.1f}x vs {PREFIX_TARGETS[s][0]} (<= {PREFIX_TARGETS[s][1]:g}x)"
            for s in schemes)])
        rows.append(["prefix miss / floor", *(f"{ratios[s]['prefix miss / floor']:.1f}x" for s in schemes)])
        rows.append(["keys alone / floor", *(f"{ratios[s]['keys / floor']:.1f}x" if "keys / floor" in ratios[s]
                                             else "-" for s in schemes)])
        if results["easydel"]:
            rows.append([f"pool free / EasyDeL pool (<= {FREE_TARGET:g}x)",
                         *(f"{ratios[s]['pool free / EasyDeL pool']:.2f}x" for s in schemes)])
            rows.append([f"manager free / EasyDeL manager (<= {FREE_TARGET:g}x)",
                         *(f"{ratios[s]['free / EasyDeL manager']:.2f}x" for s in schemes)])
        pages = int(n)
        print_table(f"per-page costs, ns per page, prompt of {pages:,} pages ({pages * PAGE_SIZE + 1:,} tokens), "
                    "medians",
                    ["", *schemes], rows)
        print(f"Request creation: {r['request_ns_per_token']:.1f} ns/token; array('q', tokens): "
              f"{floor[ARRAY_FLOOR]:.1f} ns/token; "
              f"ratio {r['request_ratio']:.2f}x (target <= {REQUEST_TARGET:g}x)")
    if not results["easydel"]:
        print("EasyDeL free floor: skipped (the anchors harness or easydel is not importable here)")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.per_page", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pages", default="870,6000", help="prompt sizes in pages (comma-separated)")
    p.add_argument("--schemes", default=",".join(SCHEMES))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--clock", default="wall", choices=("cpu", "wall"), help="wall: time.perf_counter_ns")
    p.add_argument("--anchors", type=Path, default=DEFAULT_ANCHORS, help="the anchors harness (for EasyDeL's floor)")
    p.add_argument("--json", type=Path)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    use_clock(a.clock)
    schemes = [s for s in a.schemes.split(",") if s]
    results = measure([int(x) for x in a.pages.split(",") if x], schemes, a.repeats, a.anchors)
    print_results(results, schemes)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
