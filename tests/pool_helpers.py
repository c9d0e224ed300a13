"""Helpers shared by the page-pool test files: a user key whose hash can change, and a runner of
pool operations that records each call's result or error."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from verikv.page_pool import PagePool

#: a pool operation: ("get", [n]), ("touch", ids), ("free", ids), ("free held", [n, *extra ids])
#: (`request_free`) or ("cache", [id, key])
PoolOp = tuple[str, list[Hashable]]


class ShiftyKey:
    """A user key whose hash and equality follow a mutable field (the pool must survive it)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __hash__(self) -> int:
        return hash(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ShiftyKey) and other.value == self.value

    def __repr__(self) -> str:
        return f"ShiftyKey({self.value})"


def request_free(pool: PagePool, count: int, extra: Sequence[int]) -> list[int]:
    """A list shaped as a request's free: up to ``count`` held pages, those held once (its own)
    before those held more often (its prefix hit, which eviction order lists last), then the
    ``extra`` ids (a repeat or a bad id spoils the shape)."""
    held = sorted((p for p in range(1, pool.num_pages) if pool.ref_count(p)), key=pool.ref_count)
    return held[:count] + list(extra)


def apply_ops(pool: PagePool, ops: Sequence[tuple[str, Sequence[object]]]) -> list[object]:
    """Run ``ops`` on ``pool`` in order; each call's result ("touched", "freed", "cached" or the
    new ids) or its error as (type name, message), to compare two pools or two paths."""
    results: list[object] = []
    for op, arg in ops:
        try:
            if op == "get":
                results.append(pool.get_new_page_ids(arg[0]))  # type: ignore[arg-type]
            elif op == "touch":
                pool.touch_ids(arg)  # type: ignore[arg-type]
                results.append("touched")
            elif op == "free":
                pool.free_page_ids(arg)  # type: ignore[arg-type]
                results.append("freed")
            elif op == "free held":
                pool.free_page_ids(request_free(pool, arg[0], arg[1:]))  # type: ignore[arg-type]
                results.append("freed")
            else:
                pool.cache_page_id(arg[0], arg[1])  # type: ignore[arg-type]
                results.append("cached")
        except Exception as exc:  # compared between two pools or paths, whatever it is
            results.append((type(exc).__name__, str(exc)))
    return results
