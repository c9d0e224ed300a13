"""A scheduler-shaped Hypothesis state machine that checks a page manager against the spec.

`ManagerMachine` is one module-level `RuleBasedStateMachine`, configured per instance by a
`Layout`, an adapter factory (`verikv.testing.adapter`; verikv's `CacheManagerAdapter` by
default) and `MachineOptions`. `machine_factory(...)` returns the zero-argument factory
Hypothesis' ``run_state_machine_as_test`` wants. It drives the manager and the spec
(`verikv.spec.manager`) side by side, the way an eSurge/vLLM scheduler does: requests arrive,
are admitted with a prefix lookup, prefill in chunks, decode (with speculative lookahead
slots and, under data parallelism, shard hints), are preempted, finish or are aborted; the
prefix cache is reset; bad inputs are thrown at every entry point; optionally key computation
fails on demand.

After every step it checks, and reports by name (`ConformanceFailure.names`):

- ``REFINEMENT``: the implementation's state (white-box: `abstract_manager`, with the
  implementation's key digests renamed to the spec's contents, the renaming learnt page by page
  and kept injective; black-box: free count and page tables) equals the spec's; every return
  value and every error agrees;
- every pool invariant and ``INV-REF-COUNT`` on the implementation's abstraction and on the
  spec state, ``INV-USAGE`` on the reported usage, ``INV-CONSERVE`` on observed counts;
- ``INV-HIT-SAFE`` on what a lookup really returned, judged by the harness' own ghost: the
  content each page holds, recorded when the request holding it has computed the page's tokens
  (not when a key is written, so keying the wrong page is caught); a windowed hit must hold
  real pages inside the window; ``INV-HIT-SHAPE`` on its shape; ``INV-ATOMIC`` when a call is
  rejected or an allocation returns None (the observed state must be unchanged).

Modes: ``white-box`` (the adapter offers ``abstraction()``), ``black-box`` (what a scheduler
sees, page ids compared exactly) and ``policy-free`` (black-box, and the spec follows the
implementation's choice of free pages, so any legal free-list policy passes; hits are compared
by length and checked for safety instead of by page id).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple

from verikv.testing import _missing_extra

try:
    from hypothesis import HealthCheck, Phase, settings, strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, run_state_machine_as_test
except ModuleNotFoundError as missing:  # pragma: no cover - exercised in a subprocess
    raise _missing_extra(missing) from missing

from verikv.errors import InvalidArgumentError, VeriKVError
from verikv.spec import invariants as inv, manager as spec
from verikv.spec.abstraction import abstract_manager
from verikv.spec.pool import NULL_PAGE, PreconditionError
from verikv.testing._answers import count_problem, flag_problem, fraction_problem, page_ids_problem, shown
from verikv.testing._arguments import (
    built_with,
    checked_factory,
    checked_flag,
    checked_instance,
    checked_names,
)
from verikv.testing._transcript import RecordedAdapter
from verikv.testing.adapter import (
    _MANAGER_METHODS,
    AdapterFactory,
    CacheManagerAdapter,
    KeyFailure,
    build_cache_manager,  # noqa: F401  (re-exported: verikv.proofs.mutants.manager imports it from here)
    page_ids_of,
)

BLOCKS: tuple[tuple[int, ...], ...] = ((0, 1, 2, 0), (1, 1, 0, 2), (2, 0, 1, 1))
"""Page-sized token blocks (page size 4) that prompts and decoded tokens are made of."""
QUOTE_PAGE = len(BLOCKS[0])
"""The block (and smallest page) size: quoted text starts at a multiple of it."""
OUTSIDE_TOKEN = 3
"""A token in no block (decoded when the drawn block is ``len(BLOCKS)``, and ending a quote)."""
PROMPTS: tuple[tuple[int, ...], ...] = (
    BLOCKS[0] + BLOCKS[1],
    BLOCKS[0] + BLOCKS[1] + (2, 2),
    BLOCKS[0] + BLOCKS[2] + BLOCKS[1],
    BLOCKS[1] + BLOCKS[0],
    BLOCKS[0] + BLOCKS[0] + BLOCKS[1] + (0,),
    BLOCKS[0][:3],
    BLOCKS[1] + BLOCKS[0] + BLOCKS[0][:1],
)
"""Prompts that share page-aligned blocks, so prefixes hit across requests."""

MM_CHOICES: tuple[tuple[tuple[str, int, int], ...], ...] = ((),) * 6 + ((("img-a", 2, 3),), (("img-b", 2, 3),))
"""Mostly text-only; sometimes an image over positions 2..4 (same tokens, different KV)."""
LoraChoice = int | tuple[str, str] | None
LORA_CHOICES: tuple[LoraChoice, ...] = (None,) * 10 + (7, 7, ("sql", "/adapters/sql-v1"), ("sql", "/adapters/sql-v2"))
"""Mostly no LoRA; sometimes adapter id 7, or the adapter named ``sql`` at one of two paths
(the name re-pointed at other weights: the same name, other keys)."""
MAX_LIVE_REQUESTS = 5
MAX_ROUNDS = 8
"""Scheduler steps one `ManagerMachine.schedule` rule may run: an engine runs many steps between
two arrivals, so outputs grow whole pages (a decoded page is what eSurge's Q1 keys wrongly)."""
BAD_CALL_TEXT: dict[str, str] = {
    "zero": "allocate with zero new tokens",
    "negative": "allocate with a negative count of computed tokens",
    "too-long": "allocate past max_model_len",
    "lookahead": "allocate with a negative lookahead",
    "dp-size": "allocate with another data_parallel_size than the manager's",
    "hits-with-pages": "allocate with a hit for a request that already holds pages",
    "own-hit-miscounted": "allocate with the manager's own lookup result and a token count it does not cover",
    "own-hit-edited": "allocate with the manager's own lookup result after one of its page ids was removed",
    "cache-too-far": "cache past the request's tokens",
    "cache-no-pages": "cache a request that holds no pages",
    "page-ids": "page_ids of a request that holds no pages",
}
"""Invalid calls the machine makes, by case name, and what each one is: token counts, DP size,
hits for a request holding pages, the manager's own latest lookup result claimed with a token
count it does not cover or after one of its page ids was dropped from it (a hit of the wrong
shape that is still the very object the manager returned), caching past the request's tokens or
without pages, page ids of a request without pages."""
BAD_CALLS: tuple[str, ...] = tuple(BAD_CALL_TEXT)
"""The invalid-call case names (`BAD_CALL_TEXT`)."""
OWN_HIT_CASES: frozenset[str] = frozenset({"own-hit-miscounted", "own-hit-edited"})
NEEDS_NO_PAGES: frozenset[str] = OWN_HIT_CASES | {"cache-no-pages", "page-ids"}
NEEDS_PAGES: frozenset[str] = frozenset({"hits-with-pages", "cache-too-far"})
KEY_FAILURES: tuple[str, ...] = ("hasher-raises", "lora-not-int", "salt-not-encodable")
"""How the failing-key-computation rule breaks a key: the hash function raises on its n-th
call, or a request gets an attribute no key can be computed from after construction."""
BAD_ATTRIBUTES: dict[str, tuple[str, Any]] = {"lora-not-int": ("lora_id", "x"),
                                              "salt-not-encodable": ("cache_salt", "\ud800")}

CHECK_NAMES: frozenset[str] = frozenset(
    {*inv.MANAGER_INVARIANTS, *inv.GHOST_INVARIANTS, *inv.LOOKUP_INVARIANTS, *inv.TRANSITION_INVARIANTS,
     "REFINEMENT"})
"""Every name a run can report: the ``INV-*`` catalogue and ``REFINEMENT`` (a return value, an
error or the state differs from the spec's)."""

class StepDraw(NamedTuple):
    """One running request's scheduler step: prefill chunk, lookahead slots, delayed caching, and
    the block a decoded page copies (one draw, so Hypothesis shows one named line per request and
    step: ``Draw n (r0 step): StepDraw(chunk=2, lookahead=0, delay=False, block=0)``)."""

    chunk: int
    lookahead: int
    delay: bool
    block: int


STEP_DRAWS = st.builds(StepDraw, st.integers(1, 8), st.sampled_from((0, 0, 0, 1, 3, 8)),
                       st.sampled_from((False,) * 5 + (True,)), st.integers(0, len(BLOCKS)))
"""Draws a `StepDraw`."""

Mode = Literal["white-box", "black-box", "policy-free"]
MODES: tuple[str, ...] = ("white-box", "black-box", "policy-free")
FEATURES: frozenset[str] = frozenset({"salt", "lora", "images", "logprobs", "cache-calls"})
"""Features the machine uses; leave out the ones an engine lacks: request salts, LoRA identities
(ids and named adapters),
images (multimodal items), prompt logprobs, and ``cache-calls`` (the scheduler registers
computed pages itself with ``cache_pages``, as an asynchronous scheduler does)."""
WAIVERS: dict[str, str] = {
    "usage-formula": "the manager reports usage by another formula: INV-USAGE is not checked on it",
    "per-call-dp-size": "the manager takes data_parallel_size per call: another DP size is not sent as a bad input",
    "shard-inference": "a request holding pages keeps the shard of its pages: held requests get no DP hint",
    "chunked-window-rule": "chunked-local groups follow another window rule: REFINEMENT and INV-HIT-SHAPE "
                           "are not enforced in layouts with a chunked group (INV-HIT-SAFE still is)",
    "free-order": "another legal free-list policy: the spec takes the free pages the manager chose",
    "window-free-on-failure": "an allocation that does not fit still frees the out-of-window pages (eSurge): "
                              "that one change is expected of a None result; INV-ATOMIC holds otherwise",
    "null-page-free": "the pool accepts a free of the null page (eSurge): the pool harness does not send it, "
                      "so the next departure (e.g. a double free of a real page) shows",
}
"""Known departures a user can declare by name; each lifts one thing in one scope."""


@dataclass(frozen=True)
class Layout:
    """A named manager configuration the machine runs against: ``name`` a str, ``config`` a
    `verikv.spec.manager.ManagerConfig`."""

    name: str
    config: spec.ManagerConfig

    def __post_init__(self) -> None:
        checked_instance(self.name, str, "name")
        checked_instance(self.config, spec.ManagerConfig, "config")


def _layout(name: str, *groups: spec.GroupLayout, num_pages: int = 12, max_model_len: int = 20,
            **kw: Any) -> Layout:
    return Layout(name, spec.ManagerConfig(tuple(groups), num_pages, max_model_len, **kw))


FULL = spec.GroupLayout("full", 4)
SHORT_WINDOW = spec.GroupLayout("sliding", 4, 3)
LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in (
    _layout("full", FULL, num_pages=8),
    _layout("full+sliding(window<=page)", FULL, SHORT_WINDOW, num_pages=9),
    _layout("full+sliding(window>page)", FULL, spec.GroupLayout("sliding", 4, 9)),
    _layout("full+chunked", FULL, spec.GroupLayout("chunked", 4, 8)),
    _layout("full+mamba", FULL, spec.GroupLayout("mamba", 20), num_pages=10),
    _layout("full+mamba(align)", FULL, spec.GroupLayout("mamba_align", 4), num_pages=12),
    _layout("no-caching", FULL, spec.GroupLayout("sliding", 4, 5), enable_caching=False),
    _layout("dp2", FULL, num_pages=12, data_parallel_size=2),
    _layout("full+sliding(eagle)", FULL, spec.GroupLayout("sliding", 4, 6), use_eagle=True),
    _layout("full+sliding(unhashed-first)", FULL, spec.GroupLayout("sliding", 4, 5), free_order="unhashed-first"),
    _layout("no-groups", num_pages=6),
    _layout("full(page 8)+sliding(page 4)", spec.GroupLayout("full", 8), spec.GroupLayout("sliding", 4, 5),
            max_model_len=24),
    _layout("sliding-only(window<=page)", SHORT_WINDOW, num_pages=7),
    _layout("chunked-only", spec.GroupLayout("chunked", 4, 8), num_pages=7),
    _layout("sliding+full(window<=page)", SHORT_WINDOW, FULL, num_pages=9),
    _layout("full+sliding+chunked", FULL, spec.GroupLayout("sliding", 4, 6), spec.GroupLayout("chunked", 4, 8),
            num_pages=13),
    _layout("dp2+sliding(unhashed-first)", FULL, spec.GroupLayout("sliding", 4, 5), num_pages=16,
            data_parallel_size=2, free_order="unhashed-first"),
    _layout("full+sliding(skip-unreachable)", FULL, spec.GroupLayout("sliding", 4, 5),
            skip_unreachable_sliding_pages=True),
    _layout("full(page 8)+sliding(page 4)(eagle, vllm rule)", spec.GroupLayout("full", 8),
            spec.GroupLayout("sliding", 4, 5), max_model_len=24, use_eagle=True, eagle_rule="vllm"),
)}


class ConformanceFailure(AssertionError):
    """The implementation departed from the spec; ``names`` lists the checks that failed."""

    def __init__(self, failures: list[tuple[str, str]]) -> None:
        self.names: list[str] = sorted({name for name, _ in failures})
        super().__init__("\n".join(f"{name}: {detail}" for name, detail in failures))


ANY_EXCEPTION: tuple[type[BaseException], ...] = (Exception,)
"""The default rejection: the adapter protocol counts any exception as "rejected", because
another engine's manager rejects with its own exception types."""


@dataclass(frozen=True)
class MachineOptions:
    """How the machine judges: ``mode``; ``checks`` to enforce (None: all); declared
    ``waivers`` (names of `WAIVERS`); request ``features`` the engine has; whether to send
    ``bad_inputs``; whether to make key computation fail (``key_failures``: needs an adapter
    with ``arm_key_failure``/``disarm_key_failure`` for the hasher case); ``rejection``, the
    exception types that count as a rejection (anything else escapes as a crash), None for the
    one default the conformance harness shares: the adapter's own ``rejection_types`` when it
    declares them (verikv's `CacheManagerAdapter`: `InvalidArgumentError`, so verikv's own runs
    also require typed errors), else any exception (`ANY_EXCEPTION`); and ``record_calls``:
    keep the calls made to the adapter as readable lines for failure reports
    (`ManagerMachine.calls`)."""

    mode: Mode = "white-box"
    checks: frozenset[str] | None = None
    waivers: frozenset[str] = frozenset()
    features: frozenset[str] = FEATURES
    bad_inputs: bool = True
    key_failures: bool = False
    rejection: tuple[type[BaseException], ...] | None = None
    record_calls: bool = False

    def __post_init__(self) -> None:
        """Each field is what it says; name collections become frozensets (as in
        `verikv.testing.conformance.ConformanceConfig`)."""
        if not isinstance(self.mode, str) or self.mode not in MODES:
            raise InvalidArgumentError(f"mode must be one of {MODES}, got {shown(self.mode)}")
        for name, known in (("checks", CHECK_NAMES), ("waivers", WAIVERS), ("features", FEATURES)):
            value = getattr(self, name)
            if value is not None or name != "checks":
                object.__setattr__(self, name, checked_names(value, name, known))
        for name in ("bad_inputs", "key_failures", "record_calls"):
            checked_flag(getattr(self, name), name)
        rejection = self.rejection
        if rejection is not None and not (isinstance(rejection, tuple) and rejection and all(
                isinstance(kind, type) and issubclass(kind, BaseException) for kind in rejection)):
            raise InvalidArgumentError(f"rejection must be None or a tuple of exception types, got {shown(rejection)}")


@dataclass(frozen=True)
class Observation:
    """What a scheduler sees of a manager: free count, usage, each live request's page table."""

    num_free: int
    usage: float
    tables: tuple[tuple[str, tuple[tuple[int, ...], ...]], ...] = ()


@dataclass
class Tracked:
    """One request as the scheduler knows it, and the engine's own request for it."""

    view: spec.RequestView
    native: Any = None
    synced: int = 0
    """How many tokens the native request holds (the rest are appended before the next call)."""
    decode_block: int | None = None
    """The block the page being decoded copies (see `ManagerMachine.decode_token`)."""


def page_ids_or_none(result: Any) -> tuple[tuple[int, ...], ...] | None:
    """An allocation's new page ids per group, or None when it did not fit."""
    return None if result is None else page_ids_of(result)


def window_pages_real(config: spec.ManagerConfig, hit: spec.Hit) -> bool:
    """A windowed hit holds real pages inside the window of the next token: the last
    ``cdiv(window - 1, page_size)`` pages (at least one) for sliding, the current chunk's pages
    for chunked local attention. A null page there would feed masked-out KV to attention.
    ``config`` is a `verikv.spec.manager.ManagerConfig`, ``hit`` a `verikv.spec.manager.Hit`."""
    checked_instance(config, spec.ManagerConfig, "config")
    checked_instance(hit, spec.Hit, "hit")
    for layout, pages in zip(config.groups, hit.pages):
        if not pages:
            continue
        if layout.kind == "sliding":
            inside = pages[-max(1, -(-(layout.span - 1) // layout.page_size)):]
        elif layout.kind == "chunked":
            inside = pages[(hit.num_tokens // layout.span) * layout.span // layout.page_size:]
        else:
            continue
        if NULL_PAGE in inside:
            return False
    return True


class ManagerMachine(RuleBasedStateMachine):
    """Scheduler-shaped conformance run of one page manager against `verikv.spec.manager`."""

    def __init__(self, layout: Layout, make_adapter: AdapterFactory = CacheManagerAdapter,
                 options: MachineOptions = MachineOptions()) -> None:
        super().__init__()
        config = layout.config
        self.layout: Layout = layout
        self.config: spec.ManagerConfig = config
        self.options: MachineOptions = options
        adapter = make_adapter(config)
        self.rejection: tuple[type[BaseException], ...] = (
            options.rejection or getattr(adapter, "rejection_types", None) or ANY_EXCEPTION)
        self.impl: Any = RecordedAdapter(adapter) if options.record_calls else adapter
        self.spec: spec.ManagerState = spec.init(config)
        self.dp: int | None = config.data_parallel_size if config.data_parallel_size > 1 else None
        self.wrong_dp: int | None = next((d for d in range(2, config.num_pages + 1)
                              if config.num_pages % d == 0 and d != config.data_parallel_size), None)
        self.enforced: frozenset[str] = CHECK_NAMES if options.checks is None else options.checks
        if "chunked-window-rule" in options.waivers and any(g.kind == "chunked" for g in config.groups):
            self.enforced = self.enforced - {"REFINEMENT", "INV-HIT-SHAPE"}
        if "usage-formula" in options.waivers:
            self.enforced = self.enforced - {"INV-USAGE"}
        self.plain_calls: bool = not {"per-call-dp-size", "shard-inference"} & options.waivers
        """Whether a held request's step may come without DP arguments (`draw_step_dp`)."""
        self.follow_choice: bool = options.mode == "policy-free" or "free-order" in options.waivers
        self.requests: dict[str, Tracked] = {}
        self.waiting: list[str] = []
        self.running: list[str] = []
        self.next_id: int = 0
        self.forward: dict[Hashable, Hashable] = {}
        self.backward: dict[Hashable, Hashable] = {}
        self.computed: dict[int, spec.PoolKey] = {}
        """Ghost: the content each page holds, written when its holder computed its tokens."""
        self.failures: list[tuple[str, str]] = []
        self.keys_failing: bool = False
        """True while the failing-key-computation rule runs a call (its errors then propagate)."""

    # ---- requests --------------------------------------------------------------------

    def native(self, rid: str) -> Any:
        """The engine's request for ``rid``, brought up to date the way a scheduler does."""
        tracked = self.requests[rid]
        view = tracked.view
        if tracked.native is None:
            tracked.native = self.impl.new_request(view)
            tracked.synced = view.num_tokens
        if view.num_tokens > tracked.synced:
            tracked.native.append_output_token_ids(list(view.tokens[tracked.synced:]))
            tracked.synced = view.num_tokens
        tracked.native.num_computed_tokens = view.num_computed_tokens
        return tracked.native

    def view(self, rid: str) -> spec.RequestView:
        return self.requests[rid].view

    def set_computed(self, rid: str, num_computed_tokens: int) -> None:
        tracked = self.requests[rid]
        tracked.view = replace(tracked.view, num_computed_tokens=num_computed_tokens)
        self.record_computed(rid)

    # ---- checking ------------------------------------------------------------------

    @property
    def calls(self) -> list[str]:
        """The calls made to the adapter so far, as readable lines (empty unless ``record_calls``)."""
        return self.impl.calls if isinstance(self.impl, RecordedAdapter) else []

    def fail(self, name: str, detail: str) -> None:
        if name in self.enforced:
            self.failures.append((name, detail))

    def answer(self, method: str, value: Any, problem: str | None) -> None:
        """Stop the run when the adapter's answer to ``method`` is malformed (``problem``): it is
        reported as ``adapter:<method>`` whatever ``checks`` enforces, as no check can judge it."""
        if problem is not None:
            raise ConformanceFailure([(f"adapter:{method}", f"{method}() answered {shown(value)}: {problem}")])

    def table(self, rid: str) -> tuple[tuple[int, ...], ...]:
        """The request's page table as the manager reports it (empty if it holds no pages)."""
        if self.requests[rid].native is None:
            return ()
        try:
            answer = self.impl.page_ids(rid)
        except self.rejection:  # the protocol: page_ids raises for a request without pages
            return ()
        self.answer("page_ids", answer, page_ids_problem(answer, self.config.num_pages))
        table = page_ids_of(answer)
        return table if any(table) else ()  # empty lists per group: no pages either

    def free_count(self) -> int:
        """The adapter's ``num_free_pages()``, checked to be a count of this pool's pages."""
        num_free = self.impl.num_free_pages()
        self.answer("num_free_pages", num_free, count_problem(num_free, self.config.num_pages))
        return int(num_free)

    def reported_usage(self) -> float:
        """The adapter's ``usage()``, checked to be a finite fraction."""
        usage = self.impl.usage()
        self.answer("usage", usage, fraction_problem(usage))
        return float(usage)

    def observe(self) -> Observation:
        tables = tuple((rid, self.table(rid)) for rid in sorted(self.requests))
        return Observation(self.free_count(), self.reported_usage(), tables)

    def snapshot(self) -> Any:
        """What must stay unchanged across a rejected call (INV-ATOMIC)."""
        if self.options.mode == "white-box":
            return abstract_manager(self.impl.abstraction())
        return self.observe()

    def record_computed(self, rid: str) -> None:
        """Ghost update: pages of ``rid`` whose tokens are all computed hold its content."""
        view, tables = self.view(rid), self.table(rid)
        for g, pages in enumerate(tables[:len(self.config.groups)]):
            if self.config.groups[g].kind == "mamba_align":
                self.record_mamba_state(view, g, pages)
                continue
            size = self.config.groups[g].page_size
            for j, page in enumerate(pages[:view.num_computed_tokens // size]):
                if page != NULL_PAGE:
                    self.computed[page] = spec.page_key(self.spec, view, g, j)

    def record_mamba_state(self, view: spec.RequestView, g: int, pages: tuple[int, ...]) -> None:
        """Ghost update, Mamba align (the engine contract of `verikv.spec.manager`): the step
        that ended at ``c`` computed tokens wrote the state after ``c`` into page ``cdiv(c,
        page_size) - 1``: the state of that page's prefix when ``c`` ends the page, else of none."""
        c, size = view.num_computed_tokens, self.config.groups[g].page_size
        j = -(-c // size) - 1
        if c == 0 or j >= len(pages) or pages[j] == NULL_PAGE:
            return
        if c % size == 0:
            self.computed[pages[j]] = spec.page_key(self.spec, view, g, j)
        else:
            self.computed.pop(pages[j], None)

    def learn_keys(self, impl_pool: Any) -> None:
        """Extend the digest <-> content renaming from pages keyed on both sides."""
        for p in range(self.config.num_pages):
            ki, ks = impl_pool.key_of(p), self.spec.pool.key_of[p]
            if ki is None or ks is None:
                continue
            if self.forward.setdefault(ki, ks) != ks:
                self.fail("INV-HIT-SAFE", f"page {p}: one implementation key stands for two contents "
                                          f"({self.forward[ki]!r} and {ks!r})")
            if self.backward.setdefault(ks, ki) != ki:
                self.fail("REFINEMENT", f"page {p}: two implementation keys for one content {ks!r}")

    def check(self) -> None:
        """Refinement and every invariant; raise `ConformanceFailure` naming what failed."""
        if self.options.mode == "white-box":
            self.check_white_box()
        else:
            self.check_black_box()
        for name in inv.violated_manager_invariants(self.spec, ghost=True):
            self.fail(name, "broken in the spec state (a spec defect)")
        if self.failures:
            failures, self.failures = self.failures, []
            raise ConformanceFailure(failures)

    def check_white_box(self) -> None:
        view = self.impl.abstraction()
        self.learn_keys(view.page_pool)
        got = abstract_manager(view, lambda k: self.forward.get(k, ("unmapped", k)))
        want = self.spec
        free = (sorted, sorted) if self.follow_choice else (tuple, tuple)
        for what, a, b in (("config", got.config, want.config), ("ref", got.pool.ref, want.pool.ref),
                           ("free list", free[0](got.pool.free), free[1](want.pool.free)),
                           ("keys", got.pool.key_of, want.pool.key_of),
                           ("cached map", got.pool.cached, want.pool.cached),
                           ("entries", dict(got.entries), dict(want.entries))):
            if a != b:
                self.fail("REFINEMENT", f"{what}: implementation {a!r} != spec {b!r}")
        for name in inv.violated_manager_invariants(got):
            self.fail(name, "broken in the implementation's abstract state")
        num_free = self.free_count()
        if num_free != len(got.pool.free):
            self.fail("REFINEMENT", f"num_free_pages() answered {num_free}; the manager's free list holds "
                                    f"{len(got.pool.free)} pages")
        self.check_usage(self.reported_usage(), len(got.pool.free))

    def check_black_box(self) -> None:
        seen, want = self.observe(), self.spec
        spec_tables = {rid: e.pages for rid, e in want.entries}
        for rid, table in seen.tables:
            if (any(table) and rid not in spec_tables) or (rid in spec_tables and table != spec_tables[rid]):
                self.fail("REFINEMENT", f"page table of {rid}: implementation {table} != "
                                        f"spec {spec_tables.get(rid, ())}")
            for g, layout in enumerate(self.config.groups):
                if layout.kind == "full" and g < len(table) and NULL_PAGE in table[g]:
                    self.fail("INV-NULL", f"{rid}: null page in the full-attention table {table[g]}")
        if seen.num_free != len(want.pool.free):
            self.fail("REFINEMENT", f"free pages: implementation {seen.num_free} != spec {len(want.pool.free)}")
        held = {p for _, table in seen.tables for group in table for p in group if p != NULL_PAGE}
        if seen.num_free + len(held) != self.config.num_pages - 1:
            self.fail("INV-CONSERVE", f"{seen.num_free} free + {len(held)} held != "
                                      f"{self.config.num_pages - 1} usable pages")
        self.check_usage(seen.usage, seen.num_free)

    def check_usage(self, reported: float, num_free: int) -> None:
        n = self.config.num_pages
        expected = 0.0 if n <= 1 else 1.0 - num_free / (n - 1)
        if abs(reported - expected) > 1e-9:
            self.fail("INV-USAGE", f"usage {reported} != 1 - free/(N-1) = {expected}")

    def check_new_pages(self, rid: str, new: tuple[tuple[int, ...], ...]) -> None:
        """Pages an allocation hands out: never the null page, each held by this request alone
        (it was free), and their old content is gone (the ghost forgets it)."""
        flat = [p for pages in new for p in pages]
        if NULL_PAGE in flat:
            self.fail("INV-NULL", f"{rid}: allocation handed out the null page: {new}")
        for p in flat:
            self.computed.pop(p, None)
        if self.options.mode == "white-box":
            return  # INV-REF-COUNT and INV-FREE-IFF-ZERO see it in the abstract state
        holders = Counter(p for _, table in self.observe().tables for group in table for p in group)
        shared = sorted(p for p in set(flat) if p != NULL_PAGE and holders[p] > 1)
        if shared:
            self.fail("INV-FREE-IFF-ZERO", f"{rid}: allocation handed out pages {shared} that are also "
                                           f"held elsewhere (they were free while in use)")

    def expect_rejected(self, what: str, impl_call: Callable[[], Any], spec_call: Callable[[], Any]) -> None:
        """Both sides reject the call; the implementation changes nothing (INV-ATOMIC). Reports
        name the call as the transcript recorded it (with ``record_calls``), else by ``what``."""
        before, recorded = self.snapshot(), len(self.calls)
        try:
            spec_call()
            self.fail("REFINEMENT", f"{what}: the spec accepts it (machine defect)")
        except PreconditionError:
            pass
        try:
            impl_call()
            rejected = False
        except self.rejection:
            rejected = True
        call = f"{what}: {self.calls[-1]}" if len(self.calls) > recorded else what
        if not rejected:
            self.fail("REFINEMENT", f"{call}: accepted by the implementation, rejected by the spec")
        if self.snapshot() != before:
            self.fail("INV-ATOMIC", f"{call}: rejected, yet the implementation's state changed")

    # ---- the calls, each checked ------------------------------------------------------

    def lookup(self, rid: str, hint: int | None) -> tuple[Any, spec.Hit]:
        """The implementation's lookup, checked for shape, safety and against the spec."""
        view = self.view(rid)
        answer = self.impl.lookup(self.native(rid), dp_shard_hint=hint, data_parallel_size=self.dp)
        try:
            pages, num_tokens = answer
        except (TypeError, ValueError):
            self.answer("lookup", answer, "not a pair (hit, number of tokens)")
        self.answer("lookup", answer, page_ids_problem(pages, self.config.num_pages)
                    or count_problem(num_tokens, self.config.max_model_len))
        got = spec.Hit(page_ids_of(pages), int(num_tokens))
        want = spec.lookup(self.spec, view, hint, self.dp)
        self.check_hit(rid, view, got)
        same = got.num_tokens == want.num_tokens if self.options.mode == "policy-free" else got == want
        if not same:
            self.fail("REFINEMENT", f"{rid}: lookup {got} != spec {want}")
        return pages, got if self.options.mode == "policy-free" else want

    def check_hit(self, rid: str, view: spec.RequestView, hit: spec.Hit) -> None:
        if not spec.inv_hit_shape(self.spec, view, hit):
            self.fail("INV-HIT-SHAPE", f"{rid}: lookup returned {hit} (num_tokens {view.num_tokens})")
            return
        if not window_pages_real(self.config, hit):
            self.fail("INV-HIT-SAFE", f"{rid}: lookup returned {hit}: a null page inside the window")
        for g, pages in enumerate(hit.pages):
            for j, page in enumerate(pages):
                if page != NULL_PAGE and self.computed.get(page) != spec.page_key(self.spec, view, g, j):
                    self.fail("INV-HIT-SAFE", f"{rid}: lookup returned page {page} at position {j} of group "
                                              f"{g}; it holds other content")

    def choose_like_impl(self, pre: spec.ManagerState, rid: str, new: tuple[tuple[int, ...], ...]
                         ) -> spec.ManagerState:
        """``pre`` with the pages the implementation chose moved to the free-list head, so the
        spec's allocation takes the same pages (policy-free comparison)."""
        planned = spec.remove_skipped(pre, rid, self.view(rid).num_computed_tokens)
        chosen = tuple(p for pages in new for p in pages)
        held = [p for p in chosen if p not in planned.pool.free]
        if held:
            self.fail("INV-FREE-IFF-ZERO", f"{rid}: allocation handed out pages {held} that were not free")
            return pre
        rest = tuple(p for p in planned.pool.free if p not in chosen)
        return replace(planned, pool=replace(planned.pool, free=chosen + rest))

    def allocate(self, rid: str, num_new: int, computed_new: int = 0, hits: Any = None,
                 spec_hits: tuple[tuple[int, ...], ...] | None = None, lookahead: int = 0,
                 delay: bool = False, hint: int | None = None, plain: bool = False) -> bool:
        """allocate_slots on both sides; returns whether it succeeded. ``plain``: with no DP
        argument at all (else the machine's DP size and ``hint``)."""
        view, pre = self.view(rid), self.spec
        dp_size = None if plain else self.dp

        def spec_call(s: spec.ManagerState) -> tuple[spec.ManagerState, tuple[tuple[int, ...], ...] | None]:
            return spec.allocate_slots(s, view, num_new, computed_new, spec_hits, lookahead, delay, hint, dp_size)

        def impl_call() -> Any:
            return self.impl.allocate(self.native(rid), num_new, computed_new, hits, lookahead, delay,
                                      dp_shard_hint=hint, data_parallel_size=dp_size)

        try:
            want_state, want = spec_call(pre)
        except PreconditionError as exc:
            self.expect_rejected(f"allocate_slots({rid}) outside the spec's precondition ({exc})",
                                 impl_call, lambda: spec_call(pre))
            return False
        before = self.snapshot()
        try:
            result = impl_call()
        except self.rejection as exc:
            if self.keys_failing:
                raise
            self.fail("REFINEMENT", f"{rid}: allocate_slots raised {exc!r}; the spec accepts the call")
            if self.snapshot() != before:
                self.fail("INV-ATOMIC", f"{rid}: allocate_slots raised and changed the state")
            return False
        if result is not None:
            self.answer("allocate", result, page_ids_problem(result, self.config.num_pages))
        got = None if result is None else page_ids_of(result)
        if got is None and want is None and "window-free-on-failure" in self.options.waivers:
            pre = want_state = spec.remove_skipped(pre, rid, view.num_computed_tokens)
        elif got is None and self.snapshot() != before:
            self.fail("INV-ATOMIC", f"{rid}: allocate_slots returned None and changed the state")
        if got is not None:
            self.check_new_pages(rid, got)
            if self.follow_choice and want is not None:
                want_state, want = spec_call(self.choose_like_impl(pre, rid, got))
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
          lora=st.sampled_from(LORA_CHOICES), mm=st.sampled_from(MM_CHOICES),
          logprobs=st.sampled_from((False,) * 7 + (True,)))
    def add_request(self, prompt: tuple[int, ...], salt: str | None, lora: LoraChoice, mm: Any,
                    logprobs: bool) -> None:
        features = self.options.features
        if "images" not in features or (mm and mm[0][1] + mm[0][2] > len(prompt)):
            mm = ()
        if "lora" not in features:
            lora = None
        name, path = lora if isinstance(lora, tuple) else (None, None)
        self.new_request(spec.RequestView(
            f"r{self.next_id}", prompt, cache_salt=salt if "salt" in features else None,
            lora_id=lora if isinstance(lora, int) else None, lora_name=name, lora_path=path, mm_features=mm,
            prompt_logprobs=logprobs and "logprobs" in features))
        self.check()

    def named_lora_requests(self) -> list[str]:
        return sorted(rid for rid, tracked in self.requests.items() if tracked.view.lora_name is not None)

    @precondition(lambda self: len(self.requests) < MAX_LIVE_REQUESTS and self.named_lora_requests())
    @rule(data=st.data())
    def add_repointed_request(self, data: st.DataObject) -> None:
        """A live request's text (prompt and output so far) again under its adapter's name at one of the two paths: at
        the same path it may hit the request's pages; at the other (the name re-pointed at other
        weights) it must not, as that KV was computed with the old weights."""
        view = self.view(data.draw(st.sampled_from(self.named_lora_requests()), label="same prompt as"))
        name, path = data.draw(st.sampled_from([c for c in LORA_CHOICES if isinstance(c, tuple)]), label="lora")
        self.new_request(replace(view, request_id=f"r{self.next_id}", num_computed_tokens=0, lora_name=name,
                                 lora_path=path))
        self.check()

    def quotable(self) -> list[str]:
        """Requests with text after their first page to quote (see `add_quoting_request`)."""
        return sorted(rid for rid, tracked in self.requests.items() if len(tracked.view.tokens) >= 2 * QUOTE_PAGE)

    @precondition(lambda self: len(self.requests) < MAX_LIVE_REQUESTS and self.quotable())
    @rule(data=st.data())
    def add_quoting_request(self, data: st.DataObject) -> None:
        """A prompt that quotes a live request's text (prompt or decoded output) from a page
        boundary after its first page, plus one token, as a user pastes an answer into a new
        chat. Its first page has the tokens of that page in another context, so a manager that
        keys a page without its chain predecessor gives a false hit (how eSurge's Q1 is reached
        in every windowed layout: a decoded page keyed after its window dropped its
        predecessors)."""
        tokens = self.view(data.draw(st.sampled_from(self.quotable()), label="quoted")).tokens
        start = data.draw(st.sampled_from(range(QUOTE_PAGE, len(tokens) - QUOTE_PAGE + 1, QUOTE_PAGE)), label="from")
        self.new_request(spec.RequestView(f"r{self.next_id}", tokens[start:] + (OUTSIDE_TOKEN,)))
        self.check()

    def new_request(self, view: spec.RequestView) -> None:
        self.next_id += 1
        self.requests[view.request_id] = Tracked(view)
        self.waiting.append(view.request_id)

    def draw_hint(self, data: st.DataObject, rid: str) -> int | None:
        """A DP shard hint for a call about ``rid`` (None without DP). A request holding pages
        is also given hints, which must not move it off its shard (unless waived)."""
        if self.dp is None or (self.spec.entry(rid) is not None and "shard-inference" in self.options.waivers):
            return None
        return data.draw(st.sampled_from((None, 0, 1)), label="hint")

    def draw_step_dp(self, data: st.DataObject, rid: str) -> tuple[int | None, bool]:
        """The DP arguments of a scheduler step for ``rid``: a hint (`draw_hint`), and for a
        request holding pages sometimes no DP argument at all (``plain``), as a scheduler that
        names the shard only at admission calls (the call a decode fast path takes). Not with
        the ``per-call-dp-size`` or ``shard-inference`` waiver: such a manager learns the shard
        from each call."""
        if self.dp is not None and self.plain_calls and self.spec.entry(rid) is not None and data.draw(
                st.sampled_from((False, False, True)), label="no DP arguments"):
            return None, True
        return self.draw_hint(data, rid), False

    @precondition(lambda self: self.waiting)
    @rule(data=st.data(), chunk=st.integers(1, 12), lookahead=st.sampled_from((0, 0, 2)))
    def admit(self, data: st.DataObject, chunk: int, lookahead: int) -> None:
        """Prefix lookup, then allocate the first prefill chunk (eSurge's waiting-queue path)."""
        rid = data.draw(st.sampled_from(self.waiting))
        self.admit_request(rid, chunk, lookahead, self.draw_hint(data, rid))
        self.check()

    def admit_request(self, rid: str, chunk: int, lookahead: int, hint: int | None) -> None:
        pages, hit = self.lookup(rid, hint)
        num_new = min(chunk, self.view(rid).num_tokens - hit.num_tokens)
        if num_new >= 1 and not self.failures and self.allocate(
                rid, num_new, hit.num_tokens, pages, hit.pages, lookahead, hint=hint):
            self.set_computed(rid, hit.num_tokens + num_new)
            self.waiting.remove(rid)
            self.running.append(rid)

    @precondition(lambda self: self.running)
    @rule(data=st.data(), rounds=st.integers(1, MAX_ROUNDS))
    def schedule(self, data: st.DataObject, rounds: int) -> None:
        """``rounds`` scheduler steps, each checked. In a step each running request, oldest
        first, gets a prefill chunk or one decode token (plus speculative lookahead slots); a
        request the pool cannot serve is preempted (freed, to be recomputed later)."""
        for _ in range(rounds):
            for rid in list(self.running):
                chunk, lookahead, delay, block = data.draw(STEP_DRAWS, label=f"{rid} step")
                self.step_request(rid, chunk, lookahead, delay, block, *self.draw_step_dp(data, rid))
                if self.failures:
                    break
            self.check()

    def decode_token(self, rid: str, block: int) -> None:
        """Append one sampled token. A page that decoding starts copies block ``block`` (drawn
        at its first token; ``len(BLOCKS)`` means tokens outside every block), so a decoded page
        can equal a later prompt's page, as real outputs repeat text (how eSurge's Q1 false hit
        is reached)."""
        tracked = self.requests[rid]
        tokens = tracked.view.tokens
        position = len(tokens) % len(BLOCKS[0])
        if position == 0 or tracked.decode_block is None:
            tracked.decode_block = block
        token = BLOCKS[tracked.decode_block][position] if tracked.decode_block < len(BLOCKS) else OUTSIDE_TOKEN
        tracked.view = replace(tracked.view, tokens=tokens + (token,))

    def step_request(self, rid: str, chunk: int, lookahead: int, delay: bool, block: int,
                     hint: int | None = None, plain: bool = False) -> None:
        view = self.view(rid)
        if view.num_computed_tokens == view.num_tokens:
            if view.num_tokens >= self.config.max_model_len:
                self.finish_request(rid, aborted=False)
                return
            self.decode_token(rid, block)
            view = self.view(rid)
        num_new = min(chunk, view.num_tokens - view.num_computed_tokens)
        if self.allocate(rid, num_new, lookahead=lookahead, delay=delay, hint=hint, plain=plain):
            self.set_computed(rid, view.num_computed_tokens + num_new)
        elif not self.failures:
            self.preempt_request(rid)

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def preempt(self, data: st.DataObject) -> None:
        self.preempt_request(data.draw(st.sampled_from(self.running)))
        self.check()

    def preempt_request(self, rid: str) -> None:
        self.impl.free(self.native(rid))
        self.spec = spec.free_request(self.spec, rid)
        self.set_computed(rid, 0)
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
        """The request is done (stopped or aborted): free its pages, forget its keys."""
        tracked = self.requests.pop(rid)
        if tracked.native is not None:
            self.impl.free(tracked.native)
            self.impl.finish(tracked.native)
        self.spec = spec.free_page_hashes(spec.free_request(self.spec, rid), rid)
        for queue in (self.waiting, self.running):
            if rid in queue:
                queue.remove(rid)

    @precondition(lambda self: self.running and "cache-calls" in self.options.features)
    @rule(data=st.data(), back=st.integers(0, 6))
    def cache_computed(self, data: st.DataObject, back: int) -> None:
        """The async scheduler's ``cache_pages(request, computed - placeholders)``."""
        rid = data.draw(st.sampled_from(self.running))
        view = self.view(rid)
        n = max(0, view.num_computed_tokens - back)
        if self.spec.entry(rid) is None:  # running without pages: no cache group
            self.expect_rejected(f"cache_pages({rid}) without pages", lambda: self.impl.cache(self.native(rid), n),
                                 lambda: spec.cache_pages(self.spec, view, n))
        else:
            self.impl.cache(self.native(rid), n)
            self.spec = spec.cache_pages(self.spec, view, n)
        self.check()

    @rule()
    def reset_prefix_cache(self) -> None:
        self.apply_reset()
        self.check()

    def apply_reset(self) -> None:
        """``reset_prefix_cache`` on both sides; their answers must agree. A reset that happened
        drops every key, so the learnt digest-to-content renaming starts over."""
        got = self.impl.reset()
        self.answer("reset", got, flag_problem(got))
        self.spec, want = spec.reset_prefix_cache(self.spec)
        if got != want:
            self.fail("REFINEMENT", f"reset_prefix_cache returned {got}, spec {want}")
        if want:
            self.forward.clear()
            self.backward.clear()

    # ---- bad inputs -------------------------------------------------------------------

    @precondition(lambda self: self.options.bad_inputs and self.requests)
    @rule(data=st.data(), case=st.sampled_from(BAD_CALLS))
    def bad_input(self, data: st.DataObject, case: str) -> None:
        """One invalid call about a request the case applies to (with or without pages); both
        sides reject it and the implementation changes nothing."""
        fits = [rid for rid in sorted(self.requests) if self.bad_case_fits(rid, case)]
        if fits:
            rid = data.draw(st.sampled_from(fits))
            calls = self.bad_call(rid, case)
            if calls is not None:
                self.expect_rejected(f"{case} for {rid} ({BAD_CALL_TEXT[case]})", *calls)
        self.check()

    def bad_case_fits(self, rid: str, case: str) -> bool:
        """Whether ``case`` can be sent about ``rid``: it holds pages (or none) as the case
        needs, and for an own-hit case the spec says its lookup hits."""
        held = self.spec.entry(rid) is not None
        if (case in NEEDS_PAGES and not held) or (case in NEEDS_NO_PAGES and held):
            return False
        return case not in OWN_HIT_CASES or spec.lookup(self.spec, self.view(rid), None, self.dp).num_tokens > 0

    def bad_call(self, rid: str, case: str) -> tuple[Callable[[], Any], Callable[[], Any]] | None:
        """The (implementation, spec) calls of one bad-input case about a request it fits
        (`bad_case_fits`), or None when ``case`` does not apply to this layout or state."""
        view, s, config = self.view(rid), self.spec, self.config
        entry = s.entry(rid)
        if case in OWN_HIT_CASES:
            return self.malformed_own_hit(rid, case == "own-hit-edited")
        if case == "hits-with-pages" and entry is not None:
            ps = config.groups[0].page_size
            own = tuple((pages[0],) if config.groups[g].page_size == ps else () for g, pages in enumerate(entry.pages))
            if any(len(group) * config.groups[g].page_size != ps for g, group in enumerate(own)):
                return None
            return (lambda: self.impl.allocate(self.native(rid), 1, ps, own, 0, False),
                    lambda: spec.allocate_slots(s, view, 1, ps, own))
        if case in ("cache-too-far", "cache-no-pages"):
            n = view.num_tokens + 1 if case == "cache-too-far" else 1
            return lambda: self.impl.cache(self.native(rid), n), lambda: spec.cache_pages(s, view, n)
        if case == "page-ids":
            return lambda: self.impl.page_ids(rid), lambda: spec.page_ids(s, rid)
        num_new, computed_new, lookahead, dp_size = {
            "zero": (0, 0, 0, self.dp),
            "negative": (1, -4, 0, self.dp),
            "too-long": (config.max_model_len + 1 - view.num_computed_tokens, 0, 0, self.dp),
            "lookahead": (1, 0, -1, self.dp),
            "dp-size": (1, 0, 0, self.wrong_dp),
        }[case]
        if case == "dp-size" and (dp_size is None or "per-call-dp-size" in self.options.waivers):
            return None  # no DP size other than the manager's divides num_pages, or waived
        return (lambda: self.impl.allocate(self.native(rid), num_new, computed_new, None, lookahead, False,
                                           data_parallel_size=dp_size),
                lambda: spec.allocate_slots(s, view, num_new, computed_new, None, lookahead,
                                            data_parallel_size=dp_size))

    def malformed_own_hit(self, rid: str, edit: bool) -> tuple[Callable[[], Any], Callable[[], Any]] | None:
        """The calls claiming ``rid``'s fresh lookup result (the manager's own object) with a
        shape that does not fit: a token count one page short of what it covers, or (``edit``)
        the covered count after the last page id of a group was removed from the object itself
        (only when the result exposes its id lists as Python lists, as verikv's ``page_ids``).
        None when the lookup hits nothing."""
        pages, hit = self.lookup(rid, None)
        if hit.num_tokens == 0 or self.failures:
            return None
        claimed = max(0, hit.num_tokens - self.config.groups[0].page_size)
        if edit:
            groups = getattr(pages, "page_ids", pages)
            edited = next((ids for ids in groups if isinstance(ids, list) and ids), None)
            if edited is None:
                return None
            edited.pop()
            claimed = hit.num_tokens
        view, s, spec_hits = self.view(rid), self.spec, page_ids_of(pages)
        return (lambda: self.impl.allocate(self.native(rid), 1, claimed, pages, 0, False, data_parallel_size=self.dp),
                lambda: spec.allocate_slots(s, view, 1, claimed, spec_hits, data_parallel_size=self.dp))


    # ---- failing key computation -----------------------------------------------------

    @precondition(lambda self: self.options.key_failures and self.requests)
    @rule(data=st.data(), how=st.sampled_from(KEY_FAILURES), after=st.integers(1, 3))
    def failing_key_computation(self, data: st.DataObject, how: str, after: int) -> None:
        """A scheduler call during which key computation fails: the hash function raises on its
        ``after``-th call, or the request got an attribute no key can be made from. The manager
        must reject it with a typed error (at the assignment or at the call) and change nothing
        (INV-ATOMIC); the spec state stays as it was."""
        rid = data.draw(st.sampled_from(sorted(self.requests)))
        if how in BAD_ATTRIBUTES:
            self.call_with_bad_attribute(data, rid, *BAD_ATTRIBUTES[how])
        else:
            self.impl.arm_key_failure(after)
            try:
                self.call_while_keys_fail(data, rid, how)
            finally:
                self.impl.disarm_key_failure()
        self.check()

    def call_with_bad_attribute(self, data: st.DataObject, rid: str, attribute: str, value: Any) -> None:
        native, before = self.native(rid), self.snapshot()
        old = getattr(native, attribute)
        try:
            setattr(native, attribute, value)
        except VeriKVError:  # validated on assignment: the request keeps its old value
            if getattr(native, attribute) != old or self.snapshot() != before:
                self.fail("INV-ATOMIC", f"{attribute}={value!r} rejected, yet something changed")
            return
        try:
            if self.call_while_keys_fail(data, rid, f"{attribute}={value!r}"):
                self.fail("REFINEMENT", f"{rid}: a call with {attribute}={value!r} was accepted")
        finally:
            setattr(native, attribute, old)

    def call_while_keys_fail(self, data: st.DataObject, rid: str, how: str) -> bool:
        """Admit (waiting) or step (running) ``rid`` while its keys cannot be computed. True if
        no call raised; on an error, check it is typed and that nothing changed."""
        before, spec_before = self.snapshot(), self.spec
        self.keys_failing = True
        try:
            if rid in self.waiting:
                self.admit_request(rid, data.draw(st.integers(1, 12), label="chunk"), 0, None)
            else:
                self.step_request(rid, data.draw(st.integers(1, 8), label="chunk"), 0, False,
                                  data.draw(st.integers(0, len(BLOCKS)), label="block"))
            return True
        except Exception as exc:  # every error is judged: typed, and nothing changed
            if not isinstance(exc, (KeyFailure, VeriKVError)):
                self.fail("REFINEMENT", f"{how}: {rid}'s call raised {exc!r}, not a typed verikv error")
            if self.snapshot() != before:
                self.fail("INV-ATOMIC", f"{how}: {rid}'s call raised {exc!r} and changed the state")
            self.spec = spec_before
            return False
        finally:
            self.keys_failing = False

    # ---- the batched step: one call, equal to the same single calls in order ----------

    def batch_manager(self) -> Any:
        """The manager behind the adapter when it has ``allocate_slots_batch`` (verikv's), else None."""
        manager = getattr(self.impl, "manager", None)
        return manager if callable(getattr(manager, "allocate_slots_batch", None)) else None

    @precondition(lambda self: self.running and self.batch_manager() is not None)
    @rule(data=st.data(), lookahead=st.sampled_from((0, 0, 2, 3)), delay=st.sampled_from((False, False, True)))
    def batch_step(self, data: st.DataObject, lookahead: int, delay: bool) -> None:
        """A scheduler step as one ``allocate_slots_batch`` call over some running requests (each
        a prefill chunk, or one decoded token when its tokens are all computed)."""
        ready = [rid for rid in self.running if self.view(rid).num_tokens < self.config.max_model_len]
        if ready:
            rids = data.draw(st.lists(st.sampled_from(ready), min_size=1, unique=True), label="batch")
            counts = []
            for rid in rids:
                view = self.view(rid)
                if view.num_computed_tokens == view.num_tokens:
                    self.decode_token(rid, data.draw(st.integers(0, len(BLOCKS)), label=f"{rid} block"))
                    view = self.view(rid)
                chunk = data.draw(st.integers(1, 8), label=f"{rid} chunk")
                counts.append(min(chunk, view.num_tokens - view.num_computed_tokens))
            self.allocate_batch(rids, counts, lookahead, delay)
        self.check()

    def singles_on_a_copy(self, natives: list[Any], counts: list[int], lookahead: int, delay: bool
                          ) -> tuple[tuple[tuple[tuple[int, ...], ...] | None, ...], Any]:
        """The single ``allocate_slots`` calls a batch stands for, in order, on a deep copy of the
        manager (and of the requests it holds): their results, and the copy after them."""
        twin, twin_natives = copy.deepcopy((self.batch_manager(), natives))
        return self.single_calls(twin, twin_natives, counts, lookahead, delay), twin

    def single_calls(self, manager: Any, natives: list[Any], counts: list[int], lookahead: int, delay: bool
                     ) -> tuple[tuple[tuple[int, ...], ...] | None, ...]:
        """``allocate_slots`` for each request and count in order on ``manager``; a call that
        returns None must change nothing there (INV-ATOMIC)."""
        results = []
        for native, n in zip(natives, counts):
            before = abstract_manager(manager)
            result = page_ids_or_none(manager.allocate_slots(native, n, 0, None, lookahead, delay,
                                                             data_parallel_size=self.dp))
            if result is None and abstract_manager(manager) != before:
                self.fail("INV-ATOMIC", f"{native.request_id}: allocate_slots (a single call of a batch) returned "
                                        "None and changed the state")
            results.append(result)
        return tuple(results)

    def spec_batch_like_impl(self, views: list[spec.RequestView], counts: list[int],
                             got: tuple[tuple[tuple[int, ...], ...] | None, ...], lookahead: int, delay: bool
                             ) -> tuple[spec.ManagerState, tuple[tuple[tuple[int, ...], ...] | None, ...]]:
        """The spec's batch as the fold of its `allocate_slots`, each element taking the pages the
        implementation chose for it (`choose_like_impl`): the policy-free comparison of a batch."""
        s, want = self.spec, []
        for view, n, new in zip(views, counts, got):
            pre = s if new is None else self.choose_like_impl(s, view.request_id, new)
            s, one = spec.allocate_slots(pre, view, n, 0, None, lookahead, delay, None, self.dp)
            want.append(one)
        return s, tuple(want)

    def allocate_batch(self, rids: list[str], counts: list[int], lookahead: int, delay: bool) -> None:
        """``allocate_slots_batch`` on the manager and, on a copy of it, the same single calls in
        order: their results, states and key lists must be equal, and equal to the spec's batch
        (the fold of its `allocate_slots`); a batch the spec rejects must be rejected whole,
        changing nothing. A request whose allocation succeeded has computed its tokens."""
        manager, views = self.batch_manager(), [self.view(rid) for rid in rids]
        natives = [self.native(rid) for rid in rids]

        def batch_call() -> Any:
            return manager.allocate_slots_batch(natives, counts, lookahead, delay, data_parallel_size=self.dp)

        try:
            want_state, want = spec.allocate_slots_batch(self.spec, views, counts, lookahead, delay, self.dp)
        except PreconditionError as exc:
            self.expect_rejected(f"allocate_slots_batch({rids}) outside the spec's precondition ({exc})", batch_call,
                                 lambda: spec.allocate_slots_batch(self.spec, views, counts, lookahead, delay, self.dp))
            return
        singles, twin = self.singles_on_a_copy(natives, counts, lookahead, delay)
        got = tuple(page_ids_or_none(result) for result in batch_call())
        if self.follow_choice:
            want_state, want = self.spec_batch_like_impl(views, counts, got, lookahead, delay)
        if got != singles:
            self.fail("REFINEMENT", f"allocate_slots_batch({rids}, {counts}) returned {got}; "
                                    f"the single calls {singles}")
        elif abstract_manager(manager) != abstract_manager(twin) or any(
                manager.page_hashes_of(rid) != twin.page_hashes_of(rid) for rid in self.requests):
            self.fail("REFINEMENT", f"allocate_slots_batch({rids}, {counts}) left another state than the single calls")
        if got != want:
            self.fail("REFINEMENT", f"allocate_slots_batch({rids}, {counts}) returned {got}, spec {want}")
        for rid, new in zip(rids, got):
            if new is not None:
                self.check_new_pages(rid, new)
        self.spec = want_state
        for rid, view, n, new in zip(rids, views, counts, want):
            if new is not None:
                self.set_computed(rid, view.num_computed_tokens + n)



def machine_factory(layout: Layout, make_adapter: AdapterFactory = CacheManagerAdapter,
                    options: MachineOptions = MachineOptions(),
                    machine: type[ManagerMachine] = ManagerMachine) -> Callable[[], ManagerMachine]:
    """The zero-argument factory ``run_state_machine_as_test`` wants, for one layout (a
    `Layout`): ``machine`` (`ManagerMachine` or a subclass) checks adapters ``make_adapter``
    builds, as ``options`` (`MachineOptions`) say."""
    _check_machine_arguments(layout, make_adapter, options, machine)

    def make() -> ManagerMachine:
        return machine(layout, make_adapter, options)
    make.__name__ = make.__qualname__ = f"{machine.__name__}[{layout.name}]"
    return make


def _check_machine_arguments(layout: Any, make_adapter: Any, options: Any, machine: Any) -> None:
    """`InvalidArgumentError` unless the arguments are what `machine_factory` documents."""
    checked_instance(layout, Layout, "layout")
    checked_factory(make_adapter, "make_adapter")
    checked_instance(options, MachineOptions, "options")
    if not (isinstance(machine, type) and issubclass(machine, ManagerMachine)):
        raise InvalidArgumentError(f"machine must be ManagerMachine or a subclass, got {shown(machine)}")


def detection_settings() -> settings:
    """Bounded, reproducible settings for showing a mutant is caught (no shrinking: only the
    names of the failed checks are wanted)."""
    return settings(max_examples=200, stateful_step_count=60, deadline=None, derandomize=True,
                    database=None, print_blob=False, phases=(Phase.explicit, Phase.generate),
                    suppress_health_check=list(HealthCheck))


def find_manager_failure(make_manager: Callable[[spec.ManagerConfig], Any], layout: Layout,
                         run_settings: settings | None = None,
                         machine: type[ManagerMachine] = ManagerMachine) -> list[str]:
    """Run the manager machine (``machine``: it or a subclass) for ``layout`` against
    ``make_manager``; the names of the checks that failed, or []. An unexpected exception
    escaping the machine is ``crash:<type>``. A ``make_manager`` that cannot be called or builds
    no manager (one lacking `CacheManagerAdapter`'s methods), a ``layout`` that is not a `Layout`
    or ``run_settings`` that are not Hypothesis settings are an `InvalidArgumentError`, before
    anything runs."""
    checked_factory(make_manager, "make_manager")
    checked_instance(layout, Layout, "layout")
    if run_settings is not None:
        checked_instance(run_settings, settings, "run_settings")
    built_with(make_manager, (layout.config,), _MANAGER_METHODS, "manager (verikv.CacheManager)")
    make = machine_factory(layout, lambda config: CacheManagerAdapter(config, make_manager), machine=machine)
    try:
        run_state_machine_as_test(make, settings=run_settings or detection_settings())  # type: ignore[arg-type]
    except ConformanceFailure as failure:
        return failure.names
    except Exception as exc:  # a crash is a detection too; report it by type
        return [f"crash:{type(exc).__name__}"]
    return []

