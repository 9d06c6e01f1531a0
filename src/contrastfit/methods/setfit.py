"""``setfit``: SetFit's procedure (Tunstall et al., 2022, *Efficient Few-Shot Learning Without
Prompts*), written from the paper and the library's documented defaults.

Stage 1 fine-tunes the encoder contrastively on pairs of labelled sentences with the cosine-similarity
loss (:func:`contrastfit.losses.cosine_pairs`: target 1 for a same-class pair, 0 otherwise, positive
and negative pairs weighted equally). Stage 2 freezes the encoder and fits scikit-learn's logistic
regression on the normalised embeddings (``head_solver = "logistic"``, ``head_C`` = 1).

Defaults follow SetFit 1.x's ``TrainingArguments``: body learning rate 2e-5 and one epoch over the
pairs its ``oversampling`` strategy draws, i.e. ``2 * max(#positive pairs, #negative pairs)`` pairs
(positives counted with the library's self-pairs) in batches of ``batch_size``: that many
optimisation steps (:meth:`SetFit.training_steps`; ``--epochs`` overrides it). What differs: the
library materialises a list of pairs and encodes both sentences of each (2 x batch_size sentences a
step); here each step encodes one class-balanced batch of ``batch_size`` sentences and uses every pair
in it, so a step costs about half as much. ``bench/fewshot.py`` runs both on the same samples.
"""

from __future__ import annotations

import math

import numpy as np

from ..losses import cosine_pairs
from .base import LogisticHead, LossOutput, NormalizedFeaturesMethod, register_method


def setfit_pair_count(train_labels) -> int:
    """The number of pairs SetFit 1.x's default ``oversampling`` strategy trains on for these labels."""
    _, counts = np.unique(np.asarray(train_labels), return_counts=True)
    positive = int(sum(k * (k + 1) // 2 for k in counts))
    negative = int((counts.sum() ** 2 - (counts ** 2).sum()) // 2)
    return 2 * max(positive, negative)


@register_method
class SetFit(NormalizedFeaturesMethod):
    name = "setfit"
    description = "cosine-similarity loss on same/different-class pairs, then logistic regression on the frozen encoder"
    reference = "Tunstall et al. 2022, Sec. 3"
    Hparams = LogisticHead
    contrastive = True  # the class-balanced sampler: every batch holds positive and negative pairs
    training_defaults = {"learning_rate": 2e-5}

    @classmethod
    def training_steps(cls, train_labels, batch_size: int) -> int:
        return math.ceil(setfit_pair_count(train_labels) / batch_size)

    def training_loss(self, model, inputs, labels) -> LossOutput:
        loss = cosine_pairs(model.encoder(**inputs).pooled, labels)
        return LossOutput(loss=loss, parts={"cosine_pairs": loss})
