r"""LaCon: label anchored contrastive learning (Zhang et al., *Label Anchored Contrastive Learning for
Language Understanding*), Eq. 3-8.

``H`` are the instance representations (n, d) and ``L`` the C learnable label embeddings (C, d)
(Eq. 1-2); ``sim`` is the cosine similarity and ``tau`` the temperature.

Multi-head instance-centred contrastive loss (ICL), Eq. 4 (Eq. 3 is the case ``heads = 1``). Each
of ``H_i`` and ``L_p`` is cut into ``m = heads`` contiguous chunks of ``d / m`` dimensions
(``h_i^k``, ``l_p^k``):

.. math::

    \mathcal{L}'_{ICL} = -\frac{1}{N} \sum_{k=1}^{m} \sum_{i}
        \log \frac{\exp(\mathrm{sim}(h_i^k, l_{y_i}^k)/\tau)}{\sum_{1 \le p \le C} \exp(\mathrm{sim}(h_i^k, l_p^k)/\tau)}

Label-centred contrastive loss (LCL), Eq. 5, with ``A(p)`` the instances of class ``p``, ``B(p)``
the other instances, and ``P`` the classes present in the batch:

.. math::

    \mathcal{L}_{LCL} = -\frac{1}{|P|} \sum_{p \in P} \sum_{a \in A(p)}
        \log \frac{\exp(\mathrm{sim}(L_p, H_a)/\tau)}{\sum_{b \in B(p)} \exp(\mathrm{sim}(L_p, H_b)/\tau)}

Label embedding regulariser (LER), Eq. 6, and the total, Eq. 7:

.. math::

    \mathcal{L}_{LER} = \mathrm{avg}_{i \neq j} \left( \exp(1 + \mathrm{sim}(L_i, L_j)) - 1 \right),
    \qquad
    \mathcal{L} = \mathcal{L}'_{ICL} + \mathcal{L}_{LCL} + \lambda \, \mathcal{L}_{LER}

Prediction (Eq. 8): ``argmax_j sim(H_x, L_j)``; :func:`lacon_predict` returns the cosine matrix, used
as logits.

Conventions (the equations implemented as written)
--------------------------------------------------
* Normalisation: ``H`` and ``L`` are L2-normalised (Sec. 2.1); every ``sim`` is a cosine, so for
  ICL each *chunk* is L2-normalised on its own (normalising the full vector first changes nothing).
  LCL, LER and the prediction use the full vectors (one head). A vector (or chunk) ``v`` is normalised
  as ``v / max(||v||, eps)`` with eps 2^-8 for float16 input and 1e-12 otherwise
  (:mod:`contrastfit.losses._common`): a zero row or chunk gives finite gradients in every dtype.
* ICL: the heads are **summed** (Eq. 4 has no ``1/m``), the instances averaged (``1/N``); the
  denominator runs over all C labels, including labels absent from the batch. ``d`` must be a
  multiple of ``heads``. ``heads = 1`` is Eq. 3.
* LCL: the denominator holds the **negatives only** (``B(p)``; the positive is not in it), so a
  per-pair term can be negative and LCL is bounded below by ``-|P|^{-1} sum_p |A(p)| (2/tau - log
  |B(p)|)``, not by 0. Positives are **summed** per label (no ``1/|A(p)|``), labels averaged
  (``1/|P|``): LCL grows with the number of instances per class in the batch.
* LCL, classes without instances: a label with no instance in the batch is not in ``P`` (no anchor).
  A label whose ``B(p)`` is empty - only when every instance has that label (single-class batch, or
  a batch of one) - has an empty denominator (the term is ``-inf``): it is left out as well. When no
  label is left, LCL is a zero that is still connected to the graph (zero gradient), never NaN
  (pitfall 1). In that case ICL still gives the instances a gradient.
* LER: averaged over the ``C (C - 1)`` ordered pairs ``i != j`` of **all** label embeddings (not only
  those in the batch), so it lies in ``[0, e^2 - 1]`` as Sec. 2.4 states. With ``C = 1`` it is a
  graph-connected zero.
* Total, Eq. 7: ``icl + lcl + ler_weight * ler``. For the ablations of Tables 3 and 6 every term has
  a weight: ``total = icl_weight * icl + lcl_weight * lcl + ler_weight * ler`` (defaults 1, 1, 0.5:
  Eq. 7). A term whose weight is 0 is left out of the sum altogether (it is still computed and
  returned, unweighted, for logging), so ``total`` is then exactly the sum of the other weighted
  terms and the removed term sends no gradient. All three weights 0 is refused (nothing to train).
* Batch of one: ICL is defined (one instance against all labels), LCL is 0 (no negative), LER does
  not depend on the batch. Empty batch (``N = 0``): ICL's mean over no instance is 0 and LCL has no
  anchor, both zeros connected to the graph; LER is computed as usual, so ``total`` is
  ``ler_weight * ler``.
* ``temperature`` and the three weights must be finite (NaN or inf raises ``ValueError``);
  ``temperature`` > 0, the weights >= 0.
* Computed in float32 whatever the input dtype (float64 in gives float64), with autocast disabled
  inside, so it is safe under fp16/bf16 autocast.
* The label embeddings are a parameter of the model head, not of this loss; they must be in the
  optimizer (pitfall 3).

Defaults (Sec. 4.4, "Hyper-parameter tuning", RTE)
---------------------------------------------------
* ``temperature = 0.1``: swept over 0.05..0.5; "the recommended value is around 0.1 and 0.2".
* ``heads = 6``: "the optimal number of heads in Equation 4 is 6" (Fig. 5(b)). Needs ``d % 6 == 0``
  (768 for BERT-base; pass ``heads`` for other sizes).
* ``ler_weight = 0.5``: **not given by the paper**. Sec. 4.4 sweeps lambda over 0.1..1.0 and says it
  "can be set in a wide range", with no LER or a large lambda performing poorly (Fig. 5(c), whose
  values are not in the text); 0.5 is the middle of that sweep.
* ``icl_weight = 1``, ``lcl_weight = 1``: Eq. 7 has no weight on ICL or LCL; these exist for the
  ablations (Table 3: "-ICL", "-LCL", "-LER"; Table 6: the terms added cumulatively).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ._common import check_finite, full_precision, l2_normalize, norm_eps


class LaConLossParts(NamedTuple):
    """The terms of the LaCon objective; ``total`` is the one to back-propagate (Eq. 7)."""

    total: torch.Tensor
    icl: torch.Tensor  # multi-head instance-centred loss, Eq. 4
    lcl: torch.Tensor  # label-centred loss, Eq. 5
    ler: torch.Tensor  # label embedding regulariser, Eq. 6 (unweighted)


def _check(embeddings: torch.Tensor, label_embeddings: torch.Tensor) -> None:
    if embeddings.dim() != 2:
        raise ValueError(f"embeddings must be (batch, dim), got shape {tuple(embeddings.shape)}")
    if label_embeddings.dim() != 2 or label_embeddings.shape[1] != embeddings.shape[1]:
        raise ValueError(f"label_embeddings must be (num_labels, {embeddings.shape[1]}), "
                         f"got shape {tuple(label_embeddings.shape)}")
    if label_embeddings.shape[0] < 1:
        raise ValueError("label_embeddings must hold at least one label")


def lacon(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    label_embeddings: torch.Tensor,
    temperature: float = 0.1,
    heads: int = 6,
    ler_weight: float = 0.5,
    icl_weight: float = 1.0,
    lcl_weight: float = 1.0,
) -> LaConLossParts:
    """LaCon loss of instance ``embeddings`` (n, d) with integer ``labels`` (n,) against the
    ``label_embeddings`` (C, d). Returns :class:`LaConLossParts` (total, icl, lcl, ler).

    ``total = icl_weight * icl + lcl_weight * lcl + ler_weight * ler`` (Eq. 7 with the defaults); a
    zero weight drops its term from ``total`` (the ablations "-ICL", "-LCL", "-LER" of Table 3)."""
    _check(embeddings, label_embeddings)
    if labels.shape != embeddings.shape[:1]:
        raise ValueError(f"labels must be ({embeddings.shape[0]},), got shape {tuple(labels.shape)}")
    check_finite("temperature", temperature)
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    n, d = embeddings.shape
    c = label_embeddings.shape[0]
    if heads < 1 or d % heads:
        raise ValueError(f"heads must be >= 1 and divide the embedding dim {d}, got {heads}")
    weights = {"icl_weight": icl_weight, "lcl_weight": lcl_weight, "ler_weight": ler_weight}
    for name, value in weights.items():
        check_finite(name, value)
        if not value >= 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    if not any(weights.values()):
        raise ValueError("icl_weight, lcl_weight and ler_weight are all 0: the LaCon loss has no term left")
    labels = labels.long()
    if bool(((labels < 0) | (labels >= c)).any()):
        raise ValueError(f"labels must lie in [0, {c})")

    with full_precision(embeddings, label_embeddings) as (h_raw, l_raw):
        # ICL (Eq. 4): per head, a softmax over the C labels; heads summed, instances averaged.
        eps_h, eps_l = norm_eps(embeddings.dtype), norm_eps(label_embeddings.dtype)
        hk = l2_normalize(h_raw.reshape(n, heads, d // heads), eps_h)
        lk = l2_normalize(l_raw.reshape(c, heads, d // heads), eps_l)
        head_logits = torch.einsum("nmd,cmd->mnc", hk, lk) / temperature  # (heads, n, C)
        if n:
            icl = F.cross_entropy(head_logits.reshape(heads * n, c), labels.repeat(heads), reduction="sum") / n
        else:  # the mean over no instance: 0, still connected to the graph
            icl = head_logits.sum() * 0.0

        h = l2_normalize(h_raw, eps_h)
        lab = l2_normalize(l_raw, eps_l)

        # LCL (Eq. 5): each present label is an anchor; positives its instances, denominator the negatives.
        logits = lab @ h.T / temperature  # (C, n): sim(L_p, H_a) / tau
        positives = labels.view(1, -1) == torch.arange(c, device=labels.device).view(-1, 1)  # (C, n)
        negatives = ~positives
        anchors = positives.any(dim=1) & negatives.any(dim=1)
        if bool(anchors.any()):
            lg, pos, neg = logits[anchors], positives[anchors], negatives[anchors]
            log_denom = torch.logsumexp(lg.masked_fill(~neg, float("-inf")), dim=1, keepdim=True)
            per_label = -torch.where(pos, lg - log_denom, torch.zeros_like(lg)).sum(dim=1)
            lcl = per_label.mean()
        else:
            lcl = logits.sum() * 0.0

        # LER (Eq. 6): mean over the ordered pairs i != j of all labels of exp(1 + cos) - 1.
        if c > 1:
            off_diag = ~torch.eye(c, dtype=torch.bool, device=lab.device)
            ler = (torch.exp(1.0 + (lab @ lab.T)[off_diag]) - 1.0).mean()
        else:
            ler = lab.sum() * 0.0

        # Eq. 7 with a weight per term; a zero-weighted term is left out (not multiplied by 0), so the
        # total is exactly the other terms and no gradient (nor a non-finite value) comes from it.
        total = None
        for weight, term in ((icl_weight, icl), (lcl_weight, lcl), (ler_weight, ler)):
            if weight:
                total = weight * term if total is None else total + weight * term
        return LaConLossParts(total=total, icl=icl, lcl=lcl, ler=ler)


def lacon_predict(embeddings: torch.Tensor, label_embeddings: torch.Tensor) -> torch.Tensor:
    """Eq. 8: the cosine similarities (n, C) of each instance to each label (full vectors, one head),
    in float32 (float64 stays float64). ``argmax(dim=1)`` is the prediction; use it as logits."""
    _check(embeddings, label_embeddings)
    with full_precision(embeddings, label_embeddings, normalize=True) as (h, lab):
        return h @ lab.T


class LaConLoss(nn.Module):
    """``nn.Module`` form of :func:`lacon`. Holds no parameter: the label embeddings live in the model
    head and are passed to :meth:`forward`."""

    def __init__(self, temperature: float = 0.1, heads: int = 6, ler_weight: float = 0.5,
                 icl_weight: float = 1.0, lcl_weight: float = 1.0):
        super().__init__()
        self.temperature = temperature
        self.heads = heads
        self.ler_weight = ler_weight
        self.icl_weight = icl_weight
        self.lcl_weight = lcl_weight

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor, label_embeddings: torch.Tensor) -> LaConLossParts:
        return lacon(embeddings, labels, label_embeddings, self.temperature, self.heads, self.ler_weight,
                     icl_weight=self.icl_weight, lcl_weight=self.lcl_weight)

    def extra_repr(self) -> str:
        return (f"temperature={self.temperature}, heads={self.heads}, ler_weight={self.ler_weight}, "
                f"icl_weight={self.icl_weight}, lcl_weight={self.lcl_weight}")
