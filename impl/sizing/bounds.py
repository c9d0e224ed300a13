"""Upper bounds on every sizing input, so that any input is answered at once.

Beyond these the planner raises ``SizingError`` (it never clamps): a request for ``dp = 2**30``
shards or a config with ten million layers is refused before anything is built for it. The
bounds are far above any real deployment and match the ranges the sizing theorems cover
(``docs/sizing.md``, "What is proved") where those are stated. The config bounds
(``MAX_CONFIG_LAYERS``, ``MAX_CONFIG_DIM``) are the cache-spec reader's, shared by both config readers.
"""

from __future__ import annotations

from verikv.cache_specs import MAX_CONFIG_DIM, MAX_CONFIG_LAYERS

__all__ = ["MAX_BYTES", "MAX_CONFIG_DIM", "MAX_CONFIG_LAYERS", "MAX_DP", "MAX_MODEL_LAYERS", "MAX_NUM_SEQS",
           "MAX_PAGE_SIZE", "MAX_TP"]

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


MAX_MODEL_LAYERS = 8192
"""Most layer records in one model (a hybrid layer such as Falcon-H1's counts twice)."""
