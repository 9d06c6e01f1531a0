"""The README and the documentation site's sources (docs/, mkdocs.yml); `make test` also builds the
site with `mkdocs build --strict`, which checks every link and anchor."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def test_readme_is_short_and_starts_with_the_two_commands():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 120
    assert lines[0] == "# contrastfit"
    first_block = lines[lines.index("```bash") + 1:lines.index("```")]
    assert [line.split()[:2] for line in first_block] == [["make", "demo"], ["make", "test"]]
    assert not any(line.startswith("## ") for line in lines[:lines.index("```bash")])  # before any section


def test_no_page_a_user_reads_names_an_internal_issue_number():
    """History (which issue changed what, and when) goes in CHANGELOG.md; README and docs describe the
    product as it is."""
    pattern = re.compile(r"\bissues? \d+|issue-\d+", re.IGNORECASE)
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = [f"{p.relative_to(ROOT)}:{n}: {m.group(0)}" for p in pages
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) for m in pattern.finditer(line)]
    assert not found, found


def test_no_page_a_user_reads_is_a_dated_lab_note():
    """A date belongs to CHANGELOG.md; a record's file name may carry one (`quantize_2026-11-27.json`)."""
    pattern = re.compile(r"(?<![_\w])20\d\d-\d\d-\d\d")
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = [f"{p.relative_to(ROOT)}:{n}: {m.group(0)}" for p in pages
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) for m in pattern.finditer(line)]
    assert not found, found


def _nav_pages(nav) -> list[str]:
    pages = []
    for item in nav:
        values = item.values() if isinstance(item, dict) else [item]
        for value in values:
            pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_every_docs_page_is_in_the_nav_and_every_readme_link_exists():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    nav = _nav_pages(config["nav"])
    pages = sorted(p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(nav) == pages
    assert "pitfalls.md" in nav and "design.md" in nav
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert targets and all((ROOT / t).is_file() for t in targets), targets


def test_the_design_page_describes_the_tree():
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    for part in ("data/", "losses/", "methods/", "training.py", "cli.py", "bench/"):
        assert f"`{part}" in design, part


def test_every_method_with_hyper_parameters_has_its_generated_table():
    """docs/concepts/losses.md names each such method in a `<!-- hparams: ... -->` marker, which
    docs/hooks.py replaces with the table read from the method's `Hparams` declaration."""
    from contrastfit.methods import available_methods

    page = (ROOT / "docs" / "concepts" / "losses.md").read_text(encoding="utf-8")
    listed = {name for marker in re.findall(r"^<!-- hparams: ([a-z -]+) -->$", page, re.MULTILINE)
              for name in marker.split()}
    assert listed == {n for n, s in available_methods().items() if s.defaults}
    text = load_script("docs", "hooks").on_page_markdown(page, None, None, None)
    assert "<!-- hparams:" not in text and "| `temperature` (`--temperature`) | `0.3` | number, > 0 |" in text


def test_the_losses_page_lists_every_method_once():
    """The table "Every method" of docs/concepts/losses.md has a row per registered method."""
    from contrastfit.methods import available_methods

    page = (ROOT / "docs" / "concepts" / "losses.md").read_text(encoding="utf-8")
    table = page.split("## Every method", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z-]+)`", table, re.MULTILINE)
    assert sorted(rows) == sorted(available_methods()), rows
