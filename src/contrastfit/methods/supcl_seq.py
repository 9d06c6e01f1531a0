r"""SupCL-Seq and its two baselines (Sedghamiz et al., 2021).

``supcl-seq`` (Section 2, Eq. 2)
    Stage 1: every batch goes through the encoder ``N`` times, view ``n`` with *every* dropout of
    the encoder set to ``p_n`` (``view_dropouts``, default ``0.0,0.1,0.2``, Table 4). The pooled
    embeddings of all views are stacked and :func:`~contrastfit.losses.supcon` (temperature 0.05,
    inner product of L2-normalised embeddings, Table 4) is applied with the anchors' labels repeated
    per view: the other views of the same sentence *and* every view of every same-class sentence are
    positives. Stage 2: the encoder is frozen and a linear head is trained with CE on cached
    embeddings (:func:`contrastfit.head_stage.train_head`).

``dropout-augmented-ce`` (the paper's "Dropout Augmented" baseline, Table 2)
    CE on the same dropout views, averaged over views; encoder and head trained together in one stage.

``self-supervised-cl`` (Eq. 1, Gao et al.'s SimCSE objective with the same views)
    Stage 1 as ``supcl-seq`` but labels ignored: the only positives of a view are the other views of
    the same sentence. Stage 2: the same frozen-encoder linear head.

Regression targets (STS-B) are binned by rounding to one decimal for the contrastive stage
(footnote 3; ``regression_bin`` = 0.1 in target units) and the head is trained with MSE.
Dropout is switched with :func:`contrastfit.encoders.set_dropout`, which works for any encoder and
restores the exact previous values (pitfall 6).

Under DDP the views are gathered into the global batch (:func:`contrastfit.distributed.gather_views`;
``self-supervised-cl``'s instance ids are then global row indices). ``supcl-seq`` takes a
cross-batch memory (``--memory-size``, :mod:`contrastfit.memory`): every view of every sentence of
earlier (global) batches, with its label, is an extra candidate once the memory is full.
``self-supervised-cl`` does not (its positives are views of the same sentence, which the memory of
other batches never holds).
"""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import BeforeValidator, Field

from ..encoders import set_dropout
from ..errors import ConfigError
from ..distributed import gather_views
from ..losses import supcon
from .base import HeadStage, Hparams, LossOutput, Method, comma_separated, hparam, register_method

VIEW_DROPOUTS = (0.0, 0.1, 0.2)  # Table 4 (CoLA, RTE, SST-2, WNLI)
#: the dropout probability of each view: one or more probabilities in [0, 1)
Dropouts = Annotated[tuple[Annotated[float, Field(ge=0, lt=1)], ...], BeforeValidator(comma_separated)]


class _Views(Hparams):
    view_dropouts: Dropouts = hparam(VIEW_DROPOUTS, "dropout probability of each view, e.g. 0.0,0.1,0.2", min_length=1, flag="P,P,...")


class _ContrastiveViews(_Views):
    temperature: float = hparam(0.05, "SupCon temperature", gt=0, flag="T")


def dropout_views(model, inputs: dict[str, torch.Tensor], probabilities) -> list[torch.Tensor]:
    """Pooled embeddings of one forward pass per dropout probability, each with its own graph."""
    return [_pooled_with_dropout(model, inputs, p) for p in probabilities]


def _pooled_with_dropout(model, inputs, p: float) -> torch.Tensor:
    with set_dropout(model.encoder, p):
        return model.encoder(**inputs).pooled


def contrastive_labels(method: Method, labels: torch.Tensor) -> torch.Tensor:
    """Class ids for the contrastive term: regression targets rounded to bins of ``regression_bin``."""
    if method.task == "regression":
        return torch.round(labels.float() / method.hp.regression_bin).long()
    return labels


@register_method
class SupCLSeq(Method):
    name = "supcl-seq"
    description = "SupCon over N dropout views, then a linear head on the frozen encoder"
    reference = "Sedghamiz et al. 2021, Eq. 2, Table 4"
    contrastive = True
    frozen_head_stage = True
    cross_batch_memory = True

    class Hparams(HeadStage, _ContrastiveViews):
        regression_bin: float = hparam(0.1, "width of the bins a regression target is rounded to for the "
                                       "contrastive term (target units)", gt=0)

    def training_loss(self, model, inputs, labels) -> LossOutput:
        views = dropout_views(model, inputs, self.hp.view_dropouts)
        views, y = gather_views(views, contrastive_labels(self, labels))  # global batch under DDP
        rows, y = torch.cat(views), y.repeat(len(views))
        memory = self.memory  # the cross-batch memory (--memory-size): candidates once full, then enqueue
        loss = supcon(rows, y, self.hp.temperature, **(memory.candidates() if memory is not None else {}))
        if memory is not None:
            memory.enqueue(rows, y)
        return LossOutput(loss=loss, parts={"supcon": loss})


@register_method
class SelfSupervisedCL(Method):
    name = "self-supervised-cl"
    description = "labels ignored: views of the same sentence are the only positives; then a frozen-encoder head"
    reference = "Sedghamiz et al. 2021, Eq. 1 (Gao et al. 2021)"
    contrastive = False
    frozen_head_stage = True
    in_batch_negatives = True  # the other sentences' views

    class Hparams(HeadStage, _ContrastiveViews):
        pass

    def __init__(self, num_labels, hidden_size, task="classification", **hparams):
        super().__init__(num_labels, hidden_size, task, **hparams)
        if len(self.hp.view_dropouts) < 2:
            raise ConfigError(f"{self.name}: needs at least two view_dropouts (a view's positives are the other views)")

    def training_loss(self, model, inputs, labels) -> LossOutput:
        views = dropout_views(model, inputs, self.hp.view_dropouts)
        views, _ = gather_views(views)  # global batch under DDP: rows in rank order
        instance = torch.arange(views[0].shape[0], device=labels.device).repeat(len(views))
        loss = supcon(torch.cat(views), instance, self.hp.temperature)
        return LossOutput(loss=loss, parts={"selfcl": loss})


@register_method
class DropoutAugmentedCE(Method):
    name = "dropout-augmented-ce"
    description = "cross-entropy averaged over the same N dropout views (one stage)"
    reference = "Sedghamiz et al. 2021, Table 2 baseline"
    Hparams = _Views

    def training_loss(self, model, inputs, labels) -> LossOutput:
        views = dropout_views(model, inputs, self.hp.view_dropouts)
        logits = [model.head(v) for v in views]
        loss = torch.stack([self.task_loss(lg, labels) for lg in logits]).mean()
        return LossOutput(loss=loss, logits=logits[0], parts={"ce": loss})


__all__ = ["SupCLSeq", "SelfSupervisedCL", "DropoutAugmentedCE", "dropout_views", "contrastive_labels"]
