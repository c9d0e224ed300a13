"""What the type checkers see of a property built by a factory function.

A module that builds its validated properties with one helper (`verikv.request`'s C-level
getters, `CachePage`'s per-page record fields) gets back a ``property`` the checkers type as
``Any``. Annotating the class attribute with `Field` (the type read, the type assigned) or
`ReadOnly` states the types once, where the property is declared. Both are protocols, never
instantiated: at run time the attribute is the ``property`` itself.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

Get = TypeVar("Get", covariant=True)
Set = TypeVar("Set", contravariant=True)


class ReadOnly(Protocol[Get]):
    """A property whose reads give ``Get``; it has no setter."""

    def __get__(self, instance: object, owner: object = None) -> Get: ...


class Field(ReadOnly[Get], Protocol[Get, Set]):
    """A property whose reads give ``Get`` and whose assignments take ``Set`` (validated)."""

    def __set__(self, instance: object, value: Set) -> None: ...
