"""Label names as information: the zero-shot method, label texts as a prior of the logistic head
and as SupCon anchors while fine-tuning, and the rules that keep cryptic names out."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.linear_model import LogisticRegression

from contrastfit import train
from contrastfit.errors import ConfigError
from contrastfit.heads import LinearHead
from contrastfit.methods.base import label_anchor_problem, label_text

from conftest import sentiment_rows, write_rows_csv


class _Columns:
    def __init__(self, columns, rows=()):
        self.column_names = columns
        self._rows = list(rows)

    def __getitem__(self, key):
        return self._rows


def test_label_text_writes_a_name_as_words():
    assert label_text("Social_Preventive_Medicine") == "social preventive medicine"
    assert label_text("  sci  fi ") == "sci fi"


@pytest.mark.parametrize("names, problem", [
    (["negative", "positive"], None),
    (["Anatomy", "ENT", "Surgery"], None),                   # one short code among words is kept
    (["0", "1"], "codes"),
    (["ABBR", "DESC", "ENTY", "HUM"], "codes"),
    (None, "no label names"),
])
def test_label_names_that_are_codes_are_not_anchors(names, problem):
    got = label_anchor_problem(names, _Columns(["input_ids"]))
    assert (got is None) if problem is None else (problem in got)


def test_text_pairs_keep_their_label_names_out():
    pairs = _Columns(["input_ids", "token_type_ids"], [[0, 0, 1, 1]])
    assert label_anchor_problem(["no", "yes"], pairs) == "text pairs"


def test_a_sample_weight_counts_like_repeated_rows():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 5)).astype(np.float32)
    y = np.arange(12) % 3
    weighted = LinearHead(5, 3).eval()
    weighted.fit_logistic(torch.from_numpy(x), torch.from_numpy(y), sample_weight=torch.tensor([3.0] + [1.0] * 11))
    repeated = LogisticRegression(max_iter=1000).fit(np.vstack([x, x[:1], x[:1]]), np.concatenate([y, y[:1], y[:1]]))
    np.testing.assert_allclose(torch.softmax(weighted(torch.from_numpy(x)), -1).detach().numpy(),
                               repeated.predict_proba(x), atol=1e-4)


@pytest.fixture()
def word_labels_csv(tmp_path):
    """The toy sentiment rows with label names the tiny encoder's vocabulary knows: good / bad."""
    rows = [{**r, "sentiment": "good" if r["sentiment"] == "positive" else "bad"} for r in sentiment_rows()]
    return write_rows_csv(tmp_path / "words.csv", rows)


def _features(model, texts):
    enc = model.tokenize(texts, padding=True)
    model.eval()
    with torch.no_grad():
        pooled = model.encoder(**{k: torch.tensor(v, device=model.device) for k, v in enc.items()}).pooled
    return F.normalize(pooled.float(), dim=-1).cpu()


def test_zero_shot_predicts_the_nearest_label_name(tiny_encoder_dir, word_labels_csv, tmp_path):
    result = train(method="zero-shot", data=str(word_labels_csv), label_column="sentiment", model=str(tiny_encoder_dir),
                   output=str(tmp_path / "zs"), progress=False)
    model = result.model
    assert result["training"]["steps"] == 0
    texts = ["good fun film", "bad dull plot", "the actor"]
    want = (_features(model, texts) @ _features(model, ["bad", "good"]).T).argmax(-1).tolist()
    assert [model.label_names.index(p) for p in model.predict(texts)] == want
    logits = torch.as_tensor(model.predict_logits(texts))
    torch.testing.assert_close(logits, 20.0 * _features(model, texts) @ _features(model, ["bad", "good"]).T,
                               atol=1e-4, rtol=1e-4)


def test_zero_shot_refuses_codes(tiny_encoder_dir, tmp_path):
    rows = [{**r, "sentiment": "1" if r["sentiment"] == "positive" else "0"} for r in sentiment_rows()]
    csv = write_rows_csv(tmp_path / "codes.csv", rows)
    with pytest.raises(ConfigError, match="zero-shot needs label names.*codes"):
        train(method="zero-shot", data=str(csv), label_column="sentiment", model=str(tiny_encoder_dir),
              output=str(tmp_path / "zs"), progress=False)


def test_the_label_prior_adds_each_name_as_heavy_as_its_class(tiny_encoder_dir, word_labels_csv, tmp_path):
    from contrastfit.data import load_data

    result = train(method="linear-probe", data=str(word_labels_csv), label_column="sentiment",
                   model=str(tiny_encoder_dir), output=str(tmp_path / "lp"), progress=False, hparams={"label_prior": 0.5})
    model = result.model
    data = load_data(str(word_labels_csv), label_column="sentiment", validation_split=0)  # the probe's: no hold-out
    x = _features(model, list(data.train["text"])).numpy()
    y = np.asarray(data.train["label"])
    names = _features(model, ["bad", "good"]).numpy()
    n = len(y)
    probe = LogisticRegression(max_iter=1000).fit(np.vstack([x, names]), np.concatenate([y, [0, 1]]),
                                                  sample_weight=np.r_[np.ones(n), np.full(2, 0.5 * n / 2)])
    texts = ["a good day", "bad and dull", "fine"]
    np.testing.assert_allclose(model.predict_proba(texts), probe.predict_proba(_features(model, texts).numpy()), atol=1e-5)


def test_label_anchors_join_the_supcon_batch_as_one_row_per_class(tiny_encoder_dir):
    from contrastfit import ContrastiveClassifier
    from contrastfit.losses import supcon

    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce-scl-lr", ["bad", "good"],
                                               hparams={"label_anchors": 1.0})
    texts, labels = ["good fun film", "great story", "bad plot", "dull actor"], torch.tensor([1, 1, 0, 0])
    enc = {k: torch.tensor(v) for k, v in model.tokenize(texts, padding=True).items()}
    from datasets import Dataset

    model.method.prepare(model, Dataset.from_dict({"input_ids": enc["input_ids"].tolist()}))
    model.eval()  # no dropout: the loss is a function of the inputs
    out = model.method.training_loss(model, enc, labels)
    pooled = model.encoder(**enc).pooled
    names = {k: torch.tensor(v) for k, v in model.tokenize(["bad", "good"], padding=True).items()}
    anchors = model.encoder(**names).pooled
    want_scl = supcon(torch.cat([pooled, anchors]), torch.tensor([1, 1, 0, 0, 0, 1]), 0.3)
    want_ce = F.cross_entropy(model.head(pooled), labels)
    torch.testing.assert_close(out.parts["scl"], want_scl)
    torch.testing.assert_close(out.loss, 0.1 * want_ce + 0.9 * want_scl)
    model.method.hp = model.method.hp.model_copy(update={"label_anchors": False})  # off: the batch alone
    torch.testing.assert_close(model.method.training_loss(model, enc, labels).parts["scl"], supcon(pooled, labels, 0.3))


def test_codes_as_label_names_are_ignored_with_a_warning_and_the_record_says_so(tiny_encoder_dir, tmp_path):
    rows = [{**r, "sentiment": "1" if r["sentiment"] == "positive" else "0"} for r in sentiment_rows()]
    csv = write_rows_csv(tmp_path / "codes.csv", rows)
    with pytest.warns(UserWarning, match=r"linear-probe: the label names are not used \(label names look like codes"):
        result = train(method="linear-probe", data=str(csv), label_column="sentiment", model=str(tiny_encoder_dir),
                       output=str(tmp_path / "lp"), progress=False, hparams={"label_prior": 1.0})
    assert result["training"]["head_stage"]["label_prior"].startswith("label names look like codes")


# -- label descriptions (--label-descriptions) ---------------------------------------------------------

def _codes_csv(tmp_path):
    rows = [{**r, "sentiment": "1" if r["sentiment"] == "positive" else "0"} for r in sentiment_rows()]
    return write_rows_csv(tmp_path / "codes.csv", rows)


@pytest.mark.parametrize("name, content", [
    ("d.json", '{"0": "bad", " 1 ": "good  film"}'),
    ("d.yaml", '"0": bad\n"1": good  film\n'),
    ("d.csv", 'label,description\n0,bad\n1,"good  film"\n'),
    ("d.tsv", 'label\tdescription\n0\tbad\n1\tgood  film\n'),
])
def test_label_descriptions_read_from_each_format(tmp_path, name, content):
    from contrastfit.data.descriptions import read_label_descriptions

    (tmp_path / name).write_text(content)
    assert read_label_descriptions(str(tmp_path / name)) == {"0": "bad", "1": "good film"}  # labels stripped, spaces one
    assert read_label_descriptions({"0": "bad"}) == {"0": "bad"} and read_label_descriptions(None) is None


@pytest.mark.parametrize("name, content, message", [
    ("d.json", '{"0": ""}', r"d.json: label '0' has an empty description"),
    ("d.json", '["bad", "good"]', r"d.json: give a mapping of label to description, not list"),
    ("d.json", '{"0": "bad"', r"d.json: not valid JSON"),
    ("d.csv", "label,text\n0,bad\n", r"d.csv: the first row must be the header label,description"),
    ("d.csv", "label,description\n0,bad,worse\n", r"d.csv: row 2 has 3 cells, not 2"),
    ("d.yaml", '"0": bad\n" 0": worse\n', r"d.yaml: label '0' is described twice"),
    ("d.txt", "0 bad", r"d.txt: give a .json, .yaml, .yml, .csv, .tsv file"),
])
def test_bad_label_descriptions_are_one_line_errors_naming_the_file(tmp_path, name, content, message):
    from contrastfit.data.descriptions import read_label_descriptions

    (tmp_path / name).write_text(content)
    with pytest.raises(ConfigError, match=message) as err:
        read_label_descriptions(str(tmp_path / name))
    assert "\n" not in str(err.value)


def test_a_described_label_that_the_data_lacks_is_refused_before_training(tiny_encoder_dir, tmp_path):
    (tmp_path / "d.json").write_text('{"0": "bad", "2": "neutral"}')
    with pytest.raises(ConfigError, match=r"d.json: '2' is not a label of the data \(its labels: 0, 1\)"):
        train(data=str(_codes_csv(tmp_path)), label_column="sentiment", model=str(tiny_encoder_dir),
              label_descriptions=str(tmp_path / "d.json"), progress=False)
    with pytest.raises(ConfigError, match=r"'2' is not a label of the data \(its labels: 0, 1\)"):  # label sets too
        train(data=str(_codes_csv(tmp_path)), label_column="sentiment", model=str(tiny_encoder_dir), multi_label=True,
              label_descriptions={"0": "bad", "2": "neutral"}, progress=False)


def test_descriptions_stand_in_for_codes(tiny_encoder_dir, word_labels_csv, tmp_path):
    """Codes 0/1 described as bad/good give the zero-shot model of the names bad/good, and the record
    (and the run's identity) carries the descriptions."""
    named = train(method="zero-shot", data=str(word_labels_csv), label_column="sentiment",
                  model=str(tiny_encoder_dir), progress=False)
    (tmp_path / "d.csv").write_text("label,description\n0,bad\n1,good\n")
    described = train(method="zero-shot", data=str(_codes_csv(tmp_path)), label_column="sentiment",
                      model=str(tiny_encoder_dir), label_descriptions=str(tmp_path / "d.csv"), progress=False)
    texts = ["good fun film", "bad dull plot", "the actor"]
    np.testing.assert_allclose(described.model.predict_logits(texts), named.model.predict_logits(texts), atol=1e-6)
    assert described["data"]["label_descriptions"] == {"0": "bad", "1": "good"}
    assert described.model.info.label_descriptions == {"0": "bad", "1": "good"}
    assert described.record.identity.spec["data"]["label_descriptions"] == {"0": "bad", "1": "good"}
    (tmp_path / "d.csv").write_text("label,description\n0,dull\n1,good\n")  # the same file, edited
    again = train(method="zero-shot", data=str(_codes_csv(tmp_path)), label_column="sentiment",
                  model=str(tiny_encoder_dir), label_descriptions=str(tmp_path / "d.csv"), progress=False)
    assert again.record.identity.sha256 != described.record.identity.sha256


def test_the_default_recipe_anchors_on_the_descriptions(tiny_encoder_dir, tmp_path):
    from contrastfit import ContrastiveClassifier
    from datasets import Dataset

    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce-scl-lr", ["0", "1"])
    model.info.label_descriptions = {"0": "bad plot", "1": "good"}
    model.method.prepare(model, Dataset.from_dict({"input_ids": [[1, 2]]}))
    want = model.tokenizer(["bad plot", "good"], padding=True, return_tensors="pt")
    assert model.method.anchor_note is None
    torch.testing.assert_close(model.method.label_inputs["input_ids"], want["input_ids"])
    with pytest.warns(UserWarning, match="ce does not use label names; the label descriptions are not used"):
        train(method="ce", data=str(_codes_csv(tmp_path)), label_column="sentiment", model=str(tiny_encoder_dir),
              label_descriptions={"0": "bad", "1": "good"}, epochs=1, progress=False)
