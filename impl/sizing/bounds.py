"""Upper bounds on every sizing input, so that any input is answered at once.

Beyond these the planner raises ``SizingError`` (it never clamps): a request for ``dp = 2**30``
shards or a config with ten million layers is refused before anything is built for it. The
bounds are far above any real deployment and match the ranges the sizing theorems cover
(``docs/sizing.md``, "What is proved") where those are stated.
"""

from __future__ import annotations

MAX_TP = 1024
"""Most tensor-parallel ranks."""

MAX_DP = 4096
"""Most data-parallel shards."""

MAX_BYTES = 2**60
"""Largest byte count accepted for memory, weights, in-use, reserved, workspace or KV budget (1 EiB)."""

MAX_PAGE_SIZE = 2**20
"""Largest page size in tokens."""

MAX_NUM_SEQS = 2**16
"""Most running requests (``max_num_seqs``)."""

MAX_CONFIG_LAYERS = 4096
"""Largest ``num_hidden_layers`` read from a config (the biggest published models have under 200)."""

MAX_MODEL_LAYERS = 8192
"""Most layer records in one model (a hybrid layer such as Falcon-H1's counts twice)."""
