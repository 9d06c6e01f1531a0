r"""``simcse-unsup``: unsupervised SimCSE (Gao et al. 2021), as in Behrman & Christoglou (CS224N
report, Eq. 1, Sec. 3.3), then the report's task head on the frozen encoder
(:mod:`contrastfit.methods.simcse_base`).

The batch goes through the encoder twice in training mode; the encoder's own dropout (the report's
0.1, BERT's default) makes the two pooled embeddings ``z1``, ``z2`` differ, and
:func:`~contrastfit.losses.simcse.simcse_unsup` (temperature 0.05) treats ``z2[i]`` as the positive of
``z1[i]`` and the other rows of ``z2`` as negatives. Labels are ignored. For sentence-pair data the two
sentences of every pair are separate sentences (2N of them).
"""

from __future__ import annotations

from ..distributed import gather_views
from ..losses.simcse import simcse_unsup
from .base import LossOutput, register_method
from .simcse_base import SentenceEmbeddingMethod, sentence_inputs


@register_method
class SimCSEUnsup(SentenceEmbeddingMethod):
    name = "simcse-unsup"
    description = "unsupervised SimCSE (two dropout passes), then the report's task head on the frozen encoder"
    reference = "Behrman & Christoglou (CS224N), Eq. 1; Gao et al. 2021"
    in_batch_negatives = True

    def training_loss(self, model, inputs, labels) -> LossOutput:
        sentences = sentence_inputs(model, inputs)
        z1 = model.encoder(**sentences).pooled
        z2 = model.encoder(**sentences).pooled
        (g1, g2), _ = gather_views([z1, z2])  # in-batch negatives from the global batch under DDP
        loss = simcse_unsup(g1, g2, self.hp.temperature)
        return LossOutput(loss=loss, parts={"simcse": loss})


__all__ = ["SimCSEUnsup"]
