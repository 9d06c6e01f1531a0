"""Word-level text noise and label noise: exact counts, determinism, validation of rates."""

from __future__ import annotations

import collections

import datasets
import numpy as np
import pytest

from contrastfit.data import data_hash
from contrastfit.data.noise import (
    add_text_noise,
    corpus_vocabulary,
    flip_labels,
    noise_count,
    word_deletion,
    word_insertion,
    word_swap,
)

SENTENCE = " ".join(f"w{i}" for i in range(20))


def _ds(n: int = 100, num_labels: int = 3, pairs: bool = False) -> datasets.Dataset:
    rng = np.random.default_rng(0)
    cols = {"text": [" ".join(f"t{i}w{j}" if j % 3 else f"common{j % 4}" for j in range(10)) for i in range(n)]}
    if pairs:
        cols["text_pair"] = [" ".join(f"p{i}x{j}" for j in range(6)) for i in range(n)]
    cols["label"] = rng.integers(0, num_labels, size=n).tolist()
    feats = {"text": datasets.Value("string"), **({"text_pair": datasets.Value("string")} if pairs else {}),
             "label": datasets.Value("int64")}
    return datasets.Dataset.from_dict(cols, features=datasets.Features(feats))


def test_noise_count_rounds_half_up():
    assert [noise_count(r, 10) for r in (0.0, 0.04, 0.05, 0.25, 0.3, 1.0)] == [0, 0, 1, 3, 3, 10]
    assert noise_count(0.5, 5) == 3 and noise_count(0.1, 25) == 3


@pytest.mark.parametrize("rate,deleted", [(0.0, 0), (0.1, 2), (0.25, 5), (0.5, 10), (1.0, 19)])
def test_word_deletion_deletes_exactly(rate, deleted):
    out = word_deletion(SENTENCE, rate, np.random.default_rng(1))
    words = out.split()
    assert len(words) == 20 - deleted  # rate 1 keeps one word
    original = SENTENCE.split()
    assert [w for w in original if w in set(words)] == words  # order kept, only deletions


def test_word_swap_moves_adjacent_pairs():
    for rate, swaps in ((0.0, 0), (0.2, 2), (0.5, 5), (1.0, 10)):
        out = word_swap(SENTENCE, rate, np.random.default_rng(3)).split()
        orig = SENTENCE.split()
        assert sorted(out) == sorted(orig)
        moved = [i for i in range(20) if out[i] != orig[i]]
        assert len(moved) == 2 * swaps
        for i in moved:  # every moved word moved by exactly one position
            assert out[i] in (orig[i - 1] if i else None, orig[i + 1] if i < 19 else None)
    assert word_swap("one", 1.0, np.random.default_rng(0)) == "one"


def test_word_insertion_inserts_from_vocabulary():
    vocab = ["zz1", "zz2", "zz3"]
    out = word_insertion(SENTENCE, 0.3, np.random.default_rng(5), vocab).split()
    assert len(out) == 26
    assert [w for w in out if w not in vocab] == SENTENCE.split()
    with pytest.raises(ValueError, match="vocabulary"):
        word_insertion(SENTENCE, 0.3, np.random.default_rng(5), [])


def test_word_noise_is_deterministic_per_seed():
    for fn in (word_deletion, word_swap):
        assert fn(SENTENCE, 0.3, np.random.default_rng(7)) == fn(SENTENCE, 0.3, np.random.default_rng(7))
        assert fn(SENTENCE, 0.3, np.random.default_rng(7)) != fn(SENTENCE, 0.3, np.random.default_rng(8))
    assert word_deletion(SENTENCE, 0.3, 7) == word_deletion(SENTENCE, 0.3, np.random.default_rng(7))


def test_corpus_vocabulary_min_count():
    texts = ["a b c", "a b", "a d"]
    assert corpus_vocabulary(texts) == ["a", "b"]
    assert corpus_vocabulary(texts, min_count=1) == ["a", "b", "c", "d"]
    assert corpus_vocabulary(texts, min_count=3) == ["a"]


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.1", None, True])
def test_rates_are_validated(bad):
    ds = _ds(10)
    for call in (lambda: word_deletion(SENTENCE, bad, 0), lambda: word_swap(SENTENCE, bad, 0),
                 lambda: add_text_noise(ds, "deletion", bad, 0), lambda: flip_labels(ds, bad, 3, 0)):
        with pytest.raises(ValueError, match="between 0 and 1"):
            call()


def test_unknown_kind_and_regression_labels_are_refused():
    with pytest.raises(ValueError, match="unknown text noise kind 'typo'"):
        add_text_noise(_ds(10), "typo", 0.1, 0)
    reg = datasets.Dataset.from_dict({"text": ["a", "b"], "label": [0.5, 1.5]})
    with pytest.raises(ValueError, match="regression"):
        flip_labels(reg, 0.5, 2, 0)
    with pytest.raises(ValueError, match="at least 2 classes"):
        flip_labels(_ds(10, num_labels=1), 0.5, 1, 0)


@pytest.mark.parametrize("rate", [0.0, 0.1, 0.25, 0.5, 1.0])
def test_flip_labels_exact_count_and_uniform_other_class(rate):
    ds = _ds(200, num_labels=4)
    noisy, record = flip_labels(ds, rate, 4, seed=11)
    old, new = np.asarray(ds["label"][:]), np.asarray(noisy["label"][:])
    assert (old != new).sum() == round(rate * 200) == record["rows_changed"]
    assert noisy["text"][:] == ds["text"][:] and noisy.features == ds.features
    assert new.min() >= 0 and new.max() < 4
    assert sum(record["transitions"].values()) == record["rows_changed"]


def test_flip_labels_uniform_over_other_classes():
    ds = _ds(3000, num_labels=3)
    noisy, _ = flip_labels(ds, 1.0, 3, seed=0)
    old, new = np.asarray(ds["label"][:]), np.asarray(noisy["label"][:])
    for c in range(3):
        targets = collections.Counter(new[old == c].tolist())
        assert c not in targets and len(targets) == 2
        a, b = targets.values()
        assert abs(a - b) < 0.15 * (a + b)


def test_flip_labels_deterministic_and_nested_across_rates():
    ds = _ds(200)
    a, _ = flip_labels(ds, 0.2, 3, seed=5)
    b, _ = flip_labels(ds, 0.2, 3, seed=5)
    c, _ = flip_labels(ds, 0.2, 3, seed=6)
    assert data_hash(a) == data_hash(b) != data_hash(c)
    low, _ = flip_labels(ds, 0.1, 3, seed=5)
    old, lo, hi = (np.asarray(d["label"][:]) for d in (ds, low, a))
    flipped_low = np.flatnonzero(old != lo)
    assert set(flipped_low) <= set(np.flatnonzero(old != hi))
    assert (lo[flipped_low] == hi[flipped_low]).all()


@pytest.mark.parametrize("kind", ["deletion", "swap", "insertion"])
def test_add_text_noise_counts_words_and_rows(kind):
    ds = _ds(50, pairs=True)
    noisy, record = add_text_noise(ds, kind, 0.2, seed=3)
    assert noisy["label"][:] == ds["label"][:] and noisy.column_names == ds.column_names
    assert record["rows"] == 50 and record["rows_changed"] == 50  # 10- and 6-word texts, 20% always touches them
    delta = {"deletion": (-2, -1), "swap": (0, 0), "insertion": (2, 1)}[kind]  # round(.2*10)=2, round(.2*6)=1
    for before, after in zip(ds, noisy):
        assert len(after["text"].split()) - len(before["text"].split()) == delta[0]
        assert len(after["text_pair"].split()) - len(before["text_pair"].split()) == delta[1]
        assert after["text"] != before["text"] and after["text_pair"] != before["text_pair"]
    expected_words = {"deletion": 50 * 3, "swap": 50 * (2 * 1 + 2 * 1), "insertion": 50 * 3}[kind]
    assert record["words_changed"] == expected_words
    again, _ = add_text_noise(ds, kind, 0.2, seed=3)
    other, _ = add_text_noise(ds, kind, 0.2, seed=4)
    assert data_hash(again) == data_hash(noisy) != data_hash(other)


def test_add_text_noise_rate_zero_changes_nothing():
    ds = _ds(20)
    noisy, record = add_text_noise(ds, "swap", 0.0, seed=0)
    assert data_hash(noisy) == data_hash(ds) and record["rows_changed"] == 0 and record["words_changed"] == 0
