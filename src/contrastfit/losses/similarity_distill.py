r"""Distillation of a teacher's sentence-embedding geometry: the student's cosine similarity of every
pair of texts regresses onto the teacher's (SetFit's distillation; Tunstall et al. 2022, the
``DistillationTrainer`` of the SetFit library, on sentence-transformers' ``CosineSimilarityLoss`` of
Reimers & Gurevych 2019).

SetFit distils a model on unlabelled texts by drawing pairs of them, taking the **teacher's** cosine
similarity of the two texts' embeddings as the pair's target, and training the student's encoder with
the squared error between its own cosine and that target; the student's head is then fitted on the
teacher's predicted labels. Here the pairs are every pair of distinct rows of a batch (SetFit's random
pairs, drawn a batch at a time), with the teacher's embeddings of those rows computed once before
training (:mod:`contrastfit.distillation`):

.. math::

    \mathcal{L} = \operatorname{mean}_{i < j}
        \left( \cos(s_i, s_j) - \cos(t_i, t_j) \right)^2

where ``s`` are the student's embeddings and ``t`` the teacher's. Only similarities are compared, each
model in its own space, so the two embeddings may have different widths (e.g. 384 for MiniLM, 768 for
MPNet): no projection is needed, unlike the MSE between the embeddings themselves (Reimers & Gurevych
2020, which needs equal widths or a learnt projection).

Inputs
------
* ``student``: (n, d_s) the student's embeddings of a batch (with their graph);
* ``teacher``: (n, d_t) the teacher's embeddings of the same rows, any width; constants (detached here).

Conventions
-----------
* Unweighted mean over the ``n (n - 1) / 2`` pairs (SetFit's pairs are uniform over the texts); a batch
  of fewer than two rows has no pair and gives 0 with the graph intact.
* Rows normalised as ``x / max(||x||, eps)`` (:mod:`contrastfit.losses._common`; eps by each input's
  dtype), so a zero row has cosine 0 with everything and finite gradients.
* Computed in float32 whatever the input dtypes (float64 stays float64), autocast disabled inside.

Usage::

    from contrastfit.losses import similarity_distillation
    loss = similarity_distillation(student_encoder(**batch).pooled, teacher_embeddings_of_these_rows)
"""

from __future__ import annotations

import torch
from torch import nn

from ._common import full_precision


def similarity_distillation(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Mean over the pairs ``i < j`` of ``(cos(student_i, student_j) - cos(teacher_i, teacher_j))^2``."""
    if student.dim() != 2 or teacher.dim() != 2:
        raise ValueError(f"student and teacher must be (batch, dim), got shapes {tuple(student.shape)} and "
                         f"{tuple(teacher.shape)}")
    if teacher.shape[0] != student.shape[0]:
        raise ValueError(f"teacher must have one row per student row ({student.shape[0]}), got {teacher.shape[0]}")
    with full_precision(student, teacher.detach(), normalize=True) as (s, t):
        n = s.shape[0]
        if n < 2:
            return s.sum() * 0.0
        upper = torch.triu(torch.ones(n, n, dtype=torch.bool, device=s.device), diagonal=1)
        return ((s @ s.T - t @ t.T)[upper] ** 2).mean()


class SimilarityDistillationLoss(nn.Module):
    """``nn.Module`` form of :func:`similarity_distillation`."""

    def forward(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        return similarity_distillation(student, teacher)
