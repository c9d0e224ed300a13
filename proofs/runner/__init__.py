"""The `verikv prove` runner: the registry of checks and mutants, selection, isolation, reports."""
