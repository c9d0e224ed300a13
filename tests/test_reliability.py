"""Regressions (manager side): a rejected call changes nothing, for every input.

Each test reproduces one finding of the hostile-input run and checks the typed error and an
unchanged full snapshot (abstract state, key lists, statistics, pending events, DP size).
"""

from __future__ import annotations

import json
from dataclasses import astuple
from typing import Any

import numpy as np
import pytest

from verikv import (
    CacheGroupSpec,
    CacheManager,
    CachePages,
    FullAttentionSpec,
    HashingError,
    InvalidArgumentError,
    Request,
    SlidingWindowSpec,
    VeriKVError,
)
from verikv.coordinators import get_kv_cache_coordinator
from verikv.free_queue import MAX_PAGE_ID
from verikv.hashing import PageHasher, encode_canonical, hash_page_tokens
from verikv.spec.abstraction import abstract_manager

KW: dict[str, Any] = dict(num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False)
FULL = CacheGroupSpec(FullAttentionSpec(page_size=4, **KW))
SLIDING = CacheGroupSpec(SlidingWindowSpec(page_size=4, sliding_window=8, **KW))
SURROGATE = json.loads('"\\ud800"')  # what a JSON request body can carry


def manager(num_pages: int = 8, groups: list[CacheGroupSpec] | None = None, **kw: Any) -> CacheManager:
    kw.setdefault("hash_seed", 0)
    return CacheManager(num_pages, [FULL] if groups is None else groups, 64, enable_kv_events=True, **kw)


def snapshot(m: CacheManager) -> tuple[Any, ...]:
    """Everything a rejected call must leave as it was."""
    events = m.page_pool._events
    assert events is not None  # the managers here record KV events
    return (
        abstract_manager(m),
        {rid: m.page_hashes_of(rid) for rid in m.hashed_request_ids()},
        astuple(m.prefix_cache_stats),
        list(events._events),  # pending KV events, read without draining
        m.data_parallel_size,
    )


def rejected(m: CacheManager, call: Any, error: type[Exception] = InvalidArgumentError) -> None:
    before = snapshot(m)
    with pytest.raises(error):
        call()
    assert snapshot(m) == before


def builtin_only(value: Any) -> bool:
    """True if ``value`` is built from exact builtin immutable types only."""
    if type(value) in (tuple, PageHashTypes.PageHash, PageHashTypes.PageHashWithGroupId):
        return all(builtin_only(v) for v in value)
    return value is None or type(value) in (int, str, bytes, bool, float)


class PageHashTypes:
    from verikv.hashing import PageHash, PageHashWithGroupId


# ---- defect 1: keys that cannot change -------------------------------------------------------


class UnstableStr(str):
    """A str whose hash changes when ``salt`` does (passes every isinstance check)."""

    salt = 0

    def __hash__(self) -> int:
        return hash((str(self), self.salt))


def test_a_salt_whose_hash_changes_cannot_corrupt_the_cache() -> None:
    m = manager()
    salt = UnstableStr("t")
    r = Request("r", range(13), cache_salt=salt)
    assert type(r.cache_salt) is str  # normalised at the boundary
    m.allocate_slots(r, 13)
    m.free(r)
    salt.salt = 1
    assert m.allocate_slots(Request("f", [9] * 28), 28) is not None  # evicts r's keys cleanly
    assert m.usage == 1.0 and m.page_pool.get_num_free_pages() == 0
    m.free(Request("f", [1]))
    assert m.usage == 0.0  # every page came back (INV-CONSERVE)


def test_cached_keys_hold_only_exact_builtins() -> None:
    class Int(int):
        def __hash__(self) -> int:
            return 7

    m = manager(16)
    r = Request("r", np.arange(9), cache_salt=UnstableStr("s"), lora_id=Int(3),
                mm_features=[(UnstableStr("img"), 1, 2), (b"raw", 5, 1), (np.int64(5), 6, 1)])  # type: ignore[list-item]  # numpy integers are accepted at run time
    m.allocate_slots(r, 9)
    keys = [m.page_pool.key_of(p) for p in m.get_page_ids("r")[0]]
    assert keys[0] is not None and keys[1] is not None
    assert all(builtin_only(k) for k in keys if k is not None)
    assert type(r.lora_id) is int and all(type(f.mm_hash) in (str, bytes, int) for f in r.mm_features)
    assert all(type(t) is int for t in r.all_token_ids)


@pytest.mark.parametrize("field", ["cache_salt", "mm_features"])
def test_lone_surrogates_are_rejected_at_construction_and_assignment(field: str) -> None:
    value: Any = SURROGATE if field == "cache_salt" else [(SURROGATE, 0, 1)]
    with pytest.raises(InvalidArgumentError):
        Request("r", range(9), **{field: value})
    r = Request("r", range(9))
    with pytest.raises(InvalidArgumentError):
        setattr(r, field, value)
    assert getattr(r, field) in (None, ())


def test_surrogate_seed_is_rejected() -> None:
    with pytest.raises(InvalidArgumentError):
        PageHasher(seed=SURROGATE)
    with pytest.raises(InvalidArgumentError):
        CacheManager(8, [FULL], 64, hash_seed=SURROGATE)
    with pytest.raises(InvalidArgumentError):
        hash_page_tokens("sha256", None, [1], ("salt", SURROGATE))
    with pytest.raises(InvalidArgumentError):
        encode_canonical(SURROGATE, bytearray())


def test_extra_keys_are_frozen_to_builtins_or_rejected() -> None:
    hasher = PageHasher("builtin", seed=0)
    page = hasher.hash_page(None, [1, 2], [["lora", 1]])  # unhashable under builtin: frozen to tuples
    assert page.extra_keys == (("lora", 1),) and builtin_only(page)
    assert page == hasher.hash_page(None, (1, 2), (("lora", 1),))
    for bad in ({"a": 1}, {1}, float("nan"), object(), bytearray(b"x")):
        with pytest.raises(InvalidArgumentError):
            hasher.hash_page(None, [1], (bad,))
    nested: Any = 1
    for _ in range(100_000):
        nested = [nested]
    with pytest.raises(InvalidArgumentError):
        hasher.hash_page(None, [1], nested)
    with pytest.raises(InvalidArgumentError):
        encode_canonical(nested, bytearray())


# ---- defect 2: keys are computed before anything changes --------------------------------------


class Switch:
    """A builtin-compatible hash function that fails (or returns a user object) on demand."""

    def __init__(self) -> None:
        self.mode = "ok"

    def __call__(self, value: Any) -> Any:
        if self.mode == "raise":
            raise ZeroDivisionError("boom")
        if self.mode == "object":
            return object()  # a user object as a hash value: its hash could change
        return hash(value)


@pytest.mark.parametrize("mode", ["raise", "object"])
def test_a_failing_hash_function_leaves_allocate_slots_atomic(mode: str) -> None:
    fn = Switch()
    m = manager(hash_scheme=fn)
    fn.mode = mode
    r = Request("r", range(9))
    rejected(m, lambda: m.allocate_slots(r, 9), HashingError)
    assert m.request_ids() == [] and m.hashed_request_ids() == []


def test_a_failing_hash_function_leaves_no_key_list_behind_on_lookup() -> None:
    fn = Switch()
    m = manager(hash_scheme=fn)
    fn.mode = "raise"
    rejected(m, lambda: m.get_computed_pages(Request("r", range(9))), HashingError)
    assert m.hashed_request_ids() == []


@pytest.mark.parametrize("groups", [[FULL], [FULL, SLIDING]], ids=["decode-fast-path", "hybrid"])
def test_a_failing_hash_function_on_a_decode_step_changes_nothing(groups: list[CacheGroupSpec]) -> None:
    fn = Switch()
    m = manager(16, groups, hash_scheme=fn)
    r = Request("r", range(7))
    m.allocate_slots(r, 7)
    r.num_computed_tokens = 7
    r.append_output_token_ids(1)  # the 8th token fills page 1: this step caches it
    fn.mode = "raise"
    rejected(m, lambda: m.allocate_slots(r, 1), HashingError)
    r.num_computed_tokens = 8
    r.append_output_token_ids(2)  # the 9th token needs a new page (and caching is due again)
    rejected(m, lambda: m.allocate_slots(r, 1), HashingError)
    fn.mode = "ok"
    assert m.allocate_slots(r, 1) is not None


def test_a_failing_hash_function_in_cache_pages_changes_nothing() -> None:
    fn = Switch()
    m = manager(hash_scheme=fn)
    r = Request("r", range(9))
    m.allocate_slots(r, 9, delay_cache_pages=True)
    fn.mode = "raise"
    rejected(m, lambda: m.cache_pages(r, 8), HashingError)


def test_a_stale_key_list_survives_a_failed_lookup_of_its_successor() -> None:
    fn = Switch()
    m = manager(hash_scheme=fn)
    old = Request("r", range(9))
    m.get_computed_pages(old)
    fn.mode = "raise"
    rejected(m, lambda: m.get_computed_pages(Request("r", range(9))), HashingError)
    assert len(m.page_hashes_of("r")) == 2


def test_invalid_attribute_is_rejected_on_assignment_not_after_allocation() -> None:
    m = manager()
    r = Request("q", range(9))
    with pytest.raises(InvalidArgumentError):
        r.lora_id = "x"  # type: ignore[assignment]
    assert r.lora_id is None
    assert m.allocate_slots(r, 9) is not None


# ---- defect 3: stale computed tokens ----------------------------------------------------------


def test_computed_tokens_without_pages_are_rejected() -> None:
    m = manager()
    a = Request("a", range(9))
    m.allocate_slots(a, 9)
    a.num_computed_tokens = 9
    m.free(a)  # preempted, but the scheduler forgot to reset num_computed_tokens
    rejected(m, lambda: m.allocate_slots(a, 1))
    a.num_computed_tokens = 0
    assert m.allocate_slots(a, 9) is not None


def test_hits_passed_in_the_same_call_are_not_stale() -> None:
    m = manager()
    a = Request("a", range(9))
    m.allocate_slots(a, 9)
    b = Request("b", range(9))
    hits, n = m.get_computed_pages(b)
    assert n == 8
    assert m.allocate_slots(b, 1, n, hits) is not None


def test_zero_groups_keep_counting_computed_tokens() -> None:
    m = CacheManager(8, [], 64)
    r = Request("r", range(9))
    assert m.allocate_slots(r, 9) is not None
    r.num_computed_tokens = 9
    assert m.allocate_slots(r, 1) is not None  # nothing is ever held: nothing can be stale


# ---- defect 4: request fields validated on assignment ------------------------------------------


@pytest.mark.parametrize(("field", "value"), [
    ("request_id", 5), ("request_id", None), ("request_id", ""),
    ("lora_id", -1), ("lora_id", True), ("lora_id", 1.0), ("lora_id", "x"),
    ("cache_salt", 5), ("cache_salt", bytearray(b"x")),
    ("mm_features", [("img", 0, 99)]), ("mm_features", np.array([1, 0, 2])), ("mm_features", np.array(3)),
    ("num_computed_tokens", -1), ("num_computed_tokens", -(2**70)), ("num_computed_tokens", 1.0),
    ("status", 3), ("prompt_logprobs", 1),
])
def test_request_fields_are_validated_on_assignment(field: str, value: Any) -> None:
    r = Request("r", range(9))
    before = getattr(r, field)
    with pytest.raises(InvalidArgumentError):
        setattr(r, field, value)
    assert getattr(r, field) == before


@pytest.mark.parametrize(("field", "value"), [
    ("request_id", "other"), ("cache_salt", "t"), ("lora_id", 3), ("mm_features", [("img", 0, 1)])])
def test_identity_is_frozen_while_pages_are_held(field: str, value: Any) -> None:
    m = manager()
    r = Request("r", range(9))
    m.allocate_slots(r, 9)
    with pytest.raises(InvalidArgumentError):
        setattr(r, field, value)
    m.free(r)  # pages no longer held: the request may change
    setattr(r, field, value)
    assert getattr(r, field) == value or field == "mm_features"
    assert m.page_pool.get_num_free_pages() == 7


def test_changed_identity_drops_the_kept_keys_so_no_stale_hit_is_served() -> None:
    m = manager()
    r = Request("r", range(9))
    m.allocate_slots(r, 9)
    m.free(r)
    r.lora_id = 5  # same object, same tokens, another adapter: its KV is not r's old KV
    hits, n = m.get_computed_pages(r)
    assert n == 0 and hits.get_page_ids() == ([],)
    kept = list(m.page_hashes_of("r"))
    assert kept and kept == m.hasher.hash_request(r, 4, stop=len(kept))  # the keys of lora 5


# ---- defect 5: typed errors --------------------------------------------------------------------


def test_num_pages_is_bounded_by_int32_page_ids() -> None:
    """One bound, the pool's: ids and free-list links (up to three per page with DP shards) are int32."""
    for build in (lambda n: CacheManager(n, [FULL], 64),
                  lambda n: get_kv_cache_coordinator(n, [FULL], 64, False, True)):
        for n in (MAX_PAGE_ID + 2, 2**31):
            with pytest.raises(InvalidArgumentError):
                build(n)
    assert 3 * (MAX_PAGE_ID + 1) <= 2**31 - 1


def test_query_with_a_non_str_id_is_typed() -> None:
    m = manager()
    for call in (m.page_hashes_of, m.get_page_ids, m.num_cached_pages, m.request_shard):
        with pytest.raises(VeriKVError):
            call([1])  # type: ignore[arg-type]


def test_numpy_tokens_are_converted_and_numpy_misuse_is_rejected() -> None:
    r = Request("r", np.arange(5))
    r.append_output_token_ids(np.array([7, 8]))
    r.append_output_token_ids(np.int32(9))  # type: ignore[arg-type]  # numpy integers are accepted at run time
    assert list(r.all_token_ids) == [0, 1, 2, 3, 4, 7, 8, 9]
    assert all(type(t) is int for t in r.all_token_ids)
    for bad in (np.array(3), np.array([1.5]), np.array([[1, 2]])):
        with pytest.raises(InvalidArgumentError):
            r.append_output_token_ids(bad)
        with pytest.raises(InvalidArgumentError):
            Request("x", bad)
    assert r.num_tokens == 8


def test_deep_or_huge_inputs_give_typed_errors() -> None:
    nested: Any = [1]
    for _ in range(100_000):
        nested = [nested]
    huge = 10**5000  # beyond the int-to-str digit limit: messages must not format it
    m = manager()
    r = Request("r", range(9))
    for call in (lambda: Request("x", nested), lambda: Request("x", [huge]), lambda: r.append_output_token_ids(nested),
                 lambda: r.append_output_token_ids(huge), lambda: CachePages(nested), lambda: CachePages([[huge * -1]]),
                 lambda: Request("x", [1], lora_id=-huge), lambda: PageHasher(nested),
                 lambda: m.allocate_slots(r, huge), lambda: m.allocate_slots(r, 1, huge)):
        before = snapshot(m)
        with pytest.raises(VeriKVError):
            call()
        assert snapshot(m) == before


def test_page_extra_keys_rejects_a_negative_page_index() -> None:
    r = Request("r", range(9), lora_id=1)
    hasher = PageHasher(seed=0)
    assert hasher.page_extra_keys(r, 0, 4) == (("lora", 1),)
    for index, size in ((-1, 4), (0, 0), (True, 4), (0, 1.0)):
        with pytest.raises(InvalidArgumentError):
            hasher.page_extra_keys(r, index, size)  # type: ignore[arg-type]


def test_cache_pages_added_to_something_else_is_typed() -> None:
    with pytest.raises(InvalidArgumentError):
        CachePages([[1]]) + 5  # type: ignore[operator]


# ---- eSurge-style data parallelism ----------------------------------------------------


def test_an_untouched_manager_adopts_the_dp_size_of_its_first_dp_call() -> None:
    m = manager(8, hash_seed=None)
    assert m.data_parallel_size == 1
    m.get_computed_pages(Request("r", range(9)), dp_shard_hint=1, data_parallel_size=2)
    assert m.data_parallel_size == 2
    r = Request("r", range(9))
    new = m.allocate_slots(r, 9, dp_shard_hint=1, data_parallel_size=2)
    assert new is not None and all(4 <= p < 8 for p in new.get_page_ids()[0])
    assert m.request_shard("r") == 1
    rejected(m, lambda: m.get_computed_pages(Request("s", range(9)), dp_shard_hint=0, data_parallel_size=4))


def test_a_failed_first_dp_call_adopts_nothing() -> None:
    fn = Switch()
    m = manager(8, hash_scheme=fn)
    fn.mode = "raise"
    rejected(m, lambda: m.get_computed_pages(Request("r", range(9)), dp_shard_hint=0, data_parallel_size=2),
             HashingError)
    assert m.data_parallel_size == 1


def test_a_manager_given_a_dp_size_keeps_it() -> None:
    m = manager(8, data_parallel_size=1)
    rejected(m, lambda: m.get_computed_pages(Request("r", range(9)), dp_shard_hint=0, data_parallel_size=2))


# ---- the layers below the manager check what they are given -------------------------------------


def _layers() -> tuple[CacheManager, Any, Any, list[Any]]:
    m = manager(16, [FULL, SLIDING])
    r = Request("a", range(9))
    m.allocate_slots(r, 9)
    return m, m.coordinator, m.coordinator.single_type_managers[1], list(m.page_hashes_of("a"))


@pytest.mark.parametrize("case", [
    "coord-alloc-hits-foreign", "coord-alloc-hits-shape", "coord-alloc-held-with-hits", "coord-alloc-slots",
    "coord-cache-few-keys", "coord-free-id", "coord-common-unknown", "coord-lookup-negative",
    "group-remove-beyond", "group-alloc-not-a-list", "group-free-not-a-list", "group-alloc-huge",
    "group-cache-bad-keys", "group-lookup-keys", "group-lookup-groups", "group-common-bad-count",
])
def test_coordinator_and_group_managers_reject_bad_arguments_without_change(case: str) -> None:
    m, c, sliding, keys = _layers()
    full_pages, sliding_pages = c.records["a"].pages  # the request's page lists (its record)
    calls = {
        "coord-alloc-hits-foreign": lambda: c.allocate_slots("b", 0, 8, ([99], [])),
        "coord-alloc-hits-shape": lambda: c.allocate_slots("b", 0, 8, ([],)),
        "coord-alloc-held-with-hits": lambda: c.allocate_slots("a", 9, 12, ([1], [])),
        "coord-alloc-slots": lambda: c.allocate_slots("b", 0, -1, None),
        "coord-cache-few-keys": lambda: c.cache_pages("a", keys[:1], 8),
        "coord-free-id": lambda: c.free(["a"]),
        "coord-common-unknown": lambda: c.get_num_common_prefix_pages("zz", 1),
        "coord-lookup-negative": lambda: c.find_longest_cache_hit(keys, -1),
        "group-remove-beyond": lambda: sliding.remove_skipped_pages(sliding_pages, 0, 9),
        "group-alloc-not-a-list": lambda: sliding.allocate_new_pages(tuple(sliding_pages), 16),
        "group-free-not-a-list": lambda: sliding.free("a"),
        "group-alloc-huge": lambda: sliding.allocate_new_pages(sliding_pages, 10**5000),
        "group-cache-bad-keys": lambda: sliding.cache_pages(sliding_pages, 0, ["not a key"] * 3, 12),
        "group-lookup-keys": lambda: sliding.find_longest_cache_hit([[1]] * 3, 8, (1,)),
        "group-lookup-groups": lambda: sliding.find_longest_cache_hit(keys, 8, "x"),
        "group-common-bad-count": lambda: c.single_type_managers[0].get_num_common_prefix_pages(full_pages, 0),
    }
    rejected(m, calls[case], VeriKVError)


def test_status_and_token_view_misuse_is_typed() -> None:
    from verikv import RequestStatus

    with pytest.raises(InvalidArgumentError):
        RequestStatus.is_finished("x")  # type: ignore[arg-type]
    view = Request("r", [1, 2]).all_token_ids
    with pytest.raises(InvalidArgumentError):
        view["a"]  # type: ignore[call-overload]
    with pytest.raises(IndexError):  # the sequence protocol: iteration stops on IndexError
        view[2]
    assert list(view) == [1, 2] and view[-1] == 2 and view[:1] == [1]
