r"""Knowledge distillation from a teacher's soft probabilities (Hinton, Vinyals & Dean, 2015,
*Distilling the Knowledge in a Neural Network*, Sec. 2).

The teacher's logits ``v`` and the student's logits ``z`` of the same text are both softened by a
temperature ``T``, :math:`p = \operatorname{softmax}(v / T)` and :math:`q = \operatorname{softmax}(z / T)`,
and the student minimises the Kullback-Leibler divergence of its distribution from the teacher's,
multiplied by :math:`T^2` (Sec. 2: the gradient of the soft term scales as :math:`1/T^2`; the factor keeps
its size when ``T`` changes):

.. math::

    \mathcal{L} = \frac{T^2}{n} \sum_{i=1}^{n} \sum_{c=1}^{C}
        p_{ic} \left(\log p_{ic} - \log q_{ic}\right)

over the ``n`` rows of a batch and the ``C`` classes. Its gradient with respect to the student's logit
is :math:`\tfrac{T}{n}(q_{ic} - p_{ic})` (Hinton's Eq. 2 per row, with the factor). At ``T = 1`` it is the
cross-entropy against the teacher's probabilities minus the teacher's entropy (a constant), so it
reaches 0 exactly when the student's probabilities are the teacher's.

Inputs
------
* ``student_logits``: (n, C), the student's head output for a batch (with its graph);
* ``teacher_logits``: (n, C), the teacher's logits for the same rows, computed once before training
  (:mod:`contrastfit.distillation`); they are constants: no gradient flows to them (detached here);
* ``temperature``: ``T > 0``, finite.

Conventions
-----------
* Mean over the rows; a batch of no rows gives 0 with the graph intact.
* A class the teacher gives probability 0 (a logit of ``-inf``, or one far below the others)
  contributes 0 (``0 log 0 = 0``), as in the limit.
* Computed in float32 whatever the input dtype (float64 stays float64), with autocast disabled
  inside (:mod:`contrastfit.losses._common`), so it is safe under fp16/bf16 autocast.

Usage::

    from contrastfit.losses import soft_target_kl
    loss = soft_target_kl(student_head(pooled), teacher_logits_of_these_rows, temperature=2.0)
"""

from __future__ import annotations

import torch
from torch import nn

from ._common import check_finite, full_precision


def soft_target_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``T^2`` times the mean over rows of ``KL(softmax(teacher / T) || softmax(student / T))``."""
    check_finite("temperature", temperature)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if student_logits.dim() != 2:
        raise ValueError(f"student_logits must be (batch, classes), got shape {tuple(student_logits.shape)}")
    if teacher_logits.shape != student_logits.shape:
        raise ValueError(f"teacher_logits must have the student's shape {tuple(student_logits.shape)}, "
                         f"got {tuple(teacher_logits.shape)}")
    with full_precision(student_logits, teacher_logits.detach()) as (z, v):
        if z.shape[0] == 0:
            return z.sum() * 0.0
        t = float(temperature)
        log_q = torch.log_softmax(z / t, dim=-1)
        log_p = torch.log_softmax(v / t, dim=-1)
        p = log_p.exp()
        # p log p - p log q, with 0 log 0 = 0 (xlogy) and no inf * 0 where the teacher gives a class nothing
        per_row = (torch.special.xlogy(p, p) - torch.where(p > 0, p * log_q, torch.zeros_like(p))).sum(dim=-1)
        return per_row.mean() * (t * t)


class SoftTargetKLLoss(nn.Module):
    """``nn.Module`` form of :func:`soft_target_kl` with a fixed temperature."""

    def __init__(self, temperature: float = 1.0):
        super().__init__()
        check_finite("temperature", temperature)
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = float(temperature)

    def forward(self, student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
        return soft_target_kl(student_logits, teacher_logits, self.temperature)
