"""The distribution's metadata: version ranges tested at their lower bounds, license, sdist contents, typed exports."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]
_REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9_.\-]+)(?P<spec>.*)$")


def _requirements() -> list[str]:
    extras = [req for reqs in PROJECT["optional-dependencies"].values() for req in reqs]
    return [*PROJECT["dependencies"], *extras]


def _lowest_constraints() -> dict[str, str]:
    lines = (ROOT / ".ci" / "lowest-constraints.txt").read_text(encoding="utf-8").splitlines()
    pins = [line.split("==") for line in lines if line and not line.startswith("#")]
    return {name.strip().lower(): version.strip() for name, version in pins}


def test_every_requirement_is_a_range_not_a_pin() -> None:
    for req in _requirements():
        spec = _REQUIREMENT.match(req)
        assert spec is not None and "==" not in req and ">=" in spec["spec"], req


def test_every_lower_bound_is_installed_by_the_lowest_versions_ci_run() -> None:
    """.ci/run installs .ci/lowest-constraints.txt once; each pin there is a requirement's lower bound."""
    lowest = _lowest_constraints()
    for req in _requirements():
        match = _REQUIREMENT.match(req)
        assert match is not None
        name = match["name"].lower()
        floor = re.search(r">=([\w.]+)", match["spec"])
        assert floor is not None and name in lowest, req
        pinned = lowest[name].split(".")
        assert pinned[:len(floor[1].split("."))] == floor[1].split("."), f"{req} vs {name}=={lowest[name]}"


def test_license_is_an_spdx_expression_with_its_file() -> None:
    assert PROJECT["license"] == "Apache-2.0" and PROJECT["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text(encoding="utf-8")[:200]
    assert any(req.startswith("setuptools>=77") for req in PYPROJECT["build-system"]["requires"])


def test_sdist_carries_the_docs_the_readme_links_to() -> None:
    manifest = (ROOT / "MANIFEST.in").read_text(encoding="utf-8")
    assert "recursive-include docs *.md" in manifest
    linked = set(re.findall(r"\]\((docs/[\w\-/]+\.md)\)", (ROOT / "README.md").read_text(encoding="utf-8")))
    assert linked and all((ROOT / page).is_file() for page in linked)


def test_pytest_plugin_entry_point() -> None:
    assert PROJECT["entry-points"]["pytest11"] == {"verikv": "verikv.proofs.pytest_plugin"}


def test_type_checkers_see_every_lazy_export() -> None:
    """impl/__init__.py: the TYPE_CHECKING imports name exactly the lazily exported names, from the same modules."""
    tree = ast.parse((ROOT / "impl" / "__init__.py").read_text(encoding="utf-8"))
    exports = next(ast.literal_eval(node.value) for node in tree.body
                   if isinstance(node, ast.AnnAssign) and node.value is not None
                   and getattr(node.target, "id", "") == "_EXPORTS")
    guarded = next(node for node in tree.body
                   if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING")
    typed = {alias.asname: node.module for node in guarded.body if isinstance(node, ast.ImportFrom)
             for alias in node.names if alias.asname == alias.name}
    assert typed == {name: f"verikv.{module}" for name, module in exports.items()}
