"""What ``pip install .`` ships, checked from pyproject.toml without building (``make wheel-check``
builds the wheel, installs it into a fresh virtualenv and uses it: .ci/wheel_check.sh)."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_every_file_the_package_reads_is_package_data(pyproject):
    """Every file of ``src/contrastfit`` that is not a module (the report templates today) matches a
    ``package-data`` pattern of its package, so the wheel holds it (setuptools ships modules alone
    otherwise, and the installed package would fail where it reads the file)."""
    setuptools = pyproject["tool"]["setuptools"]
    assert setuptools["packages"]["find"]["where"] == ["src"]  # nothing beside the package: no tests/, bench/
    patterns = setuptools.get("package-data", {})
    src = ROOT / "src"
    data = [p for p in (src / "contrastfit").rglob("*")
            if p.is_file() and p.suffix not in {".py", ".pyc"} and "__pycache__" not in p.parts]
    assert data, "the report templates are package data"
    for path in data:
        rel = path.relative_to(src)
        covered = any(
            rel.as_posix().startswith(package.replace(".", "/") + "/")
            and fnmatch.fnmatch(rel.relative_to(package.replace(".", "/")).as_posix(), pattern)
            for package, globs in patterns.items() for pattern in globs)
        assert covered, f"{rel} is not in [tool.setuptools.package-data]: the wheel would lack it"


def test_the_install_page_names_every_extra(pyproject):
    """docs/get-started.md has a row for each extra of pyproject.toml, and no row for one it lacks."""
    extras = set(pyproject["project"]["optional-dependencies"])
    page = (ROOT / "docs" / "get-started.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([a-z0-9-]+)` \|", page, re.M))
    assert rows == extras
