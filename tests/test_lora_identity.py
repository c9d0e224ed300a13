"""LoRA identity by name and path, as vLLM 0.33's ``LoRARequest`` gives it:
re-pointing a name at other weights changes the page keys; the int id alone still works."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from verikv import CacheGroupSpec, CacheManager, FullAttentionSpec, InvalidArgumentError, PageStored, Request
from verikv.hashing import PageHasher

GROUP = CacheGroupSpec(FullAttentionSpec(page_size=4, num_kv_heads=1, head_size=8, dtype=np.float16, use_mla=False))
PROMPT = list(range(13))


def keys(**lora: Any) -> list[bytes]:
    return PageHasher(seed=0).hash_request(Request("r", PROMPT, **lora), 4)


def test_name_and_path_enter_every_key_and_the_id_does_not() -> None:
    named = keys(lora_name="sql", lora_path="/adapters/sql-v1")
    assert named == keys(lora_name="sql", lora_path="/adapters/sql-v1", lora_id=7)  # the id only numbers it
    assert all(a != b for a, b in zip(named, keys(lora_name="sql", lora_path="/adapters/sql-v2")))  # re-pointed
    assert all(a != b for a, b in zip(named, keys(lora_name="chat", lora_path="/adapters/sql-v1")))
    assert all(a != b for a, b in zip(named, keys(lora_name="sql")))  # a name without a path is another identity
    assert all(a != b for a, b in zip(named, keys()))
    assert keys(lora_id=7) != keys(lora_name="sql") and keys(lora_id=7) != keys()  # the id alone still keys
    extra = PageHasher(seed=0).page_extra_keys(Request("r", PROMPT, lora_name="sql", lora_path="/w"), 1, 4)
    assert extra == (("lora", "sql", "/w"),)


@pytest.mark.parametrize("lora", [dict(lora_name=""), dict(lora_name=3), dict(lora_path="/w"),
                                  dict(lora_name="a", lora_path=""), dict(lora_name="a", lora_path=b"/w"),
                                  dict(lora_name="\ud800")])
def test_bad_lora_identities_are_refused(lora: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        Request("r", PROMPT, **lora)


def test_setters_check_and_keep_a_path_tied_to_a_name() -> None:
    r = Request("r", PROMPT)
    with pytest.raises(InvalidArgumentError):
        r.lora_path = "/w"  # no name yet
    r.lora_name = "sql"
    r.lora_path = "/w"
    with pytest.raises(InvalidArgumentError):
        r.lora_name = None  # the path would name nothing
    assert (r.lora_name, r.lora_path) == ("sql", "/w")
    r.lora_path = None
    r.lora_name = None
    assert (r.lora_name, r.lora_path) == (None, None)


def admit(m: CacheManager, req: Request) -> int:
    """Look up and allocate the prompt; the number of hit tokens."""
    hits, n = m.get_computed_pages(req)
    assert m.allocate_slots(req, req.num_tokens - n, n, hits) is not None
    req.num_computed_tokens = req.num_tokens
    return n


def test_re_pointing_a_name_at_other_weights_misses_the_cache() -> None:
    m = CacheManager(32, [GROUP], 64, hash_seed=0)
    admit(m, Request("a", PROMPT, lora_name="sql", lora_path="/w1", lora_id=1))
    assert admit(m, Request("b", PROMPT, lora_name="sql", lora_path="/w2", lora_id=1)) == 0
    assert admit(m, Request("c", PROMPT, lora_name="sql", lora_path="/w1", lora_id=2)) == 12  # same adapter


def test_changing_the_path_of_a_freed_request_rehashes_it() -> None:
    m = CacheManager(32, [GROUP], 64, hash_seed=0)
    r = Request("a", PROMPT, lora_name="sql", lora_path="/w1")
    admit(m, r)
    before = m.page_hashes_of("a")
    with pytest.raises(InvalidArgumentError):
        r.lora_path = "/w2"  # frozen while the request holds pages
    m.free(r)
    r.lora_path = "/w2"
    r.num_computed_tokens = 0
    assert admit(m, r) == 0  # its old pages are for the old weights
    assert all(a != b for a, b in zip(before, m.page_hashes_of("a")))


def test_events_carry_the_adapters_name_and_id() -> None:
    m = CacheManager(32, [GROUP], 64, hash_seed=0, enable_kv_events=True)
    admit(m, Request("a", PROMPT, lora_name="sql", lora_path="/w1", lora_id=4))
    (stored,) = m.take_events()
    assert isinstance(stored, PageStored)
    assert (stored.lora_name, stored.lora_id) == ("sql", 4)
    assert stored.extra_keys == ((("lora", "sql", "/w1"),),) * 3


# --- the spec's LoRA identity and the exhaustive check of verikv prove ---------------------------

def test_the_spec_identity_is_name_and_path_else_the_id() -> None:
    from verikv.spec.manager import RequestView, content_of, lora_identity

    named = RequestView("a", (1, 2), lora_id=7, lora_name="sql", lora_path="/w1")
    assert lora_identity(named) == ("sql", "/w1")
    assert lora_identity(RequestView("a", (1, 2), lora_id=7)) == 7
    assert lora_identity(RequestView("a", (1, 2))) is None
    same_weights = RequestView("b", (1, 2), lora_id=9, lora_name="sql", lora_path="/w1")
    assert content_of(named, 2, 2) == content_of(same_weights, 2, 2)  # the id only numbers the adapter
    re_pointed = RequestView("b", (1, 2), lora_id=7, lora_name="sql", lora_path="/w2")
    assert content_of(named, 2, 2) != content_of(re_pointed, 2, 2)


def test_the_lora_keys_check_passes_and_covers_hits_across_identities() -> None:
    from verikv.proofs.refinement import lora_keys

    (check,) = lora_keys.checks()
    outcome = check.run()
    assert outcome.status == "passed", outcome.detail
    assert f"{len(lora_keys.IDENTITIES) ** 2 * len(lora_keys.PROMPTS) ** 2} request pairs" in outcome.detail


@pytest.mark.parametrize("name", ["impl:lora_key_ignores_path", "impl:lora_key_keeps_id",
                                  "spec:lora-identity-ignores-path"])
def test_each_lora_key_mutant_is_caught(name: str) -> None:
    from verikv.proofs.refinement import lora_keys
    from verikv.proofs.runner.registry import discover_mutants

    (mutant,) = [m for m in lora_keys.mutants() if m.name == name]
    assert mutant.detect() == [f"{lora_keys.NAME}: INV-HIT-SAFE"]
    assert name in {m.name for m in discover_mutants()}
    assert lora_keys.checks()[0].run().ok  # the patch is undone
