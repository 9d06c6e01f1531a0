r"""Sosnowski et al., *Distance Metric Learning Loss Functions in Few-Shot Scenarios of Supervised
Language Models Fine-Tuning*: cross-entropy plus a distance-metric-learning (DML) loss.

.. math:: \mathcal{L} = \beta\, \ell_{CCE} + (1 - \beta)\, \ell_{DML}    \qquad\text{(Eq. 4)}

``beta`` weights the **cross-entropy** (CE on a linear head over the pooled embedding, as in
``ce``). Both methods train encoder and head together in one stage, with the class-balanced batch
sampler (``contrastive = True``), and are for class labels only (a regression target is refused).

``ce-supcon`` (Sec. 3.1.1, ``l_DML`` = SupCon, Eq. 1)
    The same objective as ``ce-scl`` (Gunel et al.'s ``(1 - lambda) CE + lambda SCL`` on the pooled
    [CLS] embedding, which Sosnowski et al. cite as the architecture they use) with
    ``lambda = 1 - beta``. It *is* the ``ce-scl`` class: :class:`CrossEntropySupConBeta` subclasses
    :class:`~contrastfit.methods.ce_scl.CrossEntropySupCon` and only renames the weight; the loss is
    the parent's ``training_loss`` unchanged. Its hyper-parameters are ``beta`` and ``temperature``
    (``--beta``, ``--temperature``); ``lambda`` is not one of them (one knob, one name).
    Defaults, Table 2 (RoBERTa-large): ``beta = 0.9`` for every size; ``temperature = 0.6`` for 20
    training examples, ``0.7`` for 100 and 1,000 (``0.7`` when the size is unknown). Note that
    Table 2's 0.6 is not in the paper's own grid ``tau in {0.1, 0.3, 0.5, 0.7, 0.9}``; it is used as
    printed. Numerically the CE weight is ``1 - (1 - beta)``, which equals ``beta`` up to one
    rounding of the last bit. Being ``ce-scl``'s loss, its SupCon term is computed over the
    **global** batch under DDP (gathered embeddings and labels, :mod:`contrastfit.distributed`) and
    it takes a cross-batch memory (``--memory-size``, :mod:`contrastfit.memory`).

``ce-softtriple`` (Sec. 3.1.2, ``l_DML`` = SoftTriple, Eq. 2-3)
    :class:`~contrastfit.losses.SoftTripleLoss` (:func:`~contrastfit.losses.soft_triple`) with
    ``centers_per_class`` (``k``) centres per class, ``la`` (``lambda``, the scale), ``gamma`` (the
    entropy-regulariser temperature of Eq. 3) and ``margin`` (``delta``). ``dml_on``:

    * ``"tokens"`` (default): "instead of treating a single [CLS] vector as the observation
      representation, we use the entire encoder output" (Sec. 3.1.2). Every real token
      (``attention_mask == 1``, special tokens included, padding excluded) of the encoder's last
      hidden states is an anchor carrying its sentence's label
      (:func:`~contrastfit.losses.flatten_tokens`); SoftTriple is the mean over those tokens, so
      a longer sentence weighs more.
    * ``"pooled"``: the pooled sentence embedding (one anchor per sentence).

    The CE term is always on the head over the pooled embedding. The centres are an
    ``nn.Parameter`` of the method (``method.soft_triple.centers``, its own optimiser parameter
    group, :meth:`CrossEntropySoftTriple.param_groups`): trained by the optimizer,
    saved in ``head.safetensors`` and reloaded with the model (pitfall 3). They train with their own
    learning rate ``centers_learning_rate`` (default ``1e-2``): Sosnowski et al. give none; Qian et
    al. (SoftTriple, ICCV 2019) train the centres with a much larger learning rate than the
    backbone (1e-2 against 1e-4 in their experiments), and centres start random while the encoder
    is pretrained. ``center_reg`` is Qian et al.'s optional centre regulariser, off (0) as in
    Sosnowski et al.

    Multi-process (DDP): SoftTriple compares each example (or token) with the class **centres**,
    not with the other examples of the batch, so it has no batch negatives to gather: each process
    computes it on its own rows, like the cross-entropy, and DDP averages the processes' terms. With
    ``dml_on="pooled"`` and equal shares that is exactly the term of the concatenated batch (tested);
    with ``dml_on="tokens"`` it is the mean over processes of each process's mean over its tokens,
    which weighs the processes' tokens equally only when they hold equally many. The centres get
    each process's gradient and DDP's average, as any parameter. For the same reason it takes no
    cross-batch memory (``--memory-size`` is refused).
    Defaults, Table 1 (:data:`~contrastfit.losses.SOSNOWSKI_TABLE1`), by training-set size:

    ========  ====  =====  ======  =====  ====
    # train   k     gamma  lambda  delta  beta
    ========  ====  =====  ======  =====  ====
    20        25    0.1    9       0.7    0.4
    100       2000  0.1    4       0.7    0.8
    1,000     2000  0.1    7       0.9    0.9
    ========  ====  =====  ======  =====  ====

    When the size is unknown the 100 row is the default. ``k = 2000`` holds
    ``2000 * classes * hidden`` centre weights (1.5 M for two classes on a 384-wide MiniLM, 4 M on
    1024-wide RoBERTa-large) and, at token level, a ``(tokens in batch) x (2000 * classes)``
    similarity matrix per step.

Training-set size (both methods)
    The paper tuned at 20, 100 and 1,000 examples. ``train()`` applies the row *nearest on a log
    scale* to the actual training-set size (:func:`nearest_size_row`): the boundaries are the
    geometric means, so ``n <= 44`` takes the 20 row, ``45 <= n <= 316`` the 100 row and
    ``n >= 317`` the 1,000 row. Values the user gives always win over the table.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Mapping

from ..errors import ConfigError
from ..losses import SOSNOWSKI_TABLE1, SoftTripleLoss, flatten_tokens
from .base import Hparams, LossOutput, Method, ParamGroup, hparam, register_method
from .ce_scl import CrossEntropySupCon

#: Sosnowski et al., Table 2 (SupCon hyper-parameters by training-set size).
SOSNOWSKI_TABLE2: dict[int, dict[str, float]] = {
    20: {"beta": 0.9, "temperature": 0.6},
    100: {"beta": 0.9, "temperature": 0.7},
    1000: {"beta": 0.9, "temperature": 0.7},
}
#: Table 1's row of the defaults when the training-set size is unknown.
_TABLE1_100 = SOSNOWSKI_TABLE1[100]
#: the weight of the cross-entropy, Sosnowski's parametrisation (Eq. 4)
_BETA_HELP = "weight of CE in beta CE + (1 - beta) DML"


def nearest_size_row(table: Mapping[int, dict[str, Any]], n_train: int) -> dict[str, Any]:
    """The row of ``table`` (keyed by training-set size) nearest to ``n_train`` on a log scale.

    For Sosnowski's sizes 20 / 100 / 1000: ``n <= 44`` -> 20, ``n <= 316`` -> 100, else 1000
    (the boundaries are sqrt(20 * 100) = 44.7 and sqrt(100 * 1000) = 316.2). ``n < 1`` counts as 1.
    """
    target = math.log(max(int(n_train), 1))
    size = min(sorted(table), key=lambda s: abs(math.log(s) - target))
    return dict(table[size])


@register_method
class CrossEntropySupConBeta(CrossEntropySupCon):
    """``ce-scl`` with Sosnowski's parametrisation ``beta CE + (1 - beta) SupCon`` and Table 2 defaults."""

    name = "ce-supcon"
    description = "beta CE + (1 - beta) SupCon on the pooled embedding (ce-scl with lambda = 1 - beta)"
    reference = "Sosnowski et al., Eq. 1 and 4, Table 2 (the objective of Gunel et al. 2021)"

    class Hparams(Hparams):
        beta: float = hparam(0.9, _BETA_HELP, ge=0, le=1, flag="BETA")
        temperature: float = hparam(0.7, "SupCon temperature", gt=0, flag="T")

    def contrastive_weight(self) -> float:
        """Gunel's lambda is Sosnowski's 1 - beta (beta weights the cross-entropy, Eq. 4)."""
        return 1.0 - float(self.hp.beta)

    @classmethod
    def size_defaults(cls, n_train: int) -> dict[str, Any]:
        return nearest_size_row(SOSNOWSKI_TABLE2, n_train)


@register_method
class CrossEntropySoftTriple(Method):
    name = "ce-softtriple"
    description = "beta CE + (1 - beta) SoftTriple on every token (or the pooled embedding); centres trained"
    reference = "Sosnowski et al., Eq. 2-4, Table 1 (SoftTriple: Qian et al. 2019)"
    contrastive = True

    class Hparams(Hparams):  # defaults: Table 1's 100-example row
        beta: float = hparam(_TABLE1_100["beta"], _BETA_HELP, ge=0, le=1, flag="BETA")
        centers_per_class: int = hparam(_TABLE1_100["centers_per_class"], "SoftTriple's centres per class (k)", ge=1)
        gamma: float = hparam(_TABLE1_100["gamma"], "temperature of the entropy regulariser over a class's centres",
                              gt=0)
        la: float = hparam(_TABLE1_100["la"], "SoftTriple's scale (lambda)", gt=0)
        margin: float = hparam(_TABLE1_100["margin"], "SoftTriple's margin (delta)", ge=0)
        center_reg: float = hparam(0.0, "weight of Qian et al.'s centre regulariser (0: off, as in Sosnowski et al.)",
                                   ge=0)
        dml_on: Literal["pooled", "tokens"] = hparam(
            "tokens", "apply the metric-learning loss to the pooled embedding or every token",
            flag=True)
        centers_learning_rate: float = hparam(1e-2, "learning rate of the centres (their own parameter group)", gt=0)

    def __init__(self, num_labels, hidden_size, task="classification", **hparams):
        super().__init__(num_labels, hidden_size, task, **hparams)
        hp = self.hparams
        if task == "regression":
            raise ConfigError(f"{self.name} needs class labels; use 'ce' for a regression target")
        self.soft_triple = SoftTripleLoss(hidden_size, num_labels, hp["centers_per_class"], la=hp["la"],
                                          gamma=hp["gamma"], margin=hp["margin"], center_reg=hp["center_reg"])

    @classmethod
    def size_defaults(cls, n_train: int) -> dict[str, Any]:
        return nearest_size_row(SOSNOWSKI_TABLE1, n_train)

    def param_groups(self, model) -> list[ParamGroup]:
        return [ParamGroup("softtriple_centers", [self.soft_triple.centers], float(self.hp.centers_learning_rate))]

    def training_loss(self, model, inputs, labels) -> LossOutput:
        out = model.encoder(**inputs)
        logits = model.head(out.pooled)
        ce = self.task_loss(logits, labels)
        if self.hp.dml_on == "tokens":
            x, y = flatten_tokens(out.token_embeddings, out.attention_mask, labels.long())
        else:
            x, y = out.pooled, labels.long()
        st = self.soft_triple(x, y)
        beta = self.hp.beta
        return LossOutput(loss=beta * ce + (1 - beta) * st, logits=logits, parts={"ce": ce, "softtriple": st})


__all__ = ["CrossEntropySupConBeta", "CrossEntropySoftTriple", "SOSNOWSKI_TABLE2", "nearest_size_row"]
