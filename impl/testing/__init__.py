"""verikv.testing: the spec as reusable Hypothesis state machines (needs the ``testing`` extra)."""
