"""Evaluation protocols: exact class counts, disjoint splits, determinism, per-protocol invariants."""

from __future__ import annotations

import collections

import datasets
import numpy as np
import pytest

from contrastfit.data import TextData, data_hash, load_data
from contrastfit.data.sampling import derive_seed
from contrastfit.experiments.protocols import ProtocolRun
from contrastfit.experiments.protocols.augmentation import augmentation
from contrastfit.experiments.protocols.classes import class_sweep
from contrastfit.experiments.protocols.cross_validation import cross_validation
from contrastfit.experiments.protocols.few_shot import few_shot
from contrastfit.experiments.protocols.imbalance import imbalance
from contrastfit.experiments.protocols.noise import noise
from contrastfit.experiments.protocols.transfer import transfer_target

NAMES = ["neg", "neu", "pos"]


def _split(prefix: str, n: int, seed: int) -> datasets.Dataset:
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 3  # balanced
    rng.shuffle(labels)
    texts = [f"{prefix} {i} " + " ".join(f"w{(i * 7 + j) % 50}" for j in range(8)) for i in range(n)]
    return datasets.Dataset.from_dict({"text": texts, "label": labels.tolist()},
                                      features=datasets.Features({"text": datasets.Value("string"),
                                                                  "label": datasets.Value("int64")}))


@pytest.fixture(scope="module")
def toy() -> TextData:
    """3 classes, 200 / 60 / 60 rows, every text unique across the splits."""
    return TextData("toy", _split("train", 200, 0), _split("val", 60, 1), _split("test", 60, 2), list(NAMES), {"kind": "test"})


@pytest.fixture(scope="module")
def skewed() -> TextData:
    """3 classes with 400 / 300 / 100 training rows (for imbalance)."""
    labels = [0] * 400 + [1] * 300 + [2] * 100
    train = datasets.Dataset.from_dict({"text": [f"train {i}" for i in range(800)], "label": labels})
    return TextData("skewed", train, _split("val", 60, 1), _split("test", 60, 2), list(NAMES))


@pytest.fixture(scope="module")
def bbc() -> TextData:
    return load_data("bbc-news")


def _counts(ds) -> dict[int, int]:
    return dict(sorted(collections.Counter(ds["label"][:]).items()))


def _check_disjoint(run: ProtocolRun) -> None:
    parts = [set(getattr(run.data, s)["text"][:]) for s in ("train", "validation", "test") if getattr(run.data, s) is not None]
    for i in range(len(parts)):
        for j in range(i + 1, len(parts)):
            assert not parts[i] & parts[j], run.setting


def _hashes(runs: list[ProtocolRun]) -> list[tuple]:
    return [(r.setting, r.sample, *(data_hash(getattr(r.data, s)) for s in ("train", "validation", "test"))) for r in runs]


def test_derive_seed_streams_are_distinct():
    seeds = {derive_seed(s, stream, i) for s in (0, 1) for stream in ("train", "validation", "pool") for i in (0, 1)}
    assert len(seeds) == 12
    assert derive_seed(0, "train", 1) == derive_seed(0, "train", 1)


# ---------------------------------------------------------------------------------------------
# Few-shot
# ---------------------------------------------------------------------------------------------

def test_few_shot_per_class(toy):
    runs = few_shot(toy, shots=[4, 8], samples=3, seed=1)
    assert [(r.setting, r.sample) for r in runs] == [(f"shots={k}", s) for k in (4, 8) for s in range(3)]
    for r in runs:
        assert _counts(r.data.train) == {c: r.params["shots"] for c in range(3)}
        assert r.data.test is toy.test and r.data.validation is toy.validation  # full split without validation_size
        assert r.data.label_names == NAMES
        _check_disjoint(r)
    trains = [data_hash(r.data.train) for r in runs if r.params["shots"] == 4]
    assert len(set(trains)) == 3  # samples differ
    assert _hashes(few_shot(toy, shots=[4, 8], samples=3, seed=1)) == _hashes(runs)
    assert _hashes(few_shot(toy, shots=[4, 8], samples=3, seed=2)) != _hashes(runs)


def test_few_shot_stratified_with_fixed_validation(toy):
    runs = few_shot(toy, train_size=[20, 100], samples=4, validation_size=30, seed=0)
    assert {r.setting for r in runs} == {"N=20", "N=100"}
    for r in runs:
        n = r.params["train_size"]
        assert len(r.data.train) == n
        assert _counts(r.data.train) in ({0: 7, 1: 7, 2: 6}, {0: 7, 1: 6, 2: 7}, {0: 6, 1: 7, 2: 7},
                                         {0: 34, 1: 33, 2: 33}, {0: 33, 1: 34, 2: 33}, {0: 33, 1: 33, 2: 34})
        assert _counts(r.data.validation) == {0: 10, 1: 10, 2: 10}
        _check_disjoint(r)
    assert len({data_hash(r.data.validation) for r in runs}) == 1  # drawn once
    assert len({data_hash(r.data.train) for r in runs if r.setting == "N=20"}) == 4
    assert runs[0].sampling["sample_seed"] == derive_seed(0, "train", 0)


def test_few_shot_full_and_errors(toy):
    (full,) = few_shot(toy, samples=5)
    assert full.setting == "full" and data_hash(full.data.train) == data_hash(toy.train)
    with pytest.raises(ValueError, match="not both"):
        few_shot(toy, shots=4, train_size=20)
    with pytest.raises(ValueError, match="class 'neg'"):
        few_shot(toy, shots=100)
    with pytest.raises(ValueError, match="samples"):
        few_shot(toy, shots=4, samples=0)


def test_transfer_target_is_few_shot(toy):
    runs = transfer_target(toy, shots=5, samples=2, seed=3)
    assert _hashes(runs) == _hashes(few_shot(toy, shots=5, samples=2, seed=3))
    assert all(r.sampling["protocol"] == "transfer-target" for r in runs)


# ---------------------------------------------------------------------------------------------
# Cross-validation
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("train_size", [None, 100])
def test_cross_validation_folds_partition_the_pool(toy, train_size):
    runs = cross_validation(toy, folds=5, train_size=train_size, seed=0)
    pool_size = train_size or 200
    assert [r.setting for r in runs] == ["folds=5"] * 5 and [r.sample for r in runs] == list(range(5))
    assert [r.sample for r in runs] == list(range(5))
    held = [set(r.data.test["text"][:]) for r in runs]
    pool = set().union(*held)
    assert len(pool) == pool_size and sum(len(h) for h in held) == pool_size  # disjoint, covering
    assert pool <= set(toy.train["text"][:])
    for r, h in zip(runs, held):
        assert set(r.data.train["text"][:]) == pool - h
        assert len(h) == pool_size // 5
        counts = _counts(r.data.test)
        assert max(counts.values()) - min(counts.values()) <= 1  # stratified
        assert data_hash(r.data.validation) == data_hash(toy.validation)
        _check_disjoint(r)
    assert _hashes(cross_validation(toy, folds=5, train_size=train_size, seed=0)) == _hashes(runs)
    assert _hashes(cross_validation(toy, folds=5, train_size=train_size, seed=1)) != _hashes(runs)


def test_cross_validation_repeats_and_test_split(toy):
    runs = cross_validation(toy, folds=4, train_size=40, repeats=2, seed=0, test="split", validation_size=30)
    assert len(runs) == 8 and runs[5].setting == "folds=4" and runs[5].sample == 5
    for r in runs:
        assert data_hash(r.data.test) == data_hash(toy.test) and len(r.data.train) == 30 and len(r.data.validation) == 30
        _check_disjoint(r)
    assert len({data_hash(r.data.train) for r in runs}) == 8


# ---------------------------------------------------------------------------------------------
# Imbalance
# ---------------------------------------------------------------------------------------------

def test_imbalance_counts(skewed):
    runs = imbalance(skewed, ratios=(1, 3, 10), minority_size=10, samples=2, seed=0)
    assert [(r.setting, r.sample) for r in runs] == [(f"rho={k}", s) for k in (1, 3, 10) for s in range(2)]
    for r in runs:
        rho = r.params["rho"]
        assert _counts(r.data.train) == {0: 10, 1: 10 * rho, 2: 10 * rho}
        assert r.params["minority_classes"] == ["neg"] and r.params["majority_classes"] == ["neu", "pos"]
        _check_disjoint(r)
    assert data_hash(runs[0].data.train) != data_hash(runs[1].data.train)
    assert _hashes(imbalance(skewed, ratios=(1, 3, 10), minority_size=10, samples=2, seed=0)) == _hashes(runs)


def test_imbalance_override_and_errors(skewed):
    (run,) = imbalance(skewed, ratios=[5], minority_size=20, minority_classes=["pos"])
    assert _counts(run.data.train) == {0: 100, 1: 100, 2: 20}
    (run,) = imbalance(skewed, ratios=[2], minority_size=20, minority_classes=[1, 2])
    assert _counts(run.data.train) == {0: 40, 1: 20, 2: 20}
    with pytest.raises(ValueError, match="class 'pos'"):
        imbalance(skewed, ratios=[20], minority_size=10)  # pos has 100 < 200
    with pytest.raises(ValueError, match="unknown class 'nope'"):
        imbalance(skewed, minority_classes=["nope"])
    with pytest.raises(ValueError, match="majority"):
        imbalance(skewed, minority_classes=[0, 1, 2])


def test_imbalance_binary_default_minority_is_class_0():
    train = datasets.Dataset.from_dict({"text": [f"t{i}" for i in range(100)], "label": [0, 1] * 50})
    data = TextData("bin", train, None, None, ["a", "b"])
    (run,) = imbalance(data, ratios=[3], minority_size=8)
    assert _counts(run.data.train) == {0: 8, 1: 24} and run.params["minority_classes"] == ["a"]


# ---------------------------------------------------------------------------------------------
# Noise
# ---------------------------------------------------------------------------------------------

def test_noise_only_touches_training_labels(toy):
    runs = noise(toy, label_noise=(0.0, 0.1, 0.2), train_size=60, samples=2, seed=0)
    assert [r.setting for r in runs] == ["N=60,label_noise=0"] * 2 + ["N=60,label_noise=0.1"] * 2 + ["N=60,label_noise=0.2"] * 2
    clean = few_shot(toy, train_size=60, samples=2, seed=0)
    for r in runs:
        base = clean[r.sample].data.train
        assert r.data.train["text"][:] == base["text"][:]  # same sample at every noise level
        changed = sum(a != b for a, b in zip(r.data.train["label"][:], base["label"][:]))
        assert changed == round(r.params["label_noise"] * 60)
        if r.params["label_noise"]:
            assert r.sampling["label_noise"]["rows_changed"] == changed
        assert data_hash(r.data.validation) == data_hash(toy.validation)
        assert data_hash(r.data.test) == data_hash(toy.test)
        _check_disjoint(r)
    assert _hashes(noise(toy, label_noise=(0.0, 0.1, 0.2), train_size=60, samples=2, seed=0)) == _hashes(runs)


def test_noise_text_on_full_training_set(toy):
    runs = noise(toy, label_noise=0.0, text_noise=[0.0, 0.25], text_noise_kind="deletion", samples=2, seed=0)
    assert [(r.setting, r.sample) for r in runs] == [("label_noise=0,text_noise=0", 0),
                                                      ("label_noise=0,text_noise=0.25", 0),
                                                      ("label_noise=0,text_noise=0.25", 1)]
    assert data_hash(runs[0].data.train) == data_hash(toy.train)
    for r in runs[1:]:
        assert r.data.train["label"][:] == toy.train["label"][:]
        for before, after in zip(toy.train["text"][:], r.data.train["text"][:]):
            assert len(before.split()) - len(after.split()) == 3  # 10 words, round(0.25 * 10) = 3 (half up)
        assert r.sampling["text_noise"]["rows_changed"] == 200
        assert data_hash(r.data.validation) == data_hash(toy.validation) and data_hash(r.data.test) == data_hash(toy.test)
    assert data_hash(runs[1].data.train) != data_hash(runs[2].data.train)
    with pytest.raises(ValueError, match="between 0 and 1"):
        noise(toy, label_noise=1.5)


# ---------------------------------------------------------------------------------------------
# Augmentation (Gunel Sec. 4.2/5.3: supervised : augmented = 1 : 3, copies added, labels kept)
# ---------------------------------------------------------------------------------------------

def test_augmentation_adds_copies_to_the_few_shot_sample(toy):
    runs = augmentation(toy, ratio=[0, 1, 3], augmenter="deletion", rate=[0.1, 0.3], shots=5, samples=2, seed=4)
    assert [(r.setting, r.sample) for r in runs] == [(f"shots=5,{x}", s) for x in
                                                      ("ratio=0", "ratio=1,rate=0.1", "ratio=1,rate=0.3",
                                                       "ratio=3,rate=0.1", "ratio=3,rate=0.3") for s in range(2)]
    clean = few_shot(toy, shots=5, samples=2, seed=4)
    for r in runs:
        base = clean[r.sample].data.train
        n, ratio = len(base), r.params["ratio"]
        assert n == 15 and len(r.data.train) == n + ratio * n  # the originals plus ratio copies of each
        assert r.data.train.select(range(n)).to_dict() == base.to_dict()  # the same sample, unchanged, first
        assert r.data.train["label"][:] == base["label"][:] * (1 + ratio)  # copies keep their labels
        for j in range(1, ratio + 1):
            copies = r.data.train["text"][j * n:(j + 1) * n]
            assert all(c != o for c, o in zip(copies, base["text"][:]))
        assert data_hash(r.data.validation) == data_hash(toy.validation)  # never augmented
        assert data_hash(r.data.test) == data_hash(toy.test)
        record = r.sampling["augmentation"]
        assert (record["augmenter"], record["ratio"], record["rows_original"], record["rows_added"]) == ("deletion", ratio, n, ratio * n)
        assert r.sampling["protocol"] == "augmentation" and r.params["augmenter"] == "deletion"
    # deterministic; the copies at ratio 1 are the first copies at ratio 3 (same sample, same rate)
    assert _hashes(augmentation(toy, ratio=[0, 1, 3], augmenter="deletion", rate=[0.1, 0.3], shots=5, samples=2, seed=4)) == _hashes(runs)
    by = {(r.setting, r.sample): r.data.train for r in runs}
    assert by[("shots=5,ratio=1,rate=0.1", 1)].to_dict() == by[("shots=5,ratio=3,rate=0.1", 1)].select(range(30)).to_dict()
    assert data_hash(by[("shots=5,ratio=3,rate=0.1", 0)]) != data_hash(by[("shots=5,ratio=3,rate=0.1", 1)])
    other = augmentation(toy, ratio=3, augmenter="deletion", rate=0.1, shots=5, samples=1, seed=5)[0]
    assert other.data.train["text"][15:] != by[("shots=5,ratio=3,rate=0.1", 0)]["text"][15:]


def test_augmentation_options_and_config(toy):
    full = augmentation(toy, augmenter="swap", rate=0.2)  # defaults: ratio 3 (Gunel's 1:3), full training split
    assert [r.setting for r in full] == ["ratio=3,rate=0.2"] and len(full[0].data.train) == 4 * 200
    with pytest.raises(ValueError, match="unknown augmenter 'backtranslate'"):
        augmentation(toy, augmenter="backtranslate")
    with pytest.raises(ValueError, match="temperature applies to hub"):
        augmentation(toy, augmenter="swap", temperature=0.5)
    with pytest.raises(ValueError, match="integer >= 0"):
        augmentation(toy, ratio=-1)
    from contrastfit.experiments.config import parse_config

    raw = {"data": "mr", "methods": ["ce"], "output": "x",
           "protocol": {"kind": "augmentation", "ratio": 3, "augmenter": "insertion", "rate": 0.1, "train_size": 100}}
    assert parse_config(raw).protocol.augmenter == "insertion"
    with pytest.raises(ValueError, match="protocol: unknown key 'ratios'"):
        parse_config({**raw, "protocol": {"kind": "augmentation", "ratios": 3}})


def test_augmentation_hub_model_loads_once_and_only_when_copies_are_asked_for(toy, monkeypatch):
    import transformers

    loads, generations = [], []

    class Pipe:
        tokenizer = None  # no chat template: a plain prompt

        def __call__(self, prompts, num_return_sequences, **kwargs):
            generations.append((len(prompts), num_return_sequences, kwargs["temperature"]))
            return [[{"generated_text": f" copy {j}\nmore"} for j in range(num_return_sequences)] for _ in prompts]

    monkeypatch.setattr(transformers, "pipeline", lambda task, model=None: loads.append((task, model)) or Pipe())
    assert augmentation(toy, ratio=0, augmenter="hub:org/m", shots=2)[0].data.train["text"][:] == \
        few_shot(toy, shots=2)[0].data.train["text"][:]
    assert loads == []  # ratio 0 needs no model
    runs = augmentation(toy, ratio=[0, 2], augmenter="hub:org/m", temperature=0.5, shots=2, samples=2)
    assert loads == [("text-generation", "org/m")]  # one load for every sample
    assert [(r.setting, r.sample) for r in runs] == [("shots=2,ratio=0", 0), ("shots=2,ratio=0", 1),
                                                      ("shots=2,ratio=2", 0), ("shots=2,ratio=2", 1)]
    assert generations == [(6, 2, 0.5), (6, 2, 0.5)]
    r = runs[2]
    assert r.data.train["text"][6:] == ["copy 0"] * 6 + ["copy 1"] * 6 and r.data.train["label"][6:] == r.data.train["label"][:6] * 2
    assert r.params == {"shots": 2, "ratio": 2, "augmenter": "hub:org/m", "temperature": 0.5}
    assert r.sampling["augmentation"]["models"] == ["org/m"] and r.sampling["augmentation"]["temperature"] == 0.5


# ---------------------------------------------------------------------------------------------
# Class sweep
# ---------------------------------------------------------------------------------------------

def test_class_sweep_remaps_labels(bbc):
    runs = class_sweep(bbc, num_classes=(2, 3, 5), samples=2, seed=0)
    assert [(r.setting, r.sample) for r in runs] == [(f"classes={k}", s) for k in (2, 3, 5) for s in range(2)]
    orig = {s: dict(zip(getattr(bbc, s)["text"][:], getattr(bbc, s)["label"][:])) for s in ("train", "validation", "test")}
    for r in runs:
        k = r.params["num_classes"]
        assert len(r.data.label_names) == k == r.data.num_labels
        assert r.data.label_names == r.sampling["classes"]
        assert [bbc.label_names.index(n) for n in r.data.label_names] == sorted(bbc.label_names.index(n) for n in r.data.label_names)
        for split in ("train", "validation", "test"):
            ds = getattr(r.data, split)
            assert set(ds["label"][:]) == set(range(k))
            full_count = sum(1 for v in orig[split].values() if bbc.label_names[v] in r.data.label_names)
            assert len(ds) == full_count  # whole splits of the chosen classes
            for text, label in zip(ds["text"][:50], ds["label"][:50]):
                assert r.data.label_names[label] == bbc.label_names[orig[split][text]]
        _check_disjoint(r)
    five = [r for r in runs if r.params["num_classes"] == 5]
    assert all(r.data.label_names == bbc.label_names for r in five)
    two = [r.sampling["classes"] for r in runs if r.params["num_classes"] == 2]
    three = [r.sampling["classes"] for r in runs if r.params["num_classes"] == 3]
    assert all(set(a) <= set(b) for a, b in zip(two, three))  # nested within a sample
    assert _hashes(class_sweep(bbc, num_classes=(2, 3, 5), samples=2, seed=0)) == _hashes(runs)


def test_class_sweep_few_shot_and_samples_differ(bbc):
    runs = class_sweep(bbc, num_classes=3, shots=10, samples=4, seed=1)
    assert {r.setting for r in runs} == {"classes=3,shots=10"}
    for r in runs:
        assert _counts(r.data.train) == {0: 10, 1: 10, 2: 10}
        _check_disjoint(r)
    assert len({tuple(r.sampling["classes"]) for r in runs}) > 1
    assert len({data_hash(r.data.train) for r in runs}) == 4
    with pytest.raises(ValueError, match="more than"):
        class_sweep(bbc, num_classes=6)


def test_cross_validation_fold_train_size(toy):
    runs = cross_validation(toy, folds=10, fold_train_size=12, seed=0)
    held = [set(r.data.test["text"][:]) for r in runs]
    assert sum(len(h) for h in held) == 200 and len(set().union(*held)) == 200
    for r, h in zip(runs, held):
        assert _counts(r.data.train) == {0: 4, 1: 4, 2: 4} and r.params["fold_train_size"] == 12
        _check_disjoint(r)
    assert len({data_hash(r.data.train) for r in runs}) == 10
    with pytest.raises(ValueError, match="fold_train_size 500"):
        cross_validation(toy, folds=5, fold_train_size=500)
