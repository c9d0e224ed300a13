"""Hostile inputs at the conformance harness: its configuration, its entry points and adapters'
answers.

``CASES`` (built with `hostile`): every field of `ConformanceConfig` and the layout and config of
`check_conformance` take each hostile value, and a refused one must be an `InvalidArgumentError`
that changes nothing. An adapter that answers with a malformed value (a NaN usage, a free count
that is a string, a bool or ``10**100``, a lookup that is not a pair, ...) must make the run fail
with a conformance report naming the adapter method: those cases are ``accept`` cases whose call
checks that report, and raises an untyped error when it is missing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from hostile import Case, P, World, substitution_cases
from hypothesis import settings

from verikv.testing import live
from verikv.testing.conformance import (
    CacheManagerAdapter,
    ConformanceConfig,
    ConformanceError,
    check_conformance,
)
from verikv.testing.manager_machine import StepDraw

PROFILE = "hostile-harness"
settings.register_profile(PROFILE, max_examples=5, stateful_step_count=10, derandomize=True, database=None,
                          deadline=None)
"""A small derandomized budget: the valid calls run the machine briefly, the bad ones never start it."""

INTS = {"zero", "neg1", "2**31", "2**63", "10**100", "-10**100", "hashflip_int"}
"""Hostile values that are exact Python ints."""
NUMPY_INTS = {"np_int", "np_neg"}


def _config(**fields: Any) -> ConformanceConfig:
    return ConformanceConfig(**{"profile": PROFILE, "shrink": False, **fields})


def _config_world() -> World:
    return {}


def _build_config(world: World, **fields: Any) -> Any:
    return ConformanceConfig(**fields)


CONFIG_FIELDS = {
    "layouts": P(("full",), "object", accept={"None", "empty_list"}),
    "skip_layouts": P(("dp2",), "object", accept={"empty_list"}),
    "free_order": P("esurge", "object", accept={"None"}),
    "eagle_rule": P("vllm", "object", accept={"None"}),
    "mode": P("black-box", "object"),
    "checks": P(frozenset({"REFINEMENT"}), "object", accept={"None", "empty_list"}),
    "waivers": P(frozenset({"usage-formula"}), "object", accept={"empty_list"}),
    "features": P(frozenset({"salt"}), "object", accept={"empty_list"}),
    "bad_inputs": P(False, "bool", reject={"np_bool"}),
    "max_examples": P(None, "opt_count1", reject=NUMPY_INTS | {"np_bool"}, accept={"hashflip_int"}),
    "stateful_step_count": P(None, "opt_count1", reject=NUMPY_INTS | {"np_bool"}, accept={"hashflip_int"}),
    "shrink": P(True, "bool", reject={"np_bool"}),
    "profile": P(PROFILE, "object", accept={"None"}),
    "seed": P(None, "object", accept={"None"} | INTS, either=NUMPY_INTS),
    "shrink_seconds": P(20.0, "object", accept={"1.5", "2.0", "2**31", "2**63", "10**100", "hashflip_int"},
                        either={"np_int", "np_float"}),
}
"""Every `ConformanceConfig` field: a valid value and which hostile values it must accept."""


def _check_world() -> World:
    return {"config": _config(mode="black-box")}


def _check(world: World, layout: Any, config: Any) -> None:
    check_conformance(CacheManagerAdapter, layout, config)


CHECK_PARAMS = {
    "layout": P("full", "object"),
    "config": P(lambda: _config(mode="black-box"), "object"),
}


def answering(method: str, value: Any) -> Callable[[Any], CacheManagerAdapter]:
    """An adapter factory: verikv's adapter, except that ``method`` answers ``value``."""
    def answer(self: Any, *args: Any, **kwargs: Any) -> Any:
        return value

    cls = type(f"Answers{method.title().replace('_', '')}", (CacheManagerAdapter,), {method: answer})
    return cls


def reported(method: str, value: Any, mode: str) -> Callable[[World], None]:
    """Run the harness on an adapter whose ``method`` answers ``value``; succeed only when the
    run fails with a report naming that method (``adapter:<method>``)."""
    def act(world: World) -> None:
        try:
            check_conformance(answering(method, value), "full+sliding(window>page)", _config(mode=mode))
        except ConformanceError as error:
            if error.names != [f"adapter:{method}"] or f"{method}() answered" not in str(error):
                raise AssertionError(f"reported as {error.names}, not adapter:{method}:\n{error}") from None
            return
        raise AssertionError(f"{method}() answering {value!r} was not reported")
    return act


MALFORMED_ANSWERS: dict[str, list[Any]] = {
    "usage": [math.nan, math.inf, -math.inf, "0.5", None, True],
    "num_free_pages": ["3", True, False, 10**100, -1, 1.5, None, math.nan],
    "lookup": ["x", None, ((), "4"), ((), -1), ((("p",),), 4), ((), 10**100)],
    "allocate": ["x", ((1.5,),), ((-1,),), ((10**100,),)],
    "reset": ["yes", None, 1],
}
"""Per adapter method, answers the harness cannot judge (each stops the run as ``adapter:<method>``)."""


def _answer_cases() -> list[Case]:
    return [Case(f"harness.answer[{mode}:{method}={value!r}]", _config_world, reported(method, value, mode), "accept")
            for mode in ("white-box", "black-box") for method, values in MALFORMED_ANSWERS.items()
            for value in values]


def _live_cases() -> list[Case]:
    """The live-report functions, each inside `live.writing_to`, so the writer in use is restored."""
    def set_writer(world: World, writer: Any) -> None:
        with live.writing_to(world["shown"].append):
            live.set_writer(writer)

    def emit(world: World, text: Any) -> None:
        with live.writing_to(world["shown"].append):
            live.emit(text)

    def writing_to(world: World, writer: Any) -> None:
        with live.writing_to(writer):
            pass

    def world() -> World:
        return {"shown": []}

    writer = P(lambda: (lambda text: None), "object", accept={"None", "callable"})
    return (substitution_cases("testing.live.set_writer", world, set_writer, {"writer": writer})
            + substitution_cases("testing.live.emit", world, emit,
                                 {"text": P("report", "object", accept={"str", "empty_str", "surrogate",
                                                                        "hashflip_str"})})
            + substitution_cases("testing.live.writing_to", world, writing_to,
                                 {"writer": P(lambda: (lambda text: None), "object", accept={"None", "callable"})})
            + [Case("testing.manager_machine.StepDraw[fields]", world, lambda w: StepDraw(2, 0, False, 1), "accept")])


CASES: list[Case] = (substitution_cases("harness.ConformanceConfig", _config_world, _build_config, CONFIG_FIELDS)
                     + substitution_cases("harness.check_conformance", _check_world, _check, CHECK_PARAMS)
                     + _answer_cases() + _live_cases())
