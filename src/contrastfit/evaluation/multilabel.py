"""Multi-label metrics and the per-label decision thresholds chosen on validation.

Metrics (:func:`multilabel_metrics`, scikit-learn's definitions on the (n, L) 0/1 matrices):

* ``micro_f1``: F1 of all (text, label) decisions pooled (frequent labels weigh more);
* ``macro_f1``: the mean of the per-label F1s (every label counts the same);
* ``subset_accuracy``: the fraction of texts whose predicted label **set** is exactly right;
* ``hamming_loss``: the fraction of wrong (text, label) decisions;
* ``samples_f1``: F1 per text, averaged over texts;
* ``per_label``: precision / recall / F1 / support (number of texts with the label) of every label.

F1 of a label with neither true nor predicted positives is 0 (``zero_division=0``, as for single-label
data). :data:`MULTILABEL_HEADLINE` is what the run summary prints.

Thresholds (:func:`choose_thresholds`): each label's probability is compared with its own threshold.
On a validation split the threshold of label ``j`` is the one of the grid 0.05, 0.10, ..., 0.95 that
maximises label ``j``'s F1 there (ties: the one nearest 0.5); a label with no positive example in
validation keeps 0.5, as does every label when there is no validation split (``rule`` says which).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..data.types import LABEL, TEXT, TEXT_PAIR

MULTILABEL_HEADLINE = ("micro_f1", "macro_f1", "subset_accuracy")
THRESHOLD_GRID = tuple(round(0.05 * k, 2) for k in range(1, 20))
DEFAULT_THRESHOLD = 0.5


def multilabel_metrics(y_true: np.ndarray, y_pred: np.ndarray, label_names: Sequence[str]) -> dict:
    from sklearn.metrics import f1_score, hamming_loss, precision_recall_fscore_support

    y_true = np.asarray(y_true, dtype=np.float32) > 0.5
    y_pred = np.asarray(y_pred, dtype=np.float32) > 0.5
    if len(y_true) == 0:
        return {"micro_f1": 0.0, "macro_f1": 0.0, "subset_accuracy": 0.0, "n": 0}
    p, r, f, s = precision_recall_fscore_support(y_true, y_pred, average=None, zero_division=0)
    micro = precision_recall_fscore_support(y_true, y_pred, average="micro", zero_division=0)
    return {
        "micro_f1": float(micro[2]),
        "macro_f1": float(f1_score(y_true, y_pred, average="macro", zero_division=0)),
        "subset_accuracy": float(np.mean((y_true == y_pred).all(axis=1))),
        "hamming_loss": float(hamming_loss(y_true, y_pred)),
        "samples_f1": float(f1_score(y_true, y_pred, average="samples", zero_division=0)),
        "micro_precision": float(micro[0]),
        "micro_recall": float(micro[1]),
        "per_label": {name: {"precision": float(p[i]), "recall": float(r[i]), "f1": float(f[i]), "support": int(s[i])}
                      for i, name in enumerate(label_names)},
        "n": int(len(y_true)),
    }


def _f1(truth: np.ndarray, pred: np.ndarray) -> float:
    tp = float(np.sum(truth & pred))
    denom = float(np.sum(truth) + np.sum(pred))
    return 0.0 if denom == 0 else 2 * tp / denom


def thresholds(model) -> list[float]:
    """A multi-label model's per-label thresholds: ``info.thresholds`` (chosen on validation at training
    time, :func:`choose_thresholds`), or :data:`DEFAULT_THRESHOLD` for every label."""
    got = model.info.thresholds
    return list(got) if got else [DEFAULT_THRESHOLD] * len(model.label_names)


def choose_thresholds(probs: np.ndarray | None, y_true: np.ndarray | None,
                      grid: Sequence[float] = THRESHOLD_GRID) -> tuple[list[float], str]:
    """Per-label thresholds (see the module docstring) and the rule that gave them."""
    if probs is None or y_true is None or len(probs) == 0:
        return [], "0.5 for every label (no validation split)"
    probs = np.asarray(probs, dtype=np.float64)
    truth = np.asarray(y_true, dtype=np.float32) > 0.5
    out = []
    for j in range(probs.shape[1]):
        if not truth[:, j].any():
            out.append(DEFAULT_THRESHOLD)
            continue
        scores = [(_f1(truth[:, j], probs[:, j] >= t), -abs(t - DEFAULT_THRESHOLD), t) for t in grid]
        out.append(float(max(scores)[2]))
    return out, (f"per label, the threshold of {grid[0]:g}..{grid[-1]:g} (step 0.05) with the best F1 on the "
                 f"validation split ({len(probs)} texts); 0.5 for a label without a positive there")


def evaluate_multilabel(model, dataset, batch_size: int = 64, progress: bool = False) -> dict:
    """Metrics of a multi-label ``model`` on a labelled split, at the model's thresholds."""
    texts = dataset[TEXT]
    pairs = dataset[TEXT_PAIR] if TEXT_PAIR in dataset.column_names else None
    probs = model.predict_proba(texts, pairs, batch_size=batch_size)
    pred = probs >= np.asarray(model.thresholds, dtype=np.float64)
    return multilabel_metrics(np.asarray(dataset[LABEL]), pred, model.label_names)
