r"""``ce-scl``: cross-entropy plus supervised contrastive learning (Gunel et al., ICLR 2021).

.. math:: \mathcal{L} = (1 - \lambda)\, \mathcal{L}_{CE} + \lambda\, \mathcal{L}_{SCL}    \quad\text{(Eq. 1)}

``L_SCL`` is :func:`contrastfit.losses.supcon` (Eq. 3) on the L2-normalised pooled ([CLS])
embedding of the same single forward pass that feeds the classifier; positives are the other
in-batch examples of the same class. Defaults: ``lambda = 0.9``, ``temperature = 0.3``, the values
in the paper's grid (lambda in {0.1, 0.3, 0.5, 0.7, 0.9, 1.0}, tau in {0.1, 0.3, 0.5, 0.7}) that
its few-shot runs favoured; tune them on validation data for your task.

Under DDP the SupCon term is over the **global** batch (:func:`contrastfit.distributed.gather`:
every process's pooled embeddings with their gradients, and their labels); the cross-entropy is per
process and averaged by DDP. With ``--memory-size M`` (:mod:`contrastfit.memory`) the last ``M``
pooled embeddings of earlier (global) batches join SupCon as extra candidates once the memory is
full; each batch is enqueued after it is contrasted.

For label sets (``--multi-label``): SupCon is replaced by **Jaccard-weighted SupCon**
(:func:`contrastfit.losses.jaccard_supcon`), :math:`(1-\lambda)\,\mathrm{BCE} + \lambda\,\mathcal{L}_{JSupCon}`
on the pooled embedding of the same forward pass (:class:`MultiLabelSupCon`); ``ce-scl-lr``'s form
(:class:`MultiLabelSupConLogistic`) then fits one logistic regression per label. Its label names are off
by default there (``--param label_anchors=true --param label_prior=1`` turns them on): with
``label_anchors`` each label's name joins every batch's Jaccard-SupCon term as one more row whose label
set is that label alone, a positive of every text carrying the label with weight :math:`1/|S_i|`; with
``label_prior`` it joins the label's one-vs-rest regression as one positive example weighing
``label_prior`` times the label's positive texts together (never a negative of the other labels: labels
co-occur).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from ..errors import ConfigError
from ..distributed import gather
from ..losses import jaccard_supcon, supcon
from .base import (Hparams, LabelSetsLoss, LogisticHead, LossOutput, Method, NormalizedFeaturesMethod, hparam,
                   register_label_sets, register_method)


@register_method
class CrossEntropySupCon(Method):
    name = "ce-scl"
    description = "(1 - lambda) CE + lambda SupCon on the pooled embedding"
    reference = "Gunel et al. 2021, Eq. 1-3"
    contrastive = True
    cross_batch_memory = True

    class Hparams(Hparams):
        lambda_: float = hparam(0.9, "weight of the SupCon term: (1 - lambda) CE + lambda SupCon", ge=0, le=1,
                                alias="lambda", flag="LAMBDA")
        temperature: float = hparam(0.3, "SupCon temperature", gt=0, flag="T")

    def __init__(self, num_labels, hidden_size, task="classification", **hparams):
        super().__init__(num_labels, hidden_size, task, **hparams)
        if task == "regression":
            raise ConfigError(f"{self.name} needs class labels; use 'ce' for a regression target")

    def contrastive_weight(self) -> float:
        """lambda, the weight of the SupCon term (presets with another parametrisation override this)."""
        return float(self.hp.lambda_)

    def training_loss(self, model, inputs, labels) -> LossOutput:
        pooled = model.encoder(**inputs).pooled
        logits = model.head(pooled)
        ce = self.task_loss(logits, labels)
        batch = gather(pooled, labels)  # the global batch under DDP (contrastfit.distributed)
        rows, row_labels = batch.embeddings, batch.labels
        anchors = self.anchor_rows(model)
        if anchors is not None:  # one more row per class, labelled 0..C-1
            rows = torch.cat([rows, anchors.to(rows.dtype)])
            row_labels = torch.cat([row_labels, torch.arange(len(anchors), device=row_labels.device)])
        memory = self.memory  # the cross-batch memory (--memory-size): candidates once full, then enqueue
        scl = supcon(rows, row_labels, self.hp.temperature, **(memory.candidates() if memory is not None else {}))
        if memory is not None:
            memory.enqueue(batch.embeddings, batch.labels)  # the texts only
        lam = self.contrastive_weight()
        return LossOutput(loss=(1 - lam) * ce + lam * scl, logits=logits, parts={"ce": ce, "scl": scl})

    def anchor_rows(self, model) -> torch.Tensor | None:
        """Rows besides the batch's that join the SupCon term, one per class in label order (``ce-scl-lr``'s
        label names); None here. They are not gathered across processes: each process adds the same rows."""
        return None


@register_method
class SupConLogistic(NormalizedFeaturesMethod, CrossEntropySupCon):
    """``ce-scl-lr``, the default recipe: ``ce-scl`` fine-tuning (Gunel et al.'s loss, its defaults),
    then the classifier is refitted as a logistic regression on the fine-tuned, frozen encoder's
    normalised embeddings (SetFit's second stage, Tunstall et al. 2022).

    Why the head is refitted: with lambda = 0.9 the CE term gets a tenth of the gradient, and in a
    few-shot budget the linear head trained with it learns little, while the encoder it shaped is
    fine. Refitting the head costs one encoding of the training set and a scikit-learn fit.

    Label names (where they are words and the texts single, :func:`~contrastfit.methods.base.label_anchor_problem`):
    each class's name joins every batch's SupCon term as one more example of the class
    (``label_anchors``), and the refitted head's data as one example weighing as much as the class's
    examples together (``label_prior = 1``); ``label_anchors=false, label_prior=0`` is the recipe
    without them.

    Schedule (``training_defaults``): at least 30 steps (3 epochs on larger sets) at a learning rate of
    1e-4, half of ``ce-scl``'s 60 steps at twice its 5e-5. The multi-label form keeps 60 steps at 5e-5.

    Weight interpolation (WiSE-FT, Wortsman et al. 2022, Eq. 1; ``--wise-ft``, default 0.5 here): the
    fine-tuned encoder's weights are averaged with the pretrained ones before the head is refitted;
    ``--wise-ft 1`` keeps the fine-tuned weights. The multi-label form does not interpolate.

    The evidence for each part, and where the recipe does not carry over: docs/concepts/default-recipe.md.
    """

    name = "ce-scl-lr"
    training_defaults = {"learning_rate": 1e-4, "min_steps": 30, "wise_ft": 0.5}
    description = "ce-scl fine-tuning, then a logistic-regression head on the frozen encoder (the default)"
    reference = "Gunel et al. 2021, Eq. 1-3; head as Tunstall et al. 2022"

    class Hparams(LogisticHead, CrossEntropySupCon.Hparams):
        label_prior: float = hparam(1.0, LogisticHead.model_fields["label_prior"].description, ge=0)
        label_anchors: bool = hparam(True, "the label names (as text, encoded by the encoder being trained) join every "
                                     "batch's SupCon term as one example of their class each")

    def anchor_rows(self, model):
        """The label names' pooled embeddings (with the encoder's dropout: they train with it), when
        ``label_anchors`` is on and the names are usable; None otherwise."""
        if self.label_inputs is None or not self.hp.label_anchors:
            return None
        return model.encoder(**{k: v.to(model.device) for k, v in self.label_inputs.items()}).pooled


@register_label_sets("ce-scl")
class MultiLabelSupCon(LabelSetsLoss, CrossEntropySupCon):
    description = "(1 - lambda) BCE + lambda Jaccard-weighted SupCon (multi-label ce-scl)"

    def training_loss(self, model, inputs, labels) -> LossOutput:
        pooled = model.encoder(**inputs).pooled
        logits = model.head(pooled)
        bce = self.task_loss(logits, labels)
        batch = gather(pooled, labels)  # the global batch under DDP
        rows, sets = batch.embeddings, batch.labels
        anchors = self.anchor_rows(model)
        if anchors is not None:  # one more row per label, whose set is that label alone
            rows = torch.cat([rows, anchors.to(rows.dtype)])
            sets = torch.cat([sets, torch.eye(len(anchors), dtype=sets.dtype, device=sets.device)])
        scl = jaccard_supcon(rows, sets, self.hp.temperature)
        lam = self.contrastive_weight()
        return LossOutput(loss=(1 - lam) * bce + lam * scl, logits=logits, parts={"bce": bce, "scl": scl})


@register_label_sets("ce-scl-lr")
class MultiLabelSupConLogistic(LabelSetsLoss, SupConLogistic):
    description = "multi-label ce-scl fine-tuning, then one-vs-rest logistic regressions (the default)"
    # the global schedule (60 steps at 5e-5), which bench/multilabel.py measured: the single-label
    # recipe's shorter one was chosen on single-label sets only
    training_defaults: ClassVar[dict[str, Any]] = {}
    training_loss = MultiLabelSupCon.training_loss
