"""A scheduler-shaped Hypothesis state machine that checks a cache manager against the spec.

`manager_machine(layout, make_manager)` returns a `RuleBasedStateMachine` class that drives an
implementation (built by ``make_manager(layout.config)``; `verikv.CacheManager` by default)
and the spec (`verikv.spec.manager`) side by side, the way an eSurge/vLLM scheduler does:
requests arrive, are admitted with a prefix lookup, prefill in chunks, decode (with
speculative lookahead slots), are preempted, finish or are aborted; the prefix cache is reset;
bad inputs are thrown at every entry point.

After every step it checks, and reports by name (`ConformanceFailure.names`):

- ``REFINEMENT``: `abstract_manager(impl)` equals the spec state, with the implementation's
  key digests renamed to the spec's contents (the renaming is learnt page by page and must
  stay injective: two digests for one content is a refinement failure, one digest for two
  contents is an ``INV-HIT-SAFE`` failure, since a lookup could then return foreign KV);
  every return value and every error agrees;
- every pool invariant and ``INV-REF-COUNT`` on the implementation's abstraction and on the
  spec state, ``INV-HIT-SAFE`` (state form) on the spec state, ``INV-USAGE`` on the reported
  usage;
- ``INV-HIT-SAFE`` and ``INV-HIT-SHAPE`` on what the implementation's lookup really returned,
  judged by the spec's ghost page contents; ``INV-ATOMIC`` when an allocation returns None or
  a call raises (the implementation's abstract state must be unchanged).

Small token alphabets and a handful of prompts built from shared blocks make prefix hits,
evictions and full-pool paths frequent. The implementation is reached only through eSurge's
method names and the read-only protocol of `verikv.spec.abstraction`, so another engine's
manager can be plugged in with a thin adapter.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, run_state_machine_as_test

from verikv.errors import InvalidArgumentError
from verikv.spec import invariants as inv
from verikv.spec import manager as spec
from verikv.spec.abstraction import abstract_manager
from verikv.spec.pool import PreconditionError
from verikv.spec.pool import usage as pool_usage

_BLOCKS = ((0, 1, 2, 0), (1, 1, 0, 2), (2, 0, 1, 1))
PROMPTS: tuple[tuple[int, ...], ...] = (
    _BLOCKS[0] + _BLOCKS[1],
    _BLOCKS[0] + _BLOCKS[1] + (2, 2),
    _BLOCKS[0] + _BLOCKS[2] + _BLOCKS[1],
    _BLOCKS[1] + _BLOCKS[0],
    _BLOCKS[0] + _BLOCKS[0] + _BLOCKS[1] + (0,),
    _BLOCKS[0][:3],
    _BLOCKS[1] + _BLOCKS[0] + _BLOCKS[0][:1],
)
"""Prompts that share page-aligned blocks (page size 4), so prefixes hit across requests."""

MM_CHOICES: tuple[tuple[tuple[str, int, int], ...], ...] = ((),) * 6 + ((("img-a", 2, 3),), (("img-b", 2, 3),))
"""Mostly text-only; sometimes an image over positions 2..4 (same tokens, different KV)."""
MAX_LIVE_REQUESTS = 5
BAD_CALLS: tuple[str, ...] = ("zero", "negative", "too-long", "lookahead", "dp-size", "hits-with-pages",
                              "cache-too-far", "cache-no-pages", "page-ids")
"""Invalid calls the machine makes: token counts, DP size, hits for a request holding pages,
caching past the request's tokens or without pages, page ids of a request without pages."""


@dataclass(frozen=True)
class Layout:
    """A named manager configuration the machine runs against."""

    name: str
    config: spec.ManagerConfig


def _layout(name: str, *groups: spec.GroupLayout, num_pages: int = 12, max_model_len: int = 20,
            **kw: Any) -> Layout:
    return Layout(name, spec.ManagerConfig(tuple(groups), num_pages, max_model_len, **kw))


FULL = spec.GroupLayout("full", 4)
LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in (
    _layout("full", FULL, num_pages=8),
    _layout("full+sliding(window<=page)", FULL, spec.GroupLayout("sliding", 4, 3), num_pages=9),
    _layout("full+sliding(window>page)", FULL, spec.GroupLayout("sliding", 4, 9)),
    _layout("full+chunked", FULL, spec.GroupLayout("chunked", 4, 8)),
    _layout("full+mamba", FULL, spec.GroupLayout("mamba", 20), num_pages=10),
    _layout("no-caching", FULL, spec.GroupLayout("sliding", 4, 5), enable_caching=False),
    _layout("dp2", FULL, num_pages=12, data_parallel_size=2),
    _layout("full+sliding(eagle)", FULL, spec.GroupLayout("sliding", 4, 6), use_eagle=True),
    _layout("full+sliding(unhashed-first)", FULL, spec.GroupLayout("sliding", 4, 5), free_order="unhashed-first"),
    _layout("no-groups", num_pages=6),
    _layout("full(page 8)+sliding(page 4)", spec.GroupLayout("full", 8), spec.GroupLayout("sliding", 4, 5),
            max_model_len=24),
)}


class ConformanceFailure(AssertionError):
    """The implementation departed from the spec; ``names`` lists the checks that failed."""

    def __init__(self, failures: list[tuple[str, str]]) -> None:
        self.names = sorted({name for name, _ in failures})
        super().__init__("\n".join(f"{name}: {detail}" for name, detail in failures))


def build_cache_manager(config: spec.ManagerConfig) -> Any:
    """A `verikv.CacheManager` for a spec configuration (small made-up layer geometry)."""
    from verikv import (
        CacheGroupSpec,
        CacheManager,
        ChunkedLocalAttentionSpec,
        FullAttentionSpec,
        MambaSpec,
        SlidingWindowSpec,
    )

    def kv_spec(g: spec.GroupLayout) -> Any:
        geometry = dict(page_size=g.page_size, num_kv_heads=1, head_size=8, dtype="float16", use_mla=False)
        if g.kind == "full":
            return FullAttentionSpec(**geometry)
        if g.kind == "sliding":
            return SlidingWindowSpec(**geometry, sliding_window=g.span)
        if g.kind == "chunked":
            return ChunkedLocalAttentionSpec(**geometry, attention_chunk_size=g.span)
        return MambaSpec(page_size=g.page_size, shapes=((4,),), dtype="float32")

    return CacheManager(config.num_pages, [CacheGroupSpec(kv_spec(g)) for g in config.groups],
                        config.max_model_len, enable_caching=config.enable_caching,
                        use_eagle=config.use_eagle, free_order=config.free_order,
                        data_parallel_size=config.data_parallel_size)


def build_request(rid: str, tokens: tuple[int, ...], salt: str | None, lora_id: int | None,
                  mm: tuple[tuple[str, int, int], ...], prompt_logprobs: bool) -> Any:
    """A `verikv.Request` for the machine's draws."""
    from verikv.request import Request

    return Request(rid, tokens, cache_salt=salt, lora_id=lora_id, mm_features=mm, prompt_logprobs=prompt_logprobs)


def view_of(request: Any) -> spec.RequestView:
    """The spec's view of an implementation request (eSurge attribute names)."""
    return spec.RequestView(
        request.request_id, tuple(request.all_token_ids), request.num_computed_tokens,
        request.cache_salt, request.lora_id,
        tuple((f.mm_hash, f.offset, f.length) for f in request.mm_features),
        request.prompt_logprobs, request.is_finished(),
    )


def _ids(pages: Any) -> tuple[tuple[int, ...], ...]:
    """Per-group page ids of a ``CachePages`` result."""
    return tuple(tuple(group) for group in pages.get_page_ids())


def manager_machine(layout: Layout, make_manager: Callable[[spec.ManagerConfig], Any] = build_cache_manager,
                    make_request: Callable[..., Any] = build_request) -> type[RuleBasedStateMachine]:
    """The state machine class for one layout and one implementation factory."""
    config = layout.config
    dp = config.data_parallel_size if config.data_parallel_size > 1 else None
    wrong_dp = next((d for d in range(2, config.num_pages + 1)
                     if config.num_pages % d == 0 and d != config.data_parallel_size), None)
    hints = st.sampled_from((None, 0, 1)) if dp else st.just(None)

    class ManagerMachine(RuleBasedStateMachine):
        """Scheduler-shaped conformance run of one manager against `verikv.spec.manager`."""

        def __init__(self) -> None:
            super().__init__()
            self.impl = make_manager(config)
            self.spec = spec.init(config)
            self.requests: dict[str, Any] = {}
            self.waiting: list[str] = []
            self.running: list[str] = []
            self.next_id = 0
            self.forward: dict[Hashable, Hashable] = {}
            self.backward: dict[Hashable, Hashable] = {}
            self.failures: list[tuple[str, str]] = []

        # ---- checking ------------------------------------------------------------------

        def fail(self, name: str, detail: str) -> None:
            self.failures.append((name, detail))

        def impl_state(self, renamed: bool = True) -> spec.ManagerState:
            rename = (lambda k: self.forward.get(k, ("unmapped", k))) if renamed else None
            return abstract_manager(self.impl, rename)

        def learn_keys(self) -> None:
            """Extend the digest <-> content renaming from pages keyed on both sides."""
            pool = self.impl.page_pool
            for p in range(config.num_pages):
                ki, ks = pool.key_of(p), self.spec.pool.key_of[p]
                if ki is None or ks is None:
                    continue
                if self.forward.setdefault(ki, ks) != ks:
                    self.fail("INV-HIT-SAFE", f"page {p}: one implementation key stands for two contents "
                                              f"({self.forward[ki]!r} and {ks!r})")
                if self.backward.setdefault(ks, ki) != ki:
                    self.fail("REFINEMENT", f"page {p}: two implementation keys for one content {ks!r}")

        def check(self) -> None:
            """Refinement and every invariant; raise `ConformanceFailure` naming what failed."""
            self.learn_keys()
            got = self.impl_state()
            want = self.spec
            for what, a, b in (("config", got.config, want.config), ("ref", got.pool.ref, want.pool.ref),
                               ("free list", got.pool.free, want.pool.free),
                               ("keys", got.pool.key_of, want.pool.key_of),
                               ("cached map", got.pool.cached, want.pool.cached),
                               ("entries", dict(got.entries), dict(want.entries))):
                if a != b:
                    self.fail("REFINEMENT", f"{what}: implementation {a!r} != spec {b!r}")
            for name in inv.violated_manager_invariants(got):
                self.fail(name, "broken in the implementation's abstract state")
            for name in inv.violated_manager_invariants(want, ghost=True):
                self.fail(name, "broken in the spec state (a spec defect)")
            reported = self.impl.usage
            if abs(reported - pool_usage(got.pool)) > 1e-9:
                self.fail("INV-USAGE", f"usage {reported} != 1 - free/(N-1) = {pool_usage(got.pool)}")
            if self.failures:
                failures, self.failures = self.failures, []
                raise ConformanceFailure(failures)

        def expect_rejected(self, what: str, impl_call: Callable[[], Any], spec_call: Callable[[], Any]) -> None:
            """Both sides reject the call; the implementation changes nothing (INV-ATOMIC)."""
            before = self.impl_state(renamed=False)
            try:
                spec_call()
                self.fail("REFINEMENT", f"{what}: the spec accepts it (machine defect)")
            except PreconditionError:
                pass
            try:
                impl_call()
                self.fail("REFINEMENT", f"{what}: accepted by the implementation, rejected by the spec")
            except InvalidArgumentError:
                pass
            if self.impl_state(renamed=False) != before:
                self.fail("INV-ATOMIC", f"{what}: rejected, yet the implementation's state changed")

        def view(self, rid: str) -> spec.RequestView:
            return view_of(self.requests[rid])

        def lookup(self, rid: str, hint: int | None) -> tuple[Any, spec.Hit]:
            """The implementation's lookup, checked against the spec and the ghost contents."""
            request, view = self.requests[rid], self.view(rid)
            pages, num_tokens = self.impl.get_computed_pages(request, dp_shard_hint=hint, data_parallel_size=dp)
            got = spec.Hit(_ids(pages), num_tokens)
            want = spec.lookup(self.spec, view, hint, dp)
            if not spec.inv_hit_safe(self.spec, view, got):
                self.fail("INV-HIT-SAFE", f"{rid}: lookup returned {got} whose pages hold other content")
            if not spec.inv_hit_shape(self.spec, view, got):
                self.fail("INV-HIT-SHAPE", f"{rid}: lookup returned {got} (num_tokens {view.num_tokens})")
            if got != want:
                self.fail("REFINEMENT", f"{rid}: lookup {got} != spec {want}")
            return pages, want

        def allocate(self, rid: str, num_new: int, computed_new: int = 0, hits: Any = None,
                     spec_hits: tuple[tuple[int, ...], ...] | None = None, lookahead: int = 0,
                     delay: bool = False, hint: int | None = None) -> bool:
            """allocate_slots on both sides; returns whether it succeeded."""
            request, view = self.requests[rid], self.view(rid)
            before = self.impl_state(renamed=False)
            pre = self.spec
            try:
                want_state, want = spec.allocate_slots(pre, view, num_new, computed_new, spec_hits, lookahead,
                                                       delay, hint, dp)
            except PreconditionError as exc:
                self.expect_rejected(f"allocate_slots({rid}) outside the spec's precondition ({exc})",
                                     lambda: self.impl.allocate_slots(request, num_new, computed_new, hits, lookahead,
                                                                      delay, dp_shard_hint=hint, data_parallel_size=dp),
                                     lambda: spec.allocate_slots(pre, view, num_new, computed_new, spec_hits,
                                                                 lookahead, delay, hint, dp))
                return False
            try:
                result = self.impl.allocate_slots(request, num_new, computed_new, hits, lookahead, delay,
                                                  dp_shard_hint=hint, data_parallel_size=dp)
            except InvalidArgumentError as exc:
                self.fail("REFINEMENT", f"{rid}: allocate_slots raised {exc!r}; the spec accepts the call")
                if self.impl_state(renamed=False) != before:
                    self.fail("INV-ATOMIC", f"{rid}: allocate_slots raised and changed the state")
                return False
            got = None if result is None else _ids(result)
            if result is None and self.impl_state(renamed=False) != before:
                self.fail("INV-ATOMIC", f"{rid}: allocate_slots returned None and changed the state")
            if not spec.inv_atomic(pre, want_state, want):
                self.fail("INV-ATOMIC", f"{rid}: the spec's failed allocation changed its state")
            if got != want:
                self.fail("REFINEMENT", f"{rid}: allocate_slots returned {got}, spec {want}")
            self.spec = want_state
            return want is not None

        # ---- scheduler rules ------------------------------------------------------------

        @initialize()
        def start(self) -> None:
            self.check()

        @precondition(lambda self: len(self.requests) < MAX_LIVE_REQUESTS)
        @rule(prompt=st.sampled_from(PROMPTS), salt=st.sampled_from((None,) * 4 + ("tenant-b",)),
              lora=st.sampled_from((None,) * 5 + (7,)), mm=st.sampled_from(MM_CHOICES),
              logprobs=st.sampled_from((False,) * 7 + (True,)))
        def add_request(self, prompt: tuple[int, ...], salt: str | None, lora: int | None, mm: Any,
                        logprobs: bool) -> None:
            rid = f"r{self.next_id}"
            self.next_id += 1
            if mm and mm[0][1] + mm[0][2] > len(prompt):
                mm = ()
            self.requests[rid] = make_request(rid, prompt, salt, lora, mm, logprobs)
            self.waiting.append(rid)
            self.check()

        @precondition(lambda self: self.waiting)
        @rule(data=st.data(), chunk=st.integers(1, 12), lookahead=st.sampled_from((0, 0, 2)), hint=hints)
        def admit(self, data: st.DataObject, chunk: int, lookahead: int, hint: int | None) -> None:
            """Prefix lookup, then allocate the first prefill chunk (eSurge's waiting-queue path)."""
            rid = data.draw(st.sampled_from(self.waiting))
            request = self.requests[rid]
            pages, hit = self.lookup(rid, hint)
            num_new = min(chunk, request.num_tokens - hit.num_tokens)
            if num_new >= 1 and not self.failures and self.allocate(
                    rid, num_new, hit.num_tokens, pages, hit.pages, lookahead, hint=hint):
                request.num_computed_tokens = hit.num_tokens + num_new
                self.waiting.remove(rid)
                self.running.append(rid)
            self.check()

        @precondition(lambda self: self.running)
        @rule(data=st.data())
        def schedule(self, data: st.DataObject) -> None:
            """One scheduler step: each running request, oldest first, gets a prefill chunk or
            one decode token (plus speculative lookahead slots); a request the pool cannot
            serve is preempted (freed, to be recomputed later)."""
            for rid in list(self.running):
                self.step_request(rid, data.draw(st.integers(1, 8), label="chunk"),
                                  data.draw(st.sampled_from((0, 0, 0, 1, 3, 8)), label="lookahead"),
                                  data.draw(st.sampled_from((False,) * 5 + (True,)), label="delay"),
                                  data.draw(st.integers(0, 2), label="token"))
                if self.failures:
                    break
            self.check()

        def step_request(self, rid: str, chunk: int, lookahead: int, delay: bool, token: int) -> None:
            request = self.requests[rid]
            if request.num_computed_tokens == request.num_tokens:
                if request.num_tokens >= config.max_model_len:
                    self.finish_request(rid, aborted=False)
                    return
                request.append_output_token_ids(token)
            num_new = min(chunk, request.num_tokens - request.num_computed_tokens)
            if self.allocate(rid, num_new, lookahead=lookahead, delay=delay):
                request.num_computed_tokens += num_new
            elif not self.failures:
                self.preempt_request(rid)

        @precondition(lambda self: self.running)
        @rule(data=st.data())
        def preempt(self, data: st.DataObject) -> None:
            self.preempt_request(data.draw(st.sampled_from(self.running)))
            self.check()

        def preempt_request(self, rid: str) -> None:
            request = self.requests[rid]
            self.impl.free(request)
            self.spec = spec.free_request(self.spec, rid)
            request.num_computed_tokens = 0
            self.running.remove(rid)
            self.waiting.append(rid)

        @precondition(lambda self: self.running)
        @rule(data=st.data())
        def finish(self, data: st.DataObject) -> None:
            self.finish_request(data.draw(st.sampled_from(self.running)), aborted=False)
            self.check()

        @precondition(lambda self: self.requests)
        @rule(data=st.data())
        def abort(self, data: st.DataObject) -> None:
            self.finish_request(data.draw(st.sampled_from(sorted(self.requests))), aborted=True)
            self.check()

        def finish_request(self, rid: str, aborted: bool) -> None:
            from verikv.request import RequestStatus

            request = self.requests.pop(rid)
            self.impl.free(request)
            self.impl.free_page_hashes(request)
            self.spec = spec.free_page_hashes(spec.free_request(self.spec, rid), rid)
            request.status = RequestStatus.FINISHED_ABORTED if aborted else RequestStatus.FINISHED_STOPPED
            for queue in (self.waiting, self.running):
                if rid in queue:
                    queue.remove(rid)

        @precondition(lambda self: self.running)
        @rule(data=st.data(), back=st.integers(0, 6))
        def cache_computed(self, data: st.DataObject, back: int) -> None:
            """The async scheduler's ``cache_pages(request, computed - placeholders)``."""
            rid = data.draw(st.sampled_from(self.running))
            request = self.requests[rid]
            n = max(0, request.num_computed_tokens - back)
            if self.spec.entry(rid) is None:  # running without pages: no cache group
                self.expect_rejected(f"cache_pages({rid}) without pages", lambda: self.impl.cache_pages(request, n),
                                     lambda: spec.cache_pages(self.spec, self.view(rid), n))
            else:
                self.impl.cache_pages(request, n)
                self.spec = spec.cache_pages(self.spec, self.view(rid), n)
            self.check()

        @rule()
        def reset_prefix_cache(self) -> None:
            got = self.impl.reset_prefix_cache()
            self.spec, want = spec.reset_prefix_cache(self.spec)
            if got != want:
                self.fail("REFINEMENT", f"reset_prefix_cache returned {got}, spec {want}")
            if want:
                self.forward.clear()
                self.backward.clear()
            self.check()

        # ---- bad inputs -------------------------------------------------------------------

        @precondition(lambda self: self.requests)
        @rule(data=st.data(), case=st.sampled_from(BAD_CALLS))
        def bad_input(self, data: st.DataObject, case: str) -> None:
            """One invalid call; both sides reject it and the implementation changes nothing."""
            rid = data.draw(st.sampled_from(sorted(self.requests)))
            request, view, s = self.requests[rid], self.view(rid), self.spec
            entry = s.entry(rid)
            if case in ("hits-with-pages", "cache-too-far", "cache-no-pages", "page-ids") and (
                    (entry is None) != (case in ("cache-no-pages", "page-ids"))):
                return  # the case needs a request with (or without) pages
            if case == "hits-with-pages":
                ps = config.groups[0].page_size
                own = tuple((pages[0],) if config.groups[g].page_size == ps else () for g, pages in enumerate(entry.pages))
                if any(len(group) * config.groups[g].page_size != ps for g, group in enumerate(own)):
                    return
                from verikv import CachePages
                impl_call = lambda: self.impl.allocate_slots(request, 1, ps, CachePages([list(g) for g in own]))
                spec_call = lambda: spec.allocate_slots(s, view, 1, ps, own)
            elif case in ("cache-too-far", "cache-no-pages"):
                n = view.num_tokens + 1 if case == "cache-too-far" else 1
                impl_call = lambda: self.impl.cache_pages(request, n)
                spec_call = lambda: spec.cache_pages(s, view, n)
            elif case == "page-ids":
                impl_call = lambda: self.impl.get_page_ids(rid)
                spec_call = lambda: spec.page_ids(s, rid)
            else:
                num_new, computed_new, lookahead, dp_size = {
                    "zero": (0, 0, 0, dp),
                    "negative": (1, -4, 0, dp),
                    "too-long": (config.max_model_len + 1 - view.num_computed_tokens, 0, 0, dp),
                    "lookahead": (1, 0, -1, dp),
                    "dp-size": (1, 0, 0, wrong_dp),
                }[case]
                if dp_size is None:
                    return  # no DP size other than the manager's divides num_pages
                impl_call = lambda: self.impl.allocate_slots(request, num_new, computed_new, None, lookahead,
                                                             data_parallel_size=dp_size)
                spec_call = lambda: spec.allocate_slots(s, view, num_new, computed_new, None, lookahead,
                                                        data_parallel_size=dp_size)
            self.expect_rejected(f"{case} for {rid}", impl_call, spec_call)
            self.check()

    ManagerMachine.__name__ = ManagerMachine.__qualname__ = f"ManagerMachine[{layout.name}]"
    return ManagerMachine


def detection_settings() -> settings:
    """Bounded, reproducible settings for showing a mutant is caught (no shrinking: only the
    names of the failed checks are wanted)."""
    return settings(max_examples=200, stateful_step_count=60, deadline=None, derandomize=True,
                    database=None, print_blob=False, phases=(Phase.explicit, Phase.generate),
                    suppress_health_check=list(HealthCheck))


def find_manager_failure(make_manager: Callable[[spec.ManagerConfig], Any], layout: Layout,
                         run_settings: settings | None = None) -> list[str]:
    """Run the manager machine for ``layout`` against ``make_manager``; the names of the checks
    that failed, or []. An unexpected exception escaping the machine is ``crash:<type>``."""
    try:
        run_state_machine_as_test(manager_machine(layout, make_manager), settings=run_settings or detection_settings())
    except ConformanceFailure as failure:
        return failure.names
    except Exception as exc:  # a crash is a detection too; report it by type
        return [f"crash:{type(exc).__name__}"]
    return []
