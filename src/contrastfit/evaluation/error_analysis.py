"""Error analysis by word groups (Sosnowski et al., Table 7).

A *word group* is the set of test examples that contain a given word token, e.g. ``"but"`` or
``"n't"``. For each group, :func:`error_analysis` reports its size, every method's accuracy on it
and a two-sided Mann-Whitney U p-value (:func:`scipy.stats.mannwhitneyu`) comparing the method's
0/1 correctness vector with the baseline's on the same examples.

:func:`word_groups` picks the groups automatically: by default the contrast / negation words of
:data:`DEFAULT_CANDIDATES`, then the most frequent other content words, each present in at least
``min_count`` texts.

Tokens are lowercased word tokens; the negation clitic is split off as its own token as in the Penn
Treebank, so ``"didn't"``, ``"did n't"`` and ``"didn’t"`` all give ``["did", "n't"]``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["DEFAULT_CANDIDATES", "error_analysis", "tokenize", "word_groups"]

#: Contrast and negation words examined first (Sosnowski et al. Table 7 style).
DEFAULT_CANDIDATES = ("but", "not", "n't", "no", "never", "however", "although")

_APOSTROPHES = re.compile(r"[\u2018\u2019\u02bc`\u00b4]")
_NT = re.compile(r"(?<=[a-z])n't\b")
_TOKEN = re.compile(r"n't|'[a-z]+|[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens, with ``n't`` split off (``"didn't"`` -> ``["did", "n't"]``)."""
    text = _APOSTROPHES.sub("'", str(text).lower())
    text = _NT.sub(" n't", text)
    return _TOKEN.findall(text)


def _document_frequency(texts: Iterable[str]) -> tuple[list[set[str]], Counter]:
    token_sets = [set(tokenize(t)) for t in texts]
    df: Counter = Counter()
    for tokens in token_sets:
        df.update(tokens)
    return token_sets, df


def word_groups(texts: Sequence[str], min_count: int = 20, max_groups: int = 20,
                candidates: Iterable[str] | None = None) -> list[str]:
    """Words that are present in at least ``min_count`` of ``texts``, at most ``max_groups`` of them.

    With ``candidates`` given, only those words (tokenized the same way, so ``"didn't"`` stands for
    ``"n't"``) are considered, most frequent first. With ``candidates=None``, the words of
    :data:`DEFAULT_CANDIDATES` come first (most frequent first), and the remaining places are
    filled with the most frequent other alphabetic tokens of 3+ letters that are not English stop
    words (scikit-learn's list). Ties keep a deterministic order (candidate order, then
    alphabetical).
    """
    _, df = _document_frequency(texts)

    def ranked(words: Iterable[str]) -> list[str]:
        unique = list(dict.fromkeys(words))
        order = {w: i for i, w in enumerate(unique)}
        return sorted((w for w in unique if df[w] >= min_count), key=lambda w: (-df[w], order[w]))

    if candidates is not None:
        words: list[str] = []
        for c in candidates:
            tokens = tokenize(c)
            words.append(tokens[-1] if tokens else str(c).lower())
        return ranked(words)[:max_groups]

    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    chosen = ranked(DEFAULT_CANDIDATES)[:max_groups]
    others = sorted((w for w in df if w not in chosen and w.isalpha() and len(w) >= 3
                     and w not in ENGLISH_STOP_WORDS and df[w] >= min_count), key=lambda w: (-df[w], w))
    return (chosen + others)[:max_groups]


def error_analysis(texts: Sequence[str], correct_by_method: Mapping[str, Sequence[bool]], baseline: str,
                   groups: Iterable[str] | Mapping[str, str | Iterable[str]]) -> list[dict[str, Any]]:
    """Per word group: size, accuracy of every method, and Mann-Whitney p of each method vs ``baseline``.

    ``correct_by_method`` maps a method to one bool per text (its prediction was right).
    ``groups`` is a list of words (as from :func:`word_groups`) or a mapping ``{group name: word or
    list of words}``; a text is in a group when it contains any of the group's words.

    Returns one row per group::

        {"group": "but", "n": 37,
         "accuracy": {"ce": 0.81, "lacon": 0.86},
         "mannwhitney_p": {"lacon": 0.52}}

    ``mannwhitney_p`` has every method except the baseline; a p-value is ``None`` when the group is
    empty or the two correctness vectors are together constant (all right or all wrong), where the
    test says nothing. Accuracies of an empty group are ``None``.
    """
    from scipy.stats import mannwhitneyu

    if baseline not in correct_by_method:
        raise ValueError(f"baseline {baseline!r} is not one of the methods {sorted(correct_by_method)}")
    correct = {}
    for method, values in correct_by_method.items():
        arr = np.asarray(values, dtype=bool)
        if arr.shape != (len(texts),):
            raise ValueError(f"method {method!r}: {arr.size} correctness values for {len(texts)} texts")
        correct[method] = arr.astype(float)

    if isinstance(groups, Mapping):
        spec = {name: [words] if isinstance(words, str) else list(words) for name, words in groups.items()}
    else:
        spec = {g: [g] for g in groups}
    token_sets, _ = _document_frequency(texts)

    rows = []
    for name, words in spec.items():
        wanted = {tok for w in words for tok in (tokenize(w)[-1:] or [str(w).lower()])}
        mask = np.asarray([bool(tokens & wanted) for tokens in token_sets], dtype=bool)
        n = int(mask.sum())
        row: dict[str, Any] = {"group": name, "n": n,
                               "accuracy": {m: (float(c[mask].mean()) if n else None) for m, c in correct.items()},
                               "mannwhitney_p": {}}
        base = correct[baseline][mask]
        for method, c in correct.items():
            if method == baseline:
                continue
            sub = c[mask]
            both = np.concatenate([sub, base])
            if n == 0 or both.min() == both.max():
                row["mannwhitney_p"][method] = None
            else:
                row["mannwhitney_p"][method] = float(mannwhitneyu(sub, base, alternative="two-sided").pvalue)
        rows.append(row)
    return rows
