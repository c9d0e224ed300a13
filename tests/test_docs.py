"""The user documentation only names things that exist: relative links (and their anchors)
resolve, every INV-* name is in the spec's catalogue, every check or mutant name cited in code
spans is in the `verikv prove` registry, and every dotted ``verikv.*`` name imports."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from verikv.proofs.runner.registry import discover_checks, discover_mutants
from verikv.spec import invariants

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
CATALOGUE = {*invariants.MANAGER_INVARIANTS, *invariants.GHOST_INVARIANTS, *invariants.LOOKUP_INVARIANTS,
             *invariants.TRANSITION_INVARIANTS}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
CHECK_NAME = re.compile(r"^(?:[a-z_]+(?:\.[a-z0-9_-]+)+/[A-Z][A-Z0-9-]*(?::\S+)?"  # <transition>/<INVARIANT>
                        r"|(?:pool|manager|crosshair|sizing|spec):[\w.:-]+)$")  # <kind>:<target>, mutants


def prose(path: Path) -> str:
    """The Markdown text without fenced code blocks (commands and examples, not references)."""
    return re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in prose(path).splitlines() if line.startswith("#")}


def test_docs_exist_and_the_index_links_every_user_page() -> None:
    names = {path.name for path in DOCS}
    assert {"index.md", "concepts.md", "ci.md", "model-testing.md", "differences.md", "invariants.md"} <= names
    linked = set(LINK.findall((ROOT / "docs" / "index.md").read_text()))
    assert names - {"index.md"} <= linked


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(path: Path) -> None:
    for target in LINK.findall(prose(path)):
        if re.match(r"[a-z]+:", target):
            continue  # an absolute URL
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        assert resolved.exists(), f"{path.name}: broken link {target}"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), f"{path.name}: no heading #{anchor} in {resolved.name}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_invariant_names_are_in_the_catalogue(path: Path) -> None:
    used = set(re.findall(r"\bINV-[A-Z][A-Z0-9-]*[A-Z0-9]", path.read_text()))
    assert used <= CATALOGUE, f"{path.name}: unknown {sorted(used - CATALOGUE)}"


def test_cited_check_and_mutant_names_are_in_the_registry() -> None:
    known = {check.name for check in discover_checks()} | {mutant.name for mutant in discover_mutants()}
    every: set[str] = set()
    for path in DOCS:
        cited = {span for span in CODE_SPAN.findall(prose(path)) if CHECK_NAME.match(span)}
        assert cited <= known, f"{path.name}: not in the registry: {sorted(cited - known)}"
        every |= cited
    assert len(every) > 50  # the pattern does find the catalogue's citations


def resolves(dotted: str) -> bool:
    """Whether ``verikv.a.b.C.d`` names a module, or an attribute reached from one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_dotted_verikv_names_exist(path: Path) -> None:
    names = {span for span in CODE_SPAN.findall(prose(path)) if re.fullmatch(r"verikv(\.\w+)+", span)}
    missing = sorted(name for name in names if not resolves(name))
    assert not missing, f"{path.name}: {missing}"


def test_the_catalogue_page_has_an_entry_per_invariant() -> None:
    text = (ROOT / "docs" / "invariants.md").read_text()
    assert {f"### {name}" for name in CATALOGUE} <= set(text.splitlines())
