r"""SetFit's contrastive fine-tuning loss on sentence pairs (Tunstall et al., 2022, Sec. 3.1).

SetFit fine-tunes the encoder on pairs of labelled sentences: a pair of the same class has target
similarity 1, a pair of different classes target 0, and sentence-transformers' ``CosineSimilarityLoss``
is the squared error between the pair's cosine and its target. SetFit draws as many positive as
negative pairs (its default ``oversampling`` strategy repeats the rarer kind). Here the pairs are
every pair of distinct rows of a batch:

.. math::

    \mathcal{L} = \tfrac12 \operatorname{mean}_{(i,j) \in P} (\cos(u_i, u_j) - 1)^2
                + \tfrac12 \operatorname{mean}_{(i,j) \in N} \cos(u_i, u_j)^2

where ``P`` (``N``) are the pairs ``i < j`` with equal (different) labels.

Conventions
-----------
* Positive and negative pairs weigh half each, as SetFit's balanced pair sampling makes them; a batch
  with only one kind averages that kind; a batch with no pair (one row, or an empty batch) gives 0
  with the graph intact.
* Cosines of rows normalised as ``x / max(||x||, eps)``, eps 2^-8 for float16 input and 1e-12
  otherwise (:mod:`contrastfit.losses._common`): a zero row gives finite gradients in every dtype.
* A row is never paired with itself (SetFit's sampler may draw such a pair: its cosine is exactly 1,
  so it adds nothing but weight).
* Computed in float32 whatever the input dtype (float64 stays float64), with autocast disabled inside,
  so it is safe under fp16/bf16 autocast.
"""

from __future__ import annotations

import torch
from torch import nn

from ._common import full_precision


def cosine_pairs(embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """SetFit's pair loss over every pair of distinct rows of ``embeddings`` (n, d), ``labels`` (n,)."""
    if embeddings.dim() != 2:
        raise ValueError(f"embeddings must be (batch, dim), got shape {tuple(embeddings.shape)}")
    if labels.shape != embeddings.shape[:1]:
        raise ValueError(f"labels must be ({embeddings.shape[0]},), got shape {tuple(labels.shape)}")
    with full_precision(embeddings, normalize=True) as (z,):
        cos = z @ z.T
        n = z.shape[0]
        upper = torch.triu(torch.ones(n, n, dtype=torch.bool, device=z.device), diagonal=1)
        same = labels.view(-1, 1) == labels.view(1, -1)
        terms = []
        for mask, target in ((upper & same, 1.0), (upper & ~same, 0.0)):
            if bool(mask.any()):
                terms.append(((cos[mask] - target) ** 2).mean())
        if not terms:
            return z.sum() * 0.0
        return torch.stack(terms).mean()


class CosinePairsLoss(nn.Module):
    """``nn.Module`` form of :func:`cosine_pairs`."""

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return cosine_pairs(embeddings, labels)
