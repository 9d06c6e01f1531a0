"""The model card (README.md) written from a run's records."""

from __future__ import annotations

import json
from pathlib import Path

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


def _folder(tmp_path, record: dict, config: dict | None = None, name: str = "run") -> Path:
    """A model folder holding only the two records a card is written from."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(record), encoding="utf-8")
    (folder / "contrastfit.json").write_text(json.dumps(config if config is not None else {"method": record["method"]}),
                                             encoding="utf-8")
    return folder


def test_card_front_matter_and_sections_come_from_the_record(tmp_path):
    """The written README read back by huggingface_hub (ModelCard.load, metadata_load): the front matter's
    fields, the model-index as evaluation results with each split named, and the body's sections."""
    from huggingface_hub import ModelCard, metadata_load

    path = write_model_card(_folder(tmp_path, RECORD))
    card = ModelCard.load(path)
    meta = metadata_load(path)
    index = meta.pop("model-index")
    assert meta == {"base_model": "sentence-transformers/all-MiniLM-L6-v2", "license": "apache-2.0", "language": ["en"],
                    "library_name": "contrastfit", "pipeline_tag": "text-classification",
                    "tags": ["contrastfit", "ce-scl", "classification"], "datasets": ["glue/sst2"],
                    "metrics": ["accuracy", "f1", "macro_f1", "mcc"]}
    assert index[0]["name"] == "ce-scl on glue/sst2" and [r["dataset"] for r in index[0]["results"]] == [
        {"name": "glue/sst2", "type": "glue/sst2", "split": "validation"}, {"name": "glue/sst2", "type": "glue/sst2", "split": "test"}]
    results = card.data.eval_results
    assert {(r.task_type, r.task_name) for r in results} == {("text-classification", "Text Classification")}
    assert {r.metric_type: r.metric_value for r in results if r.dataset_split == "test"} == RECORD["metrics"]["test"]
    assert {r.metric_name for r in results if r.dataset_split == "validation"} >= {"validation accuracy", "validation ece"}
    body = card.text
    assert body.lstrip().startswith("# ce-scl on glue/sst2")
    assert "Gunel" in body  # the method's paper, from the registry
    assert "`negative`, `positive`" in body
    assert "| train | 32 | `aaaa` | shots 16, sample seed 3, sample index 0 |" in body and "| test | 100 | `cccc` |  |" in body
    assert "| ce-scl | accuracy | 0.7188 | 0.6912 |" in body and "| ce-scl | ece | 0.0800 | 0.1000 |" in body
    assert "The kept step is 48, the best validation accuracy (0.7188) of 5 evaluations." in body
    assert "| lambda | 0.9 |" in body and "| learning_rate | 5e-05 |" in body and "| seed | 3 |" in body
    for section in ("## Training data", "## Training", "## Evaluation", "## Usage", "## Loading", "## Limitations",
                    "## Versions"):
        assert section in body, section
    assert "## Calibration" not in body
    assert "widget" not in meta  # the record holds no training texts
    # a built-in data set is not a Hub data set: no datasets entry
    builtin = json.loads(json.dumps(RECORD))
    builtin["data"]["source"] = {"kind": "builtin", "name": "mr"}
    assert "datasets" not in metadata_load(write_model_card(_folder(tmp_path, builtin, name="builtin")))
    calibrated = model_card(RECORD, {"calibration": {"temperature": 1.8, "n": 64, "data": "mr (validation split, 64 rows)",
                                                      "nll_before": 0.7, "nll_after": 0.6, "ece_before": 0.2,
                                                      "ece_after": 0.05}})
    assert "softmax(logits / 1.8000)" in calibrated and "ECE 0.2000 -> 0.0500" in calibrated


def test_the_model_index_holds_only_the_evaluated_splits_and_the_hub_data_set(tmp_path):
    """A run evaluated on validation only: one result, split validation; a run with no metrics: no
    model-index at all. A Hub data set with a configuration: its repository as the type, the
    configuration and revision named."""
    from huggingface_hub import ModelCard, metadata_load

    validation_only = json.loads(json.dumps(RECORD))
    del validation_only["metrics"]["test"]
    validation_only["data"]["source"] = {"kind": "hub", "name": "nyu-mll/glue", "config": "sst2", "revision": "abc"}
    card = ModelCard.load(write_model_card(_folder(tmp_path, validation_only, name="val")))
    assert {r.dataset_split for r in card.data.eval_results} == {"validation"}
    assert {(r.dataset_type, r.dataset_name, r.dataset_config, r.dataset_revision) for r in card.data.eval_results} == {
        ("nyu-mll/glue", "glue/sst2", "sst2", "abc")}
    assert card.data.datasets == ["nyu-mll/glue"]
    assert "| ce-scl | accuracy | 0.7188 |" in card.text and "| test |" not in card.text.split("## Evaluation")[1]
    unevaluated = json.loads(json.dumps(RECORD))
    unevaluated["metrics"] = {}
    meta = metadata_load(write_model_card(_folder(tmp_path, unevaluated, name="none")))
    assert "model-index" not in meta and meta["pipeline_tag"] == "text-classification"
    assert ModelCard.load(tmp_path / "none" / "README.md").data.eval_results is None


def test_the_widget_shows_a_training_text_of_each_label(tmp_path):
    """The record's examples (one training text per label) become the Hub widget's examples, titled by
    their label; a sentence-pair model gets none (the widget takes one text)."""
    from huggingface_hub import metadata_load

    record = json.loads(json.dumps(RECORD))
    record["data"]["examples"] = [{"label": "negative", "text": "a dull plot"}, {"label": "positive", "text": "a fine film"}]
    meta = metadata_load(write_model_card(_folder(tmp_path, record)))
    assert meta["widget"] == [{"text": "a dull plot", "example_title": "negative"},
                              {"text": "a fine film", "example_title": "positive"}]
    record["data"]["text_pair"] = True
    assert "widget" not in metadata_load(write_model_card(_folder(tmp_path, record, name="pairs")))


def test_label_examples_take_one_short_training_text_per_label():
    import datasets

    from contrastfit.card import label_examples

    train = datasets.Dataset.from_dict({"text": ["x" * 600, "b short", "a first", "a second"], "label": [1, 1, 0, 0]})
    assert label_examples(train, ["neg", "pos"]) == [{"label": "neg", "text": "a first"}, {"label": "pos", "text": "b short"}]
    assert label_examples(train, None) == []  # a regression target has no labels to show
    pairs = train.add_column("text_pair", ["p"] * 4)
    assert label_examples(pairs, ["neg", "pos"]) == []


def test_base_model_is_a_hub_id_or_left_out(tmp_path):
    """The built-in alias and its installed folder map to the MiniLM's Hub id, a Hub cache folder to its
    repository, a Hub id stays; a local folder contrastfit does not know is left out (no licence
    or language is guessed for it)."""
    from contrastfit.card import hub_base_model
    from contrastfit.encoders import builtin_model_path

    assert hub_base_model("minilm-l6") == "sentence-transformers/all-MiniLM-L6-v2"
    try:
        installed = str(builtin_model_path("minilm-l6"))
    except ModelError:
        installed = None
    if installed is not None:
        assert hub_base_model(installed) == "sentence-transformers/all-MiniLM-L6-v2"
        record = json.loads(json.dumps(RECORD))
        record["model"] = installed
        meta = yaml.safe_load(model_card(record, {}).split("---", 2)[1])
        assert (meta["base_model"], meta["license"], meta["language"]) == (
            "sentence-transformers/all-MiniLM-L6-v2", "apache-2.0", ["en"])
    snapshot = tmp_path / "hub" / "models--BAAI--bge-small-en-v1.5" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    assert hub_base_model(str(snapshot)) == "BAAI/bge-small-en-v1.5"
    assert hub_base_model("owner/encoder") == "owner/encoder"
    assert hub_base_model(str(tmp_path)) is None and hub_base_model(None) is None


def test_license_language_and_datasets_are_settable_and_kept(tmp_path):
    """``write_model_card(..., license=, language=, datasets=)`` sets the fields (the datasets replace the
    record's), keeps them in contrastfit.json, so the next card written there (calibrate's) has them too;
    a malformed value is one line and changes nothing."""
    from huggingface_hub import metadata_load

    from contrastfit.errors import ConfigError

    folder = _folder(tmp_path, RECORD)
    meta = metadata_load(write_model_card(folder, license="mit", language=["en", "de"], datasets="me/reviews"))
    assert (meta["license"], meta["language"], meta["datasets"]) == ("mit", ["en", "de"], ["me/reviews"])
    assert meta["model-index"][0]["results"][0]["dataset"]["type"] == "glue/sst2"  # what was evaluated stays
    assert json.loads((folder / "contrastfit.json").read_text())["card"] == {
        "license": "mit", "language": ["en", "de"], "datasets": ["me/reviews"]}
    meta = metadata_load(write_model_card(folder, language="fr"))  # one field changed, the others kept
    assert (meta["license"], meta["language"], meta["datasets"]) == ("mit", ["fr"], ["me/reviews"])
    before = (folder / "README.md").read_text()
    for kwargs, message in ((dict(license="MIT License"), "--license 'MIT License' is not a Hub licence id"),
                            (dict(language=["english!"]), "--language 'english!' is not a language code"),
                            (dict(datasets=["a/b/c"]), "--dataset 'a/b/c' is not a Hub data set id")):
        with pytest.raises(ConfigError, match=message) as err:
            write_model_card(folder, **kwargs)
        assert "\n" not in str(err.value)
    assert (folder / "README.md").read_text() == before


def test_contrastfit_card_takes_license_language_and_dataset(tmp_path, capsys):
    from huggingface_hub import metadata_load

    from contrastfit.cli import main

    folder = _folder(tmp_path, RECORD)
    assert main(["card", str(folder), "--license", "cc-by-4.0", "--language", "en", "--language", "nl",
                 "--dataset", "owner/name", "--dataset", "other/set"]) == 0
    assert capsys.readouterr().out == f"wrote {folder / 'README.md'}\n"
    meta = metadata_load(folder / "README.md")
    assert (meta["license"], meta["language"], meta["datasets"]) == ("cc-by-4.0", ["en", "nl"], ["owner/name", "other/set"])
    assert main(["card", str(folder), "--dataset", "not a set"]) == 2
    assert capsys.readouterr().err == "contrastfit: error: --dataset 'not a set' is not a Hub data set id (owner/name)\n"


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
    from huggingface_hub import metadata_load

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
    meta = metadata_load(folder / "README.md")
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
