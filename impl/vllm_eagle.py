"""vLLM 0.33's EAGLE lookup: the coordinator's hit under ``CacheManager(eagle_rule="vllm")``.

With EAGLE the draft model recomputes the hidden states of the last hit page, so a lookup drops
that page. verikv's default rule (``"drop-once"``) takes the groups' common hit (a fixed point)
and recomputes it once from one largest page fewer. vLLM 0.33 instead lets each group look one of
its pages past the candidate length and drop it again, so a resent page-aligned prompt keeps its
hit. `VllmEagleLookup` follows vLLM's rule; the spec states it as
`verikv.spec.hit_rules.vllm_eagle_hit` and the per-type rules as ``find_vllm_eagle_hit`` of each
`verikv.single_type_managers.SingleTypeCacheManager`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from verikv.hashing import PageKey
from verikv.single_type_managers import MambaManager, SingleTypeCacheManager

__all__ = ["EAGLE_RULES", "VllmEagleLookup"]

EAGLE_RULES: tuple[str, ...] = ("drop-once", "vllm")
"""``CacheManager(eagle_rule=...)``: ``"drop-once"`` (the default: the common hit's fixed point,
recomputed once from one largest page fewer) or ``"vllm"`` (vLLM 0.33's rule, `VllmEagleLookup`).
Without EAGLE the rule changes nothing."""

PageIds = tuple[list[int], ...]
#: one lookup group: the manager of its first cache group and the ids of every group in it
_Joint = tuple[SingleTypeCacheManager, tuple[int, ...]]


class VllmEagleLookup:
    """vLLM 0.33's EAGLE lookup over a coordinator's groups (`find`).

    One group: its rule at the length cap, dropping the last page (never a Mamba state), no
    peek. Several groups: groups of one layout are looked up together (a page hits where it
    hits in each), full attention first, then by first appearance; the hit unit is the lcm of
    the page sizes.
    """

    __slots__ = ("_groups", "_num_groups", "_one_pass", "_unit")

    def __init__(self, managers: Sequence[SingleTypeCacheManager]) -> None:
        joint: dict[tuple[str, int, int], list[int]] = {}
        for gid, manager in enumerate(managers):
            joint.setdefault(manager.layout, []).append(gid)
        groups = [(managers[ids[0]], tuple(ids)) for ids in joint.values()]
        self._groups: list[_Joint] = sorted(groups, key=lambda group: group[0].kind != "full")
        self._num_groups = len(managers)
        self._unit = math.lcm(*(m.page_size for m in managers))
        #: one full-attention lookup group beside one other: vLLM stops after one pass
        self._one_pass = len(self._groups) == 2 and self._groups[0][0].kind == "full"

    def find(self, keys: Sequence[PageKey], max_length: int, peek_limit: int, shard: int | None,
             dp: int | None) -> tuple[PageIds, int]:
        """Hit pages per group and the hit length (at most ``max_length``, a multiple of every
        page size). ``peek_limit``: the tokens of the request's full key pages, the farthest a
        group may look past the candidate length."""
        if self._num_groups == 1:
            manager, gids = self._groups[0]
            hits = manager.find_vllm_eagle_hit(keys, max_length, gids, manager.page_size, True, shard, dp)
            return hits, len(hits[0]) * manager.page_size
        found: list[PageIds | None] = [None] * len(self._groups)
        length = self._passes(keys, max_length, peek_limit, shard, dp, found)
        out: list[list[int]] = [[] for _ in range(self._num_groups)]
        for (manager, gids), answer in zip(self._groups, found):
            for gid, pages in zip(gids, answer or ()):  # (every group was asked in the first pass)
                if manager.kind == "full":
                    del pages[length // manager.page_size:]  # a full hit is a prefix: cut to the length
                out[gid] = pages
        return tuple(out), length

    def _passes(self, keys: Sequence[PageKey], length: int, peek_limit: int, shard: int | None, dp: int | None,
                found: list[PageIds | None]) -> int:
        """Ask the lookup groups in turn until a pass leaves the candidate length unchanged (one
        pass for one full group beside one other); ``found`` gets each group's last answer.

        A full-attention group is asked once (later passes cut to what it found). Another group
        asked for the first time at a candidate length peeks one of its pages past it and drops
        the last matched page (a Mamba group neither peeks nor drops); it is then verified and
        asked without either, until a group asked that way shortens the length, which clears
        every verification."""
        verified: set[int] = set()
        while True:
            candidate = length
            for i, (manager, gids) in enumerate(self._groups):
                previous = found[i]
                if previous is not None and manager.kind == "full":
                    candidate = min(candidate, len(previous[0]) * manager.page_size)
                    continue
                drop = i not in verified
                limit = candidate
                if drop and not isinstance(manager, MambaManager):
                    limit = min(candidate + manager.page_size, peek_limit)
                hits = found[i] = manager.find_vllm_eagle_hit(keys, limit, gids, self._unit, drop, shard, dp)
                got = len(hits[0]) * manager.page_size
                if drop:
                    verified.add(i)
                elif got < candidate:
                    verified.clear()
                candidate = got
            if candidate >= length or self._one_pass:
                return min(length, candidate)
            length = candidate
