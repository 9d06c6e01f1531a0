"""``distill-cosine``: SetFit's distillation (Tunstall et al. 2022; the SetFit library's
``DistillationTrainer``), on unlabelled texts.

Stage 1 fine-tunes the student's encoder so that its cosine similarity of every pair of texts in a
batch matches the teacher's (:func:`contrastfit.losses.similarity_distillation`, the squared error;
the teacher's L2-normalised sentence embeddings of each text are computed once before training:
:mod:`contrastfit.methods.distill_base`). Stage 2 freezes it and fits the logistic regression of
``setfit`` and the default recipe on its normalised embeddings, against the **teacher's** labels of
the texts. Only similarities pass from teacher to student, each in its own space, so the widths may
differ (768 to 384) without a projection.

Defaults: SetFit's body learning rate 2e-5; the generic schedule (3 epochs, at least 60 steps), not
SetFit's pair count, which grows with the square of the number of texts. Batches are the
class-balanced sampler's over the teacher's labels (the data's class mix), so a batch's pairs are a
sample of all pairs, as SetFit's random pairs are. It trains only with a teacher
(:func:`contrastfit.distillation.distill`).
"""

from __future__ import annotations

from ..losses import similarity_distillation
from .base import LogisticHead, LossOutput, NormalizedFeaturesMethod, register_method
from .distill_base import TeacherTargetsMixin


@register_method
class DistillCosine(TeacherTargetsMixin, NormalizedFeaturesMethod):
    name = "distill-cosine"
    description = ("distillation: the student's cosine similarities of pairs fitted to a teacher's, then logistic "
                   "regression on the teacher's labels (SetFit's; contrastfit distill)")
    reference = "Tunstall et al. 2022 (SetFit's DistillationTrainer)"
    Hparams = LogisticHead
    in_batch_negatives = True  # its pairs are the rows of a batch: a batch of one has none
    training_defaults = {"learning_rate": 2e-5}
    teacher_outputs = ("embeddings",)

    def training_loss(self, model, inputs, labels) -> LossOutput:
        pooled = model.encoder(**inputs).pooled
        loss = similarity_distillation(pooled, self.teacher("embeddings", inputs, pooled))
        return LossOutput(loss=loss, parts={"similarity": loss})
