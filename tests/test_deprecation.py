"""verikv._deprecation: old names keep working for one minor version and warn, naming the replacement."""

from __future__ import annotations

import sys
import types
import warnings
from dataclasses import dataclass

import pytest
from api_snapshot import Surface

from verikv._deprecation import (
    removal_version,
    renamed_attribute,
    renamed_function,
    renamed_module_names,
)


def plan_pages(num_tokens: int, page_size: int = 16) -> int:
    """The new name."""
    return -(-num_tokens // page_size)


pages_for = renamed_function(plan_pages, "pages_for", since="0.2.0")


@dataclass(frozen=True)
class Page:
    dtype: str


@dataclass(frozen=True)
class Buffer:
    page: Page

    def total(self, count: int) -> int:
        return count * 2

    dtype = renamed_attribute[str]("page.dtype", since="0.2.0")
    sum_of = renamed_function(total, "sum_of", since="0.2.0")


def _one_warning(caught: list[warnings.WarningMessage]) -> str:
    assert [w.category for w in caught] == [DeprecationWarning]
    assert caught[0].filename == __file__, "the warning points at the caller's line"
    return str(caught[0].message)


def test_a_renamed_function_warns_and_calls_the_new_one() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert pages_for(33, page_size=16) == plan_pages(33) == 3
    assert _one_warning(caught) == ("pages_for is deprecated since verikv 0.2.0 and will be removed in 0.3.0; "
                                    "use plan_pages")
    assert pages_for.__name__ == "pages_for" and pages_for.__doc__ == plan_pages.__doc__


def test_a_renamed_method_warns_and_binds_like_the_new_one() -> None:
    buffer = Buffer(Page("bfloat16"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert buffer.sum_of(4) == buffer.total(4) == 8
    assert _one_warning(caught) == ("Buffer.sum_of is deprecated since verikv 0.2.0 and will be removed in 0.3.0; "
                                    "use Buffer.total")


def test_a_renamed_attribute_reads_through_its_path_and_warns() -> None:
    buffer = Buffer(Page("bfloat16"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert buffer.dtype == "bfloat16"
    assert _one_warning(caught) == ("Buffer.dtype is deprecated since verikv 0.2.0 and will be removed in 0.3.0; "
                                    "use Buffer.page.dtype")


class Holder:
    """A plain class: the descriptor itself refuses assignments."""

    def __init__(self) -> None:
        self.page = Page("float16")

    dtype = renamed_attribute[str]("page.dtype", since="0.2.0")


def test_a_renamed_attribute_is_read_only_and_not_a_field() -> None:
    holder = Holder()
    with pytest.raises(AttributeError, match=r"use Holder\.page\.dtype, which is read-only here"):
        holder.dtype = "bfloat16"  # type: ignore[assignment]
    assert holder.page.dtype == "float16" and "dtype" not in vars(holder)
    with pytest.raises(AttributeError):  # a frozen dataclass refuses it before the descriptor sees it
        Buffer(Page("bfloat16")).dtype = "float16"  # type: ignore[assignment]
    with pytest.raises(TypeError):
        Buffer(Page("bfloat16"), "float16")  # type: ignore[call-arg]


def test_a_renamed_module_name_warns_and_gives_the_new_object(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("verikv_demo_module")
    module.__getattr__ = renamed_module_names(  # type: ignore[method-assign]
        "verikv_demo_module", {"plan": "verikv.sizing.plan_kv_cache"}, since="0.2.0")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    from verikv.sizing import plan_kv_cache
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert module.plan is plan_kv_cache
    assert _one_warning(caught) == ("verikv_demo_module.plan is deprecated since verikv 0.2.0 and will be removed "
                                    "in 0.3.0; use verikv.sizing.plan_kv_cache")
    with pytest.warns(DeprecationWarning):
        from verikv_demo_module import plan  # type: ignore[import-not-found]
    assert plan is plan_kv_cache
    with pytest.raises(AttributeError, match="has no attribute 'other'"):
        _ = module.other


def test_warnings_become_errors_under_W_error() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DeprecationWarning):
            pages_for(1)


@pytest.mark.parametrize(("since", "removed"), [("0.2.0", "0.3.0"), ("1.9.3", "1.10.0")])
def test_a_name_goes_away_one_minor_version_later(since: str, removed: str) -> None:
    assert removal_version(since) == removed


@pytest.mark.parametrize("since", ["0.2", "v0.2.0", "0.2.0rc1", ""])
def test_since_must_be_a_release_version(since: str) -> None:
    with pytest.raises(ValueError, match="release version"):
        removal_version(since)


def test_the_api_snapshot_marks_deprecated_names() -> None:
    surface = Surface()
    surface.add_class(Buffer)
    lines = surface.finish()
    path = f"{__name__}.Buffer"
    assert (f"{path}.dtype: deprecated attribute: Buffer.dtype is deprecated since verikv 0.2.0 "
            "and will be removed in 0.3.0; use Buffer.page.dtype") in lines
    assert f"{path}.sum_of: method(self, count: int) -> int; deprecated: Buffer.sum_of is deprecated since verikv " \
           "0.2.0 and will be removed in 0.3.0; use Buffer.total" in lines
    assert [line for line in lines if line.startswith(f"{path}.dtype:")] == [
        f"{path}.dtype: deprecated attribute: Buffer.dtype is deprecated since verikv 0.2.0 and will be removed in "
        "0.3.0; use Buffer.page.dtype"]


def test_the_api_snapshot_lists_a_module_s_deprecated_names(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("verikv_demo_snapshot")
    module.__all__ = []  # type: ignore[attr-defined]
    module.__getattr__ = renamed_module_names(  # type: ignore[method-assign]
        "verikv_demo_snapshot", {"plan": "verikv.sizing.plan_kv_cache"}, since="0.2.0")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    surface = Surface()
    surface.add_module(module.__name__)
    assert surface.finish() == [
        "verikv_demo_snapshot: module",
        "verikv_demo_snapshot.plan: deprecated name: verikv_demo_snapshot.plan is deprecated since verikv 0.2.0 "
        "and will be removed in 0.3.0; use verikv.sizing.plan_kv_cache"]
