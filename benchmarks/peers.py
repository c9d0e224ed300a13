"""Access to the anchors harness (``--anchors``): the published EasyDeL and vLLM managers.

The harness and the peers' packages exist only in the anchors venv. `load_adapters` returns its
`adapters` module when the peers import there, and ``None`` elsewhere (the project's own venv),
so the benchmarks that compare with a peer print that the peer was skipped instead of failing.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

DEFAULT_ANCHORS = Path(__file__).resolve().parents[2] / "shared" / "anchors"


def load_adapters(anchors: Path, kinds: tuple[str, ...]) -> ModuleType | None:
    """The harness's `adapters` module with `kinds` ("easydel", "vllm") imported, or None when
    the harness or one of the peers cannot be imported in this interpreter."""
    if not (anchors / "adapters.py").is_file() or any(importlib.util.find_spec(k) is None for k in kinds):
        return None
    if str(anchors) not in sys.path:
        sys.path.insert(0, str(anchors))
    try:
        import adapters  # type: ignore[import-not-found]  # (on the path only now)

        for kind in kinds:
            adapters.load(kind)
    except ImportError:
        return None
    module: ModuleType = adapters
    return module
