"""The model card (README.md) written from a run's records."""

from __future__ import annotations

import json

import pytest
import yaml

from contrastfit.card import model_card, write_model_card
from contrastfit.errors import ModelError

RECORD = {
    "method": "ce-scl", "hparams": {"lambda": 0.9, "temperature": 0.3}, "model": "minilm-l6", "seed": 3,
    "data": {"name": "glue/sst2", "source": {"kind": "hub", "name": "glue/sst2"}, "task": "classification",
             "label_names": ["negative", "positive"], "text_pair": False,
             "sampling": {"shots": 16, "train_size": None, "sample_seed": 3, "sample_index": 0},
             "train_size": 32, "train_hash": "aaaa", "validation_size": 64, "validation_hash": "bbbb",
             "test_size": 100, "test_hash": "cccc"},
    "training": {"batch_size": 16, "learning_rate": 5e-05, "steps": 60,
                 "selection": {"metric": "accuracy", "best_step": 48, "best_value": 0.71875, "evaluations": [{}] * 5}},
    "metrics": {"validation": {"accuracy": 0.71875, "f1": 0.7, "macro_f1": 0.71, "mcc": 0.44, "nll": 0.6, "ece": 0.08},
                "test": {"accuracy": 0.6912, "f1": 0.68, "macro_f1": 0.69, "mcc": 0.38, "nll": 0.62, "ece": 0.1}},
    "versions": {"contrastfit": "0.1.0", "torch": "2.13.0"},
}


def test_card_front_matter_and_sections_come_from_the_record():
    card = model_card(RECORD, {"method": "ce-scl"})
    _, front, body = card.split("---", 2)
    meta = yaml.safe_load(front)
    index = meta.pop("model-index")
    assert meta == {"base_model": "sentence-transformers/all-MiniLM-L6-v2", "license": "apache-2.0", "language": ["en"],
                    "library_name": "contrastfit", "pipeline_tag": "text-classification",
                    "tags": ["contrastfit", "ce-scl", "classification"], "datasets": ["glue/sst2"],
                    "metrics": ["accuracy", "f1", "macro_f1", "mcc"]}
    assert index[0]["name"] == "ce-scl on glue/sst2" and [r["dataset"] for r in index[0]["results"]] == [
        {"name": "glue/sst2", "type": "glue/sst2", "split": "validation"}, {"name": "glue/sst2", "type": "glue/sst2", "split": "test"}]
    test = index[0]["results"][1]
    assert test["task"] == {"type": "text-classification", "name": "Text Classification"}
    assert {m["type"]: m["value"] for m in test["metrics"]} == RECORD["metrics"]["test"]
    assert body.lstrip().startswith("# ce-scl on glue/sst2")
    assert "Gunel" in body  # the method's paper, from the registry
    assert "`negative`, `positive`" in body
    assert "| train | 32 | `aaaa` | shots 16, sample seed 3, sample index 0 |" in body and "| test | 100 | `cccc` |  |" in body
    assert "| ce-scl | accuracy | 0.7188 | 0.6912 |" in body and "| ce-scl | ece | 0.0800 | 0.1000 |" in body
    assert "The kept step is 48, the best validation accuracy (0.7188) of 5 evaluations." in body
    assert "| lambda | 0.9 |" in body and "| learning_rate | 5e-05 |" in body and "| seed | 3 |" in body
    assert "## Calibration" not in body
    # a built-in data set is not a Hub data set: no datasets entry
    builtin = json.loads(json.dumps(RECORD))
    builtin["data"]["source"] = {"kind": "builtin", "name": "mr"}
    assert "datasets" not in yaml.safe_load(model_card(builtin, {}).split("---", 2)[1])
    calibrated = model_card(RECORD, {"calibration": {"temperature": 1.8, "n": 64, "data": "mr (validation split, 64 rows)",
                                                      "nll_before": 0.7, "nll_after": 0.6, "ece_before": 0.2,
                                                      "ece_after": 0.05}})
    assert "softmax(logits / 1.8000)" in calibrated and "ECE 0.2000 -> 0.0500" in calibrated


MULTILABEL_RECORD = {
    **RECORD, "method": "ce-scl-lr",
    "data": {**RECORD["data"], "name": "toxicity-attributes", "source": {"kind": "builtin", "name": "toxicity-attributes"},
             "multi_label": True, "label_names": ["insult", "threat"]},
    "training": {"batch_size": 16, "steps": 60, "thresholds": {"insult": 0.35, "threat": 0.5},
                 "threshold_rule": "per label, on validation"},
    "metrics": {split: {"micro_f1": f1, "macro_f1": f1 - 0.1, "subset_accuracy": f1 - 0.3, "hamming_loss": 0.2,
                        "samples_f1": f1 + 0.01, "micro_precision": 0.7, "micro_recall": 0.6, "n": 99,
                        "per_label": {"insult": {"precision": 0.9, "recall": 0.8, "f1": 0.85, "support": 80},
                                      "threat": {"precision": 0.5, "recall": 0.25, "f1": 0.3333, "support": 12}}}
                for split, f1 in (("validation", 0.75), ("test", 0.7))},
}


def test_a_multilabel_card_shows_the_headline_multilabel_metrics():
    """micro-F1, macro-F1 and subset accuracy in the front matter, the model-index (valid Hub metadata:
    huggingface_hub reads it as evaluation results) and the evaluation table, with each label's F1 and
    threshold; none of the single-label metrics, which a multi-label record does not hold."""
    from huggingface_hub import ModelCard

    from contrastfit.evaluation.multilabel import MULTILABEL_HEADLINE

    card = model_card(MULTILABEL_RECORD, {"multi_label": True})
    meta = yaml.safe_load(card.split("---", 2)[1])
    assert meta["metrics"] == list(MULTILABEL_HEADLINE) == ["micro_f1", "macro_f1", "subset_accuracy"]
    assert "multi-label" in meta["tags"] and meta["pipeline_tag"] == "text-classification"
    results = meta["model-index"][0]["results"]
    assert [r["dataset"]["split"] for r in results] == ["validation", "test"]
    assert {m["type"]: m["value"] for m in results[1]["metrics"]} == {
        m: MULTILABEL_RECORD["metrics"]["test"][m] for m in MULTILABEL_HEADLINE}
    hub = ModelCard(card).data  # raises on a malformed model-index
    assert {(r.dataset_split, r.metric_type): r.metric_value for r in hub.eval_results}[("test", "micro_f1")] == 0.7
    assert "| ce-scl-lr | micro_f1 | 0.7500 | 0.7000 |" in card and "| ce-scl-lr | subset_accuracy | 0.4500 | 0.4000 |" in card
    assert "| ce-scl-lr | hamming_loss | 0.2000 | 0.2000 |" in card and "| accuracy |" not in card
    assert "| threat | 0.5 | 0.3333 (12) | 0.3333 (12) |" in card and "| insult | 0.35 |" in card
    assert "a set of labels (none, one or several) of 2: `insult`, `threat`" in card
    assert "model.predict([\"a fine film\"])" in card


def test_write_model_card_errors_are_one_line(tmp_path):
    with pytest.raises(ModelError, match="no results.json"):
        write_model_card(tmp_path)
    (tmp_path / "results.json").write_text("{", encoding="utf-8")
    (tmp_path / "contrastfit.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ModelError, match="not valid JSON"):
        write_model_card(tmp_path)


def test_the_card_is_hub_metadata_without_local_paths(tmp_path, tiny_encoder_dir):
    """A run on a local file with a local encoder: no absolute path of this machine in the card, no
    local folder as ``base_model`` (not a Hub id), and a section that says how the folder loads."""
    from contrastfit import ContrastiveClassifier

    folder = tmp_path / "run"
    ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce", ["negative", "positive"], pooling="mean").save_pretrained(folder)
    record = json.loads(json.dumps(RECORD))
    record["model"] = str(tiny_encoder_dir)
    record["data"]["source"] = {"kind": "local", "path": str(tmp_path / "data" / "train.csv"),
                                "test_data": str(tmp_path / "data" / "test.csv"), "validation_data": None}
    (folder / "results.json").write_text(json.dumps(record), encoding="utf-8")
    card = write_model_card(folder).read_text(encoding="utf-8")
    assert str(tmp_path) not in card and str(tiny_encoder_dir) not in card
    assert 'Source: `{"kind": "local", "path": "train.csv", "test_data": "test.csv", "validation_data": null}`.' in card
    meta = yaml.safe_load(card.split("---", 2)[1])
    assert "base_model" not in meta and meta["license"] == "unknown" and "language" not in meta
    assert meta["library_name"] == "contrastfit" and meta["pipeline_tag"] == "text-classification"
    assert [m["value"] for m in meta["model-index"][0]["results"][1]["metrics"]][:2] == [0.6912, 0.68]
    assert f"`{tiny_encoder_dir.name}` fine-tuned with contrastfit's `ce-scl` method" in card
    assert "`SentenceTransformer(\"path/to/this/folder\")` (or `.../encoder`) gives the encoder's pooled output " \
           "(pooling `mean`, maximum length 64), L2-normalised: `model.embed(texts)`." in card
    assert "does not classify (its config declares no labels" in card
    # a Hub id as the base model is kept as it is
    hub = json.loads(json.dumps(RECORD))
    hub["model"] = "bert-base-uncased/x"
    assert yaml.safe_load(model_card(hub, {}).split("---", 2)[1])["base_model"] == "bert-base-uncased/x"
