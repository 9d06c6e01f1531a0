r"""Unsupervised SimCSE, supervised SimCSE and DiffCSE, with the task heads of Behrman & Christoglou
(*Evaluating Contrastive Learning Strategies for Enhanced Performance in Downstream Tasks*, CS224N report).

All three are two-stage methods (``frozen_head_stage``): stage 1 trains the encoder with the sentence-
embedding objective below on the Trainer; stage 2 freezes the encoder and trains the report's task head
(Sec. 4.2) on cached features (:func:`contrastfit.training.train_head`; the report's "Frozen Weights for
Downstream Training", Sec. 5.2.1). The pure losses live in :mod:`contrastfit.losses.simcse` and
:mod:`contrastfit.losses.diffcse`; this module only decides what they are applied to.

``simcse-unsup`` (report Eq. 1, Sec. 3.3)
    The batch goes through the encoder twice in training mode; the encoder's own dropout (the report's
    0.1, BERT's default) makes the two pooled embeddings ``z1``, ``z2`` differ, and
    :func:`~contrastfit.losses.simcse.simcse_unsup` (temperature 0.05) treats ``z2[i]`` as the positive of
    ``z1[i]`` and the other rows of ``z2`` as negatives. Labels are ignored.

``simcse-sup`` (report Eq. 2, Sec. 3.4 and 4.1)
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

    ``hard_negative_weight`` is SimCSE's additive log-weight of a row's own hard negative (0 = Eq. 2
    exactly; the report does not use it). Regression targets are refused (Eq. 2 needs classes). For
    sentence-pair data the anchors/positives are the jointly encoded pairs (the pair's label is the
    class); the report's NLI premise/hypothesis triples are not built from pair columns.

``diffcse`` (report Eq. 3-6, Sec. 3.5)
    ``L = simcse_unsup(z1, z2) + lambda * RTD``. Before the encoder passes, the sentences are masked
    (:func:`~contrastfit.losses.diffcse.mask_tokens`, each non-special, non-padding token with
    probability ``mask_ratio``) and the masks are filled by a fixed generator. Defaults: ``lambda =
    0.005`` and ``temperature = 0.05`` from the report's table (Sec. 5.3.3); ``mask_ratio = 0.3`` from
    the **original DiffCSE paper** (Chuang et al. 2022, its value for BERT), since the report gives none.
    Generators:

    * ``generator = "unigram"`` (default, offline): :class:`~contrastfit.losses.diffcse.UnigramGenerator`
      built in :meth:`DiffCSE.prepare` from the token counts of the tokenised training set's
      ``input_ids`` (special ids excluded). A deliberate stand-in for DiffCSE's masked LM: it makes
      replacements that are easier to detect than an MLM's;
    * otherwise a local folder, built-in name or Hub name of a masked LM loaded with
      ``AutoModelForMaskedLM`` (``local_files_only`` for a local folder) whose tokenizer must have
      the encoder's vocabulary. It is used in eval mode, never trained, and **not saved** with the
      model (it is only needed for training; :meth:`prepare` loads it again).

    The discriminator (:class:`ConditionalDiscriminator`, owned by the method, so it is trained by the
    optimizer and saved/reloaded with the model) reads the **encoder's input word embeddings** of the
    corrupted ids (looked up on detached weights: the discriminator has no embedding table of its own
    and the RTD loss reaches the encoder only through ``h``), with the sentence embedding ``h = z1``
    (through a linear map) **prepended** as an extra first position, sinusoidal positions, LayerNorm,
    ``discriminator_layers`` ``nn.TransformerEncoder`` layers of the encoder's hidden size, and a linear
    layer giving one "replaced" logit per token. The RTD gradient flows into ``h`` and so into the
    sentence encoder (Eq. 5-6's conditioning on ``h``). RTD counts the tokens that could have been
    replaced (attention mask 1, not special), mean-reduced (see :mod:`contrastfit.losses.diffcse`).

    **Deviation**: DiffCSE's discriminator is a full BERT (and DiffCSE puts ``h`` in place of the
    [CLS] input); this one is 2 transformer layers from scratch, to keep CPU training affordable, and
    appends ``h`` as an extra position instead of overwriting [CLS] (which then needs no assumption
    that position 0 is a special token). ``discriminator_learning_rate`` (0 = the main learning rate)
    lets it train faster than the encoder: the report's DiffCSE learning rate (1e-6) is far too small
    for a layer that starts from random weights.

Randomness: dropout, masking and sampling use the global torch RNG (seeded by the Trainer), and
DiffCSE draws its corruption *before* the encoder passes, so re-seeding and repeating a call reproduces
it.

Task heads (report Sec. 4.2; :class:`SimCSETaskHead`, dropout 0.1 from its classifier table)
    * one sentence, classification (sentiment): MLP ``hidden -> hidden/2 -> classes`` with ReLU and
      dropout (the report's [768, 384], [384, ·]; ``classes`` outputs with cross-entropy);
    * sentence pair, classification (paraphrase): :class:`PairConcatHead`, the two sentence embeddings
      concatenated, ``[u; v]`` -> MLP ``2 hidden -> hidden -> classes`` with ReLU and dropout (the
      report's [1536, 768], [768, ·]; no ``|u - v|``, as the report writes it);
    * sentence pair, regression (STS): :class:`CosineRegressionHead`, ``cos(u, v)`` -> Linear(1, 10)
      -> ReLU -> Linear(10, 1), trained with MSE;
    * one sentence, regression: the single-sentence MLP with one output.

    ``u`` and ``v`` are the two sentences of a pair **encoded separately**. The data pipeline tokenises a
    pair jointly (``[CLS] a [SEP] b [SEP]``); :func:`split_pair` cuts it back into ``[CLS] a [SEP]`` and
    ``[CLS] b [SEP]`` using ``token_type_ids`` (the same ids as tokenising each sentence alone, up to
    joint truncation). A tokenizer that returns no ``token_type_ids`` (RoBERTa-style) gives the joint
    encoding and the single-sentence MLP. In stage 1, ``simcse-unsup`` and ``diffcse`` train on the two
    sentences of every pair as separate sentences (2N of them), matching what the pair heads read.
    The head picks its branch from the feature width (hidden: one sentence, 2 x hidden: a pair).

Not implemented: the report's round-robin multi-task training over several data sets (Sec. 5.3.5),
and its fine-tuning of the encoder together with the heads at 1e-6 (the heads here train on the frozen
encoder). Stage-1 optimisation values of the report (Sec. 5.3; learning rate 1e-5 for SimCSE and 1e-6
for DiffCSE, weight decay 0.1, batch 64 / 32 / 64, maximum length 64 / 100 / 64) are Trainer settings
(``--learning-rate`` etc.), not method hyper-parameters. Stage-2 values are the project's shared
:data:`~contrastfit.methods.base.HEAD_STAGE_DEFAULTS` (the report's heads used learning rate 1e-3 and
batch 8 / 8 / 32 for STS / SST / paraphrase).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError, ModelError
from ..heads import MLPHead
from ..losses.diffcse import (DEFAULT_LAMBDA, UnigramGenerator, diffcse_loss, fill_with_mlm, mask_tokens,
                              replaced_token_detection)
from ..losses.simcse import simcse_sup, simcse_unsup
from .base import HEAD_STAGE_DEFAULTS, LossOutput, Method, register_method

TEMPERATURE = 0.05  # report, Sec. 5.3.3 ("tau ... remained consistent across runs at 0.05")
HEAD_DROPOUT = 0.1  # report, classifier fine-tuning table
DIFFCSE_MASK_RATIO = 0.3  # the DiffCSE paper (Chuang et al. 2022) for BERT; the CS224N report gives none
STS_HIDDEN = 10  # report, Sec. 4.2: cosine -> [1, 10] -> [10, 1]


# ---------------------------------------------------------------------------------------------
# Sentence pairs: cut a jointly tokenised pair into its two sentences
# ---------------------------------------------------------------------------------------------

def is_pair(inputs: dict[str, torch.Tensor]) -> bool:
    """True when every row holds a sentence pair (some attended token with ``token_type_ids != 0``);
    False without ``token_type_ids`` or when no row has a second segment. A batch mixing both is refused."""
    tt = inputs.get("token_type_ids")
    if tt is None:
        return False
    second = ((tt != 0) & inputs["attention_mask"].bool()).any(dim=1)
    if bool(second.all()):
        return True
    if bool(second.any()):
        raise ValueError("a batch mixes sentence pairs and single sentences")
    return False


def split_pair(inputs: dict[str, torch.Tensor], pad_id: int = 0) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Cut jointly tokenised pairs (``[CLS] a [SEP] b [SEP]``, segment ids 0 then 1) into two batches
    ``[CLS] a [SEP]`` and ``[CLS] b [SEP]`` of the same width (padding with ``pad_id``, right side).

    The first attended token of segment 0 (``[CLS]``) is put in front of segment 1. Works whatever the
    padding side of the input. Both halves get all-zero ``token_type_ids``.
    """
    ids, att, tt = inputs["input_ids"], inputs["attention_mask"].bool(), inputs["token_type_ids"]
    in_a, in_b = att & (tt == 0), att & (tt != 0)
    len_a, len_b = in_a.sum(dim=1), in_b.sum(dim=1) + 1

    def compact(keep: torch.Tensor) -> torch.Tensor:  # kept tokens first, in order
        order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)
        return ids.gather(1, order)

    a_ids = compact(in_a)
    b_ids = torch.cat([a_ids[:, :1], compact(in_b)], dim=1)
    width = int(torch.maximum(len_a, len_b).max())
    pos = torch.arange(width, device=ids.device)[None, :]

    def half(tokens: torch.Tensor, length: torch.Tensor) -> dict[str, torch.Tensor]:
        mask = pos < length[:, None]
        tokens = tokens[:, :width].masked_fill(~mask, int(pad_id))
        return {"input_ids": tokens, "attention_mask": mask.to(inputs["attention_mask"].dtype),
                "token_type_ids": torch.zeros_like(tokens)}

    return half(a_ids, len_a), half(b_ids, len_b)


def concat_inputs(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Two batches of the same width as one (rows of ``first``, then rows of ``second``)."""
    return {k: torch.cat([first[k], second[k]]) for k in first}


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


# ---------------------------------------------------------------------------------------------
# Task heads (report Sec. 4.2)
# ---------------------------------------------------------------------------------------------

def _halves(features: torch.Tensor, hidden_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    if features.dim() != 2 or features.shape[1] != 2 * hidden_size:
        raise ValueError(f"pair features must be (batch, {2 * hidden_size}) = [u; v], got {tuple(features.shape)}")
    return features[:, :hidden_size], features[:, hidden_size:]


class CosineRegressionHead(nn.Module):
    """STS head: ``cos(u, v)`` -> Linear(1, 10) -> ReLU -> Linear(10, 1) (report Sec. 4.2, Sec. 6.1).
    Reads ``[u; v]`` (batch, 2 hidden); returns (batch, 1)."""

    def __init__(self, hidden_size: int, inner_size: int = STS_HIDDEN):
        super().__init__()
        self.hidden_size = hidden_size
        self.mlp = nn.Sequential(nn.Linear(1, inner_size), nn.ReLU(), nn.Linear(inner_size, 1))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        u, v = _halves(features, self.hidden_size)
        return self.mlp(F.cosine_similarity(u, v, dim=-1).unsqueeze(-1))


class PairConcatHead(nn.Module):
    """Paraphrase head: ``[u; v]`` -> dropout -> Linear(2 hidden, hidden) -> ReLU -> dropout ->
    Linear(hidden, outputs) (report Sec. 4.2: [1536, 768], [768, ·] for BERT-base)."""

    def __init__(self, hidden_size: int, num_outputs: int, dropout: float = HEAD_DROPOUT):
        super().__init__()
        self.hidden_size = hidden_size
        self.mlp = MLPHead(2 * hidden_size, num_outputs, depth=2, inner_size=hidden_size, dropout=dropout,
                           activation="relu")

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        _halves(features, self.hidden_size)  # shape check
        return self.mlp(features)


class SimCSETaskHead(nn.Module):
    """The report's heads, picked by the width of the features: ``hidden`` (one sentence) -> MLP
    ``hidden -> hidden/2 -> outputs`` (ReLU, dropout); ``2 hidden`` (a pair ``[u; v]``) ->
    :class:`CosineRegressionHead` for a regression target, else :class:`PairConcatHead`. Both branches
    exist (and are saved) whatever the data; only the one the data uses is trained."""

    def __init__(self, hidden_size: int, num_outputs: int, task: str = "classification", dropout: float = HEAD_DROPOUT):
        super().__init__()
        self.hidden_size = hidden_size
        self.single = MLPHead(hidden_size, num_outputs, depth=2, inner_size=max(1, hidden_size // 2),
                              dropout=dropout, activation="relu")
        if task == "regression":
            self.pair: nn.Module = CosineRegressionHead(hidden_size)
        else:
            self.pair = PairConcatHead(hidden_size, num_outputs, dropout)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if features.shape[-1] == self.hidden_size:
            return self.single(features)
        if features.shape[-1] == 2 * self.hidden_size:
            return self.pair(features)
        raise ValueError(f"features of width {features.shape[-1]}: expected {self.hidden_size} (one sentence) "
                         f"or {2 * self.hidden_size} (a pair)")


class _SimCSEBase(Method):
    """Shared: temperature check, the report's heads on (pair-aware) sentence features."""

    frozen_head_stage = True

    def __init__(self, num_labels, hidden_size, task="classification", **hparams):
        super().__init__(num_labels, hidden_size, task, **hparams)
        self.check_hparam("temperature", gt=0)

    def build_head(self) -> nn.Module:
        return SimCSETaskHead(self.hidden_size, self.num_outputs, self.task)

    def head_features(self, model, inputs):
        return sentence_features(model, inputs)


# ---------------------------------------------------------------------------------------------
# Unsupervised SimCSE (Eq. 1)
# ---------------------------------------------------------------------------------------------

@register_method
class SimCSEUnsup(_SimCSEBase):
    name = "simcse-unsup"
    description = "unsupervised SimCSE (two dropout passes), then the report's task head on the frozen encoder"
    reference = "Behrman & Christoglou (CS224N), Eq. 1; Gao et al. 2021"
    defaults = {"temperature": TEMPERATURE, **HEAD_STAGE_DEFAULTS}

    def training_loss(self, model, inputs, labels) -> LossOutput:
        sentences = sentence_inputs(model, inputs)
        z1 = model.encoder(**sentences).pooled
        z2 = model.encoder(**sentences).pooled
        loss = simcse_unsup(z1, z2, self.hparams["temperature"])
        return LossOutput(loss=loss, parts={"simcse": loss})


# ---------------------------------------------------------------------------------------------
# Supervised SimCSE (Eq. 2) with in-batch triples
# ---------------------------------------------------------------------------------------------

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
class SimCSESup(_SimCSEBase):
    name = "simcse-sup"
    description = ("supervised SimCSE on in-batch (anchor, same-class positive, other-class hard negative) triples, "
                   "then the report's task head")
    reference = "Behrman & Christoglou (CS224N), Eq. 2, Sec. 4.1; Gao et al. 2021"
    defaults = {"temperature": TEMPERATURE, "hard_negative_weight": 0.0, "augmented": False, **HEAD_STAGE_DEFAULTS}
    contrastive = True

    def __init__(self, num_labels, hidden_size, task="classification", **hparams):
        super().__init__(num_labels, hidden_size, task, **hparams)
        w = self.hparams["hard_negative_weight"]
        if math.isnan(w) or w == math.inf:
            raise ConfigError(f"{self.name}: hard_negative_weight must be finite (or -inf), got {w}")
        if task == "regression":
            raise ConfigError(f"{self.name} needs class labels (Eq. 2 pairs examples by class); "
                              "use simcse-unsup or diffcse for a regression target")

    def training_loss(self, model, inputs, labels) -> LossOutput:
        z = model.encoder(**inputs).pooled
        tr = supervised_triples(labels, self.hparams["augmented"])
        if tr.anchors.numel() == 0:  # nobody has a positive: 0, graph intact (pitfall 1)
            loss = z.sum() * 0.0
            return LossOutput(loss=loss, parts={"simcse_sup": loss})
        positives = z[tr.positives]
        if bool(tr.self_positive.any()):  # augmented: a second dropout pass of the unpaired anchors
            rows = tr.anchors[tr.self_positive]
            views = model.encoder(**{k: v[rows] for k, v in inputs.items()}).pooled
            slots = torch.nonzero(tr.self_positive, as_tuple=True)[0]
            positives = positives.index_copy(0, slots, views.to(positives.dtype))
        loss = simcse_sup(z[tr.anchors], positives, z[tr.negatives], self.hparams["temperature"],
                          self.hparams["hard_negative_weight"], tr.negative_mask)
        return LossOutput(loss=loss, parts={"simcse_sup": loss})


# ---------------------------------------------------------------------------------------------
# DiffCSE (Eq. 3-6)
# ---------------------------------------------------------------------------------------------

def sinusoidal_positions(length: int, dim: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """Fixed sine/cosine position encodings (Vaswani et al.), (length, dim)."""
    pos = torch.arange(length, device=device, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / dim))
    out = torch.zeros(length, dim, device=device, dtype=torch.float32)
    out[:, 0::2] = torch.sin(pos * freq)
    out[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return out.to(dtype)


def _num_heads(hidden: int) -> int:
    heads = max(1, hidden // 64)
    while hidden % heads:
        heads -= 1
    return heads


class ConditionalDiscriminator(nn.Module):
    """DiffCSE's discriminator ``D(x'', h, t)``, small: ``[W h; e(x''_1); ...; e(x''_T)]`` + sinusoidal
    positions -> LayerNorm -> dropout -> ``layers`` transformer-encoder layers (hidden size, GELU,
    4 x hidden feed-forward) -> Linear(hidden, 1); returns the "replaced" logit of every token (N, T)."""

    def __init__(self, hidden_size: int, layers: int = 2, dropout: float = 0.1):
        super().__init__()
        self.condition = nn.Linear(hidden_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size)
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(hidden_size, _num_heads(hidden_size), 4 * hidden_size, dropout,
                                           activation="gelu", batch_first=True)
        self.layers = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.score = nn.Linear(hidden_size, 1)

    def forward(self, token_embeddings: torch.Tensor, h: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        n, t, d = token_embeddings.shape
        x = torch.cat([self.condition(h.to(token_embeddings.dtype)).unsqueeze(1), token_embeddings], dim=1)
        x = x + sinusoidal_positions(t + 1, d, x.device, x.dtype)
        x = self.dropout(self.norm(x))
        keep = torch.cat([torch.ones(n, 1, dtype=torch.bool, device=x.device), attention_mask.bool()], dim=1)
        x = self.layers(x, src_key_padding_mask=~keep)
        return self.score(x[:, 1:]).squeeze(-1)


@dataclass
class Corruption:
    ids: torch.Tensor  # x'': the sentences with the generator's replacements
    replaced: torch.Tensor  # x''_t != x_t
    counted: torch.Tensor  # positions the RTD loss counts: attended, not special


@register_method
class DiffCSE(_SimCSEBase):
    name = "diffcse"
    description = "SimCSE + lambda * conditional replaced-token detection (small discriminator), then the report's task head"
    reference = "Behrman & Christoglou (CS224N), Eq. 3-6; Chuang et al. 2022"
    defaults = {
        "temperature": TEMPERATURE,
        "lambda": DEFAULT_LAMBDA,
        "mask_ratio": DIFFCSE_MASK_RATIO,
        "generator": "unigram",
        "discriminator_layers": 2,
        "discriminator_learning_rate": 0.0,
        **HEAD_STAGE_DEFAULTS,
    }

    def __init__(self, num_labels, hidden_size, task="classification", **hparams):
        super().__init__(num_labels, hidden_size, task, **hparams)
        hp = self.hparams
        self.check_hparam("lambda", ge=0)
        self.check_hparam("mask_ratio", gt=0, le=1)
        self.check_hparam("discriminator_layers", ge=1)
        self.check_hparam("discriminator_learning_rate", ge=0, note="0: the main learning rate")
        if not hp["generator"].strip():
            raise ConfigError(f"{self.name}: generator must be 'unigram' or a masked-LM folder / name")
        self.discriminator = ConditionalDiscriminator(hidden_size, hp["discriminator_layers"])
        # Training-only state, deliberately not submodules (not saved, not in the optimizer):
        self.__dict__["unigram"] = None  # UnigramGenerator, built by prepare()
        self.__dict__["mlm"] = None  # the masked-LM generator, loaded by prepare()

    def learning_rates(self) -> dict[str, float]:
        lr = self.hparams["discriminator_learning_rate"]
        return {"method.discriminator.": lr} if lr > 0 else {}

    # -- generator ------------------------------------------------------------------------------
    def prepare(self, model, train_dataset) -> None:
        tokenizer = model.tokenizer
        embeddings = model.encoder.backbone.get_input_embeddings()
        vocab = embeddings.num_embeddings
        if embeddings.embedding_dim != self.hidden_size:
            raise ConfigError(f"{self.name}: the encoder's word embeddings ({embeddings.embedding_dim}) differ from its "
                              f"hidden size ({self.hidden_size}); the discriminator needs them equal")
        if self.hparams["generator"] == "unigram":
            if train_dataset is None or "input_ids" not in getattr(train_dataset, "column_names", []):
                raise ConfigError(f"{self.name}: the unigram generator needs the tokenised training set (input_ids)")
            self.__dict__["unigram"] = UnigramGenerator.from_corpus(train_dataset["input_ids"], vocab,
                                                                   special_ids=tokenizer.all_special_ids)
        else:
            self.__dict__["mlm"] = load_generator(self.hparams["generator"], tokenizer)

    def _special_mask(self, model, input_ids: torch.Tensor) -> torch.Tensor:
        special = torch.tensor(sorted(set(model.tokenizer.all_special_ids)), dtype=input_ids.dtype, device=input_ids.device)
        return torch.isin(input_ids, special)

    def corrupt(self, model, sentences: dict[str, torch.Tensor]) -> Corruption:
        """x -> x' (masking, ``mask_ratio``) -> x'' (the fixed generator); global torch RNG."""
        if self.unigram is None and self.mlm is None:
            raise RuntimeError(f"{self.name}: call method.prepare(model, train_dataset) before training "
                               "(it builds the generator)")
        ids, att = sentences["input_ids"], sentences["attention_mask"]
        special = self._special_mask(model, ids)
        mask_id = model.tokenizer.mask_token_id
        with torch.no_grad():
            _, chosen = mask_tokens(ids, att, special, mask_id if mask_id is not None else 0, self.hparams["mask_ratio"])
            if self.mlm is not None:
                mlm = self.mlm
                if next(mlm.parameters()).device != ids.device:
                    mlm.to(ids.device)
                new_ids, replaced = fill_with_mlm(mlm, ids, att, chosen, mask_token_id=mask_id,
                                                  suppress_ids=model.tokenizer.all_special_ids)
            else:
                new_ids, replaced = self.unigram.fill(ids, chosen)
        return Corruption(new_ids, replaced, att.bool() & ~special)

    def discriminate(self, model, corrupted_ids: torch.Tensor, h: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Replaced logits (N, T) of ``corrupted_ids`` given the sentence embeddings ``h`` (N, hidden)."""
        weight = model.encoder.backbone.get_input_embeddings().weight.detach()
        return self.discriminator(F.embedding(corrupted_ids, weight), h, attention_mask)

    def training_loss(self, model, inputs, labels) -> LossOutput:
        sentences = sentence_inputs(model, inputs)
        corruption = self.corrupt(model, sentences)  # first, so that re-seeding reproduces it
        z1 = model.encoder(**sentences).pooled
        z2 = model.encoder(**sentences).pooled
        contrast = simcse_unsup(z1, z2, self.hparams["temperature"])
        logits = self.discriminate(model, corruption.ids, z1, sentences["attention_mask"])
        rtd = replaced_token_detection(logits, corruption.replaced, corruption.counted)
        loss = diffcse_loss(contrast, rtd, self.hparams["lambda"])
        return LossOutput(loss=loss, parts={"simcse": contrast, "rtd": rtd})


def load_generator(name_or_path: str, tokenizer) -> nn.Module:
    """DiffCSE's fixed generator: a masked LM (local folder, built-in name or Hub name) in eval mode,
    without gradients. Its tokenizer must have the encoder's vocabulary."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from ..encoders import resolve_model

    target, local = resolve_model(name_or_path)
    try:
        gen_tokenizer = AutoTokenizer.from_pretrained(target, local_files_only=local)
        mlm = AutoModelForMaskedLM.from_pretrained(target, local_files_only=local)
    except (OSError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"diffcse: could not load the generator '{name_or_path}' as a masked LM with its tokenizer: "
                         f"{reason}") from None
    if gen_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise ConfigError(f"diffcse: the generator '{name_or_path}' has another vocabulary than the encoder; "
                          "use a masked LM with the encoder's tokenizer, or generator=unigram")
    if tokenizer.mask_token_id is None:
        raise ConfigError("diffcse: the encoder's tokenizer has no mask token, which a masked-LM generator needs")
    mlm.eval()
    for p in mlm.parameters():
        p.requires_grad_(False)
    return mlm


__all__ = [
    "SimCSEUnsup", "SimCSESup", "DiffCSE", "SimCSETaskHead", "CosineRegressionHead", "PairConcatHead",
    "ConditionalDiscriminator", "supervised_triples", "Triples", "split_pair", "is_pair", "sentence_inputs",
    "sentence_features", "load_generator",
]
