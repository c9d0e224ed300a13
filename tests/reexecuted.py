"""A module's file executed a second time, for checks of code that runs at import.

A mutation tool activates a mutant after the import, so code that runs only when a module is
imported (property factories, tables) is reached by executing the module's file again under
its own name, without registering the copy in ``sys.modules``.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType


def reexecuted(module: ModuleType) -> ModuleType:
    """A fresh execution of ``module``'s file under its own name (not registered)."""
    spec = importlib.util.spec_from_file_location(module.__name__, module.__file__)
    if spec is None or spec.loader is None:  # (not an assert: this helper is not rewritten, and -O drops asserts)
        raise AssertionError(f"{module.__name__} has no loadable file")
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    return fresh
