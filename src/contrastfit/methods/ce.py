"""``ce``: standard fine-tuning with cross-entropy (Devlin et al., 2019; the baseline of every paper
here). A linear head on the pooled embedding; MSE instead of CE for a regression target; for label sets
(``--multi-label``), BCE with logits on a sigmoid head (:class:`MultiLabelCrossEntropy`)."""

from __future__ import annotations

from .base import LabelSetsLoss, LossOutput, Method, register_label_sets, register_method


@register_method
class CrossEntropy(Method):
    name = "ce"
    description = "cross-entropy fine-tuning (the standard baseline)"
    reference = "Devlin et al. 2019; Gunel et al. 2021, Eq. 2"

    def training_loss(self, model, inputs, labels) -> LossOutput:
        logits = model.head(model.encoder(**inputs).pooled)
        loss = self.task_loss(logits, labels)
        return LossOutput(loss=loss, logits=logits, parts={"ce": loss})


@register_label_sets("ce")
class MultiLabelCrossEntropy(LabelSetsLoss, CrossEntropy):
    description = "BCE fine-tuning of a sigmoid head (multi-label ce)"
