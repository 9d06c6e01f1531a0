r"""Jaccard-weighted supervised contrastive loss for multi-label data.

SupCon (Khosla et al. 2020, Eq. 2; :mod:`contrastfit.losses.supcon`) with every other row of the
batch a positive *to the degree* that its label set overlaps the anchor's, measured by the Jaccard
index of the two label sets. This is the weighting of the Jaccard Similarity Contrastive Loss (JSCL)
of Lin, Qin, Wang, Yang & Zhou, "An Effective Deployment of Contrastive Learning in Multi-label Text
Classification" (arXiv:2212.00552), written here in SupCon's form (the normalisation by ``W_i`` and the
conventions below are ours, stated so that the tests can check them):

.. math::

    w_{ip} = \frac{|Y_i \cap Y_p|}{|Y_i \cup Y_p|}, \qquad
    \ell_i = -\frac{1}{W_i} \sum_{p \neq i} w_{ip}
             \log \frac{\exp(z_i \cdot z_p / \tau)}{\sum_{a \neq i} \exp(z_i \cdot z_a / \tau)},
    \qquad W_i = \sum_{p \neq i} w_{ip},
    \qquad
    \mathcal{L} = \frac{1}{|I^+|} \sum_{i \in I^+} \ell_i

Why this form (docs/concepts/losses.md):

* with one label per row, ``w_ip`` is 1 for the same class and 0 otherwise, and the loss **is**
  SupCon (Eq. 2), value and gradient: the multi-label recipe and the single-label one are the same
  objective where they overlap (tested);
* Jaccard is symmetric, in [0, 1], 1 only for identical sets, and penalises both the labels the
  other row lacks and the ones it adds; the overlap count ``|Y_i ∩ Y_p|`` (unbounded) or
  ``|Y_i ∩ Y_p| / |Y_i|`` (asymmetric: a row with every label would be a full positive of everyone)
  do not have these properties; "strict" positives (identical sets only, Lin et al.'s SCL) leave
  most anchors of a few-shot batch with no positive at all, since exact label sets rarely repeat;
* dividing by ``W_i`` (the weighted count of positives, as SupCon divides by ``|P(i)|``) keeps each
  anchor's term a weighted mean of log-probabilities, so an anchor with many weak positives does not
  outweigh one with a single exact match.

Conventions (as :func:`contrastfit.losses.supcon`)
----------------------------------------------------
* ``label_sets`` is an (n, L) multi-hot matrix (0/1, bool, int or float; a value > 0.5 is "has the
  label"). ``z`` are the embeddings L2-normalised inside the function.
* A row with **no label** has ``w = 0`` with every row (``0 / |Y_p|``; two empty sets give 0 / 0,
  taken as 0): it is never an anchor with positives and never a positive, only a negative in others'
  denominators.
* Reduction: the mean over the anchors ``I^+`` with ``W_i > 0``. Anchors without a positive are left
  out; a batch with none (or no row) returns a zero connected to the graph, never NaN (pitfall 1).
* ``temperature`` must be finite and > 0. Computed in float32 (float64 stays float64) with autocast
  disabled (:func:`contrastfit.losses._common.full_precision`).
"""

from __future__ import annotations

import torch
from torch import nn

from ._common import check_finite, full_precision


def jaccard_weights(label_sets: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(n, n) Jaccard index of every pair of rows of the (n, L) multi-hot ``label_sets``, in ``dtype``;
    0 where both sets are empty; the diagonal is kept (callers mask "self")."""
    y = (label_sets > 0.5).to(dtype)
    inter = y @ y.T
    sizes = y.sum(dim=1)
    union = sizes.view(-1, 1) + sizes.view(1, -1) - inter
    return torch.where(union > 0, inter / union.clamp_min(1), torch.zeros_like(inter))


def jaccard_supcon(embeddings: torch.Tensor, label_sets: torch.Tensor, temperature: float = 0.1) -> torch.Tensor:
    """Jaccard-weighted SupCon of ``embeddings`` (n, d) with multi-hot ``label_sets`` (n, L)."""
    if embeddings.dim() != 2:
        raise ValueError(f"embeddings must be (batch, dim), got shape {tuple(embeddings.shape)}")
    if label_sets.dim() != 2 or label_sets.shape[0] != embeddings.shape[0]:
        raise ValueError(f"label_sets must be ({embeddings.shape[0]}, labels), got shape {tuple(label_sets.shape)}")
    check_finite("temperature", temperature)
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    with full_precision(embeddings, normalize=True) as (z,):
        n = z.shape[0]
        logits = z @ z.T / temperature
        self_mask = torch.eye(n, dtype=torch.bool, device=z.device)
        log_prob = logits - torch.logsumexp(logits.masked_fill(self_mask, float("-inf")), dim=1, keepdim=True)
        weights = jaccard_weights(label_sets.to(z.device), z.dtype).masked_fill(self_mask, 0.0)
        total = weights.sum(dim=1)
        has_pos = total > 0
        if not bool(has_pos.any()):
            return z.sum() * 0.0
        # masked_fill: the diagonal's log_prob is finite, but keep the product free of it all the same
        per_anchor = -(log_prob.masked_fill(self_mask, 0.0) * weights).sum(dim=1)[has_pos] / total[has_pos]
        return per_anchor.mean()


class JaccardSupConLoss(nn.Module):
    """``nn.Module`` form of :func:`jaccard_supcon`."""

    def __init__(self, temperature: float = 0.1):
        super().__init__()
        self.temperature = temperature

    def forward(self, embeddings: torch.Tensor, label_sets: torch.Tensor) -> torch.Tensor:
        return jaccard_supcon(embeddings, label_sets, self.temperature)

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}"
