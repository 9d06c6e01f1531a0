r"""SimCSE contrastive losses, unsupervised and supervised.

Gao, Yao & Chen, *SimCSE: Simple Contrastive Learning of Sentence Embeddings*, as written in
Behrman & Christoglou (CS224N report), Eq. 1 (unsupervised; the same term is Eq. 4 of the DiffCSE
loss there) and Eq. 2 (supervised, with hard negatives):

.. math::

    \ell^{unsup}_i = -\log \frac{e^{sim(h_i, h_i^+)/\tau}}{\sum_{j=1}^{N} e^{sim(h_i, h_j^+)/\tau}}

    \ell^{sup}_i = -\log \frac{e^{sim(h_i, h_i^+)/\tau}}
        {\sum_{j=1}^{N} \left( e^{sim(h_i, h_j^+)/\tau} + \alpha^{\mathbb{1}[i=j]} e^{sim(h_i, h_j^-)/\tau} \right)}

(The report's Eq. 1 writes ``h_j`` in the numerator and Eq. 2 writes ``h_t^+``; both are typos for the
row's own positive ``h_i^+``, as its Eq. 4 and the SimCSE paper read.)

Conventions
-----------
* ``sim`` is the cosine similarity: the embeddings are L2-normalised inside the functions, as
  ``x / max(||x||, eps)`` with eps 2^-8 for float16 input and 1e-12 otherwise
  (:mod:`contrastfit.losses._common`): a zero row gives finite gradients in every dtype.
* ``temperature`` must be finite and > 0, ``hard_negative_weight`` finite or ``-inf``; NaN or another
  infinity raises ``ValueError``.
* In-batch negatives: row ``i`` of the anchors is scored against **every** row of the positives (and,
  in the supervised loss, every row of the hard negatives); the target is column ``i``. This is a
  cross-entropy with targets ``arange(N)``, **mean** over the ``N`` anchors.
* The unsupervised loss is not symmetrised: only ``z1`` rows are anchors (as in Eq. 1).
* Default ``tau = 0.05``: the report's hyper-parameter table ("tau ... 0.05", "remained consistent
  across runs at 0.05"), which is also SimCSE's default.
* ``hard_negative_weight`` ``w`` is the *additive log-weight* ``w = log(alpha)`` of the SimCSE paper's
  hard-negative weighting (its Appendix; the report does not use or mention it): ``w`` is added to the
  logit ``sim(h_i, h_j^-)/tau`` **only when j == i** (the row's own hard negative), never to the hard
  negatives of the other rows, which are ordinary in-batch negatives. ``w = 0`` (``alpha = 1``, the
  default) is Eq. 2 exactly; ``w = -inf`` (``alpha = 0``) removes each row's own hard negative.
* ``hard_negative_mask`` (bool, ``(N,)``) marks the rows that *have* a hard negative. The hard-negative
  column of a row without one is excluded from **every** row's denominator (its contents are ignored and
  get zero gradient; pass any finite values, e.g. zeros). This supports the report's "augmented"
  supervised variant, where MultiNLI contradiction pairs without an entailment use a dropout view of the
  anchor as the positive, and rows without a contradiction have no hard negative. With every row masked
  out the loss equals the unsupervised one on ``(anchors, positives)``.
* A batch of one gives a finite loss (0 without a hard negative: the single positive is the whole
  softmax), with the graph intact. An empty batch (``N = 0``: a mean over no anchor) gives 0 with the
  graph intact, as every loss here does.
* Computed in float32 whatever the input dtype (float64 stays float64), with autocast disabled inside,
  so it is safe under fp16/bf16 autocast.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._common import check_finite, full_precision

__all__ = ["simcse_unsup", "simcse_sup", "SimCSELoss", "SupervisedSimCSELoss"]


def _check_pair(name_a: str, a: torch.Tensor, name_b: str, b: torch.Tensor) -> None:
    if a.dim() != 2:
        raise ValueError(f"{name_a} must be (batch, dim), got shape {tuple(a.shape)}")
    if b.shape != a.shape:
        raise ValueError(f"{name_b} must have the shape of {name_a} {tuple(a.shape)}, got {tuple(b.shape)}")


def _check_temperature(temperature: float) -> None:
    check_finite("temperature", temperature)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def simcse_unsup(z1: torch.Tensor, z2: torch.Tensor, temperature: float = 0.05) -> torch.Tensor:
    """Unsupervised SimCSE loss (report Eq. 1): row ``i`` of ``z1`` (n, d) against all rows of ``z2`` (n, d),
    positive = row ``i`` of ``z2`` (in SimCSE: a second dropout pass of the same sentences)."""
    _check_pair("z1", z1, "z2", z2)
    _check_temperature(temperature)
    return _simcse(z1, z2, None, temperature, 0.0, None)


def simcse_sup(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    hard_negatives: torch.Tensor | None = None,
    temperature: float = 0.05,
    hard_negative_weight: float = 0.0,
    hard_negative_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Supervised SimCSE loss (report Eq. 2) of ``anchors``, ``positives`` and ``hard_negatives``, each (n, d).

    The denominator of row ``i`` runs over all ``n`` positives and all (unmasked) hard negatives of the
    batch. ``hard_negative_weight`` is added to the logit of row ``i``'s own hard negative only;
    ``hard_negative_mask`` (bool, (n,)) marks the rows that have a hard negative (default: all). Without
    ``hard_negatives`` this is :func:`simcse_unsup` on ``(anchors, positives)``.
    """
    _check_pair("anchors", anchors, "positives", positives)
    _check_temperature(temperature)
    if hard_negatives is None:
        if hard_negative_mask is not None:
            raise ValueError("hard_negative_mask was given without hard_negatives")
    else:
        _check_pair("anchors", anchors, "hard_negatives", hard_negatives)
        if hard_negative_mask is not None:
            if hard_negative_mask.shape != anchors.shape[:1]:
                raise ValueError(
                    f"hard_negative_mask must be ({anchors.shape[0]},), got shape {tuple(hard_negative_mask.shape)}"
                )
            if hard_negative_mask.dtype != torch.bool:
                raise ValueError(f"hard_negative_mask must be a bool tensor, got {hard_negative_mask.dtype}")
    check_finite("hard_negative_weight", hard_negative_weight, minus_inf_ok=True)
    w = float(hard_negative_weight)
    return _simcse(anchors, positives, hard_negatives, temperature, w, hard_negative_mask)


def _simcse(anchors, positives, hard_negatives, temperature, weight, mask) -> torch.Tensor:
    tensors = [anchors, positives] + ([hard_negatives] if hard_negatives is not None else [])
    with full_precision(*tensors, normalize=True) as (a, p, *rest):
        n = a.shape[0]
        logits = a @ p.T / temperature  # (n, n): column j = positive of row j
        if hard_negatives is not None:
            (h,) = rest
            neg = a @ h.T / temperature  # (n, n): column j = hard negative of row j
            if weight != 0.0:
                eye = torch.eye(n, dtype=torch.bool, device=a.device)
                neg = neg + torch.zeros_like(neg).masked_fill(eye, weight)
            if mask is not None:
                neg = neg.masked_fill(~mask.to(a.device).view(1, -1), float("-inf"))
            logits = torch.cat([logits, neg], dim=1)  # (n, 2n)
        if n == 0:
            return logits.sum() * 0.0  # an empty batch: 0, still connected to the graph
        targets = torch.arange(n, device=a.device)
        return F.cross_entropy(logits, targets)


class SimCSELoss(nn.Module):
    """``nn.Module`` form of :func:`simcse_unsup`."""

    def __init__(self, temperature: float = 0.05):
        super().__init__()
        _check_temperature(temperature)
        self.temperature = temperature

    def forward(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
        return simcse_unsup(z1, z2, self.temperature)

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}"


class SupervisedSimCSELoss(nn.Module):
    """``nn.Module`` form of :func:`simcse_sup`."""

    def __init__(self, temperature: float = 0.05, hard_negative_weight: float = 0.0):
        super().__init__()
        _check_temperature(temperature)
        self.temperature = temperature
        self.hard_negative_weight = hard_negative_weight

    def forward(
        self,
        anchors: torch.Tensor,
        positives: torch.Tensor,
        hard_negatives: torch.Tensor | None = None,
        hard_negative_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return simcse_sup(anchors, positives, hard_negatives, self.temperature, self.hard_negative_weight,
                          hard_negative_mask)

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}, hard_negative_weight={self.hard_negative_weight}"
