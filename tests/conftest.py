"""Hypothesis profiles shared by the whole suite, and the proofs as part of the whole suite.

``ci`` (loaded automatically when CI=true) is derandomized, has no database and no deadline, so
a CI run is reproducible. ``nightly`` is random and heavier, for scheduled runs:
``pytest --hypothesis-profile=nightly``. Tests that need a minimum number of examples set it
with their own ``settings``; the profile then only changes randomness and the database.

Every registry check runs once, as a pytest item ``verikv-proofs::<name>`` (the plugin
`verikv.proofs.pytest_plugin`), when pytest runs the whole suite (no path arguments) or
tests/test_proofs.py; elsewhere ask for them with ``--verikv-proofs``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

_COMMON = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

settings.register_profile("ci", _COMMON, derandomize=True, database=None, print_blob=True)
settings.register_profile("dev", _COMMON)
settings.register_profile("nightly", _COMMON, max_examples=2000)
settings.load_profile("dev")

_HERE = Path(__file__).parent


def _runs_the_proofs(config: pytest.Config) -> bool:
    """Whole suite (pytest's testpaths, or this folder), or the proofs' own test module."""
    if config.args_source is pytest.Config.ArgsSource.TESTPATHS:
        return True
    targets = {(Path(config.invocation_params.dir) / arg.split("::")[0]).resolve() for arg in config.args}
    return bool(targets & {_HERE.resolve(), (_HERE / "test_proofs.py").resolve()})


def pytest_configure(config: pytest.Config) -> None:
    if _runs_the_proofs(config):
        config.option.verikv_proofs = True
