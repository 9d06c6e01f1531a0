"""Error analysis by word groups: tokenisation, automatic groups, per-group accuracy and p-values."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from contrastfit.evaluation.error_analysis import DEFAULT_CANDIDATES, error_analysis, tokenize, word_groups


def test_tokenize_splits_nt():
    assert tokenize("I didn't like it") == ["i", "did", "n't", "like", "it"]
    assert tokenize("I did n't like it") == ["i", "did", "n't", "like", "it"]
    assert tokenize("It DIDN\u2019T work, But fine.") == ["it", "did", "n't", "work", "but", "fine"]
    assert "n't" not in tokenize("the nth item, not bad")


def make_texts():
    texts = []
    texts += [f"good film but long {i}" for i in range(25)]
    texts += [f"it did n't work {i}" for i in range(12)] + [f"it didn't work {i}" for i in range(12)]
    texts += [f"not great acting {i}" for i in range(21)]
    texts += [f"never again {i}" for i in range(5)]  # below min_count
    texts += ["the butter is fine"] * 10  # "butter" must not count as "but"
    return texts


def test_word_groups_default_candidates_then_frequent_words():
    texts = make_texts()
    groups = word_groups(texts, min_count=20)
    # Default candidates first (most frequent first), then frequent content words.
    assert groups[:3] == ["but", "n't", "not"]
    assert "never" not in groups and "the" not in groups
    assert set(groups[3:]) >= {"good", "film", "long", "work", "great", "acting"}
    assert all(g not in DEFAULT_CANDIDATES for g in groups[3:])
    assert word_groups(texts, min_count=20, max_groups=2) == ["but", "n't"]


def test_word_groups_explicit_candidates():
    texts = make_texts()
    assert word_groups(texts, min_count=20, candidates=["not", "didn't", "never", "butter"]) == ["n't", "not"]
    assert word_groups(texts, min_count=5, candidates=["never", "butter"]) == ["butter", "never"]


def test_error_analysis_rows():
    texts = ["good but long", "bad but fun", "did n't like", "didn't love", "plain text", "but why"]
    correct = {
        "ce": [True, False, False, False, True, False],
        "lacon": [True, True, True, True, True, True],
        "scl": [True, False, False, False, False, False],
    }
    rows = error_analysis(texts, correct, "ce", ["but", "n't", "absent"])
    by = {r["group"]: r for r in rows}
    assert by["but"]["n"] == 3 and by["n't"]["n"] == 2 and by["absent"]["n"] == 0
    assert by["but"]["accuracy"] == pytest.approx({"ce": 1 / 3, "lacon": 1.0, "scl": 1 / 3})
    assert set(by["but"]["mannwhitney_p"]) == {"lacon", "scl"}
    expected = stats.mannwhitneyu([1, 1, 1], [1, 0, 0], alternative="two-sided").pvalue
    assert by["but"]["mannwhitney_p"]["lacon"] == pytest.approx(expected)
    assert by["but"]["mannwhitney_p"]["scl"] == pytest.approx(1.0)  # identical vectors
    # n't group: ce and scl all wrong together -> constant -> None; lacon all right vs all wrong -> a p-value.
    assert by["n't"]["mannwhitney_p"]["scl"] is None
    assert by["n't"]["mannwhitney_p"]["lacon"] == pytest.approx(
        stats.mannwhitneyu([1, 1], [0, 0], alternative="two-sided").pvalue)
    assert by["absent"]["accuracy"]["ce"] is None and by["absent"]["mannwhitney_p"]["lacon"] is None


def test_error_analysis_group_mapping_and_validation():
    texts = ["not good", "never fun", "fine", "didn't work"]
    correct = {"ce": [True, False, True, False], "lacon": [True, True, True, False]}
    rows = error_analysis(texts, correct, "ce", {"negation": ["not", "never", "n't"], "fine": "fine"})
    assert rows[0]["group"] == "negation" and rows[0]["n"] == 3
    assert rows[0]["accuracy"]["lacon"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        error_analysis(texts, correct, "missing", ["not"])
    with pytest.raises(ValueError):
        error_analysis(texts, {"ce": [True]}, "ce", ["not"])


# ---------------------------------------------------------------------------------------------
# Paired comparison: exact McNemar on the discordant pairs
# ---------------------------------------------------------------------------------------------

def test_mcnemar_exact_counts_by_hand():
    from contrastfit.evaluation.statistics import mcnemar_exact_counts

    # b = 1, c = 7: under H0 b ~ Bin(8, 1/2); two-sided p = 2 * P(X <= 1) = 2 * (1 + 8) / 2^8 = 18/256
    assert mcnemar_exact_counts(1, 7)["p"] == pytest.approx(18 / 256, rel=1e-12)
    assert mcnemar_exact_counts(7, 1)["p"] == pytest.approx(18 / 256, rel=1e-12)  # symmetric
    # b = 0, c = 5: 2 * (1/2)^5 = 1/16
    assert mcnemar_exact_counts(0, 5)["p"] == pytest.approx(1 / 16, rel=1e-12)
    # b = 2, c = 10: 2 * (1 + 12 + 66) / 4096 = 158/4096
    assert mcnemar_exact_counts(2, 10)["p"] == pytest.approx(158 / 4096, rel=1e-12)
    assert mcnemar_exact_counts(3, 3)["p"] == pytest.approx(1.0)
    none = mcnemar_exact_counts(0, 0)
    assert none["p"] is None and "no discordant" in none["reason"] and none["n_discordant"] == 0
    with pytest.raises(ValueError):
        mcnemar_exact_counts(-1, 2)


def test_mcnemar_exact_table_from_correctness_vectors():
    from contrastfit.evaluation.statistics import mcnemar_exact

    # 12 items: a = 3 both right, b = 1 method right only, c = 7 baseline right only, d = 1 both wrong
    method = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0]
    base = [1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0]
    out = mcnemar_exact(method, base)
    assert (out["a"], out["b"], out["c"], out["d"], out["n"]) == (3, 1, 7, 1, 12)
    assert out["p"] == pytest.approx(18 / 256, rel=1e-12)
    # An unpaired test on the same vectors gives another answer: the pairing matters.
    unpaired = stats.mannwhitneyu(method, base, alternative="two-sided").pvalue
    assert abs(unpaired - out["p"]) > 0.01
    with pytest.raises(ValueError):
        mcnemar_exact([1, 0], [1, 0, 1])


def test_error_analysis_rows_have_mcnemar():
    texts = ["good but long", "bad but fun", "did n't like", "didn't love", "plain text", "but why",
             "but again", "but still", "but no", "but yes"]
    correct = {
        "ce": [True, True, False, False, True, True, True, True, True, True],
        "lacon": [True, False, True, True, True, False, False, False, False, False],
    }
    by = {r["group"]: r for r in error_analysis(texts, correct, "ce", ["but", "n't", "absent"])}
    # "but": 7 texts; lacon right & ce wrong: 0; lacon wrong & ce right: 6 -> p = 2 / 2^6
    m = by["but"]["mcnemar"]["lacon"]
    assert (m["a"], m["b"], m["c"], m["d"], m["n"]) == (1, 0, 6, 0, 7)
    assert m["p"] == pytest.approx(2 / 64, rel=1e-12)
    # "n't": 2 texts, both b -> p = 2 / 4 = 0.5
    assert by["n't"]["mcnemar"]["lacon"]["p"] == pytest.approx(0.5)
    assert by["absent"]["mcnemar"]["lacon"]["p"] is None
    assert set(by["but"]["mcnemar"]) == {"lacon"}  # not the baseline against itself


# ---------------------------------------------------------------------------------------------
# Features found automatically (GEval-style, Sosnowski Table 7)
# ---------------------------------------------------------------------------------------------

def test_text_features_words_and_bigrams():
    from contrastfit.evaluation.error_analysis import text_features

    assert text_features("It didn't work") == {"it", "did", "n't", "work", "it did", "did n't", "n't work"}
    assert text_features("It didn't work", ngrams=1) == {"it", "did", "n't", "work"}


def _mw_two_sided_by_hand(with_, without):
    """Mann-Whitney U by counting pairs, normal approximation with tie and continuity corrections."""
    import math

    n1, n2 = len(with_), len(without)
    u1 = sum((a > b) + 0.5 * (a == b) for a in with_ for b in without)
    values = list(with_) + list(without)
    n = n1 + n2
    ties = sum(values.count(v) ** 3 - values.count(v) for v in set(values))
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1))))
    z = (max(u1, n1 * n2 - u1) - n1 * n2 / 2 - 0.5) / sigma
    return u1, min(1.0, math.erfc(z / math.sqrt(2)))


def make_corpus():
    """20 items: the six with "but" are all wrong but one; the five with "a great" are all right; the
    other nine share no word with anything and are mostly right."""
    texts = ["slow but fine", "long but warm", "dull but pretty", "thin but bold", "odd but wise", "flat but rich"]
    texts += ["a great cast", "a great score", "a great plot", "a great role", "a great ending"]
    texts += ["calm", "sad", "soft", "grim", "loud", "mild", "wry", "sly", "shy"]
    correct = [0, 0, 0, 0, 0, 1] + [1] * 5 + [1, 1, 0, 1, 1, 0, 1, 1, 1]
    return texts, correct


def test_associated_features_finds_the_error_word():
    from contrastfit.evaluation.error_analysis import associated_features

    texts, correct = make_corpus()
    rows = associated_features(texts, correct, min_count=5)
    # the features in at least 5 items: "but" (6), and "a", "great", "a great" (the same 5 items)
    assert [r["feature"] for r in rows] == ["but", "a", "a great", "great"]
    top = rows[0]
    # "but" (6 items, accuracy 1/6) against the other 14 (accuracy 12/14)
    assert (top["n_with"], top["n_without"]) == (6, 14)
    assert top["mean_with"] == pytest.approx(1 / 6) and top["mean_without"] == pytest.approx(12 / 14)
    assert top["difference"] == pytest.approx(1 / 6 - 12 / 14)
    # U1 by hand: the one right "but" item beats the 2 wrong others (2) and ties the 12 right ones
    # (12 x 1/2 = 6); the 5 wrong "but" items tie the 2 wrong others (10 x 1/2 = 5): U1 = 13
    assert top["u"] == 13
    # p by hand: 20 values, 7 zeros and 13 ones; mu = 6*14/2 = 42;
    # sigma^2 = 6*14/12 * (21 - ((7^3 - 7) + (13^3 - 13)) / (20*19)) = 7 * (21 - 2520/380)
    # z = (|13 - 42| - 0.5) / sigma; two-sided p = erfc(z / sqrt 2)
    sigma = math.sqrt(7 * (21 - 2520 / 380))
    p_hand = math.erfc((29 - 0.5) / sigma / math.sqrt(2))
    assert p_hand == pytest.approx(0.004486, abs=1e-6)  # z = 28.5 / 10.029 = 2.842
    assert top["p"] == pytest.approx(p_hand, rel=1e-9)
    # "great" (5 items, all right, vs 8/15): raises the score, weaker evidence
    great = rows[3]
    assert great["mean_with"] == 1.0 and great["mean_without"] == pytest.approx(8 / 15) and great["difference"] > 0
    assert rows[1]["p"] == rows[2]["p"] == great["p"] > top["p"]
    # q = Benjamini-Hochberg over the 4 features tested: q_(i) = min_{j >= i} p_(j) * 4 / j
    assert top["q"] == pytest.approx(min(top["p"] * 4, great["p"]))
    assert great["q"] == pytest.approx(great["p"])
    assert [r["q"] for r in rows] == pytest.approx(list(stats.false_discovery_control([r["p"] for r in rows])))


def test_associated_features_options():
    from contrastfit.evaluation.error_analysis import associated_features

    texts, correct = make_corpus()
    # one-sided "less": features that lower the score; "great" raises it, so its p is large
    less = {r["feature"]: r for r in associated_features(texts, correct, min_count=5, alternative="less")}
    assert less["but"]["p"] < 0.01 and less["great"]["p"] > 0.5
    assert less["but"]["p"] == pytest.approx(
        stats.mannwhitneyu([0, 0, 0, 0, 0, 1], [1] * 5 + [1, 1, 0, 1, 1, 0, 1, 1, 1], alternative="less").pvalue)
    # words only; max_features; a larger min_count
    words = associated_features(texts, correct, min_count=5, ngrams=1, max_features=2)
    assert [r["feature"] for r in words] == ["but", "a"]
    assert [r["feature"] for r in associated_features(texts, correct, min_count=6)] == ["but"]
    # a per-item loss works the same way (higher = worse): "but" items have the high losses
    loss = [2.0 if "but" in t else 0.1 * i for i, t in enumerate(texts)]
    assert associated_features(texts, loss, min_count=5)[0]["feature"] == "but"
    # constant scores: nothing to test
    flat = associated_features(texts, [1] * len(texts), min_count=5)
    assert flat and all(r["p"] is None and r["q"] is None for r in flat)
    with pytest.raises(ValueError):
        associated_features(texts, correct[:-1])
    with pytest.raises(ValueError):
        associated_features(texts, correct, alternative="bigger")
