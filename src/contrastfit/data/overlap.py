"""Which rows of a data set a saved model was trained on: the check that keeps ``calibrate`` and
``evaluate`` off the training rows.

At train time the model folder's record (``contrastfit.json``, ``info.data``; per task for a
multi-task model) gets :func:`row_sketch` of the training rows next to their ``train_hash``
(:func:`~contrastfit.data.loading.data_hash`): the 8-byte digests (the first 8 bytes of the sha1 of
the row's text, and of its pair, NFKC-normalised, case-folded, whitespace collapsed; the label is
left out: a training text is a seen text under any label), distinct and sorted, at most
:data:`SKETCH_SIZE` of them (the smallest: a bottom-k sketch, 64 KiB at most). With every training
row kept the overlap count is exact; past that, the rows of the other data whose digest is at most
the largest kept one are an unbiased sample, and the count is scaled from them (``estimated``).

:func:`train_overlap` compares a data set with that record: the same rows in the same order (equal
``train_hash``), else the overlap by rows. A folder saved before the sketch existed is compared by
``train_hash`` alone.
"""

from __future__ import annotations

import base64
import hashlib
import unicodedata
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from .loading import data_hash
from .types import TEXT, TEXT_PAIR

__all__ = ["MAX_CALIBRATION_OVERLAP", "SKETCH_SIZE", "Overlap", "row_digests", "row_sketch", "train_overlap"]

#: most row digests a model folder keeps (8 bytes each)
SKETCH_SIZE = 8192
#: ``calibrate`` refuses data of which more than this fraction are training rows (and warns below it)
MAX_CALIBRATION_OVERLAP = 0.01
_DIGEST = "sha1[:8] of NFKC, case-folded, whitespace-collapsed text (and pair)"


def _normalise(text: Any) -> str:
    return " ".join(unicodedata.normalize("NFKC", str(text)).casefold().split())


def row_digests(texts: Sequence[Any], pairs: Sequence[Any] | None = None) -> np.ndarray:
    """One unsigned 64-bit digest per row: the first 8 bytes (big-endian) of the sha1 of the row's
    normalised text, followed by a unit separator and its normalised pair when there are pairs."""
    out = np.empty(len(texts), dtype=np.uint64)
    for i, text in enumerate(texts):
        key = _normalise(text) if pairs is None else _normalise(text) + "\x1f" + _normalise(pairs[i])
        out[i] = int.from_bytes(hashlib.sha1(key.encode("utf-8")).digest()[:8], "big")
    return out


def _dataset_digests(ds) -> np.ndarray:
    return row_digests(ds[TEXT], ds[TEXT_PAIR] if TEXT_PAIR in ds.column_names else None)


def row_sketch(ds, size: int = SKETCH_SIZE) -> dict[str, Any]:
    """The record of a training set's rows that :func:`train_overlap` reads: ``rows``, ``distinct``
    digests, the ``kept`` smallest ones (all when ``distinct <= size``) as base64 of big-endian
    uint64, and how a digest is made."""
    digests = np.unique(_dataset_digests(ds))
    kept = digests[:size]
    return {"digest": _DIGEST, "rows": len(ds), "distinct": int(len(digests)), "kept": int(len(kept)),
            "hashes": base64.b64encode(kept.astype(">u8").tobytes()).decode("ascii")}


@dataclass
class Overlap:
    """How many of ``of`` rows are training rows: ``rows`` (scaled from a sample when ``estimated``),
    ``same_rows`` when the data are the training rows themselves, in order (equal ``train_hash``)."""

    rows: int
    of: int
    same_rows: bool = False
    estimated: bool = False

    @property
    def fraction(self) -> float:
        return self.rows / self.of if self.of else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fraction": self.fraction}

    def describe(self, model: str) -> str:
        """``'they are the 24 rows MODEL was trained on (same train_hash)'`` or ``'21 of its 24 rows
        (87.5%) are rows MODEL was trained on'``."""
        if self.same_rows:
            return f"they are the {self.of} rows {model} was trained on (same train_hash)"
        about = "about " if self.estimated else ""
        return f"{about}{self.rows} of its {self.of} rows ({100 * self.fraction:.1f}%) are rows {model} was trained on"


def train_overlap(train_hash: str | None, sketch: dict[str, Any] | None, ds) -> Overlap | None:
    """The overlap of ``ds`` (columns ``text``, ``text_pair``, ``label``) with the training rows a model
    records (its ``info.data``): their ``train_hash`` and row ``sketch`` (:func:`row_sketch`); None when
    there is no sketch (a folder saved before them) and ``train_hash`` is not that of ``ds``."""
    n = len(ds)
    if train_hash is not None and n and data_hash(ds) == train_hash:
        return Overlap(rows=n, of=n, same_rows=True)
    if not sketch:  # a folder saved before the row digests: only the same rows in order are known
        return None
    kept = np.frombuffer(base64.b64decode(sketch["hashes"]), dtype=">u8").astype(np.uint64)
    digests = _dataset_digests(ds)
    if sketch["kept"] >= sketch["distinct"]:  # every training row is kept: an exact count
        return Overlap(rows=int(np.isin(digests, kept).sum()), of=n)
    eligible = digests[digests <= kept[-1]] if len(kept) else digests[:0]
    if len(eligible) == 0:
        return Overlap(rows=0, of=n, estimated=True)
    return Overlap(rows=int(round(np.isin(eligible, kept).mean() * n)), of=n, estimated=True)
