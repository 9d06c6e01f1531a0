"""``zero-shot``: classify by the label names alone, no training example used.

Each label name is written as text (``Social_Preventive_Medicine`` -> ``social preventive medicine``,
:func:`~contrastfit.methods.base.label_text`) and encoded by the frozen encoder like any text; a text's
logit for class ``c`` is ``scale * cos(e(x), e(name_c))`` (the L2-normalised pooled embeddings, as
the linear probe reads them), so the prediction is the nearest label name. This is the zero-shot use
of a sentence encoder (e.g. Yin et al. 2019's "label names as hypotheses", here with an embedding
model instead of an NLI model) and the floor any few-shot method should clear; it needs label names
that say what the class is (refused with one line for codes such as ``0``/``1`` or ``ABBR``, and for
text pairs, whose labels describe the pair's relation).

The training set is not read, except for its labels' names (and for the refusal rules). ``scale``
(default 20) sets only how peaked ``predict_proba`` is, not the prediction.
"""

from __future__ import annotations

import torch

from ..encoders import eval_mode
from ..errors import ConfigError
from .base import Hparams, LossOutput, NormalizedFeaturesMethod, hparam, register_method


@register_method
class ZeroShot(NormalizedFeaturesMethod):
    name = "zero-shot"
    description = "no training: the nearest label name (cosine of the frozen encoder's embeddings)"
    reference = "Yin et al. 2019 (label names as the classes' texts)"

    class Hparams(Hparams):
        scale: float = hparam(20.0, "logit = scale x cosine to the label name (sets how peaked predict_proba is)", gt=0)

    trains_encoder = False
    frozen_head_stage = False

    def uses_label_names(self) -> bool:
        return True

    def prepare(self, model, train_dataset) -> None:
        super().prepare(model, train_dataset)
        if self.label_inputs is None:
            raise ConfigError(f"zero-shot needs label names that describe the classes: {self.anchor_note}")
        with eval_mode(model), torch.no_grad():
            anchors = self.label_features(model)
            model.head.linear.weight.copy_(self.hp.scale * anchors.to(model.head.linear.weight.dtype))
            model.head.linear.bias.zero_()

    def training_loss(self, model, inputs, labels) -> LossOutput:
        raise ConfigError("zero-shot does not train")
