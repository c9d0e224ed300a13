"""Mutation testing of verikv's core modules with mutmut (docs/mutation.md).

``python -m tools.mutation`` stages a copy of the repository per core module, runs mutmut over that
module with the module's killer tests, and writes the module's record and ``RESULTS.md`` (which
also folds in the triage of every survivor from ``triage.toml``), both in this folder.
"""
