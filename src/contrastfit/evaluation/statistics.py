"""Statistics over runs: summaries, top-k selection, tests against a baseline, model selection.

Every p-value comes from :mod:`scipy.stats`; nothing here re-implements a test.

* :func:`summarize` -- mean, sample standard deviation (``ddof=1``, as the papers report) and the
  number of runs of one setting.
* :func:`top_k` -- the ``k`` runs with the highest validation score (Gunel et al.'s "top 3 of 10").
* :func:`compare_to_baseline` -- a method's scores against a named baseline's: the paired Wilcoxon
  signed-rank test (LaCon), and the unpaired Mann-Whitney U and Welch's t-test (Sosnowski et al.).
* :func:`best_by_validation` -- the hyper-parameters with the best mean *validation* score; test
  scores are never read.
* :func:`mcnemar_exact` -- a method against a baseline on the *same test items*: the exact McNemar
  test on the discordant pairs of their per-item correctness (:func:`scipy.stats.binomtest`).

A run is a mapping (e.g. a ``results.json`` dict). A score is found by ``key``: a callable
``key(run) -> float``, a top-level key, or a dotted path such as ``"metrics.validation.accuracy"``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

Key = str | Callable[[Mapping[str, Any]], float]

__all__ = ["best_by_validation", "compare_to_baseline", "get_score", "mcnemar_exact", "mcnemar_exact_counts",
           "summarize", "top_k"]


def summarize(values: Iterable[float]) -> dict[str, float | int]:
    """``{"mean", "std", "n"}`` of ``values``.

    ``std`` is the *sample* standard deviation (``ddof=1``), which is what papers report as
    "mean +- std over seeds". With a single value the sample std is undefined; it is reported as
    ``0.0`` so that tables stay printable. With no values, ``mean`` and ``std`` are ``nan`` and
    ``n`` is 0.
    """
    arr = np.asarray([float(v) for v in values], dtype=float)
    n = int(arr.size)
    if n == 0:
        return {"mean": float("nan"), "std": float("nan"), "n": 0}
    std = float(np.std(arr, ddof=1)) if n > 1 else 0.0
    return {"mean": float(np.mean(arr)), "std": std, "n": n}


def get_score(run: Mapping[str, Any], key: Key) -> float:
    """The score of ``run`` under ``key`` (callable, top-level key or dotted path), as a float."""
    if callable(key):
        return float(key(run))
    if key in run:
        return float(run[key])
    value: Any = run
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise KeyError(f"run {_run_name(run)!r} has no score {key!r}")
        value = value[part]
    return float(value)


def _run_name(run: Mapping[str, Any]) -> str:
    for name in ("run_id", "id", "seed"):
        if name in run:
            return str(run[name])
    return "?"


def _tie_break(run: Mapping[str, Any]) -> tuple:
    """Deterministic secondary order: seed, then run id (both ascending); missing ones last."""
    seed = run.get("seed")
    run_id = run.get("run_id", run.get("id"))
    return (seed is None, str(type(seed).__name__), seed if seed is not None else 0,
            run_id is None, str(run_id) if run_id is not None else "")


def top_k(runs: Sequence[Mapping[str, Any]], k: int, key: Key = "validation") -> list[Mapping[str, Any]]:
    """The ``k`` runs with the highest validation score (``key``), best first.

    Ties are broken deterministically by ``seed`` and then ``run_id`` (ascending), so the same set
    of runs always yields the same selection. Runs whose score is NaN rank last. ``k`` larger than
    the number of runs returns all of them; ``k < 1`` raises :class:`ValueError`.
    """
    if k < 1:
        raise ValueError(f"top_k needs k >= 1, got {k}")

    def order(run: Mapping[str, Any]) -> tuple:
        score = get_score(run, key)
        return (math.isnan(score), -score if not math.isnan(score) else 0.0, _tie_break(run))

    return sorted(runs, key=order)[:k]


def _pairs(method_scores: Any, baseline_scores: Any, paired_keys: Any) -> tuple[list[float], list[float], str | None]:
    """Matched (method, baseline) scores, or a reason why there is no pairing."""
    if isinstance(method_scores, Mapping) and isinstance(baseline_scores, Mapping):
        common = [k for k in method_scores if k in baseline_scores]
        return [float(method_scores[k]) for k in common], [float(baseline_scores[k]) for k in common], None
    if paired_keys is None:
        return [], [], "no pairing keys given (pass paired_keys or score mappings keyed by e.g. (seed, sample))"
    method_keys, baseline_keys = paired_keys
    for scores, keys, who in ((method_scores, method_keys, "method"), (baseline_scores, baseline_keys, "baseline")):
        if len(scores) != len(keys):
            raise ValueError(f"{who}: {len(scores)} scores but {len(keys)} pairing keys")
        if len(set(keys)) != len(keys):
            raise ValueError(f"{who}: pairing keys are not unique")
    by_key = dict(zip(baseline_keys, baseline_scores))
    x = [float(s) for k, s in zip(method_keys, method_scores) if k in by_key]
    y = [float(by_key[k]) for k in method_keys if k in by_key]
    return x, y, None


def _p(value: float) -> float | None:
    value = float(value)
    return None if math.isnan(value) else value


def compare_to_baseline(method_scores: Sequence[float] | Mapping[Hashable, float],
                        baseline_scores: Sequence[float] | Mapping[Hashable, float],
                        paired_keys: tuple[Sequence[Hashable], Sequence[Hashable]] | None = None) -> dict[str, Any]:
    """Two-sided tests of a method's scores against a baseline's, all from :mod:`scipy.stats`.

    ``method_scores`` / ``baseline_scores`` are sequences of scores (one per run) or mappings from a
    pairing key (e.g. ``(seed, sample)``) to a score. Runs are paired for the Wilcoxon test by key:
    either the common keys of two mappings, or ``paired_keys=(method_keys, baseline_keys)`` giving
    the key of each score in the two sequences. Without keys there is no Wilcoxon test.

    Returns ``{"n_method", "n_baseline", "n_pairs", "mean_method", "mean_baseline",
    "wilcoxon_p", "mannwhitney_p", "welch_p", "reasons"}``. A p-value is ``None`` when its test
    does not apply, and ``reasons[test]`` then says why:

    * Wilcoxon signed-rank (:func:`scipy.stats.wilcoxon`, paired): needs at least 2 pairs whose
      differences are not all zero.
    * Mann-Whitney U (:func:`scipy.stats.mannwhitneyu`, two-sided): needs a score on each side.
    * Welch's t-test (:func:`scipy.stats.ttest_ind` with ``equal_var=False``): needs 2 scores on
      each side and some variance.
    """
    from scipy import stats

    x = [float(v) for v in (method_scores.values() if isinstance(method_scores, Mapping) else method_scores)]
    y = [float(v) for v in (baseline_scores.values() if isinstance(baseline_scores, Mapping) else baseline_scores)]
    reasons: dict[str, str] = {}
    out: dict[str, Any] = {
        "n_method": len(x), "n_baseline": len(y),
        "mean_method": float(np.mean(x)) if x else float("nan"),
        "mean_baseline": float(np.mean(y)) if y else float("nan"),
    }

    px, py, why = _pairs(method_scores, baseline_scores, paired_keys)
    out["n_pairs"] = len(px)
    wilcoxon_p = None
    if why is not None:
        reasons["wilcoxon"] = why
    elif len(px) < 2:
        reasons["wilcoxon"] = f"needs at least 2 pairs, got {len(px)}"
    elif all(a == b for a, b in zip(px, py)):
        reasons["wilcoxon"] = "all paired differences are zero"
    else:
        wilcoxon_p = _p(stats.wilcoxon(px, py, alternative="two-sided").pvalue)
        if wilcoxon_p is None:
            reasons["wilcoxon"] = "scipy returned nan"
    out["wilcoxon_p"] = wilcoxon_p

    mannwhitney_p = None
    if not x or not y:
        reasons["mannwhitney"] = "needs at least one score on each side"
    else:
        mannwhitney_p = _p(stats.mannwhitneyu(x, y, alternative="two-sided").pvalue)
        if mannwhitney_p is None:
            reasons["mannwhitney"] = "scipy returned nan"
    out["mannwhitney_p"] = mannwhitney_p

    welch_p = None
    if len(x) < 2 or len(y) < 2:
        reasons["welch"] = f"needs at least 2 scores on each side, got {len(x)} and {len(y)}"
    elif np.var(x) == 0 and np.var(y) == 0:
        reasons["welch"] = "both samples are constant (zero variance)"
    else:
        welch_p = _p(stats.ttest_ind(x, y, equal_var=False).pvalue)
        if welch_p is None:
            reasons["welch"] = "scipy returned nan"
    out["welch_p"] = welch_p
    out["reasons"] = reasons
    return out


def best_by_validation(groups: Mapping[Hashable, Sequence[Mapping[str, Any]]], key: Key = "validation",
                       higher_is_better: bool = True, k: int | None = None) -> Hashable:
    """The config key whose runs have the best mean validation score (``key``); with ``k``, the
    mean over each config's ``k`` best runs by that score (Gunel et al. pick hyper-parameters by "the
    average validation accuracy of the top 3 models").

    Only ``key`` is read from each run -- never a test score -- so selection cannot leak the test
    set. Groups without runs, or whose mean is NaN, are skipped; ties go to the config key that
    comes first in sorted ``str()`` order. Raises :class:`ValueError` when no group has a score.
    """
    best: tuple[float, str] | None = None
    best_key: Hashable = None
    for config_key, runs in groups.items():
        if not runs:
            continue
        scores = sorted((get_score(r, key) for r in runs), reverse=higher_is_better)
        mean = float(np.mean(scores[:k] if k is not None else scores))
        if math.isnan(mean):
            continue
        rank = (-mean if higher_is_better else mean, str(config_key))
        if best is None or rank < best:
            best, best_key = rank, config_key
    if best is None:
        raise ValueError("best_by_validation: no group has a validation score")
    return best_key


def mcnemar_exact_counts(b: int, c: int) -> dict[str, Any]:
    """Exact McNemar test from the two discordant counts of a paired 2x2 table.

    ``b``: items the method gets right and the baseline wrong; ``c``: the method wrong, the baseline
    right. Under the null hypothesis (the two are equally often right on the items where they
    disagree) ``b ~ Binomial(b + c, 1/2)``; ``p`` is the two-sided exact binomial p-value
    (:func:`scipy.stats.binomtest`), i.e. ``min(1, 2 * P(X <= min(b, c)))``. The concordant cells
    do not enter the test.

    Returns ``{"b", "c", "n_discordant", "p", "reason"}``; with no discordant pair (``b = c = 0``)
    the test says nothing: ``p`` is ``None`` and ``reason`` says why (``reason`` is ``None``
    otherwise).
    """
    from scipy.stats import binomtest

    b, c = int(b), int(c)
    if b < 0 or c < 0:
        raise ValueError(f"McNemar counts must be >= 0, got b={b}, c={c}")
    out: dict[str, Any] = {"b": b, "c": c, "n_discordant": b + c, "p": None, "reason": None}
    if b + c == 0:
        out["reason"] = "no discordant pair (the two are right and wrong on the same items)"
        return out
    out["p"] = float(binomtest(b, b + c, 0.5, alternative="two-sided").pvalue)
    return out


def mcnemar_exact(method_correct: Sequence[bool], baseline_correct: Sequence[bool]) -> dict[str, Any]:
    """Paired comparison of a method and a baseline on the same test items: exact McNemar test.

    ``method_correct[i]`` / ``baseline_correct[i]``: whether each got item ``i`` right (the same
    items in the same order). The 2x2 table is ``a`` (both right), ``b`` (method right, baseline
    wrong), ``c`` (method wrong, baseline right), ``d`` (both wrong); the test is
    :func:`mcnemar_exact_counts` on ``b`` and ``c``. Returns its dict plus ``"a"``, ``"d"`` and
    ``"n"`` (the number of items).

    The pairs must be independent: pooling the items of several runs (seeds, training samples) on
    one test set repeats every item, which this test does not account for.
    """
    m = np.asarray(method_correct, dtype=bool)
    r = np.asarray(baseline_correct, dtype=bool)
    if m.ndim != 1 or m.shape != r.shape:
        raise ValueError(f"mcnemar_exact needs two 1-d vectors of the same length, got shapes {m.shape} and {r.shape}")
    out = mcnemar_exact_counts(int(np.sum(m & ~r)), int(np.sum(~m & r)))
    out.update(a=int(np.sum(m & r)), d=int(np.sum(~m & ~r)), n=int(m.size))
    return out
