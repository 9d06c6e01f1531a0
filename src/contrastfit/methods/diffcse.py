r"""``diffcse``: DiffCSE (Chuang et al. 2022), as in Behrman & Christoglou (CS224N report, Eq. 3-6,
Sec. 3.5), then the report's task head on the frozen encoder (:mod:`contrastfit.methods.simcse_base`).

``L = simcse_unsup(z1, z2) + lambda * RTD``. Before the encoder passes, the sentences are masked
(:func:`~contrastfit.data.masking.mask_tokens`, each non-special, non-padding token with
probability ``mask_ratio``) and the masks are filled by a fixed generator. Defaults: ``lambda =
0.005`` and ``temperature = 0.05`` from the report's table (Sec. 5.3.3); ``mask_ratio = 0.3`` from
the **original DiffCSE paper** (Chuang et al. 2022, its value for BERT), since the report gives none.
Generators:

* ``generator = "unigram"`` (default, offline): :class:`~contrastfit.data.masking.UnigramGenerator`
  built in :meth:`DiffCSE.prepare` from the token counts of the tokenised training set's
  ``input_ids`` (special ids excluded). A deliberate stand-in for DiffCSE's masked LM: it makes
  replacements that are easier to detect than an MLM's;
* otherwise a local folder, built-in name or Hub name of a masked LM loaded with
  ``AutoModelForMaskedLM`` (:func:`contrastfit.encoders.load_masked_lm`; ``local_files_only`` for a
  local folder) whose tokenizer must have the encoder's vocabulary. It is used in eval mode, never trained, and **not saved** with the
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
that position 0 is a special token). ``discriminator_learning_rate`` (0 = the main learning rate; else the
discriminator's own optimiser group, :meth:`DiffCSE.param_groups`) lets it train faster than the encoder: the report's DiffCSE learning rate (1e-6) is far too small
for a layer that starts from random weights.

Randomness: DiffCSE draws its corruption (global torch RNG) *before* the encoder passes, so re-seeding
and repeating a call reproduces it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import torch
import torch.nn.functional as F
from pydantic import AfterValidator
from torch import nn

from ..data.masking import UnigramGenerator, fill_with_mlm, mask_tokens
from ..encoders import load_masked_lm
from ..errors import ConfigError, ModelError
from ..losses.diffcse import DEFAULT_LAMBDA, diffcse_loss, replaced_token_detection
from ..distributed import gather_views
from ..losses.simcse import simcse_unsup
from .base import LossOutput, ParamGroup, hparam, register_method
from .simcse_base import SentenceEmbeddingMethod, sentence_inputs

def _generator(name: str) -> str:
    if not name.strip():
        raise ValueError("must be 'unigram' or a masked-LM folder / name")
    return name


DIFFCSE_MASK_RATIO = 0.3  # the DiffCSE paper (Chuang et al. 2022) for BERT; the CS224N report gives none


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
class DiffCSE(SentenceEmbeddingMethod):
    name = "diffcse"
    description = "SimCSE + lambda * conditional replaced-token detection (small discriminator), then the report's task head"
    reference = "Behrman & Christoglou (CS224N), Eq. 3-6; Chuang et al. 2022"
    in_batch_negatives = True  # its SimCSE term

    class Hparams(SentenceEmbeddingMethod.Hparams):
        lambda_: float = hparam(DEFAULT_LAMBDA, "weight of the replaced-token-detection term", ge=0,
                                alias="lambda", flag="LAMBDA")
        mask_ratio: float = hparam(DIFFCSE_MASK_RATIO, "share of the tokens the generator replaces", gt=0, le=1)
        generator: Annotated[str, AfterValidator(_generator)] = hparam(
            "unigram", "'unigram' (a sampler over the training corpus' tokens) or a masked-LM folder / name")
        discriminator_layers: int = hparam(2, "transformer layers of the discriminator", ge=1)
        discriminator_learning_rate: float = hparam(0.0, "learning rate of the discriminator (0: the main one)", ge=0)

    def __init__(self, num_labels, hidden_size, task="classification", **hparams):
        super().__init__(num_labels, hidden_size, task, **hparams)
        hp = self.hparams
        self.discriminator = ConditionalDiscriminator(hidden_size, hp["discriminator_layers"])
        # Training-only state, deliberately not submodules (not saved, not in the optimizer):
        self.__dict__["unigram"] = None  # UnigramGenerator, built by prepare()
        self.__dict__["mlm"] = None  # the masked-LM generator, loaded by prepare()

    def param_groups(self, model) -> list[ParamGroup]:
        lr = self.hp.discriminator_learning_rate
        return [ParamGroup("discriminator", list(self.discriminator.parameters()), lr)] if lr > 0 else []

    # -- generator ------------------------------------------------------------------------------
    def prepare(self, model, train_dataset) -> None:
        tokenizer = model.tokenizer
        embeddings = model.encoder.backbone.get_input_embeddings()
        vocab = embeddings.num_embeddings
        if embeddings.embedding_dim != self.hidden_size:
            raise ConfigError(f"{self.name}: the encoder's word embeddings ({embeddings.embedding_dim}) differ from its "
                              f"hidden size ({self.hidden_size}); the discriminator needs them equal")
        if self.hp.generator == "unigram":
            if train_dataset is None or "input_ids" not in getattr(train_dataset, "column_names", []):
                raise ConfigError(f"{self.name}: the unigram generator needs the tokenised training set (input_ids)")
            self.__dict__["unigram"] = UnigramGenerator.from_corpus(train_dataset["input_ids"], vocab,
                                                                   special_ids=tokenizer.all_special_ids)
        else:
            name = self.hp.generator
            try:
                self.__dict__["mlm"] = load_masked_lm(name, tokenizer)
            except (ConfigError, ModelError) as exc:
                raise type(exc)(f"{self.name}: generator '{name}': {exc} (or use generator=unigram)") from None

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
            _, chosen = mask_tokens(ids, att, special, mask_id if mask_id is not None else 0, self.hp.mask_ratio)
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
        (g1, g2), _ = gather_views([z1, z2])  # in-batch negatives from the global batch under DDP
        contrast = simcse_unsup(g1, g2, self.hp.temperature)
        logits = self.discriminate(model, corruption.ids, z1, sentences["attention_mask"])
        rtd = replaced_token_detection(logits, corruption.replaced, corruption.counted)
        loss = diffcse_loss(contrast, rtd, self.hp.lambda_)
        return LossOutput(loss=loss, parts={"simcse": contrast, "rtd": rtd})


__all__ = ["DiffCSE", "ConditionalDiscriminator", "Corruption", "sinusoidal_positions"]
