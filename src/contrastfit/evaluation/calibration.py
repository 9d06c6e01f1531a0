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

A degenerate fit is refused (:class:`DegenerateFitError`, and :func:`temperature_scaling` returns no
record, so nothing is kept): when the logits separate the rows perfectly (every row's own class
strictly above every other, typically rows the model was trained on) the NLL falls all the way as
:math:`T \to 0`, and the "fitted" T is only where the search stopped, which makes every probability
0 or 1; and a T outside [:data:`MIN_TEMPERATURE`, :data:`MAX_TEMPERATURE`] (near the search's
bounds) says the rows do not pin the temperature down either.

Label sets (:func:`calibrate_per_label`): one temperature per sigmoid, :math:`T_j` minimising label
:math:`j`'s binary NLL on held-out texts by the same bounded search. A label whose logits separate the
held-out rows perfectly, or have no positive or no negative row, or whose :math:`T_j` falls outside
[:data:`MIN_TEMPERATURE`, :data:`MAX_TEMPERATURE`], keeps :math:`T_j = 1` (listed in the record's
``not_fitted``). The thresholds move with the temperatures (:math:`t'_j = \sigma(\operatorname{logit}(t_j) / T_j)`),
so no prediction changes: only the probabilities do.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..errors import DataError
from ..outputs import log_softmax, sigmoid

__all__ = ["DegenerateFitError", "probability_metrics", "log_softmax", "negative_log_likelihood", "expected_calibration_error",
           "fit_temperature", "temperature_scaling", "calibrate_per_label"]

#: bins of the expected calibration error (Guo et al. use 15)
ECE_BINS = 15
#: the range of temperatures :func:`temperature_scaling` accepts (the search runs on [e^-5, e^5])
MIN_TEMPERATURE, MAX_TEMPERATURE = 0.05, 20.0


class DegenerateFitError(DataError):
    """A temperature fit that separates the calibration rows perfectly or lands outside
    [MIN_TEMPERATURE, MAX_TEMPERATURE]; its one-line message gives T, NLL and ECE before and after."""


def temperatures(model) -> np.ndarray:
    """A multi-label model's per-label temperatures (``info.calibration.temperatures``; 1 each
    before calibration)."""
    got = model.info.calibration.temperatures
    return np.asarray(got if got else [1.0] * len(model.label_names), dtype=np.float64)


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


def separates(logits: np.ndarray, labels: Sequence[int]) -> bool:
    """Whether every row's own class has a logit strictly above every other class's (then the NLL of
    ``softmax(logits / T)`` decreases all the way to 0 as T -> 0)."""
    z = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels, dtype=int)
    own = z[np.arange(len(labels)), labels]
    others = z.copy()
    others[np.arange(len(labels)), labels] = -np.inf
    return bool(len(labels)) and bool((own > others.max(axis=1)).all())


def probability_metrics(logits, labels: Sequence[int], temperature: float = 1.0) -> dict:
    """How good the probabilities ``softmax(logits / temperature)`` are: ``nll`` (mean cross-entropy,
    nats) and ``ece`` (expected calibration error, 15 bins)."""
    logits = np.asarray(logits, dtype=np.float64)
    probabilities = np.exp(log_softmax(logits / temperature))
    return {"nll": negative_log_likelihood(logits, labels, temperature),
            "ece": expected_calibration_error(probabilities, labels)}


def temperature_scaling(logits: np.ndarray, labels: Sequence[int]) -> dict[str, float]:
    """Fit the temperature on (``logits``, ``labels``) and return the record a model keeps:
    ``temperature``, ``n`` and the NLL and ECE of those rows before and after. Raises
    :class:`DegenerateFitError` (one line with those numbers) when the logits separate the rows
    perfectly or T falls outside [MIN_TEMPERATURE, MAX_TEMPERATURE]."""
    labels = np.asarray(labels, dtype=int)
    t = fit_temperature(logits, labels)
    before, after = probability_metrics(logits, labels), probability_metrics(logits, labels, t)
    record = {"temperature": t, "n": int(len(labels)), "nll_before": before["nll"], "nll_after": after["nll"],
              "ece_before": before["ece"], "ece_after": after["ece"]}
    numbers = (f"NLL {before['nll']:.4f} -> {after['nll']:.4f}, ECE {before['ece']:.4f} -> {after['ece']:.4f}; "
               "nothing was saved")
    if separates(logits, labels):
        raise DegenerateFitError(
            f"degenerate temperature fit: the model separates all {len(labels)} calibration rows perfectly (every "
            f"row's label has the highest logit), so the NLL falls as T -> 0 and every probability would be 0 or 1 "
            f"(T {t:.4g}, {numbers}); calibrate on held-out rows the model gets some wrong")
    if not MIN_TEMPERATURE <= t <= MAX_TEMPERATURE:
        raise DegenerateFitError(
            f"degenerate temperature fit: T {t:.4g} is outside [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}] on "
            f"{len(labels)} calibration rows ({numbers}); calibrate on more held-out rows")
    return record


def binary_nll(logits: np.ndarray, y: np.ndarray, t: float = 1.0) -> float:
    """The mean binary NLL of ``sigmoid(logits / t)`` against 0/1 targets ``y``."""
    z = np.asarray(logits, dtype=np.float64) / t
    # -[y log s(z) + (1 - y) log(1 - s(z))] = softplus(z) - y z, computed stably
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def _fit_one(z: np.ndarray, y: np.ndarray) -> float | None:
    """One label's temperature, or None where the rows do not pin it down (module docstring)."""
    from scipy.optimize import minimize_scalar

    if y.min() == y.max():
        return None
    if z[y > 0.5].min() > z[y < 0.5].max():  # perfectly separated: the NLL falls as T -> 0
        return None
    res = minimize_scalar(lambda s: binary_nll(z, y, math.exp(s)), bounds=(-5.0, 5.0), method="bounded")
    t = float(math.exp(res.x))
    return t if MIN_TEMPERATURE <= t <= MAX_TEMPERATURE else None


def calibrate_per_label(model, logits: np.ndarray, label_sets: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Fit and keep (in ``model.info.calibration``) one temperature per label of a multi-label ``model``
    (``label_sets``: one multi-hot row per text), moving its thresholds with them; returns the record."""
    z = np.asarray(logits, dtype=np.float64)
    y = (np.asarray(label_sets, dtype=np.float64) > 0.5).astype(np.float64)
    if y.shape != z.shape:
        raise ValueError(f"label sets {y.shape} do not match the logits {z.shape}")
    old_t = temperatures(model)
    old_thr = np.asarray(model.thresholds, dtype=np.float64)
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
