"""verikv.proofs: Z3 theorems, CrossHair checks, mutants and the `verikv prove` runner.

Needs the ``proofs`` extra (z3-solver, crosshair-tool, rich). See ``verikv.proofs.runner.registry`` for how checks
and mutants are discovered.
"""
