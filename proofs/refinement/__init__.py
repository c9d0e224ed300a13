"""The real `CacheManager` against the spec: exhaustive refinement, random walks, events, keys."""
