"""Hypothesis profiles shared by the whole suite.

The profile loaded is ``ci`` when the environment variable ``CI`` is ``true``, ``1`` or ``yes``
(any case; GitHub Actions and GitLab set ``CI=true``, and so does ``.ci/run``), else ``dev``;
``--hypothesis-profile=NAME`` overrides either.

- ``ci``: derandomized, no example database, no deadline: a CI run generates the same examples
  every time, so it is reproducible and never fails by the luck of the draw.
- ``dev``: random (a developer's runs explore new examples), with Hypothesis' example database.
- ``nightly``: random and heavier (2000 examples), for scheduled runs:
  ``python -m pytest -q -n 2 --hypothesis-profile=nightly`` (docs/ci.md).

Tests that need a minimum number of examples set it with their own ``settings``; the profile
then only changes randomness and the database.

The registry checks are not tests of this suite: ``verikv prove`` runs each of them once (in
``.ci/run`` too); ``--verikv-proofs`` adds them as pytest items on request.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CI_VALUES = frozenset({"true", "1", "yes"})

settings.register_profile("ci", _COMMON, derandomize=True, database=None, print_blob=True)
settings.register_profile("dev", _COMMON)
settings.register_profile("nightly", _COMMON, max_examples=2000)
settings.load_profile("ci" if os.environ.get("CI", "").lower() in CI_VALUES else "dev")
