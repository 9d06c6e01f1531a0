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
and ``pos `` are one class; names that differ only in case (``Pos``, ``pos``) are refused
(:func:`check_label_names`), since merging them silently could be as wrong as keeping two classes.
Every :class:`TextData` (files, Hub data sets, folders, built-ins, one built in Python) goes through
the check.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import datasets

from ..errors import DataError

TEXT = "text"
TEXT_PAIR = "text_pair"
LABEL = "label"
SPLITS = ("train", "validation", "test")


def label_name(value: Any) -> str:
    """The class name of a raw label value: a string without surrounding white space, a whole float
    as an integer (``1.0`` -> ``'1'``), anything else as ``str``."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def check_label_names(names: list[Any], where: str, counts: dict[str, int] | None = None) -> list[str]:
    """``names`` as class names (:func:`label_name`): refused (:class:`DataError` naming ``where`` and
    both spellings, with their row counts when ``counts`` has them) when two are the same name, or
    the same but for case."""
    out = [label_name(n) for n in names]
    twice = next((n for n, k in Counter(out).items() if k > 1), None)
    if twice is not None:
        spellings = ", ".join(repr(str(n)) for n in names if label_name(n) == twice)
        raise DataError(f"{where}: the label {twice!r} is there twice ({spellings})")

    def show(name: str) -> str:
        return repr(name) + (f" ({counts[name]} row{'s' if counts[name] != 1 else ''})" if counts and name in counts else "")

    by_case: dict[str, str] = {}
    for name in out:
        other = by_case.setdefault(name.casefold(), name)
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
