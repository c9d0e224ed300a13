"""The README's editable install is visible to type checkers: user code checks clean under ``mypy --strict``.

A fresh venv gets the package exactly as the README's quick start installs it (its ``pip install``
arguments are read from README.md), from a copy of the sources so the install's link tree stays out
of this checkout. mypy (and pyright, when it is installed) then check a user's module against that
install: the module must be clean, and a second one with a planted type error must fail with the
types verikv declares, which shows the checker reads verikv's annotations instead of ``Any``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("impl", "spec", "proofs", "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "CHANGELOG.md")
TIMEOUT = 1800  # a hang guard for a fresh venv and an install, never a performance limit

USER_MODULE = '''\
"""An engine's module written against verikv's public API."""

from __future__ import annotations

import numpy as np

from verikv import CacheGroupSpec, CacheManager, CachePages, FullAttentionSpec, Request
from verikv.errors import UnknownRequestError
from verikv.sizing import KVCachePlan, LayerBuffer


def make_manager(num_pages: int) -> CacheManager:
    spec = FullAttentionSpec(page_size=16, num_kv_heads=8, head_size=128, dtype=np.float16, use_mla=False)
    return CacheManager(num_pages=num_pages, kv_cache_groups=[CacheGroupSpec(kv_cache_spec=spec)],
                        max_model_len=4096)


def admit(manager: CacheManager, request: Request) -> tuple[list[int], ...] | None:
    hits, num_hit = manager.get_computed_pages(request)
    pages: CachePages | None = manager.allocate_slots(request, request.num_tokens - num_hit, num_hit, hits)
    return None if pages is None else manager.get_page_ids(request.request_id)


def release(manager: CacheManager, request_id: str) -> bool:
    try:
        manager.get_page_ids(request_id)
    except UnknownRequestError:
        return False
    return True


def buffer_bytes(plan: KVCachePlan) -> int:
    first: LayerBuffer = plan.buffers[0]
    return first.bytes_per_device * len(plan.buffers)


if __name__ == "__main__":
    manager = make_manager(64)
    print(admit(manager, Request("r1", list(range(40)))), release(manager, "r1"), f"{manager.usage:.3f}")
'''

WRONG_MODULE = '''\
from user_module import make_manager

usage: str = make_manager(8).usage
'''
WRONG_TYPE = 'Incompatible types in assignment (expression has type "float", variable has type "str")'


def readme_install_arguments() -> list[str]:
    """The quick start's ``pip install`` arguments, as the README writes them."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"pip install (-e [^&\n]+?)\s*(?:&&|\n)", readme)
    assert match is not None, "README.md has no editable pip install"
    return match[1].replace('"', "").split()


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the venv's python, a folder holding the user's modules), after the README's install."""
    base = tmp_path_factory.mktemp("typed-install")
    source = base / "verikv-src"
    for name in SOURCES:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(origin, source / name)
    venv = base / "venv"
    done = _run([sys.executable, "-m", "venv", str(venv)], base)
    assert done.returncode == 0, done.stderr
    python = venv / "bin" / "python"
    # --no-compile: no .pyc files for the dependencies (about half the install's CPU time); they are
    # not what a type checker reads, and the editable install itself is made exactly as the README says
    done = _run([str(python), "-m", "pip", "install", "-q", "--no-compile", *readme_install_arguments()], source)
    assert done.returncode == 0, done.stdout + done.stderr
    user = base / "user"
    user.mkdir()
    (user / "user_module.py").write_text(USER_MODULE, encoding="utf-8")
    (user / "wrong_module.py").write_text(WRONG_MODULE, encoding="utf-8")
    return python, user


def test_the_readme_installs_in_strict_editable_mode() -> None:
    assert readme_install_arguments() == ["-e", ".[dev]", "--config-settings", "editable_mode=strict"]


@pytest.mark.slow
def test_user_code_runs_against_the_install(installed: tuple[Path, Path]) -> None:
    """It runs there, printing what it prints against this checkout."""
    python, user = installed
    there, here = (_run([interpreter, "user_module.py"], user) for interpreter in (str(python), sys.executable))
    assert there.returncode == here.returncode == 0, there.stderr + here.stderr
    assert there.stdout == here.stdout and "True" in there.stdout


@pytest.mark.slow
def test_mypy_strict_sees_the_editable_install(installed: tuple[Path, Path]) -> None:
    pytest.importorskip("mypy", reason="mypy is installed by .ci/run, not by the dev extra")
    python, user = installed
    mypy = [sys.executable, "-m", "mypy", "--strict", "--python-executable", str(python),
            "--cache-dir", str(user / ".mypy_cache"), "--config-file", str(user / "mypy.ini")]
    (user / "mypy.ini").write_text("[mypy]\n", encoding="utf-8")  # not the checkout's settings
    clean = _run([*mypy, "user_module.py"], user)
    assert clean.returncode == 0 and "Success: no issues found" in clean.stdout, clean.stdout + clean.stderr
    wrong = _run([*mypy, "wrong_module.py"], user)
    assert wrong.returncode == 1 and WRONG_TYPE in wrong.stdout, wrong.stdout + wrong.stderr


@pytest.mark.slow
def test_pyright_strict_sees_the_editable_install(installed: tuple[Path, Path]) -> None:
    pyright = shutil.which("pyright", path=str(Path(sys.executable).parent)) or shutil.which("pyright")
    if pyright is None:
        pytest.skip("pyright is installed by .ci/run, not by the dev extra")
    python, user = installed
    (user / "pyrightconfig.json").write_text(json.dumps({"typeCheckingMode": "strict"}), encoding="utf-8")
    clean = _run([pyright, "--pythonpath", str(python), "user_module.py"], user)
    assert clean.returncode == 0 and "0 errors" in clean.stdout, clean.stdout + clean.stderr
    wrong = _run([pyright, "--pythonpath", str(python), "wrong_module.py"], user)
    assert wrong.returncode == 1 and '"float" is not assignable to "str"' in wrong.stdout, wrong.stdout + wrong.stderr
