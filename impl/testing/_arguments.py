"""What the harness's own entry points accept: each check refuses a bad argument with
`InvalidArgumentError` naming it, before the entry point does any work.

These judge the caller's arguments (a factory, a layout, a count, a set of names), not what an
implementation under test answers (`verikv.testing._answers` judges that). Standard library and
`verikv.errors` only, so every harness module can use them.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

from verikv.errors import InvalidArgumentError, describe

T = TypeVar("T")


def is_int(value: Any) -> bool:
    """An integer of any type (numpy's included), but not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def checked_count(value: Any, name: str, least: int = 1) -> int:
    """``value`` if it is a Python int (not a bool, not numpy's) of at least ``least``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise InvalidArgumentError(f"{name} must be an int >= {least}, got {describe(value)}")
    return value


def checked_flag(value: Any, name: str) -> bool:
    """``value`` if it is a bool (numpy's bool is not one)."""
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be a bool, got {describe(value)}")
    return value


def checked_instance(value: Any, kind: type[T], name: str) -> T:
    """``value`` if it is a ``kind``."""
    if not isinstance(value, kind):
        raise InvalidArgumentError(f"{name} must be a {kind.__name__}, got {describe(value)}")
    return value


def checked_factory(value: Any, name: str) -> Any:
    """``value`` if it can be called (a class or a function that builds something)."""
    if not callable(value):
        raise InvalidArgumentError(f"{name} must be a class or function that builds one, got {describe(value)}")
    return value


def checked_names(value: Any, name: str, known: Collection[str]) -> frozenset[str]:
    """``value`` (a tuple, list or set of names, each one of ``known``) as a frozenset; anything
    else there (a string, a number, an array) is refused."""
    if not isinstance(value, tuple | list | set | frozenset):
        raise InvalidArgumentError(f"{name} must be a tuple or set, got {describe(value)}")
    if not all(isinstance(item, str) for item in value):
        raise InvalidArgumentError(f"{name} must hold names (str), got {describe(value)}")
    unknown = set(value) - set(known)
    if unknown:
        raise InvalidArgumentError(f"unknown {name} {sorted(unknown)}; known: {sorted(known)}")
    return frozenset(value)


def checked_choices(value: Any, name: str, known: Collection[str]) -> tuple[str, ...]:
    """``value`` if it is a non-empty tuple of names, each one of ``known``."""
    if (not isinstance(value, tuple) or not value
            or not all(isinstance(item, str) and item in known for item in value)):
        raise InvalidArgumentError(f"{name} must be a non-empty tuple of {sorted(known)}, got {describe(value)}")
    return value


def lacking(built: Any, methods: Sequence[str], protocol: str) -> None:
    """`InvalidArgumentError` naming the ``methods`` that ``built`` lacks, if any."""
    missing = [m for m in methods if not callable(getattr(built, m, None))]
    if missing:
        raise InvalidArgumentError(f"{type(built).__name__} lacks the {protocol} methods {missing}")


def built_with(make: Callable[..., Any], args: tuple[Any, ...], methods: Sequence[str], protocol: str) -> Any:
    """What ``make(*args)`` builds, refused when it lacks the protocol's ``methods``; None when
    ``make`` raises: a factory that raises is left to the run, which reports it as
    ``crash:<Exception>`` like any failure of what it builds."""
    try:
        built = make(*args)
    except Exception:  # the run reports it, by type
        return None
    lacking(built, methods, protocol)
    return built
