"""The conformance harness against EasyDeL 0.3.0's own page manager (docs/examples/easydel_adapter.py).

The searches run only where EasyDeL is installed (it is not a verikv dependency, and CI does not
have it); elsewhere they are skipped with the reason. Each run is the one recorded in
docs/model-testing.md ("What it finds in EasyDeL's eSurge"): seed 0, Hypothesis' default budget
(100 examples of up to 50 steps), no example database. Shrinking is off here (it only
shortens the report; the check names are the same), so the module stays quick.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import settings

from verikv.testing.conformance import ConformanceError, check_conformance, check_pool_conformance

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "easydel_adapter.py"
needs_easydel = pytest.mark.skipif(importlib.util.find_spec("easydel") is None,
                                reason="EasyDeL is not installed (pip install easydel==0.3.0 to run these)")

settings.register_profile("easydel-recorded", database=None, deadline=None)
"""Hypothesis' default budget, and no example database (a saved failure would be replayed first)."""
RECORDED = {"seed": 0, "profile": "easydel-recorded", "shrink": False}


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("easydel_adapter", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_manager_adapter_is_about_50_lines() -> None:
    text = EXAMPLE.read_text()
    adapter = text[text.index("core, esurge_request = load_esurge()"):text.index("# ---- end of adapter")]
    assert len(adapter.strip().splitlines()) <= 50


@needs_easydel
@pytest.mark.parametrize("layout", ["sliding-only(window<=page)", "sliding+full(window<=page)"])
def test_q1_false_hit_is_found_by_search_in_the_windowed_layouts(layout: str) -> None:
    """eSurge's Q1: with the window inside one page, a decoded page is keyed as the first page
    of a chain, and a prompt quoting it hits KV computed in another context (INV-HIT-SAFE)."""
    module = example()
    with pytest.raises(ConformanceError) as caught:
        check_conformance(module.EasyDeLAdapter, layout, replace(module.ESURGE_CONFIG, **RECORDED))
    assert "INV-HIT-SAFE" in caught.value.names, str(caught.value)


@needs_easydel
def test_q6_double_free_is_found_through_the_page_level_protocol() -> None:
    module = example()
    with pytest.raises(ConformanceError) as caught:
        check_pool_conformance(module.EasyDeLPoolAdapter, replace(module.ESURGE_POOL_CONFIG, **RECORDED))
    assert "rejects:double-free" in caught.value.names, str(caught.value)
