"""CrossHair refinement contracts on the manager's transitions, through the abstraction function.

Each driver below has one condition, ``post: __return__``: it builds a real `CacheManager` (public
API only, via `verikv.testing.adapter.CacheManagerAdapter`) and the spec's `ManagerState` for
the same small layout, optionally warms the prefix cache with a finished request, then applies
one transition to both with symbolic arguments and compares (a) the results and (b) the
abstraction of the manager (`verikv.spec.abstraction.abstract_manager`) with the spec's
successor. The implementation's keys are digests and the spec's are contents, so states are
compared up to a key renaming that must be a bijection (`same_up_to_key_renaming`).

Domain (the bound every check states, `DOMAIN`): one full-attention group, page size 2,
`max_model_len` 5 (a 4-token prompt plus one token reaches it; its last page is partly beyond
it), pools of 3..4 pages (full-pool failures and evictions of the warm-up's cached pages occur),
prompts of 1..4 tokens over {0, 1}, a finished warm-up request (0, 1, 0, 1) or none. Symbolic
values are mapped into the domain by branching (`_pick`), as in `verikv.proofs.crosshair.targets`, so the
search enumerates the domain path by path (the prompt's length is chosen before its tokens, so
unused tokens add no paths). The domain is small enough for CrossHair to exhaust: each check
runs without an iteration cap and requires "Confirmed over all paths" (anything less is
reported "unknown", a failure), 1-5 CPU s per check against a 60 CPU s cap. Since the manager
runs concretely on each input (`untraced`), such a run is bounded-exhaustive testing of the
domain, not symbolic reasoning about the manager: it is reported "passed", with the domain. The hash scheme is an ideal
(injective) one, `IdealHash`: hashlib is opaque to CrossHair; the real schemes are covered by
the exhaustive refinement checks (``refine:*``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable
from typing import Any

from verikv.proofs.crosshair.common import Budget, run_check, untraced
from verikv.proofs.crosshair.targets import Mismatch
from verikv.proofs.runner.registry import Check, Mutant, Outcome
from verikv.spec import manager as spec
from verikv.spec.abstraction import abstract_manager

PAGE = 2
MAX_MODEL_LEN = 5
MIN_PAGES, MAX_PAGES = 3, 4
MAX_PROMPT = 4
WARM_UP = (0, 1, 0, 1)
DOMAIN = (f"1 full group, page size {PAGE}, max_model_len {MAX_MODEL_LEN}, N={MIN_PAGES}..{MAX_PAGES}, "
          f"prompts of 1..{MAX_PROMPT} tokens over {{0,1}}, a finished warm-up request {WARM_UP} or none")


def _pick(value: int, lo: int, hi: int) -> int:
    """``value`` mapped into ``[lo, hi]`` by branching (each branch a concrete int)."""
    for candidate in range(lo, hi):
        if value <= candidate:
            return candidate
    return hi


def _bit(value: int) -> int:
    return 0 if value <= 0 else 1


class IdealHash:
    """A ``hash_scheme`` callable: each distinct hashed message gets the next number (injective,
    so keys are equal exactly when contents are: the spec's ideal-hash assumption made literal).
    Numbers start at 1, apart from the chain root."""

    def __init__(self) -> None:
        self.numbers: dict[Any, int] = {}

    def __call__(self, message: Any) -> int:
        return self.numbers.setdefault(message, len(self.numbers) + 1)


def colliding_hash() -> Callable[[Any], int]:
    """A hash scheme under which every message collides: pages of other contents hit."""
    return lambda message: 7


COLLIDING_ENV = "VERIKV_CROSSHAIR_COLLIDING_HASH"
"""Set (to anything) in a CrossHair run's environment: the managers use `colliding_hash` (the
mutant `crosshair:manager-colliding-hash`, which the exhaustive checks must catch)."""
HASH_SCHEME: Callable[[], Callable[[Any], int]] = colliding_hash if os.environ.get(COLLIDING_ENV) else IdealHash
"""Makes each manager's hash scheme."""


class _Pair:
    """The manager (through its adapter) and the spec state, driven side by side."""

    def __init__(self, pages: int) -> None:
        from verikv.testing.adapter import CacheManagerAdapter, build_cache_manager

        self.config = spec.ManagerConfig((spec.GroupLayout("full", PAGE),), pages, MAX_MODEL_LEN)
        # hashlib is opaque to CrossHair (it takes concrete bytes only): an ideal hash, and a
        # fixed seed (the default, os.urandom, would be symbolic)
        scheme = HASH_SCHEME()
        self.impl = CacheManagerAdapter(self.config, lambda config: build_cache_manager(
            config, hash_scheme=scheme, hash_seed=0))
        self.spec = spec.init(self.config)
        self.requests: dict[str, Any] = {}

    def request(self, view: spec.RequestView) -> Any:
        native = self.requests.setdefault(view.request_id, self.impl.new_request(view))
        native.num_computed_tokens = view.num_computed_tokens
        return native

    def warm_up(self, tokens: tuple[int, ...]) -> None:
        """A request computes ``tokens`` (all cached) and finishes: its pages stay hit-able."""
        view = spec.RequestView("warm", tokens)
        native = self.request(view)
        self.impl.allocate(native, len(tokens), 0, None, 0, False)
        self.spec, _ = spec.allocate_slots(self.spec, view, len(tokens))
        self.impl.free(native)
        self.spec = spec.free_request(self.spec, "warm")

    def agrees(self, what: str) -> bool:
        """The manager's abstraction equals the spec state up to a bijective key renaming."""
        got = abstract_manager(self.impl.abstraction())
        if not same_up_to_key_renaming(got, self.spec):
            raise Mismatch(f"{what}: manager {got} != spec {self.spec}")
        return True


def same_up_to_key_renaming(got: spec.ManagerState, want: spec.ManagerState) -> bool:
    """``got`` equals ``want`` once each of got's keys is renamed to the key its pages have in
    ``want``; the renaming must be a bijection (one digest per content and back)."""
    rename: dict[Hashable, Hashable] = {}
    for g, w in zip(got.pool.key_of, want.pool.key_of):
        if (g is None) != (w is None) or (g is not None and rename.setdefault(g, w) != w):
            return False
    if len(set(rename.values())) != len(rename):
        return False
    return abstract_manager_renamed(got, rename) == want


def abstract_manager_renamed(s: spec.ManagerState, rename: dict[Hashable, Hashable]) -> spec.ManagerState:
    """``s`` with its pool keys renamed (keys not in ``rename`` kept)."""
    from dataclasses import replace

    pool = replace(s.pool, key_of=tuple(None if k is None else rename.get(k, k) for k in s.pool.key_of),
                   cached=frozenset((rename.get(k, k), ids) for k, ids in s.pool.cached))
    return replace(s, pool=pool)


def _prompt(length: int, tokens: tuple[int, ...]) -> tuple[int, ...]:
    """The prompt's length first, then only the tokens it uses: a token past the length would
    double the paths without changing the run."""
    return tuple(_bit(t) for t in tokens[:_pick(length, 1, MAX_PROMPT)])


def _pair(pages: int, warm: bool) -> _Pair:
    pair = _Pair(pages)
    if warm:
        pair.warm_up(WARM_UP)
    return pair


def _scenario(pages: int, warm: bool, length: int, tokens: tuple[int, ...]) -> tuple[int, bool, tuple[int, ...]]:
    """The symbolic inputs realised into the domain (each choice a branch CrossHair explores)."""
    return _pick(pages, MIN_PAGES, MAX_PAGES), bool(warm), _prompt(length, tokens)


# --- drivers (CrossHair targets) ------------------------------------------------------------

def manager_lookup(pages: int, warm: bool, length: int, t0: int, t1: int, t2: int, t3: int) -> bool:
    """Lookup (`get_computed_pages`) returns the spec's hit, and changes nothing.

    post: __return__
    """
    n, hot, prompt = _scenario(pages, warm, length, (t0, t1, t2, t3))
    with untraced():
        from verikv.testing.adapter import page_ids_of

        pair = _pair(n, hot)
        view = spec.RequestView("r", prompt)
        hit, num_tokens = pair.impl.lookup(pair.request(view))
        want = spec.lookup(pair.spec, view)
        if (page_ids_of(hit), num_tokens) != (want.pages, want.num_tokens):
            raise Mismatch(f"lookup: manager {(page_ids_of(hit), num_tokens)} != spec {want}")
        return pair.agrees("lookup")


def manager_allocate_slots(pages: int, warm: bool, length: int, t0: int, t1: int, t2: int, t3: int, use_hit: bool,
                           extra: int) -> bool:
    """allocate_slots (with the lookup's hit or without, for the prompt and possibly one token
    more) returns the spec's new pages and leaves the spec's successor (all or nothing).

    post: __return__
    """
    n, hot, prompt = _scenario(pages, warm, length, (t0, t1, t2, t3))
    with_hit, more = bool(use_hit), _pick(extra, 0, 1)
    with untraced():
        pair = _pair(n, hot)
        view = spec.RequestView("r", prompt)
        native = pair.request(view)
        hit, num_hit = pair.impl.lookup(native) if with_hit else (None, 0)
        want_hit = spec.lookup(pair.spec, view).pages if with_hit else None
        num_new = min(view.num_tokens - num_hit + more, MAX_MODEL_LEN - num_hit)
        got = pair.impl.allocate(native, num_new, num_hit, hit, 0, False)
        pair.spec, want = spec.allocate_slots(pair.spec, view, num_new, num_hit, want_hit)
        _same_new_pages(got, want, "allocate_slots")
        return pair.agrees("allocate_slots")


def _same_new_pages(got: Any, want: Any, what: str) -> None:
    from verikv.testing.adapter import page_ids_of

    ids = None if got is None else page_ids_of(got)
    if ids != want:
        raise Mismatch(f"{what}: manager returned {ids}, spec {want}")


def _admitted(pages: int, warm: bool, prompt: tuple[int, ...],
              delay: bool) -> tuple[_Pair, spec.RequestView, bool]:
    """A pair where request "r" was admitted with its whole prompt (``delay``: uncached)."""
    pair = _pair(pages, warm)
    view = spec.RequestView("r", prompt)
    got = pair.impl.allocate(pair.request(view), view.num_tokens, 0, None, 0, delay)
    pair.spec, want = spec.allocate_slots(pair.spec, view, view.num_tokens, delay_cache_pages=delay)
    _same_new_pages(got, want, "admission")
    return pair, spec.RequestView("r", view.tokens, view.num_tokens), want is not None


def manager_cache_pages(pages: int, warm: bool, length: int, t0: int, t1: int, t2: int, t3: int,
                        upto: int) -> bool:
    """cache_pages after a delayed-caching admission keys exactly the spec's pages.

    post: __return__
    """
    n, hot, prompt = _scenario(pages, warm, length, (t0, t1, t2, t3))
    count = _pick(upto, 0, len(prompt))
    with untraced():
        pair, view, admitted = _admitted(n, hot, prompt, delay=True)
        if admitted:
            pair.impl.cache(pair.request(view), count)
            pair.spec = spec.cache_pages(pair.spec, view, count)
        return pair.agrees("cache_pages")


def manager_free(pages: int, warm: bool, length: int, t0: int, t1: int, t2: int, t3: int) -> bool:
    """free releases the request's pages in the spec's order (reverse, chain tail first).

    post: __return__
    """
    n, hot, prompt = _scenario(pages, warm, length, (t0, t1, t2, t3))
    with untraced():
        pair, view, _ = _admitted(n, hot, prompt, delay=False)
        pair.impl.free(pair.request(view))
        pair.spec = spec.free_request(pair.spec, "r")
        return pair.agrees("free")


def manager_decode_step(pages: int, warm: bool, length: int, t0: int, t1: int, t2: int, t3: int,
                        token: int) -> bool:
    """A decode step (one new token, the plain call shape that may take the fast path) after
    the prompt was admitted: the spec's new pages and successor.

    post: __return__
    """
    n, hot, prompt = _scenario(pages, warm, length, (t0, t1, t2, t3))
    new_token = _bit(token)
    with untraced():
        pair, view, admitted = _admitted(n, hot, prompt, delay=False)
        if admitted and view.num_tokens < MAX_MODEL_LEN:
            native = pair.request(view)
            native.append_output_token_ids([new_token])
            grown = spec.RequestView("r", view.tokens + (new_token,), view.num_tokens)
            got = pair.impl.manager.allocate_slots(native, 1)
            pair.spec, want = spec.allocate_slots(pair.spec, grown, 1)
            _same_new_pages(got, want, "decode step")
        return pair.agrees("decode step")


TRANSITIONS = {
    "manager_lookup": "manager.lookup",
    "manager_allocate_slots": "manager.allocate_slots",
    "manager_cache_pages": "manager.cache_pages",
    "manager_free": "manager.free_request",
    "manager_decode_step": "manager.allocate_slots (decode)",
}
BUDGET = Budget(per_condition=60, iterations=None, per_path=10)
"""No iteration cap: the search runs until every path is explored (or the CPU cap, then "unknown")."""


def run(function: str, env: dict[str, str] | None = None) -> Outcome:
    """One driver, every path: bounded-exhaustive over `DOMAIN` ("passed"), as the manager runs
    concretely on each input the branching realises."""
    return run_check((f"{__name__}.{function}",), BUDGET, require_confirmed=True, env=env, enumerated=DOMAIN)


def checks() -> list[Check]:
    """One CrossHair refinement check per manager transition."""
    return [Check(f"crosshair:{function}", "crosshair", "REFINEMENT", transition,
                  f"bounded-exhaustive: {DOMAIN}; {BUDGET.describe()}",
                  lambda function=function: run(function))  # type: ignore[misc]
            for function, transition in TRANSITIONS.items()]


def _detect_colliding_hash() -> list[str]:
    """The manager checks that fail when every key collides (the lookup-based ones must)."""
    return [f"crosshair:{function}" for function in ("manager_lookup", "manager_allocate_slots")
            if run(function, {COLLIDING_ENV: "1"}).status == "failed"]


def mutants() -> list[Mutant]:
    """A hash scheme whose keys all collide: the exhaustive manager checks must find the false hit."""
    return [Mutant("crosshair:manager-colliding-hash", "impl", "INV-HIT-SAFE", colliding_hash.__doc__ or "",
                   _detect_colliding_hash)]
