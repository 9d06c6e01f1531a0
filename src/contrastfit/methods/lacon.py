r"""LaCon: label anchored contrastive learning (Zhang et al., *Label Anchored Contrastive Learning for
Language Understanding*), ``lacon`` (LaCon-vanilla, Sec. 2.1-2.5) and ``lacon-fusion`` (Sec. 2.6),
and the paper's "BERT w/ g" baseline of Table 3, ``ce-projection``.

``lacon``
    ``H = g(f(X))`` (Eq. 1): the pooled sentence embedding (the paper uses [CLS]; here the run's
    pooling, ``cls`` unless the encoder says otherwise) goes through the projection head ``g``, a
    3-layer MLP with ReLU after each hidden layer, every layer ``d`` wide (Sec. 2.1). The ``C`` label
    embeddings ``L`` (Eq. 2) are a learnable ``(C, d)`` matrix, randomly initialised as the paper says
    (Sec. 2.1: "``W_emb`` is randomly initialized"; N(0, 1) here, as ``nn.Embedding``; label names
    are not used). Both live in the model head (:class:`~contrastfit.heads.LabelMatchingHead`), so
    the optimizer trains them and ``head.safetensors`` saves them (pitfall 3).
    Training loss: :func:`contrastfit.losses.lacon` on ``H`` and ``L``, Eq. 7
    ``L = L'_ICL (Eq. 4) + L_LCL (Eq. 5) + lambda L_LER (Eq. 6)``, generalised for the ablations to
    ``icl_weight * L'_ICL + lcl_weight * L_LCL + ler_weight * L_LER`` (a weight of 0 removes the
    term), with the parts logged as ``loss_icl``, ``loss_lcl``, ``loss_ler`` (all unweighted, also
    when a term is removed). No cross-entropy term (Sec. 5.1: LaCon "is purely equipped with three
    CL objectives").
    Prediction, Eq. 8: ``argmax_j cos(H_x, L_j)``. :meth:`predict_logits` returns
    ``cos(H_x, L_j) / temperature`` (:func:`contrastfit.losses.lacon_predict` divided by ``tau``): the
    argmax is Eq. 8's, and the softmax of these logits is the ICL model's own distribution over labels
    (Eq. 3's softmax, one head), so ``predict_proba`` is meaningful. Validation and test metrics use
    them; the evaluation loss is cross-entropy on them.

``lacon-fusion`` (Eq. 9)
    The same losses, head and prediction, but ``g`` reads the LEAM-style fused vector ``z`` instead of
    the pooled embedding: ``G_ij = cos(L_i, E_j)`` between the label embeddings and the encoder's
    final token embeddings ``E`` (all tokens, [CLS] and [SEP] included: Eq. 9 sums over ``E``, which
    holds [CLS]), ``m = conv_max(G)``, ``beta = softmax(m)``, ``z = sum_i beta_i E_i``. ``conv_max`` is
    LEAM's (Wang et al. 2018, Eq. 4-5, which LaCon cites and does not restate): one convolution
    filter of width ``2r + 1`` shared by the labels plus a bias per label, ReLU, then max-pooling over
    the labels (:class:`~contrastfit.heads.LabelFusion`). The softmax runs over the real tokens only
    (padding gets weight 0, and appending padding changes nothing). The label embeddings in ``G``
    are the same ``L`` as in the losses (the paper has one ``L``), so the projection width must
    equal the encoder's hidden size.

``ce-projection`` ("BERT w/ g", Table 3)
    Cross-entropy fine-tuning whose classifier reads ``g(f(x))``: the same 3-layer MLP ``g`` as
    LaCon's (ReLU after the two hidden layers, width ``d``, no dropout inside), then BERT's classifier
    (dropout 0.1 and one linear layer, as ``ce``) on its output (:class:`~contrastfit.heads.ProjectionClassifierHead`).
    No label embeddings, no contrastive term: it isolates what ``g`` alone brings (Table 3: "it is
    basically useless by adding g to BERT directly"). ``model.embed`` gives the pooled embedding, as
    for ``ce``. A regression target gets MSE on one output, as ``ce``.

Ablations (Table 3 and Table 6; ``examples/lacon_ablation.yaml``)
    "LaCon w/ L_ICL" (single-head ICL, Eq. 3): ``heads=1``. "-ICL", "-LCL", "-LER": ``icl_weight=0``,
    ``lcl_weight=0``, ``ler_weight=0``. Table 6's cumulative rows, as printed: ``L_ICL`` =
    ``heads=1, lcl_weight=0, ler_weight=0``; ``L'_ICL`` = ``lcl_weight=0, ler_weight=0``; ``L_LCL``
    = ``icl_weight=0, ler_weight=0``; ``L'_ICL + L_LCL`` = ``ler_weight=0``; ``L_ICL + L_LER`` =
    ``lcl_weight=0`` (with the multi-head ICL: its numbers are Table 3's "-LCL" row, as those of
    ``L'_ICL + L_LCL`` are "-LER"'s). "-g": ``projection_layers=0``. All three weights 0 is refused,
    and so is ``icl_weight = lcl_weight = 0``: LER reads only the label embeddings, so the encoder
    and ``g`` would get no gradient.

Hyper-parameters (defaults and where they come from)
---------------------------------------------------
* ``temperature = 0.1``: Sec. 4.4, "the recommended value is around 0.1 and 0.2".
* ``heads = 6``: Sec. 4.4, "the optimal number of heads in Equation 4 is 6". The projection width
  must be a multiple of it (384 for MiniLM-L6 and 768 for BERT-base are); otherwise pass another
  ``heads`` or a ``projection_dim`` that is (a :class:`~contrastfit.errors.ConfigError` says so).
* ``ler_weight = 0.5`` (lambda): **not given** by the paper, which sweeps 0.1..1.0 and says it "can be
  set in a wide range" (Sec. 4.4); 0.5 is the middle of the sweep.
* ``icl_weight = 1.0``, ``lcl_weight = 1.0``: Eq. 7 (the terms are unweighted); 0 is the paper's
  "-ICL" / "-LCL" ablation (Table 3).
* ``projection_dim = 0``: the width ``d`` of ``g`` and of the label embeddings; 0 means the encoder's
  hidden size, the paper's choice ("the dimension of the g is also d", Sec. 2.1).
* ``projection_layers = 3``: Sec. 2.1. 0 removes ``g`` (the "-g" ablation of Table 3).
* ``label_learning_rate = 0.0``: 0 means the main learning rate. The paper gives the label matrix no
  learning rate of its own; with N(0, 1) rows and AdamW at ~2e-5 the label directions move slowly,
  so a higher rate here is an option, not the paper's setting.
* ``fusion_radius = 2`` (``lacon-fusion`` only): ``r`` of LEAM's window ``2r + 1``. **Not given** by
  LaCon (nor LEAM's value for sentence-level tasks in the papers here); 2 (a 5-token window) is our
  choice for sentence-length inputs.

Multi-process (DDP)
    ICL and LCL are computed over the **global** batch: every process's projected embeddings ``H``
    are gathered with their gradients, with their labels (:func:`contrastfit.distributed.gather`),
    and every process computes :func:`~contrastfit.losses.lacon` on them (the scaling convention of
    :mod:`contrastfit.distributed`: no world-size factor; DDP's average gives the global loss's
    gradient). So each label anchor of LCL sees the instances and negatives of every process, and
    ICL averages over every instance. The label embeddings ``L`` are parameters *after* the gather:
    each process computes the same loss of them, so their gradient is the same on every process (and
    stays so after DDP's average); with ``lacon-fusion`` they also enter each process's own fusion
    block, whose share DDP's average adds up as for any parameter. The logits returned for logging
    are the process's own rows. A 2-process step equals a 1-process step on the concatenated batch
    (``tests/test_distributed.py``).

Training protocol notes (Sec. 3): AdamW, learning rate in {1e-5, 2e-5, 3e-5}, linear schedule with
6% warm-up, batch size 8..96, 10 epochs (20 in the few-shot runs). Those are trainer settings, not
method hyper-parameters. ``contrastive = True``: batches come from the class-balanced sampler, so LCL
has anchors with negatives. Classification only (the labels are anchors).
"""

from __future__ import annotations

import torch
from torch import nn

from ..distributed import gather
from ..errors import ConfigError
from ..heads import ProjectionClassifierHead, build_head
from ..losses import lacon
from .base import Hparams, LossOutput, Method, ParamGroup, hparam, register_method


class _Projection(Hparams):
    """The projection head g: ``ce-projection``'s hyper-parameters (LaCon's ``projection_dim`` is this one;
    its ``projection_layers`` also takes 0)."""

    projection_dim: int = hparam(0, "width d of the projection head g (0: the encoder's hidden size)", ge=0)
    projection_layers: int = hparam(3, "layers of the projection head g", ge=1)

__all__ = ["CEProjection", "LaCon", "LaConFusion"]


@register_method
class LaCon(Method):
    name = "lacon"
    description = "label anchored contrastive learning: ICL + LCL + LER, prediction by cosine to label embeddings"
    reference = "Zhang et al. (LaCon), Eq. 1-8, Sec. 4.4"
    contrastive = True
    head_kind = "label-matching"

    class Hparams(Hparams):
        temperature: float = hparam(0.1, "temperature of ICL, LCL and the prediction", gt=0, flag="T")
        heads: int = hparam(6, "heads of the multi-head LCL (Eq. 4); must divide the projection width", ge=1)
        ler_weight: float = hparam(0.5, "weight of the label embedding regulariser (0 removes the term)", ge=0)
        icl_weight: float = hparam(1.0, "weight of the instance-centred loss (0 removes the term)", ge=0)
        lcl_weight: float = hparam(1.0, "weight of the label-centred loss (0 removes the term)", ge=0)
        projection_dim: int = _Projection.model_fields["projection_dim"]
        projection_layers: int = hparam(3, "layers of the projection head g (0: none, the -g ablation)", ge=0)
        label_learning_rate: float = hparam(0.0, "learning rate of the label embeddings (0: the main one)", ge=0)

    def __init__(self, num_labels, hidden_size, task="classification", **hparams):
        super().__init__(num_labels, hidden_size, task, **hparams)
        hp = self.hparams
        if task == "regression":
            raise ConfigError(f"{self.name} needs class labels (they are the anchors); use 'ce' for a regression target")
        if hp["icl_weight"] == 0 and hp["lcl_weight"] == 0:
            what = "all three loss weights are 0" if hp["ler_weight"] == 0 else \
                "icl_weight and lcl_weight are both 0 (LER alone trains only the label embeddings)"
            raise ConfigError(f"{self.name}: {what}; keep icl_weight or lcl_weight > 0")
        dim = self.projection_dim
        if hp["projection_layers"] == 0 and dim != hidden_size:
            raise ConfigError(f"{self.name}: projection_layers=0 (no projection) needs projection_dim 0 or "
                              f"{hidden_size} (the encoder's hidden size), got {dim}")
        if dim % hp["heads"]:
            raise ConfigError(f"{self.name}: heads ({hp['heads']}) must divide the projection width {dim}; "
                              f"pass another heads or a projection_dim that is a multiple of it")

    @property
    def projection_dim(self) -> int:
        """The width ``d`` of the projection head and the label embeddings."""
        return int(self.hp.projection_dim) or self.hidden_size

    @property
    def fusion_radius(self) -> int | None:
        return None

    def embedding(self, model, inputs):
        """``H = g(features)``, the space of the label embeddings (Eq. 1)."""
        return model.head.project(self.head_features(model, inputs))

    def anchors(self, model):
        return model.head.label_embeddings

    def build_head(self):
        return build_head(self.head_kind, self.hidden_size, self.num_labels, dim=self.projection_dim,
                          depth=int(self.hp.projection_layers), temperature=float(self.hp.temperature),
                          fusion_radius=self.fusion_radius)

    def param_groups(self, model) -> list[ParamGroup]:
        rate = float(self.hp.label_learning_rate)
        return [ParamGroup("label_embeddings", [model.head.label_embeddings], rate)] if rate > 0 else []

    # head_features (the pooled embedding) and predict_logits (model.head on it, i.e.
    # cos(g(x), L) / temperature, Eq. 8) are the base class's.

    def training_loss(self, model, inputs, labels) -> LossOutput:
        projected = model.head.project(self.head_features(model, inputs))
        hp = self.hparams
        batch = gather(projected, labels)  # the global batch under DDP (contrastfit.distributed)
        parts = lacon(batch.embeddings, batch.labels, model.head.label_embeddings, temperature=hp["temperature"],
                      heads=hp["heads"], ler_weight=hp["ler_weight"], icl_weight=hp["icl_weight"],
                      lcl_weight=hp["lcl_weight"])
        logits = model.head.match(projected)
        return LossOutput(loss=parts.total, logits=logits, parts={"icl": parts.icl, "lcl": parts.lcl, "ler": parts.ler})


@register_method
class LaConFusion(LaCon):
    name = "lacon-fusion"
    description = "LaCon with LEAM-style label fusion (word-label cosine, conv + max-pool attention) before the projection"
    reference = "Zhang et al. (LaCon), Eq. 1-9; Wang et al. 2018 (LEAM), Eq. 2-5"

    class Hparams(LaCon.Hparams):
        fusion_radius: int = hparam(2, "r of LEAM's window of 2r + 1 words", ge=0)

    def __init__(self, num_labels, hidden_size, task="classification", **hparams):
        super().__init__(num_labels, hidden_size, task, **hparams)
        if self.projection_dim != hidden_size:
            raise ConfigError(f"{self.name}: the label embeddings are compared with token embeddings (Eq. 9), so "
                              f"projection_dim must be 0 or {hidden_size} (the encoder's hidden size), "
                              f"got {self.projection_dim}")

    @property
    def fusion_radius(self) -> int | None:
        return int(self.hp.fusion_radius)

    def head_features(self, model, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Eq. 9's fused vector ``z`` (what the projection head ``g`` reads)."""
        out = model.encoder(**inputs)
        return model.head.fuse(out.token_embeddings, out.attention_mask)


@register_method
class CEProjection(Method):
    name = "ce-projection"
    description = "cross-entropy through LaCon's 3-layer projection head g, then a linear classifier (\"BERT w/ g\")"
    reference = "Zhang et al. (LaCon), Table 3 (BERT w/ g); g from Sec. 2.1"
    Hparams = _Projection  # projection_layers >= 1: 0 would be plain 'ce'

    @property
    def projection_dim(self) -> int:
        """The width ``d`` of ``g``."""
        return int(self.hp.projection_dim) or self.hidden_size

    def build_head(self) -> nn.Module:
        return ProjectionClassifierHead(self.hidden_size, self.num_outputs, dim=self.projection_dim,
                                        depth=int(self.hp.projection_layers))

    # head_features (the pooled embedding), predict_logits (model.head on it) and embedding (the
    # pooled embedding, as for ``ce``) are the base class's.

    def training_loss(self, model, inputs, labels) -> LossOutput:
        logits = model.head(self.head_features(model, inputs))
        loss = self.task_loss(logits, labels)
        return LossOutput(loss=loss, logits=logits, parts={"ce": loss})
