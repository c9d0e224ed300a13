"""LoRA identity in the keys: the real hasher and manager checked against the spec, exhaustively.

The spec's key of a page is its content, and a content covers the request's LoRA identity
(`verikv.spec.manager.lora_identity`: ``(name, path)`` for a named adapter, the id alone
otherwise). So, for requests with equal tokens and salt, keys are equal exactly when the
identities are: re-pointing a name at other weights changes every key, a name without a path
is another identity, and an instance's id number does not change a named adapter's keys.

``keys:lora-identity`` checks the implementation against that statement for every pair of a
set of identities (none, two ids, a bare name, a name at two paths, another name at the same
path, a named adapter with an id) and two prompts: each page key the real `PageHasher` gives
is equal for both requests exactly when the spec's contents are (the key renaming stays
injective both ways), and a real `CacheManager` that cached the first request's prompt gives
the second the spec's hit length (a hit across identities would serve KV computed with other
weights: INV-HIT-SAFE). Mutants of the key (the path left out, the id kept for a named
adapter) and of the spec (the path left out) are shown to be caught.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from verikv.proofs.runner.registry import Check, Mutant, Outcome
from verikv.spec import manager as spec

PAGE = 2
PROMPTS: tuple[tuple[int, ...], ...] = ((0, 1, 2, 3, 4), (0, 1, 2, 3, 4, 5, 6))
IDENTITIES: tuple[dict[str, Any], ...] = (
    {}, {"lora_id": 7}, {"lora_id": 8}, {"lora_name": "sql"},
    {"lora_name": "sql", "lora_path": "/adapters/sql-v1"}, {"lora_name": "sql", "lora_path": "/adapters/sql-v2"},
    {"lora_name": "chat", "lora_path": "/adapters/sql-v1"},
    {"lora_name": "sql", "lora_path": "/adapters/sql-v1", "lora_id": 7},
)
NAME = f"keys:lora-identity:identities={len(IDENTITIES)},prompts={len(PROMPTS)} exhaustive"
CONFIG = spec.ManagerConfig((spec.GroupLayout("full", PAGE),), 12, 16)


def _views() -> Iterator[tuple[spec.RequestView, spec.RequestView]]:
    for a, b in itertools.product(IDENTITIES, repeat=2):
        for pa, pb in itertools.product(PROMPTS, repeat=2):
            yield spec.RequestView("a", pa, **a), spec.RequestView("b", pb, **b)


def _key_failure(a: spec.RequestView, b: spec.RequestView) -> str | None:
    """Where the real hasher's keys of ``a`` and ``b`` disagree with the spec's contents."""
    from verikv.hashing import PageHasher
    from verikv.request import Request

    hasher = PageHasher(seed=0)
    ka, kb = (hasher.hash_request(Request(v.request_id, v.tokens, lora_id=v.lora_id, lora_name=v.lora_name,
                                          lora_path=v.lora_path), PAGE) for v in (a, b))
    for i, (x, y) in enumerate(zip(ka, kb)):
        same_content = spec.content_of(a, (i + 1) * PAGE, PAGE) == spec.content_of(b, (i + 1) * PAGE, PAGE)
        if (x == y) != same_content:
            return f"page {i}: keys {'equal' if x == y else 'differ'} but the spec's contents " \
                   f"{'are equal' if same_content else 'differ'} ({a.lora_id, a.lora_name, a.lora_path} vs " \
                   f"{b.lora_id, b.lora_name, b.lora_path})"
    return None


def _hit_failure(a: spec.RequestView, b: spec.RequestView) -> str | None:
    """Cache ``a``'s prompt in a real manager and in the spec, free it, look ``b`` up."""
    from verikv.testing.adapter import CacheManagerAdapter

    adapter = CacheManagerAdapter(CONFIG)
    s, _ = spec.allocate_slots(spec.init(CONFIG), a, a.num_tokens)
    s = spec.free_request(s, a.request_id)
    first = adapter.new_request(a)
    adapter.allocate(first, a.num_tokens, 0, None, 0, False)
    adapter.free(first)
    want = spec.lookup(s, b).num_tokens
    got = adapter.lookup(adapter.new_request(b))[1]
    if got != want:
        return f"hit of {b.lora_id, b.lora_name, b.lora_path} after {a.lora_id, a.lora_name, a.lora_path}: " \
               f"{got} tokens, spec {want}"
    return None


def run() -> Outcome:
    start, pairs = time.perf_counter(), 0
    for a, b in _views():
        pairs += 1
        failure = _key_failure(a, b) or _hit_failure(a, b)
        if failure is not None:
            return Outcome("failed", f"INV-HIT-SAFE: {failure}")
    return Outcome("passed", f"exhaustive: {pairs} request pairs ({time.perf_counter() - start:.1f} s)")


def checks() -> list[Check]:
    return [Check(NAME, "refinement", "INV-HIT-SAFE", "hashing.hash_request+manager.lookup",
                  f"identities={len(IDENTITIES)},prompts={len(PROMPTS)},page={PAGE}", run)]


# --- mutants ------------------------------------------------------------------------------------

def _with_patched(module: Any, attribute: str, make: Callable[[Any], Any]) -> list[str]:
    """Run the check with ``module.attribute`` replaced by ``make(original)``; failed checks."""
    original = getattr(module, attribute)
    setattr(module, attribute, make(original))
    spec.forget_memoized_contents()
    try:
        return [] if run().ok else [f"{NAME}: INV-HIT-SAFE"]
    finally:
        setattr(module, attribute, original)
        spec.forget_memoized_contents()


def _key_ignores_path(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """impl: the LoRA extra key of a named adapter leaves the path out (re-pointing a name at
    other weights keeps the keys: a hit serves KV computed with the old weights)."""
    def lora_key(request: Any) -> Any:
        key = original(request)
        return key[:2] if key is not None else None
    return lora_key


def _key_keeps_id(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """impl: a named adapter's key also covers the instance's id number (equal weights under
    two ids miss each other's pages)."""
    def lora_key(request: Any) -> Any:
        key = original(request)
        lora_id = getattr(request, "lora_id", None)
        return key if key is None or lora_id is None or (len(key) == 2 and type(key[1]) is int) else (*key, lora_id)
    return lora_key


def _spec_ignores_path(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """spec: the LoRA identity of a named adapter is its name alone (the spec then forbids the
    key difference the correct implementation makes)."""
    def identity(req: spec.RequestView) -> Any:
        return original(replace(req, lora_path=None))
    return identity


def mutants() -> list[Mutant]:
    import verikv.hashing as hashing

    table: tuple[tuple[str, str, Any, str, Callable[[Any], Any]], ...] = (
        ("impl:lora_key_ignores_path", "impl", hashing, "_lora_key", _key_ignores_path),
        ("impl:lora_key_keeps_id", "impl", hashing, "_lora_key", _key_keeps_id),
        ("spec:lora-identity-ignores-path", "spec", spec, "lora_identity", _spec_ignores_path),
    )
    return [Mutant(name, kind, "INV-HIT-SAFE", " ".join((make.__doc__ or "").split()) + f" [{NAME}]",
                   lambda module=module, attribute=attribute, make=make: _with_patched(module, attribute, make))  # type: ignore[misc]
            for name, kind, module, attribute, make in table]
