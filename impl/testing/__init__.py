"""verikv.testing: the spec as reusable Hypothesis state machines (needs the ``testing`` extra).

`verikv.testing.adapter` (the adapter protocol and verikv's own adapter) needs only verikv; the
state machines and the conformance harness need Hypothesis, and say so when it is missing.
"""

INSTALL_HINT = "pip install 'verikv[testing]'"


def _missing_extra(error: ModuleNotFoundError) -> ModuleNotFoundError:
    """The error to raise when importing Hypothesis failed with ``error``: it names the extra."""
    package = (error.name or "hypothesis").split(".")[0]
    return ModuleNotFoundError(f"verikv.testing needs Hypothesis ({package} is missing): {INSTALL_HINT}",
                               name=package)
