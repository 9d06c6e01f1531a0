"""``linear-probe``: the frozen pretrained encoder with a logistic-regression head.

No encoder training at all: the training set is encoded once (L2-normalised pooled embeddings, what
``sentence-transformers`` returns for models that end in a Normalize module, such as
all-MiniLM-L6-v2) and scikit-learn's ``LogisticRegression`` (L2, ``head_C`` = 1, its default) is fitted
on them and copied into the linear head, so the result is saved, reloaded, predicted and compared like
every other method. It is what a practitioner tries first ("a second of CPU"), the baseline every
fine-tuning method has to beat, and the first stage of LP-FT (Kumar et al., 2022; ``--head-init probe``).
"""

from __future__ import annotations

import torch.nn.functional as F

from ..errors import ConfigError
from .base import LOGISTIC_HEAD_DEFAULTS, LossOutput, Method, register_method


class NormalizedFeaturesMethod(Method):
    """A method whose head reads the L2-normalised pooled embedding (SetFit, the linear probe)."""

    def __init__(self, num_labels, hidden_size, task="classification", **hparams):
        super().__init__(num_labels, hidden_size, task, **hparams)
        if task != "classification":
            raise ConfigError(f"{self.name} needs class labels (its head is a logistic regression); use 'ce' for a regression target")
        self.check_hparam("head_C", gt=0)

    def head_features(self, model, inputs):
        return F.normalize(model.encoder(**inputs).pooled.float(), p=2, dim=-1)


@register_method
class LinearProbe(NormalizedFeaturesMethod):
    name = "linear-probe"
    description = "frozen encoder, logistic regression on its normalised embeddings (no fine-tuning)"
    reference = "Kumar et al. 2022 (LP); the baseline of Tunstall et al. 2022"
    defaults = dict(LOGISTIC_HEAD_DEFAULTS)
    frozen_head_stage = True
    head_solver = "logistic"
    trains_encoder = False

    def training_loss(self, model, inputs, labels) -> LossOutput:
        raise ConfigError("linear-probe does not train the encoder")
