r"""DiffCSE: SimCSE plus a conditional replaced-token-detection (RTD) loss.

Chuang et al., *DiffCSE: Difference-based Contrastive Learning for Sentence Embeddings* (2022), as
written in Behrman & Christoglou (CS224N report), Eq. 3-6:

.. math::

    \mathcal{L}_{diffcse} = \mathcal{L}_{contrast} + \lambda\, \mathcal{L}_{discrim},
    \qquad
    \mathcal{L}_{discrim} = \sum_{t=1}^{T} \Big( -\mathbb{1}(x''_t = x_t) \log D(x'', h, t)
                                                  -\mathbb{1}(x''_t \neq x_t) \log\big(1 - D(x'', h, t)\big) \Big)

``L_contrast`` is the unsupervised SimCSE loss (Eq. 4 = Eq. 1, :func:`~contrastfit.losses.simcse.simcse_unsup`).
The sentence ``x`` is masked (``x'``), a fixed generator fills the masks (``x''``) and a discriminator
``D``, conditioned on SimCSE's embedding ``h`` of ``x``, predicts for each token whether it was replaced.

Conventions
-----------
* ``D(x'', h, t)`` in Eq. 5-6 (as in ELECTRA) is the probability that token ``t`` is *original*. Here the
  discriminator's ``logits`` score **replaced**: ``D = 1 - sigmoid(logit)``. Eq. 5-6 is then exactly the
  binary cross-entropy of ``sigmoid(logit)`` against the target ``replaced``.
* ``replaced[t]`` is ``x''_t != x_t``: a position that was masked but refilled with its original token
  counts as **not replaced** (ELECTRA / DiffCSE), as :meth:`UnigramGenerator.fill` and
  :func:`fill_with_mlm` return it.
* Reduction: the report's Eq. 5-6 sums over tokens; :func:`replaced_token_detection` takes the **mean**
  over the positions where ``attention_mask`` is 1, so that its scale (and ``lambda``) does not depend on
  sentence length or batch size. Special-token rule: every position with ``attention_mask == 1`` counts,
  special tokens included. [CLS]/[SEP] are never masked by :func:`mask_tokens`, so they are always
  "original"; to leave them out of the loss, pass ``attention_mask & ~special_tokens_mask``.
  A batch with no counted position gives 0, still connected to the graph.
* ``lambda`` defaults to 0.005: the report's hyper-parameter table (DiffCSE column, "lambda 0.005",
  "set at the original paper's suggestion of 0.005"). The report's Eq. 3 prints no ``lambda``.
* Masking (:func:`mask_tokens`) replaces every chosen position by ``[MASK]`` (no 80/10/10 split: the
  generator is what produces the replacements), never chooses special tokens or padding, and chooses
  each eligible position independently with the given probability.
* The generator is fixed (no gradient). The DiffCSE paper uses a pretrained masked LM
  (:func:`fill_with_mlm`); :class:`UnigramGenerator` is an offline stand-in that samples replacements
  from the corpus unigram distribution (no pretrained MLM installs offline in this project).
* Losses are computed in float32 whatever the input dtype (float64 stays float64), autocast disabled.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "DEFAULT_LAMBDA",
    "replaced_token_detection",
    "diffcse_loss",
    "mask_tokens",
    "UnigramGenerator",
    "fill_with_mlm",
    "ReplacedTokenDetectionLoss",
]

#: ``lambda`` of Eq. 3/6: the report's hyper-parameter table (0.005, "the original paper's suggestion").
DEFAULT_LAMBDA = 0.005


# ---------------------------------------------------------------------------------------------
# Losses
# ---------------------------------------------------------------------------------------------

def replaced_token_detection(
    logits: torch.Tensor, replaced: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Binary cross-entropy of the discriminator (Eq. 5-6), mean over positions with ``attention_mask == 1``.

    ``logits`` (n, T) or (n, T, 1) score "replaced"; ``replaced`` (n, T) bool targets; ``attention_mask``
    (n, T) (default: every position counts). Pass ``attention_mask & ~special_tokens_mask`` to leave
    [CLS]/[SEP] out. Logits at positions that do not count are ignored (even inf/NaN) and get zero gradient.
    """
    if logits.dim() == 3 and logits.shape[-1] == 1:
        logits = logits.squeeze(-1)
    if logits.dim() != 2:
        raise ValueError(f"logits must be (batch, tokens), got shape {tuple(logits.shape)}")
    if replaced.shape != logits.shape:
        raise ValueError(f"replaced must have the shape of logits {tuple(logits.shape)}, got {tuple(replaced.shape)}")
    if attention_mask is None:
        counted = torch.ones_like(replaced, dtype=torch.bool)
    else:
        if attention_mask.shape != logits.shape:
            raise ValueError(
                f"attention_mask must have the shape of logits {tuple(logits.shape)}, got {tuple(attention_mask.shape)}"
            )
        counted = attention_mask.bool()
    dtype = torch.promote_types(logits.dtype, torch.float32)
    with torch.autocast(device_type=logits.device.type, enabled=False):
        x = logits.to(dtype)
        if not bool(counted.any()):
            return x[counted].sum()  # an empty sum: 0, still connected to the graph
        selected = x[counted.to(x.device)]
        target = replaced.to(device=x.device)[counted.to(x.device)].to(dtype)
        return F.binary_cross_entropy_with_logits(selected, target, reduction="mean")


def diffcse_loss(contrastive: torch.Tensor, rtd: torch.Tensor, lam: float = DEFAULT_LAMBDA) -> torch.Tensor:
    """Eq. 3/6: ``contrastive + lam * rtd`` (``lam`` default 0.005, the report's table)."""
    if lam < 0:
        raise ValueError(f"lam must be >= 0, got {lam}")
    return contrastive + lam * rtd


class ReplacedTokenDetectionLoss(nn.Module):
    """``nn.Module`` form of :func:`replaced_token_detection`."""

    def forward(self, logits, replaced, attention_mask=None):
        return replaced_token_detection(logits, replaced, attention_mask)


# ---------------------------------------------------------------------------------------------
# Masking and generators
# ---------------------------------------------------------------------------------------------

def _rand(shape, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """Uniform draws on the generator's device (a CPU generator cannot draw on CUDA), moved to ``device``."""
    gen_device = generator.device if generator is not None else device
    return torch.rand(shape, generator=generator, device=gen_device).to(device)


def mask_tokens(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    special_tokens_mask: torch.Tensor | None,
    mask_token_id: int,
    probability: float,
    generator: torch.Generator | None = None,
    *,
    at_least_one: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose positions to mask and put ``mask_token_id`` there; returns ``(masked_ids, masked_positions)``.

    Eligible positions: ``attention_mask == 1`` and not ``special_tokens_mask`` (1 = special, the Hugging
    Face ``return_special_tokens_mask`` convention). Each eligible position is chosen independently with
    ``probability`` (a Bernoulli draw, so the fraction masked is ``probability`` in expectation, not
    exactly per sentence). With ``at_least_one=True``, a row that has an eligible position but drew none
    gets one eligible position chosen uniformly (which raises the rate slightly above ``probability`` on
    short rows). ``probability`` has no default: the report does not state DiffCSE's masking ratio.
    Draws come from ``generator`` (on its own device) for reproducibility.
    """
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be (batch, tokens), got shape {tuple(input_ids.shape)}")
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"probability must be in [0, 1], got {probability}")
    eligible = torch.ones_like(input_ids, dtype=torch.bool)
    checks = (("attention_mask", attention_mask, True), ("special_tokens_mask", special_tokens_mask, False))
    for name, m, want in checks:
        if m is None:
            continue
        if m.shape != input_ids.shape:
            raise ValueError(f"{name} must have the shape of input_ids {tuple(input_ids.shape)}, got {tuple(m.shape)}")
        eligible &= m.to(input_ids.device).bool() if want else ~m.to(input_ids.device).bool()
    chosen = (_rand(input_ids.shape, generator, input_ids.device) < probability) & eligible
    if at_least_one:
        scores = _rand(input_ids.shape, generator, input_ids.device).masked_fill(~eligible, -1.0)
        pick = scores.argmax(dim=1)
        need = eligible.any(dim=1) & ~chosen.any(dim=1)
        rows = torch.nonzero(need, as_tuple=True)[0]
        chosen[rows, pick[rows]] = True
    masked_ids = input_ids.masked_fill(chosen, int(mask_token_id))
    return masked_ids, chosen


class UnigramGenerator:
    """Offline stand-in for DiffCSE's masked-LM generator: replacements are drawn from the corpus unigram
    distribution of token ids (special ids have probability zero and are never drawn).

    ``counts`` is a (vocab_size,) tensor of non-negative token counts.
    """

    def __init__(self, counts: torch.Tensor | Sequence[float], special_ids: Iterable[int] = ()):
        counts = torch.as_tensor(counts, dtype=torch.float64).clone()
        if counts.dim() != 1:
            raise ValueError(f"counts must be (vocab_size,), got shape {tuple(counts.shape)}")
        if bool((counts < 0).any()) or not bool(torch.isfinite(counts).all()):
            raise ValueError("counts must be finite and non-negative")
        self.special_ids = tuple(sorted({int(i) for i in special_ids}))
        for i in self.special_ids:
            if not 0 <= i < counts.numel():
                raise ValueError(f"special id {i} outside the vocabulary of size {counts.numel()}")
        counts[list(self.special_ids)] = 0.0
        total = counts.sum()
        if total <= 0:
            raise ValueError("no non-special token has a positive count")
        self.counts = counts
        self.probabilities = counts / total

    @property
    def vocab_size(self) -> int:
        return int(self.counts.numel())

    @classmethod
    def from_corpus(
        cls, corpus: Iterable[Sequence[int]], vocab_size: int, special_ids: Iterable[int] = ()
    ) -> "UnigramGenerator":
        """Count the token ids of ``corpus`` (an iterable of input-id lists, e.g. a tokenizer's ``input_ids``)."""
        counts = torch.zeros(vocab_size, dtype=torch.float64)
        for ids in corpus:
            ids = torch.as_tensor(list(ids) if not isinstance(ids, torch.Tensor) else ids, dtype=torch.long).flatten()
            if ids.numel() == 0:
                continue
            if int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
                raise ValueError(f"token id outside [0, {vocab_size}) in the corpus")
            counts += torch.bincount(ids, minlength=vocab_size).to(torch.float64)
        return cls(counts, special_ids)

    def fill(
        self, input_ids: torch.Tensor, masked_positions: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Replace ``input_ids`` (the *original* ids) at ``masked_positions`` by unigram samples.

        Returns ``(new_ids, replaced)``; ``replaced`` is True only where the sampled id differs from the
        original (a sample equal to the original is not a replacement).
        """
        if masked_positions.shape != input_ids.shape:
            raise ValueError(
                f"masked_positions must have the shape of input_ids {tuple(input_ids.shape)}, "
                f"got {tuple(masked_positions.shape)}"
            )
        masked = masked_positions.to(input_ids.device).bool()
        k = int(masked.sum())
        new_ids = input_ids.clone()
        if k:
            probs = self.probabilities.to(generator.device if generator is not None else "cpu")
            sampled = torch.multinomial(probs, k, replacement=True, generator=generator)
            new_ids[masked] = sampled.to(device=input_ids.device, dtype=input_ids.dtype)
        return new_ids, masked & (new_ids != input_ids)

    def __repr__(self) -> str:
        return f"UnigramGenerator(vocab_size={self.vocab_size}, special_ids={self.special_ids})"


@torch.no_grad()
def fill_with_mlm(
    mlm_model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    masked_positions: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    mask_token_id: int,
    suppress_ids: Iterable[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DiffCSE's generator: sample replacements from a masked LM (e.g. ``AutoModelForMaskedLM``).

    ``input_ids`` are the *original* ids; the MLM is run, without gradient, on a copy with
    ``mask_token_id`` at ``masked_positions``, and each masked position gets an id sampled from the softmax
    of its logits (``suppress_ids``, e.g. the special ids, are given probability zero). Returns
    ``(new_ids, replaced)`` with ``replaced`` True only where the sample differs from the original.
    The model's train/eval mode is left as the caller set it (use ``eval()`` for a dropout-free generator).
    """
    if masked_positions.shape != input_ids.shape:
        raise ValueError(
            f"masked_positions must have the shape of input_ids {tuple(input_ids.shape)}, "
            f"got {tuple(masked_positions.shape)}"
        )
    masked = masked_positions.to(input_ids.device).bool()
    new_ids = input_ids.clone()
    if not bool(masked.any()):
        return new_ids, torch.zeros_like(masked)
    model_input = input_ids.masked_fill(masked, int(mask_token_id))
    kwargs = {"input_ids": model_input}
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    out = mlm_model(**kwargs)
    logits = out.logits if hasattr(out, "logits") else out[0]
    with torch.autocast(device_type=logits.device.type, enabled=False):
        scores = logits[masked.to(logits.device)].float()  # (k, V)
        if suppress_ids is not None:
            ids = sorted({int(i) for i in suppress_ids})
            if ids:
                scores[:, ids] = float("-inf")
        probs = torch.softmax(scores, dim=-1)
        if generator is not None:
            probs = probs.to(generator.device)
        sampled = torch.multinomial(probs, 1, generator=generator).squeeze(1)
    new_ids[masked] = sampled.to(device=input_ids.device, dtype=input_ids.dtype)
    return new_ids, masked & (new_ids != input_ids)
