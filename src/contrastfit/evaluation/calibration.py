r"""Calibration of a classifier's probabilities: temperature scaling and the expected calibration error.

Temperature scaling (Guo et al. 2017, "On Calibration of Modern Neural Networks", Sec. 4.2) divides
the logits :math:`z` by one scalar :math:`T > 0` learned on held-out data by minimising the negative
log-likelihood,

.. math::

    T^* = \arg\min_T \; -\frac{1}{n} \sum_i \log \operatorname{softmax}(z_i / T)_{y_i},

which changes the confidence of every prediction and none of the predictions (the arg max of
:math:`z / T` is the arg max of :math:`z`). The expected calibration error (Guo et al., Eq. 3; Naeini
et al. 2015) bins the predictions by confidence :math:`\hat p_i = \max_k p_{ik}` into ``n_bins``
equal-width bins :math:`B_m` of (0, 1] and averages the gap between accuracy and confidence,

.. math::

    \mathrm{ECE} = \sum_m \frac{|B_m|}{n} \, \bigl|\mathrm{acc}(B_m) - \mathrm{conf}(B_m)\bigr|.

Conventions: logits (n, classes) and integer labels (n,) as NumPy arrays; the temperature is searched
on :math:`\log T \in [-5, 5]` by SciPy's bounded scalar minimiser (the NLL is convex in
:math:`1/T`, so the bounded search finds its one minimum).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["log_softmax", "negative_log_likelihood", "expected_calibration_error", "fit_temperature",
           "temperature_scaling"]

#: bins of the expected calibration error (Guo et al. use 15)
ECE_BINS = 15


def log_softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def negative_log_likelihood(logits: np.ndarray, labels: Sequence[int], temperature: float = 1.0) -> float:
    """Mean cross-entropy of ``softmax(logits / temperature)`` against ``labels`` (nats)."""
    labels = np.asarray(labels, dtype=int)
    if len(labels) == 0:
        return float("nan")
    log_p = log_softmax(np.asarray(logits, dtype=np.float64) / temperature)
    return float(-log_p[np.arange(len(labels)), labels].mean())


def expected_calibration_error(probabilities: np.ndarray, labels: Sequence[int], n_bins: int = ECE_BINS) -> float:
    """ECE of class ``probabilities`` (n, classes): the confidence-weighted gap between accuracy and
    confidence over ``n_bins`` equal-width confidence bins (right-closed, as (0, 1/M], ..., ((M-1)/M, 1])."""
    probabilities = np.asarray(probabilities, dtype=np.float64)
    labels = np.asarray(labels, dtype=int)
    if len(labels) == 0:
        return float("nan")
    confidence = probabilities.max(axis=1)
    correct = (probabilities.argmax(axis=1) == labels).astype(np.float64)
    bins = np.clip(np.ceil(confidence * n_bins).astype(int) - 1, 0, n_bins - 1)
    count = np.bincount(bins, minlength=n_bins)
    gap = np.abs(np.bincount(bins, weights=correct, minlength=n_bins) - np.bincount(bins, weights=confidence, minlength=n_bins))
    return float(gap.sum() / len(labels)) if count.sum() else float("nan")


def fit_temperature(logits: np.ndarray, labels: Sequence[int]) -> float:
    """The temperature that minimises the NLL of ``softmax(logits / T)`` on (``logits``, ``labels``)."""
    from scipy.optimize import minimize_scalar

    labels = np.asarray(labels, dtype=int)
    if len(labels) == 0:
        raise ValueError("fitting a temperature needs at least one labelled example")
    result = minimize_scalar(lambda log_t: negative_log_likelihood(logits, labels, float(np.exp(log_t))),
                             bounds=(-5.0, 5.0), method="bounded", options={"xatol": 1e-6})
    return float(np.exp(result.x))


def temperature_scaling(logits: np.ndarray, labels: Sequence[int]) -> dict[str, float]:
    """Fit the temperature on (``logits``, ``labels``) and return the record a model keeps:
    ``temperature``, ``n`` and the NLL and ECE of those rows before and after."""
    from .metrics import probability_metrics

    labels = np.asarray(labels, dtype=int)
    t = fit_temperature(logits, labels)
    before, after = probability_metrics(logits, labels), probability_metrics(logits, labels, t)
    return {"temperature": t, "n": int(len(labels)), "nll_before": before["nll"], "nll_after": after["nll"],
            "ece_before": before["ece"], "ece_after": after["ece"]}
