"""``linear-probe``: the frozen pretrained encoder with a logistic-regression head.

No encoder training at all: the training set is encoded once (L2-normalised pooled embeddings, what
``sentence-transformers`` returns for models that end in a Normalize module, such as
all-MiniLM-L6-v2) and scikit-learn's ``LogisticRegression`` (L2, ``head_C`` = 1, its default) is fitted
on them and copied into the linear head, so the result is saved, reloaded, predicted and compared like
every other method. It is what a practitioner tries first ("a second of CPU"), the baseline every
fine-tuning method has to beat, and the first stage of LP-FT (Kumar et al., 2022; ``--head-init probe``).
For label sets (``--multi-label``), one-vs-rest: one logistic regression per label
(:class:`MultiLabelLinearProbe`), as SetFit's ``multi_target_strategy="one-vs-rest"``.
"""

from __future__ import annotations

from ..errors import ConfigError
from .base import (LabelSetsLoss, LogisticHead, LossOutput, NormalizedFeaturesMethod, register_label_sets,
                   register_method)


@register_method
class LinearProbe(NormalizedFeaturesMethod):
    name = "linear-probe"
    description = "frozen encoder, logistic regression on its normalised embeddings (no fine-tuning)"
    reference = "Kumar et al. 2022 (LP); the baseline of Tunstall et al. 2022"
    Hparams = LogisticHead
    trains_encoder = False

    def training_loss(self, model, inputs, labels) -> LossOutput:
        raise ConfigError("linear-probe does not train the encoder")


@register_label_sets("linear-probe")
class MultiLabelLinearProbe(LabelSetsLoss, LinearProbe):
    description = "frozen encoder, one-vs-rest logistic regressions on its normalised embeddings"
