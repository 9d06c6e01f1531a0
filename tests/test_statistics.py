"""Statistics: summaries, top-k, tests against a baseline (SciPy), model selection by validation."""

from __future__ import annotations

import math

import pytest

from contrastfit.evaluation.statistics import best_by_validation, compare_to_baseline, get_score, summarize, top_k

METHOD = [0.80, 0.82, 0.85, 0.83, 0.86]
BASE = [0.79, 0.80, 0.82, 0.79, 0.81]

# The p-values below are computed by hand from the tests' textbook definitions, not by the SciPy
# calls under test.
# Wilcoxon signed-rank, METHOD - BASE = 0.01, 0.02, 0.03, 0.04, 0.05: all 5 differences positive and
# distinct, W- = 0, exact two-sided p = 2 * P(W- = 0) = 2 / 2**5.
WILCOXON_P = 2 / 2 ** 5
# Mann-Whitney U, METHOD vs BASE: U = 2.5 + 4.5 + 5 + 5 + 5 = 22 (ties count a half), E[U] = 25 / 2.
# With ties (0.79 x2, 0.80 x2, 0.82 x2 in the pooled 10) the exact test does not apply: normal
# approximation with tie correction, Var U = n1 n2 / 12 * (N + 1 - sum(t^3 - t) / (N (N - 1)))
# = 25 / 12 * (11 - 18 / 90) = 22.5, and continuity correction: z = (22 - 12.5 - 0.5) / sqrt(22.5),
# p = 2 (1 - Phi(z)) = erfc(z / sqrt 2).
MANNWHITNEY_P = math.erfc(9 / math.sqrt(22.5) / math.sqrt(2))


def t_two_sided_p(t: float, df: float, intervals: int = 2000) -> float:
    """Two-sided p-value of Student's t with ``df`` (any real df > 1) degrees of freedom:
    2 * integral of the t density from |t| to infinity, by Simpson's rule after the substitution
    u = 1/x (the integrand c * df^((df+1)/2) * u^(df-1) * (df u^2 + 1)^(-(df+1)/2) is smooth on
    [0, 1/|t|]). Written here so that Welch's p-value is not checked against scipy.stats.t itself."""
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))

    def g(u: float) -> float:
        return c * df ** ((df + 1) / 2) * u ** (df - 1) * (df * u * u + 1) ** (-(df + 1) / 2)

    h = 1 / abs(t) / intervals
    total = g(0.0) + g(intervals * h) + sum((4 if k % 2 else 2) * g(k * h) for k in range(1, intervals))
    return 2 * total * h / 3


def welch_by_hand(x, y) -> tuple[float, float]:
    """Welch's t statistic and Welch-Satterthwaite degrees of freedom, from the sample variances."""
    def mean_var(v):
        m = sum(v) / len(v)
        return m, sum((a - m) ** 2 for a in v) / (len(v) - 1)

    (mx, vx), (my, vy) = mean_var(x), mean_var(y)
    sx, sy = vx / len(x), vy / len(y)
    return (mx - my) / math.sqrt(sx + sy), (sx + sy) ** 2 / (sx ** 2 / (len(x) - 1) + sy ** 2 / (len(y) - 1))


def test_summarize_sample_std():
    s = summarize([1.0, 2.0, 3.0, 4.0])
    assert s["n"] == 4
    assert s["mean"] == pytest.approx(2.5)
    assert s["std"] == pytest.approx(math.sqrt(5 / 3))  # ddof=1: sum sq dev 5 over n-1 = 3
    assert s["std"] != pytest.approx(math.sqrt(5 / 4))  # not the population std (ddof=0)


def test_summarize_edge_cases():
    assert summarize([0.7]) == {"mean": 0.7, "std": 0.0, "n": 1}
    empty = summarize([])
    assert empty["n"] == 0 and math.isnan(empty["mean"]) and math.isnan(empty["std"])
    assert summarize(v for v in (1, 3))["mean"] == 2.0  # any iterable


def test_compare_against_hand_computed_p_values():
    keys = [(seed, 0) for seed in range(5)]
    out = compare_to_baseline(METHOD, BASE, paired_keys=(keys, keys))
    assert out["n_pairs"] == 5 and out["n_method"] == 5 and out["n_baseline"] == 5
    assert out["wilcoxon_p"] == pytest.approx(WILCOXON_P, rel=1e-12)
    assert MANNWHITNEY_P == pytest.approx(0.0577796, rel=1e-5)
    assert out["mannwhitney_p"] == pytest.approx(MANNWHITNEY_P, rel=1e-9)
    # Welch: means 0.832 and 0.802, sample variances 0.00057 and 0.00017 -> t = 0.03 / sqrt(0.000148),
    # df = 0.000148^2 / ((0.000114^2 + 0.000034^2) / 4) (not an integer)
    t, df = welch_by_hand(METHOD, BASE)
    assert t == pytest.approx(0.03 / math.sqrt(0.000148), rel=1e-9)
    assert df == pytest.approx(0.000148 ** 2 / ((0.000114 ** 2 + 0.000034 ** 2) / 4), rel=1e-9)
    assert df == pytest.approx(6.1911, abs=1e-4)
    assert out["welch_p"] == pytest.approx(t_two_sided_p(t, df), rel=1e-9)
    assert out["mean_method"] == pytest.approx(0.832) and out["mean_baseline"] == pytest.approx(0.802)
    assert out["reasons"] == {}


def test_known_values():
    # Wilcoxon, 5 pairs all improved with distinct differences: exact two-sided p = 2 / 2**5.
    keys = list(range(5))
    assert compare_to_baseline(METHOD, BASE, (keys, keys))["wilcoxon_p"] == pytest.approx(0.0625)
    # Mann-Whitney, complete separation of 3 vs 3: exact two-sided p = 2 / C(6, 3) = 0.1.
    out = compare_to_baseline([1, 2, 3], [4, 5, 6])
    assert out["mannwhitney_p"] == pytest.approx(0.1)
    # Welch: x = 1..5 (var 2.5), y = 2x (var 10); t = -3 / sqrt(0.5 + 2), df = 6.25 / (0.0625 + 1).
    x, y = [1, 2, 3, 4, 5], [2, 4, 6, 8, 10]
    t = -3 / math.sqrt(2.5)
    df = 6.25 / (0.5 ** 2 / 4 + 2.0 ** 2 / 4)
    assert welch_by_hand(x, y) == pytest.approx((t, df), rel=1e-12)
    assert compare_to_baseline(x, y)["welch_p"] == pytest.approx(t_two_sided_p(t, df), rel=1e-9)
    # Welch with 2 degrees of freedom, where Student's t has a closed form, P(|T| > t) = 1 - t / sqrt(2 + t^2):
    # x = [1, 3], y = [4, 6] (variances 2 and 2), t = -3 / sqrt(2), df = (1 + 1)^2 / (1 + 1) = 2.
    t2 = 3 / math.sqrt(2)
    assert welch_by_hand([1, 3], [4, 6]) == pytest.approx((-t2, 2.0), rel=1e-12)
    assert compare_to_baseline([1, 3], [4, 6])["welch_p"] == pytest.approx(1 - t2 / math.sqrt(2 + t2 ** 2), rel=1e-12)
    assert 1 - t2 / math.sqrt(2 + t2 ** 2) == pytest.approx(t_two_sided_p(-t2, 2.0), rel=1e-9)  # the integral's check


def test_pairing_by_key_reorders_and_intersects():
    # Same pairs as METHOD/BASE but the baseline is listed in another order with an unmatched extra run.
    mkeys = [(s, 0) for s in range(5)]
    order = [3, 1, 4, 0, 2]
    bkeys = [(s, 0) for s in order] + [(9, 0)]
    bscores = [BASE[s] for s in order] + [0.5]
    out = compare_to_baseline(METHOD, bscores, paired_keys=(mkeys, bkeys))
    assert out["n_pairs"] == 5 and out["n_baseline"] == 6
    assert out["wilcoxon_p"] == pytest.approx(WILCOXON_P, rel=1e-12)  # paired as METHOD/BASE, not by position
    # Mappings keyed by (seed, sample) pair on their common keys.
    out2 = compare_to_baseline(dict(zip(mkeys, METHOD)), dict(zip(bkeys, bscores)))
    assert out2["wilcoxon_p"] == pytest.approx(WILCOXON_P, rel=1e-12)
    # Mann-Whitney is unpaired: all 6 baseline runs. The extra 0.5 is below every method score, so
    # U = 22 + 5 = 27 of n1 n2 = 30; N = 11, Var U = 30 / 12 * (12 - 18 / 110); z = (27 - 15 - 0.5) / sd.
    want = math.erfc(11.5 / math.sqrt(2.5 * (12 - 18 / 110)) / math.sqrt(2))
    assert want == pytest.approx(0.0345096, rel=1e-5)
    assert out2["mannwhitney_p"] == pytest.approx(want, rel=1e-9)


def test_wilcoxon_not_applicable():
    no_keys = compare_to_baseline(METHOD, BASE)
    assert no_keys["wilcoxon_p"] is None and "pairing" in no_keys["reasons"]["wilcoxon"]
    same = compare_to_baseline([0.5, 0.6, 0.7], [0.5, 0.6, 0.7], paired_keys=([1, 2, 3], [1, 2, 3]))
    assert same["wilcoxon_p"] is None and "zero" in same["reasons"]["wilcoxon"]
    one = compare_to_baseline({1: 0.9}, {1: 0.8})
    assert one["wilcoxon_p"] is None and "2 pairs" in one["reasons"]["wilcoxon"]
    assert one["welch_p"] is None and "welch" in one["reasons"]
    assert one["mannwhitney_p"] == pytest.approx(1.0)  # 1 vs 1: U is 0 or 1 with probability 1/2 each
    constant = compare_to_baseline([0.5, 0.5], [0.5, 0.5])
    assert constant["welch_p"] is None and "constant" in constant["reasons"]["welch"]
    with pytest.raises(ValueError):
        compare_to_baseline([1, 2], [1, 2], paired_keys=([1, 1], [1, 2]))


def test_top_k_highest_validation_with_deterministic_ties():
    runs = [
        {"run_id": "e", "seed": 4, "validation": 0.80, "test": 0.99},
        {"run_id": "b", "seed": 1, "validation": 0.90, "test": 0.10},
        {"run_id": "d", "seed": 3, "validation": 0.85, "test": 0.50},
        {"run_id": "a", "seed": 0, "validation": 0.85, "test": 0.60},
        {"run_id": "c", "seed": 2, "validation": 0.70, "test": 0.70},
    ]
    best = top_k(runs, 3, key="validation")
    assert [r["seed"] for r in best] == [1, 0, 3]
    assert [r["seed"] for r in top_k(list(reversed(runs)), 3, key="validation")] == [1, 0, 3]
    assert len(top_k(runs, 10)) == 5
    with pytest.raises(ValueError):
        top_k(runs, 0)


def test_top_k_ties_by_run_id_and_nested_keys():
    runs = [{"run_id": "z", "seed": 1, "metrics": {"validation": {"accuracy": 0.5}}},
            {"run_id": "y", "seed": 1, "metrics": {"validation": {"accuracy": 0.5}}},
            {"run_id": "x", "seed": 2, "metrics": {"validation": {"accuracy": float("nan")}}}]
    assert [r["run_id"] for r in top_k(runs, 3, key="metrics.validation.accuracy")] == ["y", "z", "x"]
    assert get_score(runs[0], lambda r: r["metrics"]["validation"]["accuracy"] * 2) == 1.0
    with pytest.raises(KeyError):
        get_score(runs[0], "metrics.test.accuracy")


class NoTest(dict):
    """A run that fails the test if anything reads its test score."""

    def __getitem__(self, key):
        if key == "test":
            raise AssertionError("best_by_validation read a test score")
        return super().__getitem__(key)

    def get(self, key, default=None):
        if key == "test":
            raise AssertionError("best_by_validation read a test score")
        return super().get(key, default)


def test_best_by_validation_never_looks_at_test():
    groups = {
        "lr=1e-5": [NoTest(validation=0.80, test=0.95), NoTest(validation=0.82, test=0.96)],
        "lr=3e-5": [NoTest(validation=0.86, test=0.60), NoTest(validation=0.84, test=0.61)],
        "lr=5e-5": [NoTest(validation=0.70, test=0.99)],
        "empty": [],
    }
    assert best_by_validation(groups) == "lr=3e-5"
    assert best_by_validation(groups, higher_is_better=False) == "lr=5e-5"
    # Ties go to the first key in sorted order, whatever the dict order.
    tie = {("b", 2): [{"validation": 0.5}], ("a", 1): [{"validation": 0.5}]}
    assert best_by_validation(tie) == ("a", 1)
    with pytest.raises(ValueError):
        best_by_validation({"x": []})


def test_best_by_validation_with_top_k_uses_the_mean_of_the_k_best_runs():
    """Gunel et al.: hyper-parameters by the average validation accuracy of the top 3 models."""
    groups = {
        "steady": [{"validation": v} for v in (0.80, 0.80, 0.80, 0.80)],    # mean 0.80, top-2 0.80
        "erratic": [{"validation": v} for v in (0.90, 0.88, 0.50, 0.50)],   # mean 0.695, top-2 0.89
    }
    assert best_by_validation(groups) == "steady"
    assert best_by_validation(groups, k=2) == "erratic"
    assert best_by_validation({"a": [{"validation": 1.0}], "b": [{"validation": 0.2}, {"validation": 3.0}]},
                              higher_is_better=False, k=1) == "b"
