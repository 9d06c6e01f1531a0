"""The types every data module shares: the column names and :class:`TextData`.

They live here, in a module that imports no other module of :mod:`contrastfit.data`, so that the
loaders (``loading.py``, ``builtin.py``), the samplers and the noise functions can all import them
without importing each other (``tests/test_data_imports.py`` walks the import graph and fails on a
cycle).

Conventions: every split is a ``datasets.Dataset`` with the columns ``text``, optionally
``text_pair`` (the second text of a sentence pair), and ``label``: an ``int64`` class id indexing
:attr:`TextData.label_names` (sorted names), or a ``float32`` target for regression, where
``label_names`` is ``None``.

Labels: a class's name is its label without surrounding white space (:func:`label_name`), so ``pos``
and ``pos `` are one class; names that differ only in case (``Pos``, ``pos``) or only in their
Unicode form (``café`` composed and decomposed, equal after NFC normalisation) are refused
(:func:`check_label_names`), since merging them silently could be as wrong as keeping two classes.
A boolean label is named as JSON writes it (``true`` / ``false``).
Every :class:`TextData` (files, Hub data sets, folders, built-ins, one built in Python) goes through
the check.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import datasets

from ..errors import DataError

TEXT = "text"
TEXT_PAIR = "text_pair"
LABEL = "label"
SPLITS = ("train", "validation", "test")


def label_name(value: Any) -> str:
    """The class name of a raw label value: a string without surrounding white space, a whole float
    as an integer (``1.0`` -> ``'1'``), a boolean as JSON writes it (``true`` / ``false``), anything
    else as ``str``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")


def _is_number(value: Any) -> bool:
    """A number, or a text that is one (``'1'``, ``'0.5'``: how a CSV holds a number among words)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    return isinstance(value, str) and bool(_NUMBER.match(value.strip()))


def mixed_labels_problem(values: Sequence[Any]) -> str | None:
    """What is wrong with labels that mix numbers and words (``1``, ``0``, ``'pos'``, ``'neg'``, or a
    CSV's ``0``, ``1`` and one ``pos``), naming two examples of each kind; None when they do not."""
    numbers: dict[str, None] = {}
    words: dict[str, None] = {}
    seen: set = set()
    for v in values:
        if not isinstance(v, (str, int, float)) or (isinstance(v, float) and math.isnan(v)):
            continue  # (a missing value, a list: other checks name them)
        if (type(v), v) in seen or (isinstance(v, str) and not v.strip()):
            continue
        seen.add((type(v), v))
        (numbers if _is_number(v) else words).setdefault(label_name(v), None)
    if not numbers or not words:
        return None

    def some(kind: dict[str, None], show) -> str:
        return ", ".join(show(n) for n in list(kind)[:2]) + (", ..." if len(kind) > 2 else "")

    return (f"the labels mix numbers ({some(numbers, str)}) and words ({some(words, repr)}); "
            "write every class one way, e.g. all as words")


def label_list_problem(items: Sequence[Any], text_labels: bool) -> str | None:
    """What is wrong with one row's list of labels: a null inside it, or a label that is not a text
    (a number, a boolean) where the labels are texts (``text_labels``: this list or another row's
    holds a string); None when nothing is."""
    shown = " ".join(repr(list(items)).split())
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    for item in items:
        if item is None or (isinstance(item, float) and math.isnan(item)):
            return f"null inside the label list {shown}; leave it out (an empty list is a text with no label)"
    if text_labels or any(isinstance(item, str) for item in items):
        bad = next((item for item in items if not isinstance(item, str)), None)
        if bad is not None:
            return (f"{bad!r} ({type(bad).__name__}) inside a list of text labels {shown}; write every label "
                    f"as a text (\"{label_name(bad)}\")")
    return None


def check_label_names(names: list[Any], where: str, counts: dict[str, int] | None = None) -> list[str]:
    """``names`` as class names (:func:`label_name`): refused (:class:`DataError` naming ``where`` and
    both spellings, with their row counts when ``counts`` has them) when two are the same name, or
    the same but for case or for their Unicode form (equal after NFC normalisation; the message shows
    both with ``ascii()``, since they print alike)."""
    out = [label_name(n) for n in names]
    twice = next((n for n, k in Counter(out).items() if k > 1), None)
    if twice is not None:
        spellings = ", ".join(repr(str(n)) for n in names if label_name(n) == twice)
        raise DataError(f"{where}: the label {twice!r} is there twice ({spellings})")

    def show(name: str) -> str:
        return repr(name) + (f" ({counts[name]} row{'s' if counts[name] != 1 else ''})" if counts and name in counts else "")

    by_form: dict[str, str] = {}
    for name in out:  # the same text in two Unicode forms: 'café' composed (NFC) and decomposed (NFD)
        other = by_form.setdefault(unicodedata.normalize("NFC", name), name)
        if other != name:
            raise DataError(f"{where}: labels {show(other)} and {show(name)} are the same text in two Unicode "
                            f"forms ({ascii(other)} and {ascii(name)}); write each class one way "
                            "(e.g. save the file in NFC)")
    by_case: dict[str, str] = {}
    for name in out:
        other = by_case.setdefault(unicodedata.normalize("NFC", name).casefold(), name)
        if other != name:
            raise DataError(f"{where}: labels {show(other)} and {show(name)} differ only in case; "
                            "write each class one way")
    return out


@dataclass
class TextData:
    """A labelled text data set split into train / validation / test."""

    name: str
    train: datasets.Dataset
    validation: datasets.Dataset | None
    test: datasets.Dataset | None
    label_names: list[str] | None  # None for a regression target
    source: dict[str, Any] = field(default_factory=dict)
    #: ``"int"`` when the training labels were given as integers (a model trained on them predicts ints);
    #: None: the label names are the labels (strings)
    label_type: str | None = None

    def __post_init__(self) -> None:
        if self.label_names is not None:
            self.label_names = check_label_names(self.label_names, f"data set '{self.name}'")

    @property
    def task(self) -> str:
        return "regression" if self.label_names is None else "classification"

    @property
    def num_labels(self) -> int:
        return 1 if self.label_names is None else len(self.label_names)

    @property
    def has_pairs(self) -> bool:
        return TEXT_PAIR in self.train.column_names

    def split(self, name: str) -> datasets.Dataset:
        ds = getattr(self, name, None) if name in SPLITS else None
        if ds is None:
            have = [s for s in SPLITS if getattr(self, s) is not None]
            raise DataError(f"data set '{self.name}' has no '{name}' split (it has: {', '.join(have)})")
        return ds

    def sizes(self) -> dict[str, int]:
        return {s: len(getattr(self, s)) for s in SPLITS if getattr(self, s) is not None}
