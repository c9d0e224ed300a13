"""Which checks (or mutants) ``--only`` patterns select, shared by `verikv prove` and the pytest plugin.

A pattern that is exactly the name of an entry selects that entry and nothing else, so a name
pasted from the table or the JSON means what it says even when it is also a substring of other
names. Any other pattern goes to `verikv.proofs.runner.registry.matches` (a glob on the name or the
invariant, a substring of the name, or an invariant name).

Check names hold no glob or markup characters. The bracketed forms they had before
(``lookup.rule[full]/LONGEST-COMMON-HIT``, now ``lookup.rule.full/LONGEST-COMMON-HIT``) are
still accepted in patterns for one release: `current_patterns` rewrites them and says how.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from verikv.proofs.runner.registry import Entry, matches

RENAMED: dict[str, str] = {
    f"{prefix}[{variant}]": f"{prefix}.{variant}"
    for prefix, variants in (("lookup.rule", ("full", "sliding", "chunked")), ("lookup.eagle", ("full",)),
                             ("manager.remove_skipped", ("sliding", "chunked")),
                             ("manager.allocate_slots", ("dp", "lookahead")))
    for variant in variants
}
"""Old bracketed name part -> its current form (accepted in patterns until the next release)."""


def modernize(pattern: str) -> tuple[str, str | None]:
    """``pattern`` with every old bracketed name part replaced, and a deprecation notice naming
    the replacement (None when the pattern uses no old name)."""
    new = pattern
    for old, current in RENAMED.items():
        new = new.replace(old, current)
    if new == pattern:
        return pattern, None
    return new, (f"--only {pattern!r} uses an old bracketed check name, accepted until the next release; "
                 f"selecting its current form {new!r}")


def current_patterns(patterns: Sequence[str], announce: Callable[[str], None]) -> list[str]:
    """``patterns`` with old check names replaced; ``announce`` receives each replacement's notice."""
    current = []
    for pattern in patterns:
        new, notice = modernize(pattern)
        if notice is not None:
            announce(notice)
        current.append(new)
    return current


def select(entries: Sequence[Entry], patterns: Sequence[str]) -> list[Entry]:
    """The entries the patterns select, in order; every entry when there are no patterns."""
    if not patterns:
        return list(entries)
    names = {entry.name for entry in entries}
    exact = {p for p in patterns if p in names}
    loose = [p for p in patterns if p not in names]
    return [e for e in entries if e.name in exact or any(matches(e, p) for p in loose)]
