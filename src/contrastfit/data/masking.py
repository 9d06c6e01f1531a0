r"""Token corruption for replaced-token detection (DiffCSE, Chuang et al. 2022; ELECTRA, Clark et al.
2020): choose positions to mask (:func:`mask_tokens`), then let a fixed generator put a token at each
one (:class:`UnigramGenerator`, :func:`fill_with_mlm`). The loss that scores the result is
:func:`contrastfit.losses.diffcse.replaced_token_detection`.

Conventions
-----------
* Masking replaces every chosen position by ``[MASK]`` (no 80/10/10 split: the generator is what
  produces the replacements), never chooses special tokens or padding, and chooses each eligible
  position independently with the given probability.
* ``replaced[t]`` is ``x''_t != x_t``: a position that was masked but refilled with its original token
  counts as **not replaced** (ELECTRA / DiffCSE); both generators return it so.
* The generator is fixed (no gradient). The DiffCSE paper uses a pretrained masked LM
  (:func:`fill_with_mlm`, loaded by :func:`contrastfit.encoders.load_masked_lm`);
  :class:`UnigramGenerator` is an offline stand-in that samples replacements from the corpus unigram
  distribution (no pretrained MLM installs offline in this project).
* Randomness comes from the ``generator`` argument (a ``torch.Generator``, on its own device) or, without
  one, the global torch RNG.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch
from torch import nn

__all__ = ["mask_tokens", "UnigramGenerator", "fill_with_mlm"]


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
