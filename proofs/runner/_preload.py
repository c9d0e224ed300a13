"""Imported by the fork server of `verikv.proofs.runner.isolation`: discover the registry once, before any fork.

Every check then starts in a child that shares this state and nothing else (module names
starting with ``_`` are skipped by discovery, so this module is not a provider).
"""

from verikv.proofs.runner.isolation import catalogue

catalogue(False)
catalogue(True)
