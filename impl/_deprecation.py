"""Old public names that keep working for one minor version, with a ``DeprecationWarning``.

verikv's policy: a removed or renamed public name keeps working for one minor version after
the release that deprecates it; every use warns, naming the replacement and the version that
removes the name. Three forms:

- a renamed function or method: ``old_name = renamed_function(new_function, "old_name", since="0.2.0")``;
- a renamed attribute or property, read through a dotted path from the instance:
  ``dtype = renamed_attribute[str]("page.dtype", since="0.2.0")`` in the class body;
- a renamed module-level name: ``__getattr__ = renamed_module_names(__name__, {"old": "verikv.x.new"},
  since="0.2.0")`` (PEP 562).

Each carries ``__deprecated__`` (the warning's text), which the public-API snapshot shows.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Generic, Never, Self, TypeVar, cast, overload

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def removal_version(since: str) -> str:
    """The release that removes a name deprecated in ``since``: the next minor version ("0.2.0" -> "0.3.0")."""
    parts = since.split(".")
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        raise ValueError(f"since must be a release version like '0.2.0', got {since!r}")
    return f"{parts[0]}.{int(parts[1]) + 1}.0"


def deprecation_message(old: str, new: str, since: str) -> str:
    return f"{old} is deprecated since verikv {since} and will be removed in {removal_version(since)}; use {new}"


def _warn(message: str) -> None:
    # stacklevel 3: the caller of the deprecated name, past this helper and the wrapper
    warnings.warn(message, DeprecationWarning, stacklevel=3)


def renamed_function(function: F, old_name: str, *, since: str) -> F:
    """``function`` under its old name: each call warns, then calls it with the same arguments."""
    owner = function.__qualname__.rpartition(".")[0]  # the class of a method, "" for a function
    old_qualname = f"{owner}.{old_name}" if owner else old_name
    message = deprecation_message(old_qualname, function.__qualname__, since)

    @functools.wraps(function)
    def old(*args: Any, **kwargs: Any) -> Any:
        _warn(message)
        return function(*args, **kwargs)

    old.__name__, old.__qualname__ = old_name, old_qualname
    old.__deprecated__ = message  # type: ignore[attr-defined]
    return old  # type: ignore[return-value]


class renamed_attribute(Generic[T]):  # noqa: N801 (a descriptor used like ``property``)
    """A read-only attribute under its old name: reads ``new_path`` (dotted, from the instance) and warns.

    Write ``dtype = renamed_attribute[str]("page.dtype", since="0.2.0")`` in the class body: checkers
    then type ``obj.dtype`` as ``str`` and refuse assignments, and a dataclass does not take it
    for a field (it has no annotation).
    """

    def __init__(self, new_path: str, *, since: str) -> None:
        self.new_path = new_path
        self.since = since
        self.__deprecated__ = deprecation_message("this attribute", new_path, since)  # named by __set_name__

    def __set_name__(self, owner: type, name: str) -> None:
        self.__deprecated__ = deprecation_message(f"{owner.__name__}.{name}", f"{owner.__name__}.{self.new_path}",
                                                  self.since)

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> Self: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...

    def __get__(self, instance: object, owner: type | None = None) -> Self | T:
        if instance is None:  # looked up on the class: the descriptor itself (for help() and the API snapshot)
            return self
        _warn(self.__deprecated__)
        return cast(T, functools.reduce(getattr, self.new_path.split("."), instance))

    def __set__(self, instance: object, value: Never) -> Never:
        raise AttributeError(f"{self.__deprecated__}, which is read-only here")


def renamed_module_names(module: str, renames: Mapping[str, str], *, since: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) serving old names; ``renames`` maps each to its replacement's
    full dotted name (``"verikv.sizing.plan_kv_cache"``)."""
    messages = {old: deprecation_message(f"{module}.{old}", new, since) for old, new in renames.items()}

    def __getattr__(name: str) -> Any:  # noqa: N807 (the module hook's name)
        if name not in renames:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        _warn(messages[name])
        return _resolve(renames[name])

    __getattr__.__deprecated__ = messages  # type: ignore[attr-defined]
    return __getattr__


def _resolve(dotted: str) -> Any:
    """The object a full dotted name denotes: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        candidate = ".".join(parts[:split])
        try:
            value: Any = importlib.import_module(candidate)
        except ModuleNotFoundError as error:
            if error.name != candidate:  # the module exists but needs something missing: say so
                raise
            continue
        return functools.reduce(getattr, parts[split:], value)
    raise ImportError(f"no module in {dotted!r}")
