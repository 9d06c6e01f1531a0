r"""LaCon: label anchored contrastive learning (Zhang et al., *Label Anchored Contrastive Learning for
Language Understanding*), ``lacon`` (LaCon-vanilla, Sec. 2.1-2.5) and ``lacon-fusion`` (Sec. 2.6).

``lacon``
    ``H = g(f(X))`` (Eq. 1): the pooled sentence embedding (the paper uses [CLS]; here the run's
    pooling, ``cls`` unless the encoder says otherwise) goes through the projection head ``g``, a
    3-layer MLP with ReLU after each hidden layer, every layer ``d`` wide (Sec. 2.1). The ``C`` label
    embeddings ``L`` (Eq. 2) are a learnable ``(C, d)`` matrix, randomly initialised as the paper says
    (Sec. 2.1: "``W_emb`` is randomly initialized"; N(0, 1) here, as ``nn.Embedding``; label names
    are not used). Both live in the model head (:class:`~contrastfit.heads.LabelMatchingHead`), so
    the optimizer trains them and ``head.safetensors`` saves them (pitfall 3).
    Training loss: :func:`contrastfit.losses.lacon` on ``H`` and ``L``, Eq. 7
    ``L = L'_ICL (Eq. 4) + L_LCL (Eq. 5) + lambda L_LER (Eq. 6)``, with the parts logged as
    ``loss_icl``, ``loss_lcl``, ``loss_ler`` (``ler`` unweighted). No cross-entropy term (Sec. 5.1:
    LaCon "is purely equipped with three CL objectives").
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

Hyper-parameters (defaults and where they come from)
---------------------------------------------------
* ``temperature = 0.1``: Sec. 4.4, "the recommended value is around 0.1 and 0.2".
* ``heads = 6``: Sec. 4.4, "the optimal number of heads in Equation 4 is 6". The projection width
  must be a multiple of it (384 for MiniLM-L6 and 768 for BERT-base are); otherwise pass another
  ``heads`` or a ``projection_dim`` that is (a :class:`~contrastfit.errors.ConfigError` says so).
* ``ler_weight = 0.5`` (lambda): **not given** by the paper, which sweeps 0.1..1.0 and says it "can be
  set in a wide range" (Sec. 4.4); 0.5 is the middle of the sweep.
* ``projection_dim = 0``: the width ``d`` of ``g`` and of the label embeddings; 0 means the encoder's
  hidden size, the paper's choice ("the dimension of the g is also d", Sec. 2.1).
* ``projection_layers = 3``: Sec. 2.1. 0 removes ``g`` (the "-g" ablation of Table 3).
* ``label_learning_rate = 0.0``: 0 means the main learning rate. The paper gives the label matrix no
  learning rate of its own; with N(0, 1) rows and AdamW at ~2e-5 the label directions move slowly,
  so a higher rate here is an option, not the paper's setting.
* ``fusion_radius = 2`` (``lacon-fusion`` only): ``r`` of LEAM's window ``2r + 1``. **Not given** by
  LaCon (nor LEAM's value for sentence-level tasks in the papers here); 2 (a 5-token window) is our
  choice for sentence-length inputs.

Training protocol notes (Sec. 3): AdamW, learning rate in {1e-5, 2e-5, 3e-5}, linear schedule with
6% warm-up, batch size 8..96, 10 epochs (20 in the few-shot runs). Those are trainer settings, not
method hyper-parameters. ``contrastive = True``: batches come from the class-balanced sampler, so LCL
has anchors with negatives. Classification only (the labels are anchors).
"""

from __future__ import annotations

import torch

from ..errors import ConfigError
from ..heads import build_head
from ..losses import lacon
from .base import LossOutput, Method, register_method

__all__ = ["LaCon", "LaConFusion"]


@register_method
class LaCon(Method):
    name = "lacon"
    description = "label anchored contrastive learning: ICL + LCL + LER, prediction by cosine to label embeddings"
    reference = "Zhang et al. (LaCon), Eq. 1-8, Sec. 4.4"
    defaults = {
        "temperature": 0.1,
        "heads": 6,
        "ler_weight": 0.5,
        "projection_dim": 0,
        "projection_layers": 3,
        "label_learning_rate": 0.0,
    }
    contrastive = True
    head_kind = "label-matching"

    def __init__(self, num_labels, hidden_size, task="classification", **hparams):
        super().__init__(num_labels, hidden_size, task, **hparams)
        hp = self.hparams
        if task == "regression":
            raise ConfigError(f"{self.name} needs class labels (they are the anchors); use 'ce' for a regression target")
        self.check_hparam("temperature", gt=0)
        self.check_hparam("ler_weight", ge=0)
        self.check_hparam("projection_layers", ge=0)
        self.check_hparam("projection_dim", ge=0, note="0: the encoder's hidden size")
        self.check_hparam("label_learning_rate", ge=0, note="0: the main learning rate")
        dim = self.projection_dim
        if hp["projection_layers"] == 0 and dim != hidden_size:
            raise ConfigError(f"{self.name}: projection_layers=0 (no projection) needs projection_dim 0 or "
                              f"{hidden_size} (the encoder's hidden size), got {dim}")
        if hp["heads"] < 1 or dim % hp["heads"]:
            raise ConfigError(f"{self.name}: heads ({hp['heads']}) must be >= 1 and divide the projection width {dim}; "
                              f"pass another heads or a projection_dim that is a multiple of it")

    @property
    def projection_dim(self) -> int:
        """The width ``d`` of the projection head and the label embeddings."""
        return int(self.hparams["projection_dim"]) or self.hidden_size

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
                          depth=int(self.hparams["projection_layers"]), temperature=float(self.hparams["temperature"]),
                          fusion_radius=self.fusion_radius)

    def learning_rates(self) -> dict[str, float]:
        rate = float(self.hparams["label_learning_rate"])
        return {"head.label_embeddings": rate} if rate > 0 else {}

    # head_features (the pooled embedding) and predict_logits (model.head on it, i.e.
    # cos(g(x), L) / temperature, Eq. 8) are the base class's.

    def training_loss(self, model, inputs, labels) -> LossOutput:
        projected = model.head.project(self.head_features(model, inputs))
        hp = self.hparams
        parts = lacon(projected, labels, model.head.label_embeddings, temperature=hp["temperature"],
                      heads=hp["heads"], ler_weight=hp["ler_weight"])
        logits = model.head.match(projected)
        return LossOutput(loss=parts.total, logits=logits, parts={"icl": parts.icl, "lcl": parts.lcl, "ler": parts.ler})


@register_method
class LaConFusion(LaCon):
    name = "lacon-fusion"
    description = "LaCon with LEAM-style label fusion (word-label cosine, conv + max-pool attention) before the projection"
    reference = "Zhang et al. (LaCon), Eq. 1-9; Wang et al. 2018 (LEAM), Eq. 2-5"
    defaults = {**LaCon.defaults, "fusion_radius": 2}

    def __init__(self, num_labels, hidden_size, task="classification", **hparams):
        super().__init__(num_labels, hidden_size, task, **hparams)
        self.check_hparam("fusion_radius", ge=0)
        if self.projection_dim != hidden_size:
            raise ConfigError(f"{self.name}: the label embeddings are compared with token embeddings (Eq. 9), so "
                              f"projection_dim must be 0 or {hidden_size} (the encoder's hidden size), "
                              f"got {self.projection_dim}")

    @property
    def fusion_radius(self) -> int | None:
        return int(self.hparams["fusion_radius"])

    def head_features(self, model, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Eq. 9's fused vector ``z`` (what the projection head ``g`` reads)."""
        out = model.encoder(**inputs)
        return model.head.fuse(out.token_embeddings, out.attention_mask)
