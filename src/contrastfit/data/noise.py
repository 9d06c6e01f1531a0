"""Controlled noise for robustness experiments: word-level text noise and label noise.

Gunel et al. (2021, Sec. 4.2 / Table 5) study training sets of increasing noise. Their noise comes
from a back-translation model; here noise is simulated without any model, deterministically:

* text noise on the words of ``text`` (and ``text_pair`` when present), one operation per call:

  - :func:`word_deletion`: ``round(rate * n)`` of the ``n`` words are deleted (at least one word is
    always kept, so a text never becomes empty);
  - :func:`word_swap`: ``round(rate * n / 2)`` disjoint pairs of adjacent words are swapped, i.e.
    about ``rate * n`` words move by one position (at most ``n // 2`` swaps);
  - :func:`word_insertion`: ``round(rate * n)`` words drawn uniformly from a vocabulary
    (:func:`corpus_vocabulary`: the corpus' own words) are inserted at uniform positions.

  Words are whitespace-separated tokens; a noisy text is re-joined with single spaces, so a text
  whose only difference is its whitespace counts as unchanged only if no operation applied.
  ``round`` is round-half-up (``floor(x + 0.5)``), not Python's round-half-even.

* label noise (:func:`flip_labels`): exactly ``round(rate * n)`` rows get a different class, the new
  class drawn uniformly from the other ``num_labels - 1`` classes. For one seed the flipped rows
  are nested across rates (the rows flipped at rate 0.1 are among those flipped at 0.2, with the
  same new labels), so a sweep over rates adds noise rather than redrawing it.

Everything is a function of the arguments and the seed (NumPy ``default_rng``). Rates outside
``[0, 1]`` raise :class:`~contrastfit.errors.ConfigError` (a ``ValueError``).
"""

from __future__ import annotations

import collections
import math
from typing import Any, Iterable, Sequence

import datasets
import numpy as np

from ..errors import ConfigError, DataError
from .loading import LABEL, TEXT, TEXT_PAIR

TEXT_NOISE_KINDS = ("deletion", "swap", "insertion")


def check_rate(rate: Any, what: str = "noise rate") -> float:
    """``rate`` as a float in ``[0, 1]``, or a ConfigError (a ValueError) naming it."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float, np.integer, np.floating)):
        raise ConfigError(f"{what} must be a number between 0 and 1, got {rate!r}")
    rate = float(rate)
    if math.isnan(rate) or not 0.0 <= rate <= 1.0:
        raise ConfigError(f"{what} must be between 0 and 1, got {rate}")
    return rate


def noise_count(rate: float, n: int) -> int:
    """``round(rate * n)``, rounding halves up: how many of ``n`` items a rate touches."""
    return int(math.floor(rate * n + 0.5 + 1e-9))


def _rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


# ---------------------------------------------------------------------------------------------
# One text
# ---------------------------------------------------------------------------------------------

def word_deletion(text: str, rate: float, rng: np.random.Generator | int | None) -> str:
    """Delete ``round(rate * n)`` of the ``n`` words (uniformly chosen), keeping at least one."""
    rate = check_rate(rate, "word deletion rate")
    words = text.split()
    k = min(noise_count(rate, len(words)), max(len(words) - 1, 0))
    if k == 0:
        return text
    drop = set(_rng(rng).choice(len(words), size=k, replace=False).tolist())
    return " ".join(w for i, w in enumerate(words) if i not in drop)


def word_swap(text: str, rate: float, rng: np.random.Generator | int | None) -> str:
    """Swap ``round(rate * n / 2)`` disjoint pairs of adjacent words (uniform over such sets of pairs)."""
    rate = check_rate(rate, "word swap rate")
    words = text.split()
    n = len(words)
    k = min(noise_count(rate, n / 2), n // 2)
    if k == 0:
        return text
    # A uniform set of k disjoint adjacent pairs among n words: choose k of the n - k "slots",
    # then the j-th chosen slot (in order) starts the pair at slot + j.
    slots = np.sort(_rng(rng).choice(n - k, size=k, replace=False))
    for j, s in enumerate(slots.tolist()):
        i = s + j
        words[i], words[i + 1] = words[i + 1], words[i]
    return " ".join(words)


def word_insertion(text: str, rate: float, rng: np.random.Generator | int | None, vocabulary: Sequence[str]) -> str:
    """Insert ``round(rate * n)`` words drawn uniformly from ``vocabulary`` at uniform positions."""
    rate = check_rate(rate, "word insertion rate")
    words = text.split()
    k = noise_count(rate, len(words))
    if k == 0:
        return text
    if len(vocabulary) == 0:
        raise DataError("word insertion needs a non-empty vocabulary")
    gen = _rng(rng)
    new = gen.choice(len(vocabulary), size=k, replace=True)
    for v in new.tolist():
        words.insert(int(gen.integers(0, len(words) + 1)), vocabulary[v])
    return " ".join(words)


def corpus_vocabulary(texts: Iterable[str], min_count: int = 2) -> list[str]:
    """The whitespace-separated words occurring at least ``min_count`` times, sorted."""
    if min_count < 1:
        raise ConfigError(f"min_count must be >= 1, got {min_count}")
    counts = collections.Counter(w for t in texts for w in t.split())
    return sorted(w for w, c in counts.items() if c >= min_count)


# ---------------------------------------------------------------------------------------------
# A data set
# ---------------------------------------------------------------------------------------------

def _replace_columns(ds: datasets.Dataset, new: dict[str, list]) -> datasets.Dataset:
    """``ds`` with the named columns replaced (same features, same column order)."""
    columns = ds.to_dict()
    columns.update(new)
    return datasets.Dataset.from_dict(columns, features=ds.features)


def add_text_noise(
    ds: datasets.Dataset,
    kind: str,
    rate: float,
    seed: int,
    vocabulary: Sequence[str] | None = None,
) -> tuple[datasets.Dataset, dict[str, Any]]:
    """Apply one kind of word noise (``deletion``, ``swap`` or ``insertion``) to every row.

    Both ``text`` and ``text_pair`` (if present) are noised, each column with its own generator
    (``default_rng([seed, column])``) walking the rows in order. For insertion the vocabulary
    defaults to :func:`corpus_vocabulary` of the data set's own texts (``min_count=2``, or 1 if that
    is empty). Returns the noisy data set and a record: kind, rate, seed, rows, ``rows_changed``
    (rows whose text or pair differs) and ``words_changed`` (words deleted / inserted / moved).
    """
    if kind not in TEXT_NOISE_KINDS:
        raise ConfigError(f"unknown text noise kind '{kind}' (available: {', '.join(TEXT_NOISE_KINDS)})")
    rate = check_rate(rate, "text noise rate")
    if TEXT not in ds.column_names:
        raise DataError("text noise needs a 'text' column")
    columns = [c for c in (TEXT, TEXT_PAIR) if c in ds.column_names]
    if kind == "insertion" and vocabulary is None:
        texts = [t for c in columns for t in ds[c][:]]
        vocabulary = corpus_vocabulary(texts, 2) or corpus_vocabulary(texts, 1)
    changed = np.zeros(len(ds), dtype=bool)
    words_changed = 0
    new: dict[str, list] = {}
    for ci, column in enumerate(columns):
        gen = np.random.default_rng([int(seed), ci])
        out = []
        for i, text in enumerate(ds[column][:]):
            n_before = len(text.split())
            if kind == "deletion":
                noisy = word_deletion(text, rate, gen)
                words_changed += n_before - len(noisy.split())
            elif kind == "swap":
                noisy = word_swap(text, rate, gen)
                words_changed += 2 * min(noise_count(rate, n_before / 2), n_before // 2)
            else:
                noisy = word_insertion(text, rate, gen, vocabulary)
                words_changed += len(noisy.split()) - n_before
            changed[i] |= noisy != text
            out.append(noisy)
        new[column] = out
    noisy_ds = _replace_columns(ds, new) if rate > 0 else ds
    record = {"noise": "text", "kind": kind, "rate": rate, "seed": int(seed), "columns": columns,
              "rows": len(ds), "rows_changed": int(changed.sum()), "words_changed": int(words_changed)}
    if kind == "insertion":
        record["vocabulary_size"] = len(vocabulary)
    return noisy_ds, record


def flip_labels(ds: datasets.Dataset, rate: float, num_labels: int, seed: int) -> tuple[datasets.Dataset, dict[str, Any]]:
    """Give exactly ``round(rate * n)`` rows a different class, chosen uniformly among the others.

    The rows are the first ``k`` of a permutation drawn from ``default_rng(seed)`` and each new
    label is ``(old + offset) % num_labels`` with ``offset`` uniform in ``1 .. num_labels - 1``
    (also drawn for every row up front), so for one seed a higher rate flips a superset of rows.
    Returns the noisy data set and a record: rate, seed, rows, ``rows_changed`` and the
    ``transitions`` count per (old, new) class id pair.
    """
    rate = check_rate(rate, "label noise rate")
    if LABEL not in ds.column_names:
        raise DataError("label noise needs a label column")
    if ds.features[LABEL].dtype.startswith("float"):
        raise ConfigError("label noise needs class labels; this data set has a regression target")
    if num_labels < 2:
        raise ConfigError(f"label noise needs at least 2 classes, got num_labels={num_labels}")
    labels = np.asarray(ds[LABEL][:], dtype=np.int64)
    if len(labels) and (labels.min() < 0 or labels.max() >= num_labels):
        raise DataError(f"label ids must be in 0..{num_labels - 1} for label noise (found {labels.min()}..{labels.max()})")
    n = len(labels)
    k = noise_count(rate, n)
    gen = np.random.default_rng(int(seed))
    order = gen.permutation(n)
    offsets = gen.integers(1, num_labels, size=n)
    flipped = order[:k]
    new = labels.copy()
    new[flipped] = (labels[flipped] + offsets[:k]) % num_labels
    transitions = collections.Counter(zip(labels[flipped].tolist(), new[flipped].tolist()))
    record = {"noise": "label", "rate": rate, "seed": int(seed), "rows": n, "rows_changed": int((new != labels).sum()),
              "transitions": {f"{a}->{b}": c for (a, b), c in sorted(transitions.items())}}
    noisy_ds = _replace_columns(ds, {LABEL: new.tolist()}) if k else ds
    return noisy_ds, record
