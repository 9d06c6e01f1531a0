"""The content of a report page and its rendering through Jinja2 templates.

Python code (the summary tables, the analyses) describes *what* a page holds with a few plain
objects -- :class:`Section` (a heading and its content), :class:`Table`, :class:`Figure`,
:class:`Note`, :class:`Text` --; the templates in ``contrastfit/experiments/templates/`` decide
*how* it looks: ``report.md.j2`` (Markdown, figures linked relative to the experiment folder),
``report.html.j2`` (one self-contained HTML file, its CSS inside the template, figures embedded as
base64 data URIs) and ``fragment.md.j2`` (content without a page title, for the terminal). The
Markdown and HTML layout of each kind of content is a macro in ``macros.md.j2`` / ``macros.html.j2``.

Text conventions: a `code span` in backticks stays one in Markdown and becomes ``<code>`` in HTML;
table cells that are numbers (or stand in for one: ``–``, ``baseline``, a p-value cell) are
right-aligned.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

__all__ = ["REPORT_HTML", "REPORT_MD", "Figure", "Note", "Page", "Section", "Table", "Text", "render_fragment",
           "render_page"]

#: The file names of a report in an experiment folder.
REPORT_MD = "report.md"
REPORT_HTML = "report.html"

#: Cells that are numbers (or stand in for one): right-aligned.
_NUMERIC_CELL = re.compile(r"^(?:[-+−<]?\d|–$|$|baseline$|W )")


def md_cell(text: Any) -> str:
    """A Markdown table cell: ``|`` escaped, one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_alt(text: Any) -> str:
    """Image alt text and captions: brackets and backslashes escaped."""
    return re.sub(r"([\[\]\\])", r"\\\1", str(text))


@dataclass
class Text:
    """A paragraph."""

    text: str
    kind: ClassVar[str] = "text"


@dataclass
class Note:
    """A remark on what could not be shown and why (rendered as a call-out)."""

    text: str
    kind: ClassVar[str] = "note"


@dataclass
class Table:
    """A table of pre-formatted cells with an optional caption below it. ``group`` (e.g. a
    setting) puts it under a sub-heading of its section."""

    header: list[str]
    rows: list[list[str]]
    caption: str | None = None
    group: str | None = None
    kind: ClassVar[str] = "table"

    @property
    def right_aligned(self) -> list[bool]:
        """Per column: right-align when every body cell is a number (the first column never)."""
        return [i > 0 and bool(self.rows) and all(_NUMERIC_CELL.match(str(line[i])) for line in self.rows)
                for i in range(len(self.header))]

    @property
    def widths(self) -> list[int]:
        """Per column: the width of its widest Markdown cell (at least 3), to align the text."""
        lines = [self.header, *self.rows]
        return [max(3, *(len(md_cell(line[i])) for line in lines)) for i in range(len(self.header))]


@dataclass
class Figure:
    """A PNG written under ``FOLDER/figures/`` with its caption."""

    path: Path
    caption: str
    group: str | None = None
    kind: ClassVar[str] = "figure"

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def link(self) -> str:
        """The path relative to the experiment folder (what report.md links to)."""
        return f"{self.path.parent.name}/{self.path.name}"

    def data_uri(self) -> str:
        """The PNG as a base64 data URI (what report.html embeds)."""
        return "data:image/png;base64," + base64.b64encode(Path(self.path).read_bytes()).decode("ascii")


@dataclass
class Section:
    """A heading (``level`` 1-6) and its content: text, notes, tables, figures and sub-sections."""

    title: str
    content: list[Any] = field(default_factory=list)
    level: int = 2
    kind: ClassVar[str] = "section"

    def add(self, *items: Any) -> Section:
        self.content.extend(items)
        return self


@dataclass
class Page:
    """A whole report: a title, key facts (label, value), notes and sections."""

    title: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)


def _inline_html(text: Any):
    """Escape, then turn `code` spans into ``<code>``."""
    from markupsafe import Markup, escape

    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", str(escape(str(text)))))


_ENV = None


def environment():
    """The Jinja2 environment of the report templates (HTML templates autoescaped)."""
    global _ENV
    if _ENV is None:
        from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

        env = Environment(loader=PackageLoader("contrastfit.experiments", "templates"),
                          autoescape=select_autoescape(enabled_extensions=("html.j2",), default_for_string=False),
                          trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, undefined=StrictUndefined)
        env.filters.update(md_cell=md_cell, md_alt=md_alt, inline_html=_inline_html)
        _ENV = env
    return _ENV


def _squeeze(text: str) -> str:
    """At most one blank line in a row, one newline at the end."""
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n") + "\n"


def render_page(page: Page, fmt: str) -> str:
    """``page`` as Markdown (``fmt="md"``) or self-contained HTML (``fmt="html"``)."""
    if fmt not in ("md", "html"):
        raise ValueError(f"fmt must be 'md' or 'html', got {fmt!r}")
    text = environment().get_template(f"report.{fmt}.j2").render(page=page)
    return _squeeze(text) if fmt == "md" else text


def render_fragment(content: Sequence[Any]) -> str:
    """Content (tables, text, notes, sections) as Markdown without a page title."""
    return _squeeze(environment().get_template("fragment.md.j2").render(content=list(content)))
