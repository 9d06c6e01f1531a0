"""The run record (contrastfit.record): one versioned class writes and reads results.json and
contrastfit_pretrain.json; the records already on disk (version 0, captured from the code before the
class existed: tests/records/v0_*.json) load, a later version is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contrastfit import ContrastiveClassifier
from contrastfit.card import model_card
from contrastfit.errors import ContrastfitError, ModelError
from contrastfit.identity import record_identity
from contrastfit.experiments.records import ExperimentRun
from contrastfit.record import RECORD_VERSION, RESULTS_NAME, Calibration, ModelInfo, Record, read_record
from contrastfit.training import train

RECORDS = Path(__file__).parent / "records"


def _v0(kind: str) -> dict:
    return json.loads((RECORDS / f"v0_{kind}.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("kind", ["train", "multitask", "pretrain"])
def test_version_0_records_load_and_round_trip(kind):
    raw = _v0(kind)
    record = Record.from_dict(raw)
    assert record.kind == kind and record.version == RECORD_VERSION and record.identity is None
    out = record.to_dict()
    assert list(out)[:2] == ["version", "kind"] and out["version"] == RECORD_VERSION
    assert Record.from_dict(out) == record and Record.from_dict(json.loads(json.dumps(out))) == record
    # every entry of the old record is kept, where version 1 keeps it
    if kind == "pretrain":
        assert record.base_model == raw["base_model"] and record.data.to_dict() == raw["corpus"]
        assert {k: getattr(record.training, k) for k in ("pooling", "max_length", "base_model_path")} == \
            {k: raw[k] for k in ("pooling", "max_length", "base_model_path")}
    else:
        assert {k: v for k, v in out.items() if k not in ("version", "kind")} == \
            {k: v for k, v in raw.items() if k != "kind"}


def test_version_0_records_feed_the_readers():
    train_v0 = _v0("train")
    run = ExperimentRun.from_result(train_v0)
    assert run.method == "ce-scl" and run.task == "classification" and run.identity is None
    assert run.metrics["validation"]["accuracy"] == train_v0["metrics"]["validation"]["accuracy"]
    assert "# ce-scl on toy" in model_card(train_v0, {})
    assert "# Multi-task model: sent, sts" in model_card(_v0("multitask"), {})


def test_a_later_version_or_another_kind_is_refused_in_one_line(tmp_path):
    path = tmp_path / RESULTS_NAME
    path.write_text(json.dumps({**_v0("train"), "version": RECORD_VERSION + 1}), encoding="utf-8")
    with pytest.raises(ContrastfitError, match=rf"^{path} is of record version {RECORD_VERSION + 1}, newer than "
                                                 r"this contrastfit reads \(1\); upgrade contrastfit") as info:
        read_record(path)
    assert "\n" not in str(info.value)
    with pytest.raises(ContrastfitError, match="unknown kind 'recipe'"):
        Record.from_dict({**_v0("train"), "kind": "recipe"})
    with pytest.raises(ContrastfitError, match="^run r1: training is not a mapping"):
        Record.from_dict({**_v0("train"), "training": [1]}, "run r1")
    with pytest.raises(ContrastfitError, match=r"^run r1: an entry has the wrong type \(steps: .*integer") as info:
        Record.from_dict({**_v0("train"), "training": {**_v0("train")["training"], "steps": "ten"}}, "run r1")
    assert "\n" not in str(info.value)
    path.write_text("{", encoding="utf-8")
    with pytest.raises(ContrastfitError, match="unreadable run record"):
        read_record(path)


def test_a_run_writes_the_record_it_returns_with_its_identity(tmp_path, tiny_encoder_dir, sentiment_csv):
    opts = dict(method="ce", data=str(sentiment_csv), label_column="sentiment", model=str(tiny_encoder_dir),
                epochs=1, batch_size=8, progress=False, select_best=False)
    first = train(output=str(tmp_path / "a"), **opts)
    written = read_record(tmp_path / "a" / RESULTS_NAME)
    assert written == first.record and written.to_dict() == first.to_dict()
    assert written.kind == "train" and written.version == RECORD_VERSION
    assert len(written.identity.sha256) == 64 and record_identity(first) == written.identity_sha256
    assert written.identity.spec["data"]["train_hash"] == written.data.train_hash
    # the identity is what made the run: not where it was written, nor the tags
    second = train(output=str(tmp_path / "b"), tags={"note": "again"}, **opts)
    assert second.record.identity == written.identity
    third = train(output=str(tmp_path / "c"), seed=1, **opts)
    assert third.record.identity_sha256 != written.identity_sha256
    # a finished run resumed returns its record as it was written
    again = train(output=str(tmp_path / "a"), resume=True, **opts)
    assert again.record == written and again.output == str(tmp_path / "a")


def test_model_info_reads_and_writes_a_folders_entries_unchanged():
    raw = {"base_model": "minilm-l6", "seed": 0, "label_type": "int", "future_entry": [1, 2],
           "data": {"name": "my", "source": {"kind": "local", "path": "/d/my.csv", "new_key": 1},
                    "train_hash": "abc", "train_rows": {"rows": 3}},
           "training": {"steps": 15, "learning_rate": 1e-4, "new_setting": True},
           "calibration": {"temperature": 1.5, "n": 10}}
    info = ModelInfo.read(raw)
    assert info.to_dict() == raw
    assert (info.data.source.path, info.data.train_hash, info.training.steps, info.calibration.temperature,
            info.future_entry) == ("/d/my.csv", "abc", 15, 1.5, [1, 2])
    empty = ModelInfo.read({})
    assert (empty.data.source, empty.calibration.temperature, empty.label_descriptions, empty.to_dict()) == (
        None, None, {}, {})
    empty.calibration = {"temperature": 2.0}  # validated into its model
    assert isinstance(empty.calibration, Calibration) and empty.to_dict() == {"calibration": {"temperature": 2.0}}
    with pytest.raises(ModelError, match=r"^run/contrastfit.json: an entry has the wrong type \(calibration\.temperature"):
        ModelInfo.read({"calibration": {"temperature": "hot"}}, "run/contrastfit.json")


def test_a_folder_with_a_wrongly_typed_info_entry_is_one_line(tmp_path, tiny_encoder_dir):
    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce", ["negative", "positive"])
    model.info.update(seed=3, label_type="int")
    folder = model.save_pretrained(tmp_path / "run", progress=False)
    again = ContrastiveClassifier.from_pretrained(folder, progress=False)
    assert again.info.to_dict() == model.info.to_dict() == {"base_model": str(tiny_encoder_dir), "seed": 3,
                                                             "label_type": "int"}
    config = json.loads((folder / "contrastfit.json").read_text())
    (folder / "contrastfit.json").write_text(json.dumps({**config, "seed": "three"}))
    with pytest.raises(ModelError, match=r"contrastfit.json: an entry has the wrong type \(seed:") as caught:
        ContrastiveClassifier.from_pretrained(folder, progress=False)
    assert "\n" not in str(caught.value)


def test_one_number_of_a_record_is_read_through_every_level_or_is_none():
    from contrastfit.record import metric_of

    single = Record(metrics={"test": {"accuracy": 0.8, "n": 10}})
    assert single.metric("test", "accuracy") == 0.8
    assert single.metric("test", "f1") is None and single.metric("train", "accuracy") is None
    assert metric_of({"validation": "not a mapping"}, "validation", "accuracy") is None  # a level that is not one
    multitask = {"test": {"average": 0.7, "sst": {"accuracy": 0.9}}}
    assert metric_of(multitask, "test", "sst", "accuracy") == 0.9
    assert metric_of(multitask, "test", "average") == 0.7
    assert metric_of(multitask, "test", "average", "accuracy") is None  # a number has no levels below
    assert metric_of(multitask, "test", "nli", "accuracy") is None
    assert Record(kind="multitask", metrics=multitask).metric("test", "sst", "accuracy") == 0.9


def test_each_splits_metrics_are_typed_and_read_as_the_json_has_them():
    """``record.metrics[split]`` is a SplitMetrics: its entries as attributes, and a mapping of exactly
    the entries the run wrote (what is not there is not ``in`` it), written back unchanged."""
    raw = {"kind": "train", "metrics": {"test": {"n": 10, "accuracy": 0.8, "per_class": {"pos": {"f1": 0.5}},
                                                 "brier": 0.1}}}
    record = Record.from_dict(raw)
    test = record.metrics["test"]
    assert (test.accuracy, test.n, test.mse, test["brier"]) == (0.8, 10, None, 0.1)
    assert isinstance(test.n, int) and "accuracy" in test and "mse" not in test and "f1" not in test
    assert list(test) == ["n", "accuracy", "per_class", "brier"] and len(test) == 4 and dict(test)["brier"] == 0.1
    assert test.get("mse") is None and test.get("mse", 1) == 1
    with pytest.raises(KeyError):
        test["mse"]
    assert record.to_dict()["metrics"] == raw["metrics"]
    with pytest.raises(ContrastfitError, match="metrics.validation"):
        Record.from_dict({"kind": "train", "metrics": {"validation": "not a mapping"}}, "results.json")
    multitask = Record.from_dict({"kind": "multitask", "metrics": {"test": {"average": 0.7, "sst": {"accuracy": 0.9}}},
                                  "tasks": {"sst": {"metrics": {"test": {"accuracy": 0.9, "n": 3}}}}})
    assert multitask.metrics["test"].average == 0.7 and multitask.tasks["sst"].metrics["test"].accuracy == 0.9
