r"""``simcse-sup``: supervised SimCSE (Gao et al. 2021), as in Behrman & Christoglou (CS224N report,
Eq. 2, Sec. 3.4 and 4.1), then the report's task head on the frozen encoder
(:mod:`contrastfit.methods.simcse_base`).

The report trains on NLI triples (anchor, entailment, contradiction). Here the triples are built
**in-batch from class labels** (:func:`supervised_triples`), with the class-balanced sampler
(``contrastive = True``) so that classes come with partners:

* the rows of each class, in batch order (the sampler shuffles every batch), are paired
  consecutively: the first of a pair is an **anchor**, the second its **positive**; an odd class
  leaves one row unpaired;
* each anchor's **hard negative** is a non-anchor row of another class, chosen by deterministic
  rotation (the k-th anchor takes the ``k mod m``-th of its ``m`` candidates, in batch order), so
  the loss is reproducible without any random state; an anchor with no other-class candidate has
  none (``hard_negative_mask``);
* anchors, positives and negatives come from one forward pass, and **anchors are never positives
  or hard negatives**. This is why only about half the batch are anchors (as an NLI batch of N
  triples holds 3N sentences and N anchors): every column of Eq. 2's denominator is scored against
  every anchor, so an anchor that were also some other row's positive would meet itself (cosine 1,
  a logit of 1/tau = 20 at tau = 0.05) among its own negatives;
* as in Eq. 2, every other triple's positive and hard negative is an in-batch negative of an
  anchor, **also when it has the anchor's class** (with few classes, many are): Eq. 2 has no
  notion of class beyond the triple (unlike SupCon, ``supcl-seq``);
* ``augmented`` (the report's "augmented" dataset, Sec. 4.1, which adds MultiNLI contradiction
  pairs without an entailment and gives them a dropout view of themselves as the positive): the
  unpaired rows become anchors too, and their positive is a **second forward pass of themselves**
  (dropout). Default ``False``: the report's best model, and the one its conclusion recommends, is
  trained on the authors' dataset, not the augmented one (Sec. 5.4.2-5.4.3, Sec. 7).
* A batch with no anchor at all (a batch of one; all classes singletons without ``augmented``)
  contributes 0 with the graph intact (pitfall 1).
* Multi-process (DDP): the triples are built over the **global** batch. Every process's pooled
  embeddings are gathered with their gradients and the labels with them
  (:func:`contrastfit.distributed.gather`, rank order), :func:`supervised_triples` runs on the
  global labels (the same triples on every process) and anchors, positives and hard negatives are
  rows of the global batch, named by their **global** index, so the rule "no anchor is anyone's
  positive or hard negative" holds across processes and no anchor meets itself in any denominator.
  With ``augmented``, each process re-encodes the unpaired anchors among its own rows and those
  views are gathered too. Every process then computes the global loss (the scaling convention of
  :mod:`contrastfit.distributed`), so a 2-process step equals a 1-process step on the concatenated
  batch (tested). Pairing across processes means the triples of a global batch are those of one
  process holding it.

``hard_negative_weight`` is SimCSE's additive log-weight of a row's own hard negative (0 = Eq. 2
exactly; the report does not use it). Regression targets are refused (Eq. 2 needs classes). For
sentence-pair data the anchors/positives are the jointly encoded pairs (the pair's label is the
class); the report's NLI premise/hypothesis triples are not built from pair columns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

import torch
from pydantic import AfterValidator

from ..distributed import gather
from ..errors import ConfigError
from ..losses.simcse import simcse_sup
from .base import LossOutput, hparam, register_method
from .simcse_base import SentenceEmbeddingMethod


def _finite_or_minus_inf(value: float) -> float:
    if math.isnan(value) or value == math.inf:
        raise ValueError("must be a finite number or -inf")
    return value


@dataclass
class Triples:
    """Row indices into the batch, one entry per anchor (all (k,) long; ``negative_mask`` bool)."""

    anchors: torch.Tensor
    positives: torch.Tensor  # == anchors where ``self_positive`` (a dropout view of the anchor itself)
    negatives: torch.Tensor  # == positives where ``negative_mask`` is False (ignored by the loss)
    negative_mask: torch.Tensor
    self_positive: torch.Tensor


def supervised_triples(labels: torch.Tensor, augmented: bool = False) -> Triples:
    """In-batch (anchor, positive, hard negative) triples from class labels (see the module docstring).

    Rows of a class are paired consecutively in batch order (anchor, positive); with ``augmented`` the
    unpaired row of an odd class is an anchor with itself (a second dropout pass) as positive. Hard
    negatives are non-anchor rows of another class, by rotation over the candidates in batch order.
    Anchors are listed in batch order; no anchor is any anchor's positive or hard negative.
    """
    y = labels.detach().cpu().tolist()
    anchors, positives, self_pos = [], [], []
    unpaired = []
    rows_of: dict[Any, list[int]] = {}
    for i, c in enumerate(y):
        rows_of.setdefault(c, []).append(i)
    for rows in rows_of.values():
        for a, p in zip(rows[0::2], rows[1::2]):
            anchors.append(a)
            positives.append(p)
            self_pos.append(False)
        if len(rows) % 2:
            unpaired.append(rows[-1])
    if augmented:
        for r in unpaired:
            anchors.append(r)
            positives.append(r)
            self_pos.append(True)
    order = sorted(range(len(anchors)), key=lambda k: anchors[k])
    anchors = [anchors[k] for k in order]
    positives = [positives[k] for k in order]
    self_pos = [self_pos[k] for k in order]
    anchor_set = set(anchors)
    pool = [i for i in range(len(y)) if i not in anchor_set]  # candidates for hard negatives
    negatives, has_neg = [], []
    for k, (a, p) in enumerate(zip(anchors, positives)):
        cands = [j for j in pool if y[j] != y[a]]
        if cands:
            negatives.append(cands[k % len(cands)])
            has_neg.append(True)
        else:
            negatives.append(p)
            has_neg.append(False)
    dev = labels.device

    def t(xs, dtype=torch.long):
        return torch.tensor(xs, dtype=dtype, device=dev)

    return Triples(t(anchors), t(positives), t(negatives), t(has_neg, torch.bool), t(self_pos, torch.bool))


@register_method
class SimCSESup(SentenceEmbeddingMethod):
    name = "simcse-sup"
    description = ("supervised SimCSE on in-batch (anchor, same-class positive, other-class hard negative) triples, "
                   "then the report's task head")
    reference = "Behrman & Christoglou (CS224N), Eq. 2, Sec. 4.1; Gao et al. 2021"
    contrastive = True

    class Hparams(SentenceEmbeddingMethod.Hparams):
        hard_negative_weight: Annotated[float, AfterValidator(_finite_or_minus_inf)] = hparam(
            0.0, "log-weight added to each anchor's own hard negative (-inf: the hard negatives drop out)",
            allow_inf_nan=True, flag="W")
        augmented: bool = hparam(False, "pair each unpaired anchor with a second dropout pass of itself "
                                 "(the report's augmented data set)")

    def __init__(self, num_labels, hidden_size, task="classification", **hparams):
        super().__init__(num_labels, hidden_size, task, **hparams)
        if task == "regression":
            raise ConfigError(f"{self.name} needs class labels (Eq. 2 pairs examples by class); "
                              "use simcse-unsup or diffcse for a regression target")

    def training_loss(self, model, inputs, labels) -> LossOutput:
        z = model.encoder(**inputs).pooled
        batch = gather(z, labels)  # the global batch under DDP (rank order); the batch itself otherwise
        zg = batch.embeddings
        tr = supervised_triples(batch.labels, self.hp.augmented)  # global row indices
        if tr.anchors.numel() == 0:  # nobody has a positive: 0, graph intact (pitfall 1)
            loss = zg.sum() * 0.0
            return LossOutput(loss=loss, parts={"simcse_sup": loss})
        positives = zg[tr.positives]
        if bool(tr.self_positive.any()):  # augmented: a second dropout pass of the unpaired anchors
            rows = tr.anchors[tr.self_positive]  # ascending global indices
            mine = rows[batch.local[rows]] - batch.offset  # those among this process's rows
            # every process takes part in the gather (and its backward), also with none of its own
            views = model.encoder(**{k: v[mine] for k, v in inputs.items()}).pooled if mine.numel() else z[:0]
            views = gather(views, labels[mine]).embeddings  # rank order = ascending global index
            slots = torch.nonzero(tr.self_positive, as_tuple=True)[0]
            positives = positives.index_copy(0, slots, views.to(positives.dtype))
        loss = simcse_sup(zg[tr.anchors], positives, zg[tr.negatives], self.hp.temperature,
                          self.hp.hard_negative_weight, tr.negative_mask)
        return LossOutput(loss=loss, parts={"simcse_sup": loss})


__all__ = ["SimCSESup", "Triples", "supervised_triples"]
