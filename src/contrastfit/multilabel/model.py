r"""What a multi-label :class:`~contrastfit.modeling.ContrastiveClassifier` holds and fits beside its
weights (its probabilities and predictions are :data:`contrastfit.outputs.LABEL_SETS`'s: per-label
``sigmoid(logit_j / T_j)`` against each label's threshold):

* :func:`thresholds`: ``info.thresholds`` (chosen on validation at training time,
  :func:`contrastfit.evaluation.multilabel.choose_thresholds`, saved in the folder's
  ``contrastfit.json``), or 0.5 for every label;
* :func:`calibrate_per_label`: per-label temperature scaling (Guo et al. 2017's, one temperature per
  sigmoid): ``T_j`` minimises label ``j``'s binary NLL on held-out texts (SciPy's bounded search on
  ``log T`` in [-5, 5]). A label whose logits separate the held-out rows perfectly, or have no
  positive or no negative row, or whose ``T_j`` falls outside [0.05, 20], keeps ``T_j = 1`` (listed in
  the record's ``not_fitted``). The thresholds are moved with the temperatures
  (``t'_j = sigmoid(logit(t_j) / T_j)``), so **no prediction changes**: only the probabilities do.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..evaluation.calibration import MAX_TEMPERATURE, MIN_TEMPERATURE, temperatures
from ..evaluation.multilabel import DEFAULT_THRESHOLD
from ..outputs import sigmoid


def thresholds(model) -> list[float]:
    got = model.info.thresholds
    return list(got) if got else [DEFAULT_THRESHOLD] * len(model.label_names)


def binary_nll(logits: np.ndarray, y: np.ndarray, t: float = 1.0) -> float:
    z = np.asarray(logits, dtype=np.float64) / t
    # -[y log s(z) + (1 - y) log(1 - s(z))] = softplus(z) - y z, computed stably
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def _fit_one(z: np.ndarray, y: np.ndarray) -> float | None:
    from scipy.optimize import minimize_scalar

    if y.min() == y.max():
        return None
    if z[y > 0.5].min() > z[y < 0.5].max():  # perfectly separated: the NLL falls as T -> 0
        return None
    res = minimize_scalar(lambda s: binary_nll(z, y, math.exp(s)), bounds=(-5.0, 5.0), method="bounded")
    t = float(math.exp(res.x))
    return t if MIN_TEMPERATURE <= t <= MAX_TEMPERATURE else None


def calibrate_per_label(model, logits: np.ndarray, label_sets: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Fit and keep (in ``model.info.calibration``) one temperature per label; returns the record."""
    z = np.asarray(logits, dtype=np.float64)
    y = (np.asarray(label_sets, dtype=np.float64) > 0.5).astype(np.float64)
    if y.shape != z.shape:
        raise ValueError(f"label sets {y.shape} do not match the logits {z.shape}")
    old_t = temperatures(model)
    old_thr = np.asarray(thresholds(model), dtype=np.float64)
    temps, skipped = [], []
    for j, name in enumerate(model.label_names):
        t = _fit_one(z[:, j], y[:, j])
        if t is None:
            skipped.append(name)
            t = 1.0
        temps.append(t)
    temps_a = np.asarray(temps)
    before = float(np.mean([binary_nll(z[:, j], y[:, j], old_t[j]) for j in range(z.shape[1])]))
    after = float(np.mean([binary_nll(z[:, j], y[:, j], temps_a[j]) for j in range(z.shape[1])]))
    # keep every decision: z / T_old >= logit(thr_old)  <=>  z / T_new >= logit(thr_new)
    clipped = np.clip(old_thr, 1e-12, 1 - 1e-12)
    logit_thr = np.log(clipped / (1 - clipped)) * old_t
    new_thr = sigmoid(logit_thr / temps_a)
    record = {"kind": "per-label temperature", "temperatures": temps_a.tolist(), "not_fitted": skipped,
              "n": int(len(z)), "nll_before": before, "nll_after": after}
    model.info.update(calibration=record, thresholds=new_thr.tolist())
    return record
