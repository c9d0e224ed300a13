"""verikv.spec: the abstract state machine of the page pool and the cache manager.

Pure, immutable, small: plain tuples, frozensets and frozen dataclasses, one function per
transition with its precondition, the INV-* invariants as named predicates. Never imports
the implementation (``verikv``'s own modules).
"""
