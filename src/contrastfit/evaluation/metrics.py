"""Classification and regression metrics (scikit-learn / SciPy), as plain JSON-able dicts."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..data.loading import LABEL, TEXT, TEXT_PAIR
from .calibration import probability_metrics
from .multilabel import evaluate_multilabel

#: The headline metrics printed by ``contrastfit evaluate`` and the experiment tables.
HEADLINE = ("accuracy", "f1", "macro_f1", "mcc")
#: ... of a regression target, and of label sets (:mod:`contrastfit.evaluation.multilabel`).
REGRESSION_HEADLINE = ("pearson", "spearman", "mse")
MULTILABEL_HEADLINE = ("micro_f1", "macro_f1", "subset_accuracy")


def classification_metrics(y_true: Sequence[int], y_pred: Sequence[int], label_names: Sequence[str]) -> dict:
    """Accuracy, F1 (binary: of the last class, e.g. "positive"; otherwise macro), macro-F1, MCC,
    per-class precision / recall / F1 / support, and the confusion matrix (rows = true labels)."""
    from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, matthews_corrcoef, precision_recall_fscore_support

    y_true = np.asarray(y_true)
    y_pred = np.asarray(y_pred)
    labels = list(range(len(label_names)))
    binary = len(label_names) == 2
    p, r, f, s = precision_recall_fscore_support(y_true, y_pred, labels=labels, zero_division=0)
    return {
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "f1": float(f1_score(y_true, y_pred, labels=labels, average="binary" if binary else "macro", pos_label=1, zero_division=0)),
        "macro_f1": float(f1_score(y_true, y_pred, labels=labels, average="macro", zero_division=0)),
        "mcc": float(matthews_corrcoef(y_true, y_pred)) if len(y_true) else 0.0,
        "per_class": {
            name: {"precision": float(p[i]), "recall": float(r[i]), "f1": float(f[i]), "support": int(s[i])}
            for i, name in enumerate(label_names)
        },
        "confusion_matrix": confusion_matrix(y_true, y_pred, labels=labels).tolist(),
        "n": int(len(y_true)),
    }


def regression_metrics(y_true: Sequence[float], y_pred: Sequence[float]) -> dict:
    """Pearson and Spearman correlation (STS-B style) and mean squared error."""
    from scipy.stats import pearsonr, spearmanr

    y_true = np.asarray(y_true, dtype=float)
    y_pred = np.asarray(y_pred, dtype=float)
    constant = len(y_true) < 2 or np.ptp(y_true) == 0 or np.ptp(y_pred) == 0
    return {
        "pearson": float("nan") if constant else float(pearsonr(y_true, y_pred)[0]),
        "spearman": float("nan") if constant else float(spearmanr(y_true, y_pred)[0]),
        "mse": float(np.mean((y_true - y_pred) ** 2)) if len(y_true) else float("nan"),
        "n": int(len(y_true)),
    }


def evaluate_model(model, dataset, batch_size: int = 64, progress: bool = False) -> dict:
    """Metrics of ``model`` (a :class:`~contrastfit.modeling.ContrastiveClassifier`) on a labelled split."""
    if getattr(model, "multi_label", False):
        return evaluate_multilabel(model, dataset, batch_size, progress)
    texts = dataset[TEXT]
    pairs = dataset[TEXT_PAIR] if TEXT_PAIR in dataset.column_names else None
    logits = model.predict_logits(texts, pairs, batch_size=batch_size, progress=progress)
    if model.task == "regression":
        return regression_metrics(dataset[LABEL], logits[:, 0])
    out = classification_metrics(dataset[LABEL], logits.argmax(axis=1), model.label_names)
    out.update(probability_metrics(logits, dataset[LABEL], getattr(model, "temperature", 1.0)))
    return out


def headline_names(names) -> tuple[str, ...]:
    """The headline metrics of the kind of run whose metrics are named ``names`` (a dict or a set):
    label sets' (micro-F1 first), a regression target's (Pearson's r first) or a class's (accuracy first)."""
    if "micro_f1" in names:  # multi-label (contrastfit.evaluation.multilabel)
        return MULTILABEL_HEADLINE
    return REGRESSION_HEADLINE if "pearson" in names else HEADLINE


def headline(metrics: dict) -> dict:
    return {k: metrics[k] for k in headline_names(metrics) if k in metrics}
