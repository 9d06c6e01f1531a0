r"""SoftTriple loss (Qian et al., ICCV 2019), as written by Sosnowski et al. (Eq. 2-3).

Sosnowski et al., *Distance Metric Learning Loss Functions in Few-Shot Scenarios of Supervised
Language Models Fine-Tuning*, Sec. 2.2, Eq. 2 and 3:

.. math::

    \mathcal{S}'_{i,c} = \sum_{k=1}^{K}
        \frac{\exp(\tfrac{1}{\gamma} x_i^\top w_c^k)}{\sum_{k'} \exp(\tfrac{1}{\gamma} x_i^\top w_c^{k'})}
        \, x_i^\top w_c^k                                                          \qquad (3)

    \ell_{SoftTriple} = -\frac{1}{N} \sum_{i}
        \log \frac{\exp(\lambda(\mathcal{S}'_{i,y_i} - \delta))}
                  {\exp(\lambda(\mathcal{S}'_{i,y_i} - \delta)) + \sum_{j \neq y_i} \exp(\lambda \mathcal{S}'_{i,j})}
                                                                                   \qquad (2)

Argument names: ``la`` = :math:`\lambda`, ``gamma`` = :math:`\gamma`, ``margin`` = :math:`\delta`,
``centers_per_class`` = :math:`K`.

Conventions
-----------
* ``x_i`` (the embeddings) and every centre ``w_c^k`` are L2-normalised inside the function, so every
  ``x_i . w_c^k`` is a cosine (Qian et al. normalise both; Sosnowski's Eq. 3 leaves it implicit),
  as ``v / max(||v||, eps)`` with eps 2^-8 for float16 input and 1e-12 otherwise
  (:mod:`contrastfit.losses._common`): a zero row gives finite gradients in every dtype.
* Centres are one ``(num_classes * K, dim)`` matrix; class ``c`` owns rows ``c*K .. c*K + K - 1``.
  ``K`` cannot be inferred from the labels of a batch (a batch need not contain the last class), so
  the caller passes ``centers_per_class`` or ``num_classes`` (or both, which are then checked against
  ``centers.shape[0]``). ``labels`` must lie in ``[0, num_classes)``.
* Eq. 2 is a cross-entropy over the ``num_classes`` logits ``la * (S'_{i,c} - margin * [c == y_i])``;
  every class is in the denominator, whether or not it occurs in the batch. Reduction: the **mean**
  over the ``N`` rows of the batch (Eq. 2's ``1/N``). With ``K = 1`` it is the normalised softmax
  (cosine) loss with an additive margin.
* A batch of one, or a batch with a single class, is well defined (the other classes' centres are
  the negatives): no special case is needed. An empty batch (``N = 0``, e.g. no real token at token
  level) makes Eq. 2's mean over no row 0, still connected to the graph; the centre regulariser,
  which does not depend on the batch, is added as usual.
* ``la``, ``gamma``, ``margin`` and ``center_reg`` must be finite (NaN or inf raises ``ValueError``);
  ``la`` and ``gamma`` > 0, ``center_reg`` >= 0.
* Centre regulariser (optional, off by default). Sosnowski et al. do not use or mention it (their
  Table 1 has no weight for it; their "entropy regularizer" is the ``gamma`` softmax of Eq. 3). Qian
  et al. (Sec. 3.3, "adaptive number of centers") add, to merge redundant centres of a class,

  .. math::

      \tau \, \frac{\sum_{c} \sum_{t < s} \lVert w_c^t - w_c^s \rVert_2}{C K (K - 1)},
      \qquad \lVert w_c^t - w_c^s \rVert_2 = \sqrt{2 - 2\, w_c^{t\top} w_c^s}

  Here ``center_reg`` is that weight :math:`\tau` (Qian et al. use 0.2; 0 switches it off). The
  normaliser :math:`CK(K-1)` is Qian's: twice the number ``C K (K-1) / 2`` of within-class pairs,
  i.e. the term is half the mean within-class centre distance. The square root is taken of
  ``max(2 - 2 w_t.w_s, 0) + 1e-10`` (the epsilon is added *after* the subtraction: in float32
  ``2 + 1e-10 == 2``), so coincident centres give a finite value and gradient. With ``K = 1``
  there are no pairs and the term is 0.
* Token level (``--dml-on tokens``; Sosnowski Sec. 3.1.2 apply SoftTriple to "the entire encoder
  output"): the caller flattens the ``(batch, seq, dim)`` token embeddings of the real tokens
  (``attention_mask == 1``) to ``(m, dim)`` and repeats each sequence's label over its tokens, with
  :func:`flatten_tokens`. Every token is then an anchor and ``N = m``: the mean is over tokens, so
  a longer sequence weighs more than a short one.
* Computed in float32 whatever the input dtype (float64 embeddings or centres give float64), with
  autocast disabled inside, so it is safe under fp16/bf16 autocast.
* The centres are trainable parameters (:class:`SoftTripleLoss` holds them): they must be handed
  to the optimizer (pitfall 3). Qian et al. train them with a larger learning rate than the
  backbone; Sosnowski et al. state no learning rate for them.

Hyper-parameters
----------------
The defaults ``la=20, gamma=0.1, margin=0.01, centers_per_class=10, center_reg 0.2 when used`` are
Qian et al.'s (Sec. 4). Sosnowski et al. tuned them for RoBERTa-large few-shot fine-tuning; their
Table 1 is :data:`SOSNOWSKI_TABLE1` (keys: number of training examples). Their grids (Sec. 3.2):
``k in {5, 25, 1000, 2000}``, ``gamma in {0.01, 0.03, 0.05, 0.07, 0.1}``,
``lambda in {1, 3, 3.3, 4, 6, 8, 10}``, ``delta in {0.1, 0.3, 0.5, 0.7, 0.9, 1}``,
``beta in {0.1, ..., 0.9}`` (``beta`` weights the cross-entropy: ``L = beta CE + (1 - beta) DML``,
their Eq. 4). Note that Table 1's ``lambda = 9`` (20 examples) is not in that grid.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._common import check_finite, full_precision

#: Sosnowski et al., Table 1 (SoftTriple hyper-parameters by training-set size). ``beta`` is the
#: weight of the cross-entropy in their Eq. 4, ``L = beta * CE + (1 - beta) * SoftTriple``.
SOSNOWSKI_TABLE1 = {
    20: {"centers_per_class": 25, "gamma": 0.1, "la": 9.0, "margin": 0.7, "beta": 0.4},
    100: {"centers_per_class": 2000, "gamma": 0.1, "la": 4.0, "margin": 0.7, "beta": 0.8},
    1000: {"centers_per_class": 2000, "gamma": 0.1, "la": 7.0, "margin": 0.9, "beta": 0.9},
}

_REG_EPS = 1e-10


def _num_classes_and_k(n_centers: int, num_classes: int | None, centers_per_class: int | None) -> tuple[int, int]:
    if num_classes is None and centers_per_class is None:
        raise ValueError("pass centers_per_class or num_classes: K cannot be inferred from a batch's labels")
    if centers_per_class is not None and centers_per_class < 1:
        raise ValueError(f"centers_per_class must be >= 1, got {centers_per_class}")
    if num_classes is not None and num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    if centers_per_class is None:
        if n_centers % num_classes:
            raise ValueError(f"centers has {n_centers} rows, not a multiple of num_classes={num_classes}")
        centers_per_class = n_centers // num_classes
    if num_classes is None:
        if n_centers % centers_per_class:
            raise ValueError(f"centers has {n_centers} rows, not a multiple of centers_per_class={centers_per_class}")
        num_classes = n_centers // centers_per_class
    if num_classes * centers_per_class != n_centers:
        raise ValueError(f"centers has {n_centers} rows, expected num_classes * centers_per_class = "
                         f"{num_classes} * {centers_per_class}")
    return num_classes, centers_per_class


def soft_triple(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    centers: torch.Tensor,
    la: float = 20.0,
    gamma: float = 0.1,
    margin: float = 0.01,
    centers_per_class: int | None = None,
    center_reg: float = 0.0,
    *,
    num_classes: int | None = None,
) -> torch.Tensor:
    """SoftTriple loss of ``embeddings`` (n, d) with integer ``labels`` (n,) against ``centers``
    (num_classes * K, d); pass ``centers_per_class`` (K) or ``num_classes``. ``center_reg`` is the
    weight (Qian's tau) of the optional centre regulariser. Returns a scalar (mean over the batch)."""
    if embeddings.dim() != 2:
        raise ValueError(f"embeddings must be (batch, dim), got shape {tuple(embeddings.shape)}")
    if labels.shape != embeddings.shape[:1]:
        raise ValueError(f"labels must be ({embeddings.shape[0]},), got shape {tuple(labels.shape)}")
    if centers.dim() != 2 or centers.shape[1] != embeddings.shape[1]:
        raise ValueError(f"centers must be (num_classes * K, {embeddings.shape[1]}), got shape {tuple(centers.shape)}")
    for name, value in (("la", la), ("gamma", gamma), ("margin", margin), ("center_reg", center_reg)):
        check_finite(name, value)
    if la <= 0:
        raise ValueError(f"la must be > 0, got {la}")
    if gamma <= 0:
        raise ValueError(f"gamma must be > 0, got {gamma}")
    if center_reg < 0:
        raise ValueError(f"center_reg must be >= 0, got {center_reg}")
    n_classes, k = _num_classes_and_k(centers.shape[0], num_classes, centers_per_class)
    labels = labels.long()
    if bool(((labels < 0) | (labels >= n_classes)).any()):
        raise ValueError(f"labels must lie in [0, {n_classes})")

    with full_precision(embeddings, centers, normalize=True) as (x, w):
        n = x.shape[0]
        sim = (x @ w.T).view(n, n_classes, k)  # x_i . w_c^k
        # Eq. 3: softmax over the K centres of each class (temperature gamma), weighting the similarities.
        relaxed = (torch.softmax(sim / gamma, dim=2) * sim).sum(dim=2)  # S'_{i,c}, (n, C)
        # Eq. 2: the margin delta is subtracted from the true class only, then a softmax scaled by lambda.
        logits = la * (relaxed - margin * F.one_hot(labels, n_classes).to(x.dtype))
        # the mean over the N rows; over no row (an empty batch) it is 0, still connected to the graph
        loss = F.cross_entropy(logits, labels) if n else logits.sum() * 0.0

        if center_reg > 0 and k > 1:
            wc = w.view(n_classes, k, -1)
            gram = wc @ wc.transpose(1, 2)  # (C, K, K)
            upper = torch.triu(torch.ones(k, k, dtype=torch.bool, device=w.device), diagonal=1)
            dist = torch.sqrt((2.0 - 2.0 * gram[:, upper]).clamp_min(0.0) + _REG_EPS)  # (C, K(K-1)/2)
            loss = loss + center_reg * dist.sum() / (n_classes * k * (k - 1))
        return loss


def flatten_tokens(
    token_embeddings: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-level input for :func:`soft_triple` (``--dml-on tokens``).

    ``token_embeddings`` (batch, seq, d), ``attention_mask`` (batch, seq) with 1 for real tokens
    (special tokens included) and 0 for padding, ``labels`` (batch,). Returns the real tokens'
    embeddings (m, d), in row-major (sequence, then position) order, and their sequences' labels (m,).
    """
    if token_embeddings.dim() != 3:
        raise ValueError(f"token_embeddings must be (batch, seq, dim), got shape {tuple(token_embeddings.shape)}")
    if attention_mask.shape != token_embeddings.shape[:2]:
        raise ValueError(f"attention_mask must be {tuple(token_embeddings.shape[:2])}, got {tuple(attention_mask.shape)}")
    if labels.shape != token_embeddings.shape[:1]:
        raise ValueError(f"labels must be ({token_embeddings.shape[0]},), got shape {tuple(labels.shape)}")
    keep = attention_mask != 0
    token_labels = labels.view(-1, 1).expand(attention_mask.shape)
    return token_embeddings[keep], token_labels[keep]


class SoftTripleLoss(nn.Module):
    """``nn.Module`` form of :func:`soft_triple` that owns the centres.

    ``centers`` is an ``nn.Parameter`` of shape (num_classes * centers_per_class, dim), drawn from the
    global RNG (standard normal rows, then L2-normalised: uniform on the sphere). Put it in the
    optimizer (pitfall 3).
    """

    def __init__(
        self,
        dim: int,
        num_classes: int,
        centers_per_class: int = 10,
        la: float = 20.0,
        gamma: float = 0.1,
        margin: float = 0.01,
        center_reg: float = 0.0,
    ):
        super().__init__()
        if dim < 1 or num_classes < 1 or centers_per_class < 1:
            raise ValueError("dim, num_classes and centers_per_class must be >= 1")
        self.dim = dim
        self.num_classes = num_classes
        self.centers_per_class = centers_per_class
        self.la = la
        self.gamma = gamma
        self.margin = margin
        self.center_reg = center_reg
        self.centers = nn.Parameter(torch.empty(num_classes * centers_per_class, dim))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        nn.init.normal_(self.centers)
        self.centers.copy_(F.normalize(self.centers, p=2, dim=1))

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return soft_triple(embeddings, labels, self.centers, self.la, self.gamma, self.margin,
                           self.centers_per_class, self.center_reg, num_classes=self.num_classes)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, num_classes={self.num_classes}, centers_per_class={self.centers_per_class}, "
                f"la={self.la}, gamma={self.gamma}, margin={self.margin}, center_reg={self.center_reg}")
