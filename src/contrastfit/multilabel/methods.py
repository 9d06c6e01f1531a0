r"""The multi-label forms of four methods. Each is the single-label method of the same name (same
hyper-parameters, defaults and schedule) with

* the head's task loss replaced by **BCE with logits**, averaged over texts and labels
  (``F.binary_cross_entropy_with_logits``): each label is an independent yes/no, read at inference as
  ``sigmoid(logit)`` against the label's threshold;
* for ``ce-scl`` and ``ce-scl-lr``, SupCon replaced by **Jaccard-weighted SupCon**
  (:func:`contrastfit.losses.jaccard_supcon`): :math:`(1-\lambda)\,\mathrm{BCE} + \lambda\,
  \mathcal{L}_{JSupCon}` on the pooled embedding of the same forward pass;
* for the logistic heads (``ce-scl-lr``, ``linear-probe``), one-vs-rest: one L2 logistic regression
  per label (``head_C``) on the frozen encoder's normalised embeddings, copied into the linear head's
  row for that label (:func:`fit_ovr_logistic`), as SetFit's ``multi_target_strategy="one-vs-rest"``.

They are not in the method registry (``contrastfit methods`` lists single-label methods, and every
registered method is trained on single-label data by the tests): ``--multi-label --method NAME``
picks NAME's multi-label form from :data:`MULTILABEL_METHODS`, and a saved model's folder records
``"multi_label": true`` next to the method's name. Cross-batch memory (``--memory-size``) is not
supported for multi-label training (its queue holds one label per row).

Label names (``ce-scl-lr``; off by default in the multi-label form, ``--param label_anchors=true
--param label_prior=1`` turns them on; the names are guarded as in the single-label recipe: codes and
text pairs are not used): with ``label_anchors`` each label's name (or ``--label-descriptions`` text)
joins every batch's Jaccard-SupCon term as one more row whose label set is that label alone, so it is a
positive of every text carrying the label with weight :math:`|\{c\} \cap S_i| / |\{c\} \cup S_i| = 1/|S_i|`;
with ``label_prior`` the name joins label ``c``'s one-vs-rest regression as one positive example weighing
``label_prior`` times the label's positive texts together (it is not a negative of the other labels:
labels co-occur).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from ..distributed import gather
from ..errors import ConfigError
from ..losses import jaccard_supcon
from ..methods import get_method
from ..methods.base import LossOutput, Method
from ..methods.ce import CrossEntropy
from ..methods.ce_scl import CrossEntropySupCon, SupConLogistic
from ..methods.linear_probe import LinearProbe

DEFAULT_MULTILABEL_METHOD = "ce-scl-lr"


class MultiLabelMixin:
    """BCE-with-logits as the task loss; labels are (batch, labels) multi-hot floats."""

    multi_label = True
    cross_batch_memory = False

    def task_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


class MultiLabelCrossEntropy(MultiLabelMixin, CrossEntropy):
    description = "BCE fine-tuning of a sigmoid head (multi-label ce)"


class MultiLabelSupCon(MultiLabelMixin, CrossEntropySupCon):
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


class MultiLabelSupConLogistic(MultiLabelMixin, SupConLogistic):
    description = "multi-label ce-scl fine-tuning, then one-vs-rest logistic regressions (the default)"
    # the global schedule (60 steps at 5e-5), which bench/multilabel.py measured: the single-label
    # recipe's shorter one was chosen on single-label sets only
    training_defaults: ClassVar[dict[str, Any]] = {}
    training_loss = MultiLabelSupCon.training_loss


class MultiLabelLinearProbe(MultiLabelMixin, LinearProbe):
    description = "frozen encoder, one-vs-rest logistic regressions on its normalised embeddings"


#: single-label method name -> its multi-label form
MULTILABEL_METHODS: dict[str, type[Method]] = {
    "ce": MultiLabelCrossEntropy,
    "ce-scl": MultiLabelSupCon,
    "ce-scl-lr": MultiLabelSupConLogistic,
    "linear-probe": MultiLabelLinearProbe,
}


def check_multilabel_method(name: str | None) -> str:
    name = name or DEFAULT_MULTILABEL_METHOD
    if name not in MULTILABEL_METHODS:
        raise ConfigError(f"method '{name}' has no multi-label form; with --multi-label use one of "
                          f"{', '.join(MULTILABEL_METHODS)} (default {DEFAULT_MULTILABEL_METHOD})")
    return name


def label_name_hparams(name: str) -> dict[str, Any]:
    """The hyper-parameters of method ``name`` that use the label names, at the value that turns them
    off: the multi-label forms' defaults (turned on only when given)."""
    defaults = get_method(name).defaults
    return {k: v for k, v in (("label_prior", 0.0), ("label_anchors", False)) if k in defaults}


def create_multilabel_method(name: str, num_labels: int, hidden_size: int, **hparams: Any) -> Method:
    """The multi-label form of method ``name``: the single-label method's defaults with the label names
    off (:func:`label_name_hparams`), under ``hparams``."""
    name = check_multilabel_method(name)
    spec = get_method(name)
    given = {k: v for k, v in hparams.items() if v is not None}
    merged = {**spec.defaults, **label_name_hparams(name), **given}
    cls = MULTILABEL_METHODS[name]
    method = cls(num_labels, hidden_size, "classification", **merged)
    method.registered_name = name
    return method


@torch.no_grad()
def fit_ovr_logistic(head: torch.nn.Module, features: torch.Tensor, label_sets: torch.Tensor, C: float = 1.0,
                     seed: int = 0, anchors: torch.Tensor | None = None, prior: float = 0.0) -> None:
    """One-vs-rest: for each label, scikit-learn's ``LogisticRegression`` (L2, ``C``, lbfgs) on
    ``features`` against that label's 0/1 column, copied into row ``j`` of the linear head. A label
    that is on (off) for every training row gets weight 0 and bias +10 (-10). With ``anchors`` (one
    row per label: the label names' features) and ``prior`` > 0, row ``j`` joins label ``j``'s
    regression as a positive weighing ``prior`` times the label's positive rows together (at least one)."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    linear = head.linear
    x = features.detach().float().cpu().numpy()
    y = (label_sets.detach().float().cpu().numpy() > 0.5).astype(int)
    names = anchors.detach().float().cpu().numpy() if anchors is not None and prior > 0 else None
    weight = torch.zeros_like(linear.weight)
    bias = torch.zeros_like(linear.bias)
    for j in range(y.shape[1]):
        xj, yj, wj = x, y[:, j], None
        if names is not None:
            xj, yj = np.vstack([x, names[j:j + 1]]), np.append(yj, 1)
            wj = np.append(np.ones(len(x)), prior * max(int(y[:, j].sum()), 1))
        if yj.min() == yj.max():
            bias[j] = 10.0 if yj[0] else -10.0
            continue
        clf = LogisticRegression(C=C, max_iter=1000, random_state=seed).fit(xj, yj, sample_weight=wj)
        weight[j] = torch.as_tensor(clf.coef_[0], dtype=weight.dtype)
        bias[j] = float(clf.intercept_[0])
    linear.weight.copy_(weight)
    linear.bias.copy_(bias)
