"""The release's version is written once, and CHANGELOG.md has a section for it in Keep a Changelog's form."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import verikv

ROOT = Path(__file__).resolve().parent.parent
CHANGELOG = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
KINDS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
_VERSION_HEADING = re.compile(r"^## \[(?P<name>[^\]]+)\](?: - (?P<date>\d{4}-\d{2}-\d{2}))?$")


def _sections() -> dict[str, str]:
    """Each ``## [...]`` section's text by version name, in file order."""
    parts = re.split(r"^(## \[.*)$", CHANGELOG, flags=re.M)
    return {heading: body for heading, body in zip(parts[1::2], parts[2::2])}


def test_the_version_is_written_once() -> None:
    """pyproject.toml reads the version from verikv.__version__ (``verikv --version`` and the metadata follow)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "verikv.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", verikv.__version__)


def test_the_changelog_leads_with_this_version() -> None:
    """The newest section is this version, released (dated) or still ``[Unreleased]``; 0.1.0 is the first."""
    headings = list(_sections())
    names = [_VERSION_HEADING.match(heading) for heading in headings]
    assert all(names), headings
    first = names[0]
    assert first is not None and (first["name"] == "Unreleased" or (first["name"] == verikv.__version__
                                                                     and first["date"] is not None))
    assert headings[-1].startswith("## [0.1.0] - ")


def test_every_change_is_under_a_keep_a_changelog_heading() -> None:
    for heading, body in _sections().items():
        kinds = re.findall(r"^### (.*)$", body, flags=re.M)
        assert set(kinds) <= set(KINDS) and len(kinds) == len(set(kinds)), (heading, kinds)
        if kinds:
            assert all(re.search(r"^- ", part, flags=re.M) for part in re.split(r"^### .*$", body, flags=re.M)[1:]), \
                f"{heading}: a heading without bullets"
