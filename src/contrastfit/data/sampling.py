"""Deterministic training-set samples (few-shot protocols).

* :func:`sample_per_class`: K examples of every class (``--shots K``; LaCon's K-shot, SupCL-Seq).
* :func:`sample_stratified`: N examples in total, following the label distribution
  (``--train-size N``; Gunel et al.'s N = 20 / 100 / 1000). Class quotas are the proportional share
  rounded by largest remainder, with at least one example per class when N allows it.

Both depend only on the data and the seed (NumPy ``default_rng(seed)``), and return the rows in
their original order. Given the data set's ``label_names``, both refuse a training sample that
leaves a class without an example (the classifier would have a class it never saw).

Every random draw of a protocol takes its own seed from :func:`derive_seed` (``SeedSequence([seed,
stream, index])``): training sample ``s`` of sampling seed ``seed`` is drawn with ``derive_seed(seed,
"train", s)`` and a validation subset with ``derive_seed(seed, "validation")``, by ``contrastfit train``
(``--sample-seed``, ``--sample-index``) and by the experiments' protocols alike, so a run from the
command line and the same sample inside an experiment see the same rows.
"""

from __future__ import annotations

import datasets
import numpy as np

from ..errors import DataError
from .types import LABEL


#: Streams of :func:`derive_seed`, one per kind of random draw.
STREAMS = {"train": 1, "validation": 2, "pool": 3, "label_noise": 4, "text_noise": 5, "classes": 6, "augment": 7}


def derive_seed(seed: int, stream: str, index: int = 0) -> int:
    """An integer seed for one random draw: ``SeedSequence([seed, STREAMS[stream], index])``."""
    return int(np.random.SeedSequence([seed, STREAMS[stream], index]).generate_state(1, dtype=np.uint32)[0])


def _labels(ds: datasets.Dataset) -> np.ndarray:
    if LABEL not in ds.column_names:
        raise DataError("sampling needs a label column")
    return np.asarray(ds[LABEL])


def per_class_indices(labels: np.ndarray, quotas: dict[int, int], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    chosen = []
    for cls in sorted(quotas):
        pool = np.flatnonzero(labels == cls)
        chosen.append(rng.choice(pool, size=quotas[cls], replace=False))
    return np.sort(np.concatenate(chosen)) if chosen else np.array([], dtype=int)


def _missing_class(label_names: list[str] | None, present) -> str | None:
    """The first of ``label_names`` whose id is not in ``present``."""
    present = {int(c) for c in present}
    return next((name for i, name in enumerate(label_names or ()) if i not in present), None)


def sample_per_class(ds: datasets.Dataset, shots: int, seed: int, label_names: list[str] | None = None) -> datasets.Dataset:
    """``shots`` examples of every class present in ``ds`` (of every class of ``label_names``, if given)."""
    if shots < 1:
        raise DataError(f"--shots must be >= 1, got {shots}")
    labels = _labels(ds)
    classes, counts = np.unique(labels, return_counts=True)
    missing = _missing_class(label_names, classes)
    if missing is not None:
        raise DataError(f"--shots {shots}: class '{missing}' has no example in the training split to sample")
    for cls, count in zip(classes, counts):
        if count < shots:
            name = label_names[cls] if label_names else str(cls)
            raise DataError(f"--shots {shots} is larger than class '{name}' has ({count} examples in the training split)")
    return ds.select(per_class_indices(labels, {int(c): shots for c in classes}, seed))


def stratified_quotas(counts: dict[int, int], n: int) -> dict[int, int]:
    """Split ``n`` over classes in proportion to ``counts`` (largest remainder), >= 1 each if n allows."""
    total = sum(counts.values())
    classes = sorted(counts)
    exact = np.array([n * counts[c] / total for c in classes])
    quota = np.floor(exact).astype(int)
    if n >= len(classes):
        quota = np.maximum(quota, 1)
    while quota.sum() > n:  # the >= 1 floor overshot: take from the largest
        quota[np.argmax(quota)] -= 1
    remainder = exact - np.floor(exact)
    for i in np.argsort(-remainder, kind="stable"):
        if quota.sum() >= n:
            break
        if quota[i] < counts[classes[i]]:
            quota[i] += 1
    while quota.sum() < n:  # some class was exhausted: give to any class with room
        room = [i for i, c in enumerate(classes) if quota[i] < counts[c]]
        quota[room[0]] += 1
    return {c: int(q) for c, q in zip(classes, quota)}


def sample_stratified(ds: datasets.Dataset, n: int, seed: int, label_names: list[str] | None = None) -> datasets.Dataset:
    """``n`` rows following the label distribution of ``ds`` (all rows if ``n >= len(ds)``).

    With ``label_names`` (a training sample: ``--train-size``), a sample that would leave one of
    those classes without an example is refused; without (a validation subset), it is allowed."""
    if n < 1:
        raise DataError(f"sample size must be >= 1, got {n}")
    if LABEL not in ds.column_names or ds.features[LABEL].dtype.startswith("float"):
        if n >= len(ds):
            return ds
        rng = np.random.default_rng(seed)
        return ds.select(np.sort(rng.choice(len(ds), size=n, replace=False)))
    labels = _labels(ds)
    classes, counts = np.unique(labels, return_counts=True)
    missing = _missing_class(label_names, classes)
    if missing is not None:
        raise DataError(f"--train-size {n}: class '{missing}' has no example in the training split to sample")
    if n >= len(ds):
        return ds
    quotas = stratified_quotas({int(c): int(k) for c, k in zip(classes, counts)}, n)
    missing = _missing_class(label_names, [c for c, q in quotas.items() if q > 0])
    if missing is not None:
        raise DataError(f"--train-size {n} leaves class '{missing}' without a training example "
                        f"({len(classes)} classes: give --train-size {len(classes)} or more)")
    return ds.select(per_class_indices(labels, quotas, seed))
