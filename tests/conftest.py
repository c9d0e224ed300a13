"""Hypothesis profiles shared by the whole suite.

``ci`` (loaded automatically when CI=true) is derandomized, has no database and no deadline, so
a CI run is reproducible. ``nightly`` is random and heavier, for scheduled runs:
``pytest --hypothesis-profile=nightly``. Tests that need a minimum number of examples set it
with their own ``settings``; the profile then only changes randomness and the database.
"""

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

settings.register_profile("ci", derandomize=True, database=None, print_blob=True, **_COMMON)
settings.register_profile("dev", **_COMMON)
settings.register_profile("nightly", max_examples=2000, **_COMMON)
settings.load_profile("dev")
