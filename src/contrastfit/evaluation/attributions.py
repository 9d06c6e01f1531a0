"""Token attributions: how much each word of a text moves the model's probability of a label.

Shapley values (Shapley 1953; the "Shapley value sampling" estimator of Castro et al. 2009) from
Captum's :class:`captum.attr.ShapleyValueSampling`: the players are the words of the input (the
sub-word tokens of one word form one player, so a word is kept or removed as a whole), a
coalition's value is the model's probability of the ``target`` label when only the coalition's
words are present, and a word's attribution is its mean marginal contribution over ``n_samples``
random orderings of the words. Special tokens ([CLS], [SEP]) are always present.

Conventions
-----------
* A word is *absent* (``baseline="remove"``, the default) when its tokens are masked out of
  attention (``attention_mask = 0``): the encoder and the pooling never see it, the other words
  keep their positions. ``baseline="mask"`` instead replaces its tokens by the tokenizer's mask
  token and keeps them attended (the usual choice for BERT-style masked-LM encoders).
* A sentence pair is one input with the words of both texts as players (``segments`` says which
  text a word is in). A model that encodes the two texts separately (``separate_pairs``: a
  multi-task task with a ``concat`` or cosine pair head) gets each text tokenised on its own, with
  its own special tokens, and reads the two encodings apart.
* Values are in probability units for classification (softmax of the model's logits; for LaCon
  the cosine-matching logits of Eq. 8), in output units for regression. For a multi-label model
  the value is the target label's own probability, ``sigmoid(logit_j / T_j)`` as ``predict_proba``
  gives it (``T_j`` its calibration temperature, 1 without), and the default target is the most
  probable label.
* Efficiency holds exactly for every sampled ordering, hence for their mean:
  ``sum(values) == probability - base_probability`` up to float error, where
  ``base_probability`` is the value with every word absent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..encoders import eval_mode
from ..settings import setting
from .calibration import temperatures

__all__ = ["EXPLAIN", "ExplainOptions", "TokenAttribution", "token_attributions"]

BASELINES = ("remove", "mask")


@dataclass(frozen=True)
class ExplainOptions:
    """How the words of a text are attributed, declared once: ``contrastfit explain``'s options are
    generated from these fields (:func:`contrastfit.cli.add_config_options`), :func:`token_attributions`
    takes their defaults, and an experiment's ``attributions:`` mapping declares ``samples`` and
    ``baseline`` with them (:class:`contrastfit.experiments.schema.Attributions`)."""

    samples: int = setting(25, "random word orderings per text (Shapley value sampling)", group="options",
                           metavar="N", ge=1)
    baseline: str = setting("remove", "an absent word is masked out of attention (remove) or replaced by the mask "
                                      "token (mask)", group="options", choices=BASELINES)
    seed: int = setting(0, "seed of the random word orderings", group="options", metavar="SEED")


#: the defaults, as :func:`token_attributions` and the experiments' schema read them
EXPLAIN = ExplainOptions()


@dataclass
class TokenAttribution:
    """Shapley values of the words of one text for one target label."""

    words: list[str]
    values: np.ndarray
    target: int
    target_name: str
    probability: float
    base_probability: float
    text: str
    text_pair: str | None = None
    segments: list[int] = field(default_factory=list)  # 0: first text, 1: second text of a pair

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "text_pair": self.text_pair, "words": list(self.words),
                "segments": list(self.segments), "values": [float(v) for v in self.values],
                "target": int(self.target), "target_name": self.target_name,
                "probability": float(self.probability), "base_probability": float(self.base_probability)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TokenAttribution":
        return cls(words=list(d["words"]), values=np.asarray(d["values"], dtype=np.float64), target=int(d["target"]),
                   target_name=str(d["target_name"]), probability=float(d["probability"]),
                   base_probability=float(d["base_probability"]), text=str(d["text"]),
                   text_pair=d.get("text_pair"), segments=list(d.get("segments") or []))


def _encode_words(tok, text: str, text_pair: str | None, max_length: int) -> tuple[dict[str, list[int]], list[int], list[str], list[int]]:
    """Tokenize one input as one sequence; return the encoding (lists), a feature id per token (-1
    for special tokens), the words (as they read in the text) and the segment of each word."""
    enc = tok(text, text_pair, truncation=True, max_length=max_length,
              return_offsets_mapping=bool(getattr(tok, "is_fast", False)))
    ids = enc["input_ids"]
    features = [-1] * len(ids)
    words: list[str] = []
    segments: list[int] = []
    if getattr(tok, "is_fast", False):
        sources = (text, text_pair)
        seen: dict[tuple[int, int], int] = {}
        spans: list[list[int]] = []
        for i, (w, s) in enumerate(zip(enc.word_ids(), enc.sequence_ids())):
            if w is None:  # added by the tokenizer ([CLS], [SEP]); an unknown word is still a word
                continue
            key = (s, w)
            if key not in seen:
                seen[key] = len(spans)
                spans.append([s, enc["offset_mapping"][i][0], enc["offset_mapping"][i][1]])
                segments.append(int(s))
            f = seen[key]
            spans[f][2] = enc["offset_mapping"][i][1]
            features[i] = f
        words = [sources[s][a:b] for s, a, b in spans]
    else:  # slow tokenizer: one player per token
        tokens = tok.convert_ids_to_tokens(ids)
        types = enc.get("token_type_ids") or [0] * len(ids)
        special = set(tok.all_special_ids) - {tok.unk_token_id}
        for i, t in enumerate(tokens):
            if ids[i] not in special:
                features[i] = len(words)
                words.append(t)
                segments.append(int(types[i]))
    return {k: v for k, v in enc.items() if k != "offset_mapping"}, features, words, segments


def _word_features(model, text: str, text_pair: str | None) -> tuple[dict[str, torch.Tensor], torch.Tensor, list[str], list[int], int | None]:
    """The input as one row of tokens with a feature (player) id per token (-1 for special tokens),
    the words, the segment of each word, and where the second text starts when the model encodes the
    two texts of a pair separately (``model.separate_pairs``: the row is then the two encodings one
    after the other, split again before the forward), else None."""
    tok = model.tokenizer
    if text_pair is None or not getattr(model, "separate_pairs", False):
        enc, features, words, segments = _encode_words(tok, text, text_pair, model.max_length)
        split = None
    else:
        enc, features, words, segments = _encode_words(tok, text, None, model.max_length)
        enc_b, features_b, words_b, _ = _encode_words(tok, text_pair, None, model.max_length)
        split = len(enc["input_ids"])
        enc = {k: enc[k] + enc_b[k] for k in enc}
        features = features + [f + len(words) if f >= 0 else -1 for f in features_b]
        words, segments = words + words_b, segments + [1] * len(words_b)
    batch = {k: torch.tensor([v], device=model.device) for k, v in enc.items()}
    return batch, torch.tensor([features], device=model.device), words, segments, split


def _target_index(target: int | str | None, names: list[str], regression: bool) -> int:
    """The index of the ``target`` label (0 for regression, -1 to resolve from the full input)."""
    if regression:
        target_idx = 0
    elif target is None:
        target_idx = -1  # resolved from the full input by token_attributions
    elif isinstance(target, str):
        if target not in names:
            raise ValueError(f"target label {target!r} is not one of the model's labels ({', '.join(names)})")
        target_idx = names.index(target)
    else:
        target_idx = int(target)
        if not 0 <= target_idx < len(names):
            raise ValueError(f"target index {target_idx} out of range for {len(names)} labels")
    return target_idx


def _probability_forward(model, batch: dict[str, torch.Tensor], split: int | None,
                         regression: bool) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The function from token ids and attention mask to the model's probabilities (regression: outputs)."""
    extra = {k: v for k, v in batch.items() if k not in ("input_ids", "attention_mask")}
    temps = None
    if getattr(model, "multi_label", False):  # each label's own probability, as predict_proba gives it
        temps = torch.as_tensor(temperatures(model), dtype=torch.float32, device=batch["input_ids"].device)

    def forward(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        n = input_ids.shape[0]
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask,
                  **{k: v.expand(n, -1) for k, v in extra.items()}}
        if split is not None:  # the two texts' encodings, one after the other: the model reads them apart
            inputs = {**{k: v[:, :split] for k, v in inputs.items()},
                      **{f"{k}_b": v[:, split:] for k, v in inputs.items()}}
        logits = model(**inputs).logits.float()
        if regression:
            return logits
        return (logits / temps).sigmoid() if temps is not None else logits.softmax(-1)

    return forward


def _baseline_inputs(model, batch: dict[str, torch.Tensor], present: torch.Tensor,
                     baseline: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The token ids and attention mask with every word absent (removed from attention, or masked)."""
    if baseline == "remove":
        base_ids = batch["input_ids"]
        base_att = torch.where(present, torch.zeros_like(batch["attention_mask"]), batch["attention_mask"])
    else:
        tok = model.tokenizer
        fill = next(t for t in (tok.mask_token_id, tok.unk_token_id, tok.pad_token_id) if t is not None)
        base_ids = torch.where(present, torch.full_like(batch["input_ids"], fill), batch["input_ids"])
        base_att = batch["attention_mask"]
    return base_ids, base_att


def _shapley_values(explainer_class: Any, forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                    batch: dict[str, torch.Tensor], base_ids: torch.Tensor, base_att: torch.Tensor,
                    features: torch.Tensor, present: torch.Tensor, n_words: int, target_idx: int, *,
                    exact: bool, n_samples: int, seed: int, batch_size: int) -> np.ndarray:
    """Each word's Shapley value (captum's ``explainer_class`` over ``n_words`` players; none: empty)."""
    if not n_words:
        return np.zeros(0)
    # special tokens get their own player whose baseline equals the input: value 0, never reported
    mask = torch.where(present, features, torch.full_like(features, n_words))
    torch.manual_seed(seed)  # captum draws its orderings from torch's global generator
    if exact and n_words > 6:
        raise ValueError(f"exact Shapley values over {n_words} words need {n_words}! orderings; "
                         "use sampling (exact=False) above 6 words")
    options = {} if exact else {"n_samples": n_samples}
    explainer = explainer_class(forward)
    attr = explainer.attribute((batch["input_ids"], batch["attention_mask"]), baselines=(base_ids, base_att),
                               target=target_idx, feature_mask=(mask, mask),
                               perturbations_per_eval=max(1, min(batch_size, n_words + 1)),
                               show_progress=False, **options)
    # captum writes a player's value on each of its tokens, in each input it spans
    per_token = attr[0][0].double()
    return np.array([float(per_token[mask[0] == f][0]) for f in range(n_words)])


def token_attributions(model, text: str, text_pair: str | None = None, target: int | str | None = None, *,
                       n_samples: int = EXPLAIN.samples, baseline: str = EXPLAIN.baseline, exact: bool = False,
                       seed: int = EXPLAIN.seed,
                       batch_size: int = 64) -> TokenAttribution:
    """Shapley values of the words of ``text`` (and ``text_pair``) for ``target``.

    ``model`` is a :class:`~contrastfit.ContrastiveClassifier`; ``target`` a label index or name
    (default: the predicted label, for a multi-label model the most probable one; ignored for
    regression). ``n_samples`` random word orderings are drawn (seeded), each costing one forward
    pass per word, in batches of ``batch_size``;
    ``exact=True`` averages over every ordering instead (captum's ``ShapleyValues``: n! orderings,
    for texts of a few words only).
    """
    from captum.attr import ShapleyValues, ShapleyValueSampling

    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {', '.join(BASELINES)}, got {baseline!r}")
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    batch, features, words, segments, split = _word_features(model, text, text_pair)
    regression = model.task != "classification"
    names = list(model.label_names or [])
    target_idx = _target_index(target, names, regression)
    forward = _probability_forward(model, batch, split, regression)
    with eval_mode(model), torch.no_grad():
        full = forward(batch["input_ids"], batch["attention_mask"])[0]
        if target_idx < 0:
            target_idx = int(full.argmax())
        present = features >= 0
        base_ids, base_att = _baseline_inputs(model, batch, present, baseline)
        base = forward(base_ids, base_att)[0]
        values = _shapley_values(ShapleyValues if exact else ShapleyValueSampling, forward, batch, base_ids,
                                 base_att, features, present, len(words), target_idx, exact=exact,
                                 n_samples=n_samples, seed=seed, batch_size=batch_size)
    return TokenAttribution(
        words=words, values=values, target=target_idx,
        target_name=(names[target_idx] if names and not regression else "output"),
        probability=float(full[target_idx]), base_probability=float(base[target_idx]),
        text=text, text_pair=text_pair, segments=segments,
    )
