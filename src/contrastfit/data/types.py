"""The types every data module shares: the column names and :class:`TextData`.

They live here, in a module that imports no other module of :mod:`contrastfit.data`, so that the
loaders (``loading.py``, ``builtin.py``), the samplers and the noise functions can all import them
without importing each other (``tests/test_data_imports.py`` walks the import graph and fails on a
cycle).

Conventions: every split is a ``datasets.Dataset`` with the columns ``text``, optionally
``text_pair`` (the second text of a sentence pair), and ``label``: an ``int64`` class id indexing
:attr:`TextData.label_names` (sorted names), or a ``float32`` target for regression, where
``label_names`` is ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import datasets

from ..errors import DataError

TEXT = "text"
TEXT_PAIR = "text_pair"
LABEL = "label"
SPLITS = ("train", "validation", "test")


@dataclass
class TextData:
    """A labelled text data set split into train / validation / test."""

    name: str
    train: datasets.Dataset
    validation: datasets.Dataset | None
    test: datasets.Dataset | None
    label_names: list[str] | None  # None for a regression target
    source: dict[str, Any] = field(default_factory=dict)

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
