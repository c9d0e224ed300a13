"""Spec mutants: deliberately broken Z3 pool transitions, each shown to be caught by the theorems.

Each mutant replaces one transition of `verikv.proofs.z3.pool.TRANSITIONS` with a relation that differs
from `verikv.spec.pool` in one classic way; its detector re-runs every theorem of that
transition (unbounded and bounded) against the broken relation and returns the names of the
theorems that no longer prove. A mutant nothing catches would mean the theorems cannot fail.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import z3

from verikv.proofs.runner.registry import Mutant
from verikv.proofs.z3 import pool as zp
from verikv.proofs.z3.common import NONE, Mode, failed_theorems


def free_without_rejoin(s: zp.PoolSym, a: zp.PoolArgs, mode: Mode, tag: str) -> zp.Step:
    """free: the count drops but a page reaching 0 never rejoins the free list (a leak)."""
    frames = zp.Frames(tag, mode)
    p = a.pages[0]
    pre = [zp.list_length_ok(a), z3.Implies(a.m > 0, z3.And(1 <= p, p < s.n, s.ref[p] >= 1))]
    dec = replace(s, ref=z3.Store(s.ref, p, s.ref[p] - 1))
    return frames.step(pre, zp.ite(a.m > 0, dec, s))


def free_missing_decrement(s: zp.PoolSym, a: zp.PoolArgs, mode: Mode, tag: str) -> zp.Step:
    """free: the page joins the free tail when its count "reaches 0", but the count is not lowered."""
    frames = zp.Frames(tag, mode)
    p = a.pages[0]
    pre = [zp.list_length_ok(a), z3.Implies(a.m > 0, z3.And(1 <= p, p < s.n, s.ref[p] >= 1))]
    joined = zp.ite(s.ref[p] == 1, zp.append_free(s, p), s)
    return frames.step(pre, zp.ite(a.m > 0, joined, s))


def free_double_free_allowed(s: zp.PoolSym, a: zp.PoolArgs, mode: Mode, tag: str) -> zp.Step:
    """free: no double-free check (eSurge's behaviour): a page with ref 0 goes to -1."""
    frames = zp.Frames(tag, mode)
    p = a.pages[0]
    pre = [zp.list_length_ok(a), z3.Implies(a.m > 0, z3.And(1 <= p, p < s.n))]
    dec = replace(s, ref=z3.Store(s.ref, p, s.ref[p] - 1))
    joined = zp.ite(s.ref[p] == 1, zp.append_free(dec, p), dec)
    return frames.step(pre, zp.ite(a.m > 0, joined, s))


def free_head_insert_without_shift(s: zp.PoolSym, a: zp.PoolArgs, mode: Mode, tag: str) -> zp.Step:
    """free, "unhashed-first": the page is written at the head slot without shifting the others."""
    frames = zp.Frames(tag, mode)
    p, h = a.pages[0], a.head_slot
    pre = [zp.list_length_ok(a), 0 <= h, h <= s.flen,
           z3.Implies(a.m > 0, z3.And(1 <= p, p < s.n, s.ref[p] >= 1))]
    dec = replace(s, ref=z3.Store(s.ref, p, s.ref[p] - 1))
    overwrite = replace(dec, seq=z3.Store(dec.seq, h, p), pos=z3.Store(dec.pos, p, h), flen=dec.flen + 1)
    to_head = z3.And(s.ref[p] == 1, s.unhashed_first, s.key[p] == NONE)
    joined = zp.ite(to_head, overwrite, zp.ite(s.ref[p] == 1, zp.append_free(dec, p), dec))
    return frames.step(pre, zp.ite(a.m > 0, joined, s))


def allocate_keeps_cached_entry(s: zp.PoolSym, a: zp.PoolArgs, mode: Mode, tag: str) -> zp.Step:
    """allocate: the reused page's key is cleared but it stays in its cached entry (stale hit)."""
    frames = zp.Frames(tag, mode)
    pre = [zp.list_length_ok(a), z3.Not(a.has_bounds), z3.Implies(a.m > 0, s.flen > 0)]
    page = s.seq[0]
    taken = replace(zp.remove_free(s, page), key=z3.Store(s.key, page, NONE), ref=z3.Store(s.ref, page, 1))
    return frames.step(pre, zp.ite(a.m > 0, taken, s), (z3.If(a.m > 0, page, NONE),))


def allocate_without_ref(s: zp.PoolSym, a: zp.PoolArgs, mode: Mode, tag: str) -> zp.Step:
    """allocate: the page leaves the free list but its count is not set to 1."""
    frames = zp.Frames(tag, mode)
    pre = [zp.list_length_ok(a), z3.Not(a.has_bounds), z3.Implies(a.m > 0, s.flen > 0)]
    page = s.seq[0]
    taken = zp.evict(zp.remove_free(s, page), page)
    return frames.step(pre, zp.ite(a.m > 0, taken, s), (z3.If(a.m > 0, page, NONE),))


def allocate_without_enough_pages(s: zp.PoolSym, a: zp.PoolArgs, mode: Mode, tag: str) -> zp.Step:
    """allocate: no "enough free pages" check; from an empty list it hands out whatever seq[0] says."""
    frames = zp.Frames(tag, mode)
    pre = [zp.list_length_ok(a), z3.Not(a.has_bounds)]
    page = s.seq[0]
    taken = replace(zp.evict(zp.remove_free(s, page), page), ref=z3.Store(s.ref, page, 1))
    return frames.step(pre, zp.ite(a.m > 0, taken, s), (z3.If(a.m > 0, page, NONE),))


def touch_null_page(s: zp.PoolSym, a: zp.PoolArgs, mode: Mode, tag: str) -> zp.Step:
    """touch: the null placeholder is not skipped, so page 0 gains a reference."""
    frames = zp.Frames(tag, mode)
    p = a.pages[0]
    pre = [zp.list_length_ok(a), z3.Implies(a.m > 0, z3.And(0 <= p, p < s.n))]
    revived = zp.ite(z3.And(p != 0, s.ref[p] == 0), zp.remove_free(s, p), s)
    bumped = replace(revived, ref=z3.Store(s.ref, p, s.ref[p] + 1))
    return frames.step(pre, zp.ite(a.m > 0, bumped, s))


def touch_without_unlink(s: zp.PoolSym, a: zp.PoolArgs, mode: Mode, tag: str) -> zp.Step:
    """touch: a cache hit on a free page takes a reference but leaves it in the free list."""
    frames = zp.Frames(tag, mode)
    p = a.pages[0]
    pre = [zp.list_length_ok(a), z3.Implies(a.m > 0, z3.And(0 <= p, p < s.n))]
    bumped = replace(s, ref=z3.Store(s.ref, p, s.ref[p] + 1))
    return frames.step(pre, zp.ite(z3.And(a.m > 0, p != 0), bumped, s))


def cache_null_page(s: zp.PoolSym, a: zp.PoolArgs, mode: Mode, tag: str) -> zp.Step:
    """cache: the null page may be hashed (eSurge quirk Q3)."""
    page, k = a.pages[0], a.key
    pre = [0 <= page, page < s.n, s.key[page] == NONE, mode.key_domain(k)]
    post = replace(s, key=z3.Store(s.key, page, k), inc=z3.Store(s.inc, k, z3.Store(s.inc[k], page, True)),
                   stamp=z3.Store(s.stamp, page, s.clock), clock=s.clock + 1)
    return zp.Frames(tag, mode).step(pre, post)


def cache_rehash(s: zp.PoolSym, a: zp.PoolArgs, mode: Mode, tag: str) -> zp.Step:
    """cache: an already-keyed page may be re-keyed, leaving it in its old entry too."""
    page, k = a.pages[0], a.key
    pre = [1 <= page, page < s.n, mode.key_domain(k)]
    post = replace(s, key=z3.Store(s.key, page, k), inc=z3.Store(s.inc, k, z3.Store(s.inc[k], page, True)),
                   stamp=z3.Store(s.stamp, page, s.clock), clock=s.clock + 1)
    return zp.Frames(tag, mode).step(pre, post)


def reset_keeps_entries(s: zp.PoolSym, a: zp.PoolArgs, mode: Mode, tag: str) -> zp.Step:
    """reset_prefix_cache: keys are forgotten but the cached map is kept."""
    done = s.flen == s.n - 1
    cleared = replace(s, key=z3.K(z3.IntSort(), z3.IntVal(NONE)))
    return zp.Frames(tag, mode).step([], zp.ite(done, cleared, s), (done,))


@dataclass(frozen=True)
class SpecMutant:
    """A broken relation for one transition and the invariant it is meant to break."""

    name: str
    transition: str
    invariant: str
    step: zp.StepFn

    def detect(self) -> list[str]:
        """Names of this transition's bounded theorems that fail against the mutant relation."""
        table = {**zp.TRANSITIONS, self.transition: self.step}
        return failed_theorems([t for t in zp.theorems(table) if t.transition == self.transition and t.bounded])

    def mutant(self) -> Mutant:
        doc = (self.step.__doc__ or "").strip()
        return Mutant(f"spec:{self.name}", "spec", self.invariant, doc, self.detect)


CATALOGUE = (
    SpecMutant("free-without-rejoin", "pool.free", "INV-FREE-IFF-ZERO", free_without_rejoin),
    SpecMutant("free-missing-decrement", "pool.free", "INV-FREE-IFF-ZERO", free_missing_decrement),
    SpecMutant("free-double-free-allowed", "pool.free", "INV-REF-NONNEG", free_double_free_allowed),
    SpecMutant("free-order-head-insert-without-shift", "pool.free", "INV-FREE-DISTINCT",
               free_head_insert_without_shift),
    SpecMutant("allocate-evicts-key-but-keeps-entry", "pool.allocate", "INV-KEY-BIJ", allocate_keeps_cached_entry),
    SpecMutant("allocate-without-ref", "pool.allocate", "INV-FREE-IFF-ZERO", allocate_without_ref),
    SpecMutant("allocate-non-atomic-shortfall", "pool.allocate", "INV-FREE-DISTINCT", allocate_without_enough_pages),
    SpecMutant("touch-null-page", "pool.touch", "INV-NULL", touch_null_page),
    SpecMutant("touch-without-unlink", "pool.touch", "INV-FREE-IFF-ZERO", touch_without_unlink),
    SpecMutant("cache-null-page", "pool.cache", "INV-NULL", cache_null_page),
    SpecMutant("cache-rehash", "pool.cache", "INV-KEY-BIJ", cache_rehash),
    SpecMutant("reset-keeps-entries", "pool.reset_prefix_cache", "INV-KEY-BIJ", reset_keeps_entries),
)


def mutants() -> list[Mutant]:
    """Registry provider: the spec mutants."""
    return [m.mutant() for m in CATALOGUE]
