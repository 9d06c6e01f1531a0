r"""DiffCSE: SimCSE plus a conditional replaced-token-detection (RTD) loss.

Chuang et al., *DiffCSE: Difference-based Contrastive Learning for Sentence Embeddings* (2022), as
written in Behrman & Christoglou (CS224N report), Eq. 3-6:

.. math::

    \mathcal{L}_{diffcse} = \mathcal{L}_{contrast} + \lambda\, \mathcal{L}_{discrim},
    \qquad
    \mathcal{L}_{discrim} = \sum_{t=1}^{T} \Big( -\mathbb{1}(x''_t = x_t) \log D(x'', h, t)
                                                  -\mathbb{1}(x''_t \neq x_t) \log\big(1 - D(x'', h, t)\big) \Big)

``L_contrast`` is the unsupervised SimCSE loss (Eq. 4 = Eq. 1, :func:`~contrastfit.losses.simcse.simcse_unsup`).
The sentence ``x`` is masked (``x'``), a fixed generator fills the masks (``x''``) and a discriminator
``D``, conditioned on SimCSE's embedding ``h`` of ``x``, predicts for each token whether it was replaced.
This module holds the loss only; the masking and the generators are in :mod:`contrastfit.data.masking`,
the discriminator and the method in :mod:`contrastfit.methods.diffcse`.

Conventions
-----------
* ``D(x'', h, t)`` in Eq. 5-6 (as in ELECTRA) is the probability that token ``t`` is *original*. Here the
  discriminator's ``logits`` score **replaced**: ``D = 1 - sigmoid(logit)``. Eq. 5-6 is then exactly the
  binary cross-entropy of ``sigmoid(logit)`` against the target ``replaced``.
* ``replaced[t]`` is ``x''_t != x_t``: a position that was masked but refilled with its original token
  counts as **not replaced** (ELECTRA / DiffCSE), as the generators of :mod:`contrastfit.data.masking`
  return it.
* Reduction: the report's Eq. 5-6 sums over tokens; :func:`replaced_token_detection` takes the **mean**
  over the positions where ``attention_mask`` is 1, so that its scale (and ``lambda``) does not depend on
  sentence length or batch size. Special-token rule: every position with ``attention_mask == 1`` counts,
  special tokens included. [CLS]/[SEP] are never masked (:func:`contrastfit.data.masking.mask_tokens`),
  so they are always "original"; to leave them out of the loss, pass ``attention_mask & ~special_tokens_mask``.
  A batch with no counted position gives 0, still connected to the graph.
* ``lambda`` defaults to 0.005: the report's hyper-parameter table (DiffCSE column, "lambda 0.005",
  "set at the original paper's suggestion of 0.005"). The report's Eq. 3 prints no ``lambda``. It must
  be finite and >= 0 (NaN or inf raises ``ValueError``).
* Losses are computed in float32 whatever the input dtype (float64 stays float64), autocast disabled.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._common import check_finite, full_precision

__all__ = ["DEFAULT_LAMBDA", "replaced_token_detection", "diffcse_loss", "ReplacedTokenDetectionLoss"]

#: ``lambda`` of Eq. 3/6: the report's hyper-parameter table (0.005, "the original paper's suggestion").
DEFAULT_LAMBDA = 0.005


def replaced_token_detection(
    logits: torch.Tensor, replaced: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Binary cross-entropy of the discriminator (Eq. 5-6), mean over positions with ``attention_mask == 1``.

    ``logits`` (n, T) or (n, T, 1) score "replaced"; ``replaced`` (n, T) bool targets; ``attention_mask``
    (n, T) (default: every position counts). Pass ``attention_mask & ~special_tokens_mask`` to leave
    [CLS]/[SEP] out. Logits at positions that do not count are ignored (even inf/NaN) and get zero gradient.
    """
    if logits.dim() == 3 and logits.shape[-1] == 1:
        logits = logits.squeeze(-1)
    if logits.dim() != 2:
        raise ValueError(f"logits must be (batch, tokens), got shape {tuple(logits.shape)}")
    if replaced.shape != logits.shape:
        raise ValueError(f"replaced must have the shape of logits {tuple(logits.shape)}, got {tuple(replaced.shape)}")
    if attention_mask is None:
        counted = torch.ones_like(replaced, dtype=torch.bool)
    else:
        if attention_mask.shape != logits.shape:
            raise ValueError(
                f"attention_mask must have the shape of logits {tuple(logits.shape)}, got {tuple(attention_mask.shape)}"
            )
        counted = attention_mask.bool()
    with full_precision(logits) as (x,):
        if not bool(counted.any()):
            return x[counted].sum()  # an empty sum: 0, still connected to the graph
        selected = x[counted.to(x.device)]
        target = replaced.to(device=x.device)[counted.to(x.device)].to(x.dtype)
        return F.binary_cross_entropy_with_logits(selected, target, reduction="mean")


def diffcse_loss(contrastive: torch.Tensor, rtd: torch.Tensor, lam: float = DEFAULT_LAMBDA) -> torch.Tensor:
    """Eq. 3/6: ``contrastive + lam * rtd`` (``lam`` default 0.005, the report's table)."""
    check_finite("lam", lam)
    if lam < 0:
        raise ValueError(f"lam must be >= 0, got {lam}")
    return contrastive + lam * rtd


class ReplacedTokenDetectionLoss(nn.Module):
    """``nn.Module`` form of :func:`replaced_token_detection`."""

    def forward(self, logits, replaced, attention_mask=None):
        return replaced_token_detection(logits, replaced, attention_mask)

