"""``distill-kl``: a student fitted to a teacher's soft probabilities (Hinton, Vinyals & Dean 2015,
*Distilling the Knowledge in a Neural Network*, Sec. 2), on unlabelled texts.

One stage, as ``ce``: a linear head on the student's pooled embedding, trained with the encoder on
:func:`contrastfit.losses.soft_target_kl`, ``T^2 KL(softmax(v / T) || softmax(z / T))`` between the
teacher's logits ``v`` of each text (computed once before training, divided by the teacher's
calibration temperature: :mod:`contrastfit.methods.distill_base`) and the student's ``z``. The
student's labels are the teacher's (every class, also one the teacher never ranks first on these
texts). Only logits pass from teacher to student, so the two encoders may differ in anything:
width, depth, tokenizer.

``contrastfit distill --method distill-kl`` starts the head as a logistic regression on the teacher's labels (``head_init
probe``, LP-FT: Kumar et al. 2022) and, as for every one-stage method, keeps the step that agrees
best with the teacher on the held-out tenth of the texts (``--validation-split``). It trains only
with a teacher (:func:`contrastfit.distillation.distill`).
"""

from __future__ import annotations

from ..losses import soft_target_kl
from .base import Hparams, LossOutput, Method, hparam, register_method
from .distill_base import TeacherTargetsMixin


class DistillKLHparams(Hparams):
    temperature: float = hparam(1.0, "T: both distributions are softmax(logits / T), the loss is multiplied by T^2 "
                                "(Hinton et al. 2015)", gt=0)


@register_method
class DistillKL(TeacherTargetsMixin, Method):
    name = "distill-kl"
    description = "distillation: the student's probabilities fitted to a teacher's on unlabelled texts (KL; contrastfit distill)"
    reference = "Hinton et al. 2015, Sec. 2"
    Hparams = DistillKLHparams
    teacher_outputs = ("logits",)

    def training_loss(self, model, inputs, labels) -> LossOutput:
        logits = model.head(model.encoder(**inputs).pooled)
        loss = soft_target_kl(logits, self.teacher("logits", inputs, logits), self.hp.temperature)
        return LossOutput(loss=loss, logits=logits, parts={"kl": loss})
