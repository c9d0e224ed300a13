"""Mutation testing of verikv's core modules with mutmut (docs/mutation.md).

``python -m mutation`` stages a copy of the repository per core module, runs mutmut over that
module with the module's killer tests, and writes per-module results and ``mutation/RESULTS.md``
(which also folds in the triage of every survivor from ``mutation/triage.toml``).
"""
