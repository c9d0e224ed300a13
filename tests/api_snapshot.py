"""verikv's public API as text, one item per line, for a contract test (tests/test_public_api.py).

Run ``python tests/api_snapshot.py --update`` to rewrite the checked-in snapshot
(tests/public_api.txt) after an intended change, and review the diff like code. Without
``--update`` it prints the difference and exits 1 when the live surface departs from the file.

What is public (the snapshot's header says the same):
- modules: every module of the packages listed in pyproject.toml, except ``verikv.proofs`` (the
  ``verikv prove`` runner, whose contract is its command line) and the command-line entry
  modules; a module whose dotted name has a part starting with ``_`` is private;
- names in a module: its ``__all__`` where it has one, else the names without a leading ``_``
  that the module itself binds (``def``, ``class`` or assignment, not imports);
- members of a class: the names without a leading ``_`` that the class or a private base defines
  (methods with signatures, properties with types and whether they can be set, class
  attributes), its constructor, the protocol methods it defines (``__len__``, ``__iter__`` ...),
  and its instance attributes: dataclass and NamedTuple fields, ``__slots__``, annotated class
  attributes and ``self.name`` assignments in its methods;
- record types a public callable returns that are defined outside the public modules are
  listed like public classes.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import enum
import importlib
import inspect
import pkgutil
import re
import sys
import textwrap
import tomllib
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = Path(__file__).resolve().with_name("public_api.txt")
UPDATE_COMMAND = "python tests/api_snapshot.py --update"

PRIVATE_PACKAGES = ("verikv.proofs",)
COMMAND_MODULES = ("verikv.__main__", "verikv.cli", "verikv.sizing.cli")
PROTOCOL_METHODS = ("__call__", "__contains__", "__enter__", "__exit__", "__getitem__", "__iter__", "__len__")
_SIMPLE_VALUES = (bool, int, float, str, bytes, type(None))
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")

HEADER = f"""\
# verikv public API snapshot: one line per item, sorted. Regenerate: {UPDATE_COMMAND}
# Modules: the packages of pyproject.toml except {", ".join(PRIVATE_PACKAGES)} and the command modules
#   ({", ".join(COMMAND_MODULES)}); a dotted name with a part starting with '_' is private.
# Names: a module's __all__ where present, else the names without a leading '_' it binds itself.
# Classes: public members of the class and its private bases, constructor, protocol methods, and
#   instance attributes (dataclass/NamedTuple fields, __slots__, annotations, self.x assignments).
"""


def public_modules() -> list[str]:
    """Every public module name, from the packages the distribution installs."""
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]
    names: set[str] = set()
    for package in packages:
        if not _is_public_module(package):
            continue
        names.add(package)
        for info in pkgutil.iter_modules(importlib.import_module(package).__path__, prefix=f"{package}."):
            if not info.ispkg and _is_public_module(info.name):
                names.add(info.name)
    return sorted(names)


def _is_public_module(name: str) -> bool:
    private_package = any(name == p or name.startswith(f"{p}.") for p in PRIVATE_PACKAGES)
    return not private_package and name not in COMMAND_MODULES and not any(
        part.startswith("_") for part in name.split("."))


def public_names(module: types.ModuleType) -> list[str]:
    """``__all__``, else the public names the module binds at top level (imports excluded)."""
    declared = getattr(module, "__all__", None)
    if declared is not None:
        return sorted(declared)
    tree = ast.parse(inspect.getsource(module))
    return sorted(name for name in _bound_names(tree.body) if not name.startswith("_"))


def _bound_names(body: list[ast.stmt]) -> Iterator[str]:
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node.name
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                yield from _target_names(target)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            yield from _target_names(node.target)
        elif isinstance(node, ast.If | ast.Try):
            yield from _bound_names(node.body + node.orelse)


def _target_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _target_names(element)


class Surface:
    """Collects the snapshot's lines; each class is described once, where it is defined."""

    def __init__(self) -> None:
        self.lines: set[str] = set()
        self.described: set[type] = set()
        self.returned: list[type] = []

    def add_module(self, name: str) -> None:
        module = importlib.import_module(name)
        self.lines.add(f"{name}: module")
        for attr in public_names(module):
            self.add_name(name, attr, getattr(module, attr))
        old_names: dict[str, str] = getattr(vars(module).get("__getattr__"), "__deprecated__", {})
        self.lines.update(f"{name}.{old}: deprecated name: {message}" for old, message in old_names.items())

    def add_name(self, module: str, name: str, value: Any) -> None:
        path = f"{module}.{name}"
        home = _definition_path(value)
        if home is not None and home != path:
            self.lines.add(f"{path}: alias of {home}")
        elif inspect.isclass(value):
            self.add_class(value)
        elif inspect.isroutine(value):
            self.add_callable(path, "function", value)
        else:
            self.lines.add(f"{path}: {_value_text(value)}")
            if isinstance(value, dict) and all(isinstance(key, str) for key in value):
                self.lines.update(f"{path}[{key!r}]: entry" for key in value)  # names users look up

    def add_callable(self, path: str, kind: str, function: Callable[..., Any]) -> None:
        self.lines.add(f"{path}: {kind}{_signature_text(function)}{_deprecation_text(function)}")
        if not inspect.isclass(function):  # a constructor returns its own class
            self._note_returned(function)

    def add_class(self, cls: type) -> None:
        if cls in self.described:
            return
        self.described.add(cls)
        path = f"{cls.__module__}.{cls.__qualname__}"
        bases = ", ".join(_type_name(base) for base in cls.__bases__)
        self.lines.add(f"{path}: class({bases})")
        if not issubclass(cls, enum.Enum):
            self.add_callable(f"{path}.__init__", "constructor", cls)
        attributes = _instance_attributes(cls)
        for owner in _own_and_private_bases(cls):
            self._add_members(cls, path, owner, skip=attributes)
        for name, annotation in attributes.items():
            self.lines.add(f"{path}.{name}: instance attribute{annotation}")

    def _add_members(self, cls: type, path: str, owner: type, skip: dict[str, str]) -> None:
        for name, member in vars(owner).items():
            if (name.startswith("_") and name not in PROTOCOL_METHODS) or name in skip:
                continue  # a field's default is in the constructor's signature
            member_path = f"{path}.{name}"
            if isinstance(cls, enum.EnumMeta) and name in cls.__members__:
                self.lines.add(f"{member_path}: enum member = {_value_text(cls.__members__[name].value)}")
            elif isinstance(member, property):
                self.lines.add(f"{member_path}: {_property_text(owner, name, member)}")
            elif isinstance(member, staticmethod | classmethod):
                self.add_callable(member_path, type(member).__name__, member.__func__)
            elif inspect.isclass(member) and member.__qualname__.startswith(f"{owner.__qualname__}."):
                self.add_class(member)
            elif inspect.isfunction(member):
                self.add_callable(member_path, "method", member)
            elif isinstance(getattr(member, "__deprecated__", None), str):  # verikv._deprecation.renamed_attribute
                self.lines.add(f"{member_path}: deprecated attribute: {member.__deprecated__}")
            elif _is_slot(member):
                continue  # listed with the instance attributes
            else:
                self.lines.add(f"{member_path}: class attribute {_value_text(member)}")

    def _note_returned(self, function: Callable[..., Any]) -> None:
        """Queue record types the callable returns that no public module describes."""
        for cls in _classes_in(_return_hint(function)):
            if cls.__module__.startswith("verikv") and not _is_public_module(cls.__module__):
                self.returned.append(cls)

    def finish(self) -> list[str]:
        while self.returned:
            cls = self.returned.pop()
            if cls not in self.described:
                self.lines.add(f"{cls.__module__}.{cls.__qualname__}: returned by a public callable")
                self.add_class(cls)
        return sorted(self.lines, key=lambda line: line.split(": ", 1))  # a class before its members


def _definition_path(value: Any) -> str | None:
    """Where a class or function is defined, to list re-exports as aliases."""
    if inspect.isclass(value) or inspect.isfunction(value) or inspect.isbuiltin(value):
        return f"{value.__module__}.{value.__qualname__}"
    return None


def _own_and_private_bases(cls: type) -> list[type]:
    """The class and the bases whose members no other line describes (private or outside verikv's public modules)."""
    owners = [cls]
    for base in cls.__mro__[1:]:
        private = base.__name__.startswith("_") or not _is_public_module(base.__module__)
        if base.__module__.startswith("verikv") and private:
            owners.append(base)
    return owners


def _instance_attributes(cls: type) -> dict[str, str]:
    """Public per-instance attributes with their annotation (``: T``) where one is written.

    Attributes a public base already declares are listed with that base; names the class
    defines as methods or properties are listed as such.
    """
    owners = _own_and_private_bases(cls)
    found: dict[str, str] = {}
    for owner in reversed(owners):
        found.update(_declared_attributes(owner))
    inherited = {name for base in cls.__mro__[1:] if base not in owners for name in _declared_attributes(base)}
    members = {name for klass in cls.__mro__ for name, member in vars(klass).items()
               if callable(member) or isinstance(member, property | staticmethod | classmethod)}
    return {name: annotation for name, annotation in sorted(found.items())
            if not name.startswith("_") and name not in inherited and name not in members}


def _declared_attributes(owner: type) -> dict[str, str]:
    """The instance attributes one class declares itself: slots, annotations (fields), ``self.x = ...``."""
    if owner.__module__ == "builtins":
        return {}
    annotations = inspect.get_annotations(owner)
    # Field[...] / ReadOnly[...] annotate properties (verikv.typed_property), not instance attributes
    fields = [name for name, annotation in annotations.items() if not _annotation_text(annotation).startswith(
        ("ClassVar", "Field[", "ReadOnly["))]
    names = [*_own_slots(owner), *fields, *sorted(_self_assignments(owner))]
    return {name: _annotated(annotations.get(name)) for name in names}


def _own_slots(cls: type) -> list[str]:
    slots = vars(cls).get("__slots__", ())
    return [slots] if isinstance(slots, str) else list(slots)


def _self_assignments(owner: type) -> set[str]:
    """Names assigned as ``self.name`` in the class's own methods (property accessors included)."""
    names: set[str] = set()
    for function in _own_functions(owner):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
        except (OSError, TypeError):  # a function built at run time has no source to read
            continue
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign | ast.AugAssign) else []
            names.update(target.attr for target in targets if isinstance(target, ast.Attribute)
                         and isinstance(target.value, ast.Name) and target.value.id == "self")
    return names


def _own_functions(owner: type) -> Iterator[types.FunctionType]:
    for member in vars(owner).values():
        accessors = [member.fget, member.fset] if isinstance(member, property) else [member]
        yield from (accessor for accessor in accessors if isinstance(accessor, types.FunctionType))


def _is_slot(member: Any) -> bool:
    return isinstance(member, types.MemberDescriptorType | types.GetSetDescriptorType)


def _property_text(owner: type, name: str, prop: property) -> str:
    """Its type: the class's annotation where one is written (a property built by a helper declares
    it there, as ``Field[...]`` or ``ReadOnly[...]``), else the getter's return annotation."""
    hint = inspect.get_annotations(owner).get(name)
    if hint is None and prop.fget is not None:
        hint = inspect.get_annotations(prop.fget).get("return")
    access = "settable property" if prop.fset is not None else "property"
    return f"{access}{_annotated(hint)}{_deprecation_text(prop)}"


def _deprecation_text(item: object) -> str:
    """The warning a deprecated name gives (``__deprecated__``, as `verikv._deprecation` and PEP 702 set it)."""
    message = getattr(item, "__deprecated__", None)
    return f"; deprecated: {message}" if isinstance(message, str) else ""


def _signature_text(function: Callable[..., Any]) -> str:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # some builtins have no signature to read
        return "(...)"
    params = [param.replace(annotation=_shown(param.annotation, _annotation_text),
                            default=_shown(param.default, _value_text)) for param in signature.parameters.values()]
    returns = _shown(signature.return_annotation, _annotation_text)
    return str(signature.replace(parameters=params, return_annotation=returns))


class _Shown:
    """Text that ``inspect`` prints as it is (its repr), for annotations and defaults."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _shown(value: Any, as_text: Callable[[Any], str]) -> Any:
    return value if value is inspect.Parameter.empty else _Shown(as_text(value))


def _annotated(annotation: Any) -> str:
    if annotation is None or annotation is inspect.Parameter.empty:
        return ""
    return f": {_annotation_text(annotation)}"


def _annotation_text(annotation: Any) -> str:
    if isinstance(annotation, str):
        return annotation
    if isinstance(annotation, typing.ForwardRef):  # a NamedTuple field's annotation, as written
        return annotation.__forward_arg__
    if inspect.isclass(annotation):
        return _type_name(annotation)
    return _ADDRESS.sub("", repr(annotation)).replace("typing.", "")


def _type_name(cls: type) -> str:
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _value_text(value: Any) -> str:
    """A value as it reads in a signature; sets sorted, addresses dropped, large values by type."""
    if isinstance(value, enum.Enum):
        return f"{_type_name(type(value))}.{value.name}"
    if isinstance(value, _SIMPLE_VALUES):
        return repr(value)
    if isinstance(value, frozenset | set):
        items = ", ".join(sorted(_value_text(item) for item in value))
        return f"{type(value).__name__}({{{items}}})" if items else f"{type(value).__name__}()"
    if isinstance(value, tuple) and len(value) <= 8 and all(isinstance(item, _SIMPLE_VALUES) for item in value):
        return repr(value)
    return _named_value_text(value)


def _named_value_text(value: Any) -> str:
    """A class, type alias or function by its name; any other object by its type's."""
    if inspect.isclass(value):
        return _type_name(value)
    if isinstance(value, types.UnionType | types.GenericAlias) or typing.get_origin(value) is not None:
        return _annotation_text(value)  # a type alias
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{value.__module__}.{value.__qualname__}"
    home = type(value).__module__.split(".")[0]
    if home not in ("builtins", "verikv"):  # another library's internal class names are not verikv's contract
        return f"<{home} object>"
    return f"<{_type_name(type(value))}>"


def _return_hint(function: Callable[..., Any]) -> Any:
    """The return annotation evaluated in the callable's module; None when it names something only
    type checkers import (``if TYPE_CHECKING:``), or none is written."""
    hint = inspect.get_annotations(function).get("return")
    if not isinstance(hint, str):
        return hint
    try:
        return eval(hint, getattr(function, "__globals__", {}))  # annotations are source text here
    except (NameError, TypeError, AttributeError):
        return None


def _classes_in(hint: Any) -> Iterator[type]:
    if inspect.isclass(hint):
        yield hint
    for arg in typing.get_args(hint):
        yield from _classes_in(arg)


_REMOVED_IN = re.compile(r"will be removed in (\d+)\.(\d+)\.(\d+)")


def overdue_deprecations(text: str, version: str) -> list[str]:
    """Lines of a snapshot whose deprecated name should be gone by ``version``."""
    current = tuple(int(part) for part in version.split(".")[:3])
    return [line for line in text.splitlines()
            if (removal := _REMOVED_IN.search(line)) and tuple(int(part) for part in removal.groups()) <= current]


def snapshot_text() -> str:
    surface = Surface()
    for name in public_modules():
        surface.add_module(name)
    return HEADER + "\n".join(surface.finish()) + "\n"


def difference(expected: str, actual: str) -> str:
    """A unified diff from the checked-in snapshot to the live surface, empty when they agree."""
    return "".join(difflib.unified_diff(expected.splitlines(keepends=True), actual.splitlines(keepends=True),
                                        fromfile=str(SNAPSHOT.relative_to(ROOT)), tofile="live public API"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help=f"rewrite {SNAPSHOT.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    live = snapshot_text()
    if args.update:
        SNAPSHOT.write_text(live, encoding="utf-8")
        print(f"wrote {SNAPSHOT.relative_to(ROOT)} ({live.count(chr(10))} lines)")
        return 0
    diff = difference(SNAPSHOT.read_text(encoding="utf-8") if SNAPSHOT.exists() else "", live)
    sys.stdout.write(diff or "the public API matches the snapshot\n")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
