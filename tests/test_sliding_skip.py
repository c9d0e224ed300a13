"""``skip_unreachable_sliding_pages``: vLLM 0.33's policy of not caching the
sliding-window pages that can never serve a hit, as an option that is off by default.

vLLM 0.33 (``SlidingWindowManager.reachable_block_mask``, dense retention, no EAGLE): with the
hit alignment ``A`` (the scheduler block size, the lcm of the groups' block sizes) spanning
``per = A / block_size`` blocks and a hit needing ``need = cdiv(window - 1, block_size)``
blocks, block ``i`` is cached when ``need >= per`` or ``i % per >= per - need``. verikv's rule
counts at least one page per hit (its sliding lookup always needs one), which differs only for a
window of one token.
"""

from __future__ import annotations

import numpy as np
import pytest

from verikv import CacheGroupSpec, CacheManager, FullAttentionSpec, InvalidArgumentError, Request, SlidingWindowSpec
from verikv.coordinators import sliding_page_can_hit

GEOMETRY = dict(num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False)


def groups(full_page: int, sliding_page: int, window: int) -> list[CacheGroupSpec]:
    return [CacheGroupSpec(FullAttentionSpec(page_size=full_page, **GEOMETRY)),  # type: ignore[arg-type]
            CacheGroupSpec(SlidingWindowSpec(page_size=sliding_page, sliding_window=window, **GEOMETRY))]  # type: ignore[arg-type]


def keyed_sliding_pages(m: CacheManager, rid: str) -> list[bool]:
    return [m.page_pool.key_of(p) is not None for p in m.get_page_ids(rid)[1]]


def admit(m: CacheManager, req: Request) -> int:
    hits, n = m.get_computed_pages(req)
    assert m.allocate_slots(req, req.num_tokens - n, n, hits) is not None
    req.num_computed_tokens = req.num_tokens
    return n


@pytest.mark.parametrize(("window", "kept"), [(3, [False, True, False, True]),   # need 1 of per 2
                                              (5, [True, True, True, True]),     # need 2 >= per 2
                                              (1, [False, True, False, True])])  # need max(1, 0) = 1
def test_only_the_last_pages_of_each_hit_unit_are_cached(window: int, kept: list[bool]) -> None:
    m = CacheManager(32, groups(4, 2, window), 64, hash_seed=0, skip_unreachable_sliding_pages=True)
    admit(m, Request("a", list(range(9))))  # 8 full tokens: 4 full sliding pages (of 5), 2 full pages
    assert keyed_sliding_pages(m, "a") == kept + [False]


def test_the_mask_is_vllms_for_a_three_page_unit() -> None:
    # alignment 6 tokens, block 2: per = 3; window 3 -> need 1; window 4 or 5 -> need 2
    assert [sliding_page_can_hit(i, 3, 1) for i in range(6)] == [False, False, True, False, False, True]
    assert [sliding_page_can_hit(i, 3, 2) for i in range(6)] == [False, True, True, False, True, True]
    assert all(sliding_page_can_hit(i, 3, 3) for i in range(6))


def test_off_by_default_and_a_single_sliding_group_caches_every_page() -> None:
    dense = CacheManager(32, groups(4, 2, 3), 64, hash_seed=0)
    assert dense.skip_unreachable_sliding_pages is False
    admit(dense, Request("a", list(range(9))))
    assert keyed_sliding_pages(dense, "a") == [True, True, True, True, False]
    alone = CacheManager(32, groups(4, 2, 3)[1:], 64, hash_seed=0, skip_unreachable_sliding_pages=True)
    admit(alone, Request("a", list(range(9))))
    assert [alone.page_pool.key_of(p) is not None for p in alone.get_page_ids("a")[0]] == [True] * 4 + [False]


def test_skipping_loses_no_hit() -> None:
    """The same requests on a manager with and one without the option: equal hits, equal pages."""
    prompts = [list(range(13)), list(range(9)) + [50, 51, 52, 53], list(range(13)) + [7, 7, 7]]
    results = []
    for skip in (False, True):
        m = CacheManager(16, groups(4, 2, 3), 64, hash_seed=0, skip_unreachable_sliding_pages=skip)
        got = []
        for i, prompt in enumerate(prompts):
            req = Request(f"r{i}", prompt)
            got.append((admit(m, req), m.get_page_ids(req.request_id)))
            m.free(req)
        results.append(got)
    assert results[0] == results[1]
    assert [n for n, _ in results[1]] == [0, 8, 12]


def test_the_option_must_be_a_bool() -> None:
    with pytest.raises(InvalidArgumentError):
        CacheManager(32, groups(4, 2, 3), 64, skip_unreachable_sliding_pages=1)  # type: ignore[arg-type]


def test_the_checks_pass_and_the_mutants_are_caught() -> None:
    from verikv.proofs.refinement import sliding_skip
    from verikv.proofs.runner.registry import discover_checks, discover_mutants

    no_hit_lost = next(c for c in sliding_skip.checks() if c.name == sliding_skip.NO_HIT_NAME)
    assert no_hit_lost.run().ok
    assert {c.name for c in sliding_skip.checks()} <= {c.name for c in discover_checks()}
    for mutant in sliding_skip.mutants():
        assert mutant.detect(), mutant.name
        assert mutant.name in {m.name for m in discover_mutants()}
