"""verikv.proofs: Z3 theorems, CrossHair checks, mutants and the `verikv prove` runner.

Needs the ``proofs`` extra (z3-solver, crosshair-tool, rich). See ``registry`` for how checks
and mutants are discovered.
"""
