"""Error analysis by word groups and by automatically found features (Sosnowski et al., Table 7).

A *word group* is the set of test examples that contain a given word token, e.g. ``"but"`` or
``"n't"``. For each group, :func:`error_analysis` reports its size, every method's accuracy on it
and, against the baseline on the same examples, the exact McNemar test (paired:
:func:`contrastfit.evaluation.statistics.mcnemar_exact`, ``b`` = method right and baseline wrong,
``c`` = the reverse). The older unpaired two-sided Mann-Whitney U p-value of the two 0/1
correctness vectors is still returned (``mannwhitney_p``), but it ignores that both vectors are on
the same items; use ``mcnemar``.

:func:`associated_features` *finds* the features instead of taking a list: as GEval does (Graliński
et al. 2019, the tool behind Sosnowski et al.'s Table 7), every word and every bigram present in at
least ``min_count`` test items splits the items into those with and those without it, and a
Mann-Whitney U test (:func:`scipy.stats.mannwhitneyu`) compares one method's per-item scores (1 =
right, 0 = wrong, or any per-item score such as a loss) of the two sets. Features are ranked by
p-value, with the effect (mean score with / without, counts) and Benjamini-Hochberg q-values over
all the features tested.

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

from .statistics import mcnemar_exact

__all__ = ["DEFAULT_CANDIDATES", "associated_features", "error_analysis", "text_features", "tokenize", "word_groups"]

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
         "mcnemar": {"lacon": {"b": 4, "c": 2, "n_discordant": 6, "p": 0.6875, "reason": None,
                               "a": 28, "d": 3, "n": 37}},
         "mannwhitney_p": {"lacon": 0.52}}

    ``mcnemar`` (the paired test to use) and ``mannwhitney_p`` (unpaired, kept for comparison) have
    every method except the baseline. A McNemar ``p`` is ``None`` when the group has no item on which
    the two disagree; a Mann-Whitney p-value is ``None`` when the group is empty or the two
    correctness vectors are together constant (all right or all wrong), where the test says nothing.
    Accuracies of an empty group are ``None``.
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
                               "mcnemar": {}, "mannwhitney_p": {}}
        base = correct[baseline][mask]
        for method, c in correct.items():
            if method == baseline:
                continue
            sub = c[mask]
            row["mcnemar"][method] = mcnemar_exact(sub.astype(bool), base.astype(bool))
            both = np.concatenate([sub, base])
            if n == 0 or both.min() == both.max():
                row["mannwhitney_p"][method] = None
            else:
                row["mannwhitney_p"][method] = float(mannwhitneyu(sub, base, alternative="two-sided").pvalue)
        rows.append(row)
    return rows


def text_features(text: str, ngrams: int = 2) -> set[str]:
    """The features of one text: its word tokens (:func:`tokenize`) and, for ``ngrams >= 2``, its
    n-grams of adjacent tokens up to length ``ngrams``, joined by a space (``"did n't"``)."""
    tokens = tokenize(text)
    out = set(tokens)
    for n in range(2, ngrams + 1):
        out.update(" ".join(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
    return out


def associated_features(texts: Sequence[str], scores: Sequence[float], min_count: int = 5, ngrams: int = 2,
                        alternative: str = "two-sided", max_features: int | None = None) -> list[dict[str, Any]]:
    """The features (words and bigrams) whose presence most changes the per-item score, GEval-style.

    ``scores`` holds one number per text: 1/0 for right/wrong (then the means are accuracies), or a
    per-item loss, or the fraction of runs that got the item right. Every feature of
    :func:`text_features` present in at least ``min_count`` texts (and absent from at least one)
    is tested: the scores of the texts with it against those without it, with
    :func:`scipy.stats.mannwhitneyu` (``alternative`` as there, for the *with* group:
    ``"two-sided"`` finds features that change the score either way, ``"less"`` only those that
    lower it, GEval's "worst features"; SciPy's default method: exact without ties and both groups
    under 8 items, else the normal approximation with tie and continuity corrections).

    Returns one row per feature, best (smallest p) first::

        {"feature": "but", "n_with": 12, "n_without": 88, "mean_with": 0.42, "mean_without": 0.81,
         "difference": -0.39, "u": 234.0, "p": 0.0012, "q": 0.031}

    ``u`` is the Mann-Whitney U of the *with* group (``u / (n_with * n_without)`` is the probability
    that a random item with the feature outscores one without, ties counted half); ``q`` is the
    Benjamini-Hochberg adjusted p-value over all features tested (:func:`scipy.stats.false_discovery_control`):
    with hundreds of features, small raw p-values are expected by chance. When all scores are equal
    no test says anything: ``p`` and ``q`` are ``None`` for every feature. Ties in p are broken by the
    larger ``|difference|``, then the larger ``n_with``, then the feature alphabetically. ``max_features``
    keeps the first rows only (q-values are still over all features tested).
    """
    from scipy.stats import false_discovery_control, mannwhitneyu

    y = np.asarray(scores, dtype=float)
    if y.shape != (len(texts),):
        raise ValueError(f"{y.size} scores for {len(texts)} texts")
    if not np.all(np.isfinite(y)):
        raise ValueError("scores must be finite")
    if min_count < 1:
        raise ValueError(f"min_count must be >= 1, got {min_count}")
    if ngrams < 1:
        raise ValueError(f"ngrams must be >= 1, got {ngrams}")
    if alternative not in ("two-sided", "less", "greater"):
        raise ValueError(f"alternative must be 'two-sided', 'less' or 'greater', got {alternative!r}")

    items: dict[str, list[int]] = {}  # feature -> the texts that have it
    for i, text in enumerate(texts):
        for feature in text_features(text, ngrams):
            items.setdefault(feature, []).append(i)
    n = len(texts)
    constant = n == 0 or float(y.min()) == float(y.max())
    rows: list[dict[str, Any]] = []
    for feature in sorted(f for f, idx in items.items() if min_count <= len(idx) < n):
        mask = np.zeros(n, dtype=bool)
        mask[items[feature]] = True
        with_, without = y[mask], y[~mask]
        row: dict[str, Any] = {"feature": feature, "n_with": int(mask.sum()), "n_without": int((~mask).sum()),
                               "mean_with": float(with_.mean()), "mean_without": float(without.mean())}
        row["difference"] = row["mean_with"] - row["mean_without"]
        if constant:
            row.update(u=float(row["n_with"] * row["n_without"]) / 2, p=None)
        else:
            res = mannwhitneyu(with_, without, alternative=alternative)
            row.update(u=float(res.statistic), p=float(res.pvalue))
        rows.append(row)

    tested = [r for r in rows if r["p"] is not None]
    if tested:
        q = false_discovery_control([r["p"] for r in tested], method="bh")
        for r, value in zip(tested, q):
            r["q"] = float(value)
    for r in rows:
        r.setdefault("q", None)
    rows.sort(key=lambda r: (r["p"] is None, r["p"] if r["p"] is not None else 0.0,
                             -abs(r["difference"]), -r["n_with"], r["feature"]))
    return rows[:max_features] if max_features is not None else rows
