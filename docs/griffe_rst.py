"""A griffe extension (mkdocs.yml, mkdocstrings `extensions:`): the source's docstrings are written
for Sphinx-like reading; before mkdocstrings renders them as Markdown,

* ``:func:`x```, ``:class:`~a.b.C```, ... (a cross-reference role) become the code span `x` / `C`;
* ``.. math:: EXPRESSION`` (one line) becomes a fenced ``latex`` block.

Only the docstrings' text as shown on the site changes; the source is not touched.
"""
from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|obj|exc|const):`~?([^`]+)`")
MATH = re.compile(r"^(\s*)\.\. math::\s*(.+)$", re.MULTILINE)


def markdown_docstring(text: str) -> str:
    def role(m: re.Match) -> str:
        target = m.group(1)
        shown = target.rsplit(".", 1)[-1] if m.group(0).split("`", 1)[1].startswith("~") else target
        return f"``{shown}``"

    text = ROLE.sub(role, text)
    return MATH.sub(lambda m: f"{m.group(1)}```latex\n{m.group(1)}{m.group(2).strip()}\n{m.group(1)}```", text)


class RstToMarkdown(griffe.Extension):
    def on_object(self, *, obj, loader, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_docstring(obj.docstring.value)
