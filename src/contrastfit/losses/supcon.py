r"""Supervised contrastive loss (SupCon / SCL).

Khosla et al. (2020), Eq. 2 ("L^sup_out"), used for fine-tuning language models by
Gunel et al. (ICLR 2021), Eq. 3, and by Sedghamiz et al. (SupCL-Seq, 2021), Eq. 2:

.. math::

    \ell_i = -\frac{1}{|P(i)|} \sum_{p \in P(i)}
             \log \frac{\exp(z_i \cdot z_p / \tau)}{\sum_{a \neq i} \exp(z_i \cdot z_a / \tau)},
    \qquad
    \mathcal{L} = \frac{1}{|I^+|} \sum_{i \in I^+} \ell_i

Conventions
-----------
* ``z`` are the embeddings L2-normalised inside the function (``z_i . z_a`` is a cosine), as
  ``x / max(||x||, eps)`` with eps 2^-8 for float16 input and 1e-12 otherwise
  (:mod:`contrastfit.losses._common`): a zero row gives finite gradients in every dtype.
* ``P(i)`` = the other rows with the same label as row ``i``; the denominator runs over every row
  except ``i`` itself (positives and negatives).
* Reduction: the **mean** over anchors ``I^+`` that have at least one positive. (Gunel's Eq. 3 writes a
  sum over anchors; the mean keeps the scale of the term independent of the batch size, so that
  ``lambda`` means the same at every batch size.)
* Anchors without a positive are left out. A batch in which no anchor has a positive returns a
  zero that is still connected to the graph (its gradient is zero), never NaN (pitfall 1). So does
  an empty batch (no row).
* ``temperature`` must be finite and > 0 (NaN or inf raises ``ValueError``).
* Several views of each example (SupCL-Seq's dropout views) are passed by stacking the views along
  the batch dimension and repeating the labels; a view of the same example is then a positive.
* Computed in float32 whatever the input dtype (float64 input stays float64), with autocast
  disabled inside, so it is safe under fp16/bf16 autocast.
* Extra candidates (``candidates``, ``candidate_labels``; e.g. the rows of a cross-batch memory,
  :mod:`contrastfit.memory`) are rows that are **not anchors**: they join every anchor's
  denominator, and are positives of the anchors that share their label. ``P(i)`` and the sum over
  ``a`` then run over the other batch rows *and* the candidates; the mean is still over the batch's
  anchors with at least one positive (in the batch or among the candidates). A candidate is never
  masked as "self": it is a different row (the memory holds earlier batches). Candidates get a
  gradient only if they carry one (the memory's rows are detached).
"""

from __future__ import annotations

import torch
from torch import nn

from ._common import check_finite, full_precision


def supcon(embeddings: torch.Tensor, labels: torch.Tensor, temperature: float = 0.1,
           candidates: torch.Tensor | None = None, candidate_labels: torch.Tensor | None = None) -> torch.Tensor:
    """Supervised contrastive loss of a batch of ``embeddings`` (n, d) with integer ``labels`` (n,);
    ``candidates`` (m, d) with ``candidate_labels`` (m,) are extra rows to contrast with, not anchors."""
    if embeddings.dim() != 2:
        raise ValueError(f"embeddings must be (batch, dim), got shape {tuple(embeddings.shape)}")
    if labels.shape != embeddings.shape[:1]:
        raise ValueError(f"labels must be ({embeddings.shape[0]},), got shape {tuple(labels.shape)}")
    check_finite("temperature", temperature)
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if (candidates is None) != (candidate_labels is None):
        raise ValueError("candidates and candidate_labels go together")
    if candidates is not None:
        if candidates.dim() != 2 or candidates.shape[1] != embeddings.shape[1]:
            raise ValueError(f"candidates must be (m, {embeddings.shape[1]}), got shape {tuple(candidates.shape)}")
        if candidate_labels.shape != candidates.shape[:1]:
            raise ValueError(f"candidate_labels must be ({candidates.shape[0]},), got shape {tuple(candidate_labels.shape)}")

    extra = () if candidates is None else (candidates,)
    with full_precision(embeddings, *extra, normalize=True) as (z, *rest):
        n = z.shape[0]
        others = torch.cat([z, rest[0]]) if rest else z  # batch rows, then the candidates
        other_labels = torch.cat([labels, candidate_labels.to(labels.device)]) if rest else labels
        logits = z @ others.T / temperature  # (n, n + m)
        self_mask = torch.zeros(n, others.shape[0], dtype=torch.bool, device=z.device)
        self_mask[:, :n] = torch.eye(n, dtype=torch.bool, device=z.device)
        # log of the softmax over all a != i: drop the diagonal from the normaliser.
        log_prob = logits - torch.logsumexp(logits.masked_fill(self_mask, float("-inf")), dim=1, keepdim=True)

        positives = (labels.view(-1, 1) == other_labels.view(1, -1)) & ~self_mask
        n_pos = positives.sum(dim=1)
        has_pos = n_pos > 0
        if not bool(has_pos.any()):
            return z.sum() * 0.0

        per_anchor = -(log_prob * positives).sum(dim=1)[has_pos] / n_pos[has_pos]
        return per_anchor.mean()


class SupConLoss(nn.Module):
    """``nn.Module`` form of :func:`supcon`."""

    def __init__(self, temperature: float = 0.1):
        super().__init__()
        self.temperature = temperature

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return supcon(embeddings, labels, self.temperature)

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}"
