"""docs/figures/make_figures.py (``make figures``) draws the Concepts pages' figures from contrastfit's own
losses: it runs, writes every figure, and the pages embed the committed copies."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "docs" / "figures" / "make_figures.py"


def _script():
    spec = importlib.util.spec_from_file_location("contrastfit_make_figures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_draws_every_figure(tmp_path):
    script = _script()
    paths = script.main(["--out", str(tmp_path)])
    assert [p.name for p in paths] == list(script.FIGURES)
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
        assert 5_000 < path.stat().st_size < 150_000, (path, path.stat().st_size)


def test_every_figure_is_committed_and_embedded():
    script = _script()
    pages = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs" / "concepts").glob("*.md"))
    embedded = set(re.findall(r"\]\(\.\./figures/([\w.-]+\.png)\)", pages))
    for name in script.FIGURES:
        committed = ROOT / "docs" / "figures" / name
        assert committed.is_file() and committed.stat().st_size < 150_000, name
        assert name in embedded, f"{name} is drawn but no Concepts page shows it"
