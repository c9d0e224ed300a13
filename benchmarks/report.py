"""Printing result tables: with rich when it is installed, as aligned plain text otherwise."""

from __future__ import annotations

import sys
from collections.abc import Sequence

try:
    from rich.console import Console
    from rich.table import Table
except ImportError:  # rich is optional (dev extra); fall back to plain text
    Console = None  # type: ignore[assignment,misc]


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print one table; cells are shown with `str`; every column but the first is right-aligned."""
    cells = [[str(c) for c in row] for row in rows]
    numeric = [i > 0 for i in range(len(header))]
    if Console is not None:
        table = Table(title=title, title_justify="left")
        for name, right in zip(header, numeric):
            table.add_column(name, justify="right" if right else "left")
        for row in cells:
            table.add_row(*row)
        Console(width=None if sys.stdout.isatty() else 200).print(table)
        return
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]

    def line(row: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if right else c.ljust(w) for c, w, right in zip(row, widths, numeric))

    print(f"\n{title}\n{line(header)}\n{line(['-' * w for w in widths])}")
    for row in cells:
        print(line(row))
