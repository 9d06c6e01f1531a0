r"""What the SimCSE family (``simcse-unsup``, ``simcse-sup``, ``diffcse``; one file each) shares: the
two-stage recipe with the task heads of Behrman & Christoglou (*Evaluating Contrastive Learning
Strategies for Enhanced Performance in Downstream Tasks*, CS224N report), and pair-aware sentence
inputs.

All three are two-stage methods (``frozen_head_stage``): stage 1 trains the encoder with the sentence-
embedding objective of the method's file on the Trainer; stage 2 freezes the encoder and trains the
report's task head (Sec. 4.2) on cached features (:func:`contrastfit.head_stage.train_head`; the report's
"Frozen Weights for Downstream Training", Sec. 5.2.1). The pure losses live in
:mod:`contrastfit.losses.simcse` and :mod:`contrastfit.losses.diffcse`; the methods only decide what
they are applied to.

Task heads (report Sec. 4.2; :class:`~contrastfit.heads.SimCSETaskHead`, dropout 0.1 from its classifier table)
    * one sentence, classification (sentiment): MLP ``hidden -> hidden/2 -> classes`` with ReLU and
      dropout (the report's [768, 384], [384, ·]; ``classes`` outputs with cross-entropy);
    * sentence pair, classification (paraphrase): :class:`~contrastfit.heads.PairConcatHead`, the two
      sentence embeddings concatenated, ``[u; v]`` -> MLP ``2 hidden -> hidden -> classes`` with ReLU and
      dropout (the report's [1536, 768], [768, ·]; no ``|u - v|``, as the report writes it);
    * sentence pair, regression (STS): :class:`~contrastfit.heads.CosineRegressionHead`, ``cos(u, v)`` ->
      Linear(1, 10) -> ReLU -> Linear(10, 1), trained with MSE;
    * one sentence, regression: the single-sentence MLP with one output.

    ``u`` and ``v`` are the two sentences of a pair **encoded separately**. The data pipeline tokenises a
    pair jointly (``[CLS] a [SEP] b [SEP]``); :func:`contrastfit.data.pairs.split_pair` cuts it back into
    ``[CLS] a [SEP]`` and ``[CLS] b [SEP]`` using ``token_type_ids`` (the same ids as tokenising each
    sentence alone, up to joint truncation). A tokenizer that returns no ``token_type_ids``
    (RoBERTa-style) gives the joint encoding and the single-sentence MLP. In stage 1, ``simcse-unsup``
    and ``diffcse`` train on the two sentences of every pair as separate sentences (2N of them,
    :func:`sentence_inputs`), matching what the pair heads read. The head picks its branch from the
    feature width (hidden: one sentence, 2 x hidden: a pair).

Randomness: dropout, masking and sampling use the global torch RNG (seeded by the Trainer).

The report's round-robin multi-task training over several data sets (Sec. 5.3.5) is
:mod:`contrastfit.multitask` (one encoder, a head per task; start it from a stage-1 encoder saved by
``contrastfit pretrain``). Not implemented in these methods: the report's fine-tuning of the encoder
together with the heads at 1e-6 (the heads here train on the frozen encoder). Stage-1 optimisation values of the report (Sec. 5.3; learning rate 1e-5 for SimCSE and 1e-6
for DiffCSE, weight decay 0.1, batch 64 / 32 / 64, maximum length 64 / 100 / 64) are Trainer settings
(``--learning-rate`` etc.), not method hyper-parameters. Stage-2 values are the project's shared
:class:`~contrastfit.methods.base.HeadStage` (the report's heads used learning rate 1e-3 and
batch 8 / 8 / 32 for STS / SST / paraphrase).
"""

from __future__ import annotations

import torch
from torch import nn

from ..data.pairs import concat_inputs, is_pair, split_pair
from ..heads import SimCSETaskHead
from .base import HeadStage, Method, hparam

TEMPERATURE = 0.05  # report, Sec. 5.3.3 ("tau ... remained consistent across runs at 0.05")


def _pad_id(model) -> int:
    pad = getattr(getattr(model, "tokenizer", None), "pad_token_id", None)
    return int(pad) if pad is not None else 0


def sentence_inputs(model, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch as single sentences: for pairs, the 2N separately encoded sentences (all first
    sentences, then all second sentences); otherwise the batch itself."""
    if is_pair(inputs):
        return concat_inputs(*split_pair(inputs, _pad_id(model)))
    return inputs


def sentence_features(model, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Pooled embedding (N, hidden) of single sentences, or ``[u; v]`` (N, 2 hidden) of pairs, with ``u``
    and ``v`` the two sentences encoded separately (one encoder call)."""
    if is_pair(inputs):
        n = inputs["input_ids"].shape[0]
        z = model.encoder(**sentence_inputs(model, inputs)).pooled
        return torch.cat([z[:n], z[n:]], dim=1)
    return model.encoder(**inputs).pooled


class SentenceEmbeddingMethod(Method):
    """The SimCSE family's base: a temperature, the report's heads on (pair-aware) sentence features,
    head trained in stage 2 on the frozen encoder."""

    frozen_head_stage = True

    class Hparams(HeadStage):
        temperature: float = hparam(TEMPERATURE, "InfoNCE temperature", gt=0, flag="T")

    def build_head(self) -> nn.Module:
        return SimCSETaskHead(self.hidden_size, self.num_outputs, self.task)

    def head_features(self, model, inputs):
        return sentence_features(model, inputs)


__all__ = ["SentenceEmbeddingMethod", "TEMPERATURE", "sentence_features", "sentence_inputs"]
