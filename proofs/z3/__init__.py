"""Z3 theorems: the pool, the manager and its layouts, sizing; encodings checked against the spec."""
