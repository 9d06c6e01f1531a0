"""Error analysis by word groups: tokenisation, automatic groups, per-group accuracy and p-values."""

from __future__ import annotations

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
