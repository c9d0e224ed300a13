"""Helpers shared by the page-pool test files: a user key whose hash can change, and a runner of
pool operations that records each call's result or error."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from verikv.page_pool import PagePool

#: a pool operation: ("get", [n]), ("touch", ids), ("free", ids) or ("cache", [id, key])
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
            else:
                pool.cache_page_id(arg[0], arg[1])  # type: ignore[arg-type]
                results.append("cached")
        except Exception as exc:  # compared between two pools or paths, whatever it is
            results.append((type(exc).__name__, str(exc)))
    return results
