"""Experiment configs and the runner on the tiny encoder: schema, store, skip, crash and resume."""

from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import sentiment_rows, write_rows_csv
from contrastfit.errors import ConfigError
from contrastfit.experiments import load_config, parse_config, run_experiment
from contrastfit.experiments.store import STORE_NAME, ResultsStore


@pytest.fixture()
def experiment_files(tmp_path, tiny_encoder_dir):
    train = write_rows_csv(tmp_path / "train.csv", sentiment_rows(30, seed=1))
    test = write_rows_csv(tmp_path / "test.csv", sentiment_rows(8, seed=2))

    def write(**overrides) -> Path:
        raw = {
            "name": "tiny", "data": str(train), "model": str(tiny_encoder_dir),
            "data_options": {"label_column": "sentiment", "test_data": str(test)},
            "methods": ["ce", {"name": "ce-scl", "temperature": [0.1, 0.5]}],
            "protocol": {"kind": "few-shot", "shots": 4},
            "seeds": [0], "validation_size": 8,
            "training": {"epochs": 1, "batch_size": 4, "learning_rate": 1e-3, "min_steps": 1},
            "analyses": [], "report": False,
            "output": str(tmp_path / "out"),
        }
        raw.update(overrides)
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(raw), encoding="utf-8")
        return path

    return write


def test_config_expands_grids_and_refuses_unknown_keys(experiment_files):
    config = load_config(experiment_files())
    assert [v.label for v in config.methods] == ["ce", "ce-scl[temperature=0.1]", "ce-scl[temperature=0.5]"]
    base = yaml.safe_load(experiment_files().read_text())
    with pytest.raises(ConfigError, match="unknown key.*epochz"):
        parse_config({**base, "epochz": 3})
    with pytest.raises(ConfigError, match=r"protocol: unknown key 'shotz' \(allowed: kind, samples, seed, shots"):
        parse_config({**base, "protocol": {"kind": "few-shot", "shotz": 4}})
    with pytest.raises(ConfigError, match="unknown protocol kind 'fewshot'"):
        parse_config({**base, "protocol": {"kind": "fewshot"}})
    with pytest.raises(ConfigError, match=r"methods\[0\]: method 'ce-scl' has no hyper-parameter 'tau'"):
        parse_config({**base, "methods": [{"name": "ce-scl", "tau": 0.1}]})
    with pytest.raises(ConfigError, match="baseline 'nope'"):
        parse_config({**base, "baseline": "nope"})
    with pytest.raises(ConfigError, match=r"training: unknown key 'lr' \(allowed: .*batch_size"):
        parse_config({**base, "training": {"lr": 1}})


def test_overrides_set_dotted_keys_as_yaml(experiment_files, tmp_path):
    path = experiment_files()
    config = load_config(path, ["protocol.samples=3", "protocol.shots=[2, 4]", "seeds=[0, 1]",
                                f"output={json.dumps(str(tmp_path / 'x: y'))}", "training.epochs=2"])
    assert config.protocol.kind == "few-shot" and config.protocol.options() == {"shots": [2, 4], "samples": 3}
    assert config.seeds == [0, 1] and config.output == str(tmp_path / "x: y")
    assert config.training.epochs == 2 and config.raw["protocol"]["samples"] == 3  # what experiment.json records
    assert load_config(path).protocol.options() == {"shots": [4]}  # the file is untouched
    with pytest.raises(ConfigError, match="not KEY=VALUE"):
        load_config(path, ["protocol.samples"])
    with pytest.raises(ConfigError, match="seeds is not a mapping"):
        load_config(path, ["seeds.x=1"])
    with pytest.raises(ConfigError, match="protocol: unknown key 'shotz'"):
        load_config(path, ["protocol.shotz=3"])


def test_runner_stores_every_run_and_skips_finished_ones(experiment_files, capsys):
    config = load_config(experiment_files(protocol={"kind": "few-shot", "shots": [2, 4], "samples": 2}))
    summary = run_experiment(config, progress=False)
    out = Path(config.output)
    with ResultsStore(out / STORE_NAME) as store:
        done = store.done()
        assert len(done) == 3 * 2 * 2 and all(r["status"] == "done" for r in store.all())
    # every record says what made it
    r = done[0]
    for key in ("method", "hparams", "seed", "data", "versions", "timings", "tags"):
        assert key in r
    assert {r["tags"]["setting"] for r in done} == {"shots=2", "shots=4"}
    assert {r["data"]["train_size"] for r in done} == {4, 8}
    assert {r["tags"]["sample"] for r in done} == {0, 1}
    assert len(summary["rows"]) == 6 and all(row["n"] == 2 for row in summary["rows"])
    capsys.readouterr()
    run_experiment(config, progress=False)
    assert "(0 new, 12 done earlier)" in capsys.readouterr().out


def test_killed_runner_resumes_without_losing_or_redoing_runs(experiment_files):
    path = experiment_files(seeds=[0, 1])
    out = Path(yaml.safe_load(path.read_text())["output"])
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "contrastfit.cli", "experiment", str(path), "--quiet"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store_path = out / STORE_NAME
    deadline = time.time() + 240
    try:
        while time.time() < deadline:
            if store_path.is_file():
                with ResultsStore(store_path) as store:
                    if len(store.done()) >= 2:
                        break
            time.sleep(0.2)
        else:
            pytest.fail("the runner did not finish two runs in time")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with ResultsStore(store_path) as store:
        before = {r["run_id"]: r["finished"] for r in store.all() if r["status"] == "done"}
        assert len(before) >= 2
    done = subprocess.run(cmd, env=env, capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    with ResultsStore(store_path) as store:
        rows = store.all()
        assert len(rows) == 6 and all(r["status"] == "done" for r in rows)
        after = {r["run_id"]: r["finished"] for r in rows}
    assert all(after[k] == v for k, v in before.items())  # finished runs were not redone
    with sqlite3.connect(store_path) as db:  # the standard library's SQLite, not a command that may be missing
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_runner_resumes_an_interrupted_run_from_its_checkpoint(experiment_files, monkeypatch):
    from contrastfit.trainer import ContrastfitTrainer

    config = load_config(experiment_files(methods=["ce"], training={"epochs": 3, "batch_size": 4, "min_steps": 1,
                                                                    "learning_rate": 1e-3, "save_checkpoints": True,
                                                                    "save_steps": 2}))
    original = ContrastfitTrainer.training_step
    calls = []

    def crash_at_step_5(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 5:
            raise RuntimeError("power cut")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ContrastfitTrainer, "training_step", crash_at_step_5)
    with pytest.raises(RuntimeError, match="power cut"):
        run_experiment(config, progress=False)
    (folder,) = Path(config.output).glob("runs/*")
    # the last checkpoint is kept (and, with selection on validation, the best one so far)
    kept = sorted(p.name for p in folder.glob("checkpoints/checkpoint-*"))
    assert kept[-1] == "checkpoint-4" and set(kept) <= {"checkpoint-2", "checkpoint-4"}
    monkeypatch.setattr(ContrastfitTrainer, "training_step", original)
    run_experiment(config, progress=False)
    result = json.loads((folder / "results.json").read_text())
    assert result["training"]["resumed_from"].endswith("checkpoint-4") and result["training"]["steps"] == 6
    assert not list(folder.glob("checkpoints/checkpoint-*"))  # cleaned up once the run is done
    with ResultsStore(Path(config.output) / STORE_NAME) as store:
        assert [r["status"] for r in store.all()] == ["done"]


def test_summary_json_has_mean_and_std(experiment_files):
    config = load_config(experiment_files(methods=["ce"], seeds=[0, 1]))
    run_experiment(config, progress=False)
    summary = json.loads((Path(config.output) / "summary.json").read_text())
    (row,) = summary["rows"]
    assert row["selection_metric"] == "accuracy"
    values = row["validation"]["values"]
    assert len(values) == 2 and row["validation"]["n"] == 2
    assert row["validation"]["mean"] == pytest.approx(sum(values) / 2)


@pytest.mark.parametrize("path", sorted(Path(__file__).parent.parent.joinpath("examples").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_config_is_valid(path):
    from contrastfit.experiments import MultiTaskExperimentConfig

    config = load_config(path)
    if "tasks" in yaml.safe_load(path.read_text(encoding="utf-8")):  # examples/cs224n_multitask.yaml
        assert isinstance(config, MultiTaskExperimentConfig) and config.tasks and config.variants and config.seeds
    else:
        assert config.methods and config.seeds


def test_runner_writes_analyses_and_report(experiment_files):
    config = load_config(experiment_files(methods=["ce", "ce-scl"], analyses=["tsne", "confusion", "error_analysis"],
                                          report=True, baseline="ce"))
    run_experiment(config, progress=False)
    out = Path(config.output)
    npz = list(out.glob("runs/*/analysis.npz"))
    assert len(npz) == 2
    import numpy as np

    with np.load(npz[0], allow_pickle=False) as arrays:
        assert arrays["embeddings"].shape == (16, 32) and arrays["texts"].shape == (16,)
    assert (out / "report.md").is_file() and (out / "report.html").is_file()
    assert "data:image/png;base64" in (out / "report.html").read_text()


def test_attributions_for_the_first_sample_and_seed_reach_the_report(experiment_files):
    config = load_config(experiment_files(methods=["ce", "ce-scl"], analyses=["attributions"], report=True,
                                          seeds=[0, 1], protocol={"kind": "few-shot", "shots": [4, 2], "samples": 2},
                                          attributions={"examples": [0, 3], "samples": 2}))
    run_experiment(config, progress=False)
    out = Path(config.output)
    written = sorted(out.glob("runs/*/attributions.json"))
    assert len(written) == 2  # ce and ce-scl in the first setting, sample 0, seed 0 only (16 runs in all)
    with ResultsStore(out / STORE_NAME) as store:
        runs = {r["tags"]["run_id"]: r for r in store.done()}
        assert len(runs) == 16
    for path in written:
        run = runs[path.parent.name]
        assert (run["tags"]["setting"], run["tags"]["sample"], run["seed"]) == ("shots=4", 0, 0)
    test = [r["sentence"] for r in sentiment_rows(8, seed=2)]
    for path in written:
        doc = json.loads(path.read_text())
        assert [e["index"] for e in doc["examples"]] == [0, 3]
        for e in doc["examples"]:
            assert e["text"] == test[e["index"]] and e["words"] == test[e["index"]].split()
            assert sum(e["values"]) == pytest.approx(e["probability"] - e["base_probability"], abs=1e-5)
    figures = sorted(p.name for p in (out / "figures").glob("attributions_*.png"))
    assert figures == ["attributions_shots=4_test0.png", "attributions_shots=4_test3.png"]
    report = (out / "report.md").read_text()
    assert "## Token attributions" in report and "figures/attributions_shots=4_test3.png" in report
    with pytest.raises(ConfigError, match="attributions: unknown key 'n'"):
        parse_config({**yaml.safe_load(experiment_files().read_text()), "attributions": {"n": 3}})
    with pytest.raises(ConfigError, match="attributions: baseline must be one of remove, mask, got 'zero'"):
        parse_config({**yaml.safe_load(experiment_files().read_text()), "attributions": {"baseline": "zero"}})


def test_attribution_examples_prefer_short_texts():
    from contrastfit.experiments.runner import pick_examples

    counts = [80, 10, 60, 20, 55, 5]
    assert pick_examples(counts, 2, 50) == [1, 3]           # the first two of at most 50 words
    assert pick_examples(counts, 4, 50) == [1, 3, 4, 5]     # topped up with the shortest longer one (55)
    assert pick_examples(counts, 10, 50) == list(range(6))
    assert pick_examples(counts, [0, 5, 9], 50) == [0, 5]   # explicit indices are kept, out of range dropped


def test_optuna_search_stores_trials(experiment_files, tmp_path):
    import optuna  # noqa: F401  (in the test extra: a missing package fails here instead of skipping)
    from contrastfit.cli import main

    path = experiment_files(methods=["ce-scl"], search={"method": "ce-scl", "trials": 2,
                                                         "space": {"temperature": {"low": 0.1, "high": 0.5}}})
    assert main(["experiment", str(path), "--search", "optuna", "--quiet"]) == 0
    best = json.loads((tmp_path / "out" / "search.json").read_text())
    assert best["trials"] == 2 and 0.1 <= best["params"]["temperature"] <= 0.5
    assert (tmp_path / "out" / "optuna.sqlite3").is_file()
    # a second call continues the same study (no new trials: 2 are done)
    assert main(["experiment", str(path), "--search", "optuna", "--quiet"]) == 0
    assert json.loads((tmp_path / "out" / "search.json").read_text())["trials"] == 2


# ---------------------------------------------------------------------------------------------
# Per-variant training settings, transfer sources per method, augmentation runs
# ---------------------------------------------------------------------------------------------

def test_variant_training_settings_override_the_experiment_for_that_variant(experiment_files):
    config = load_config(experiment_files(methods=["ce", {"name": "ce", "training": {"batch_size": [2, 8]}},
                                                   {"name": "ce-scl", "temperature": 0.3,
                                                    "training": {"learning_rate": 5.0e-4}}]))
    assert [v.label for v in config.methods] == ["ce", "ce[batch_size=2]", "ce[batch_size=8]",
                                                 "ce-scl[temperature=0.3,learning_rate=0.0005]"]
    run_experiment(config, progress=False)
    with ResultsStore(Path(config.output) / STORE_NAME) as store:
        runs = {r["tags"]["variant"]: r for r in store.done()}
    assert set(runs) == {v.label for v in config.methods}
    # 8 training rows (4 shots x 2 classes), 1 epoch: the steps show the batch size the Trainer used
    got = {v: (r["training"]["batch_size"], r["training"]["steps"], r["training"]["learning_rate"]) for v, r in runs.items()}
    assert got == {"ce": (4, 2, 1e-3), "ce[batch_size=2]": (2, 4, 1e-3), "ce[batch_size=8]": (8, 1, 1e-3),
                   "ce-scl[temperature=0.3,learning_rate=0.0005]": (4, 2, 5e-4)}
    assert runs["ce[batch_size=2]"]["tags"]["training_overrides"] == {"batch_size": 2}
    assert "training_overrides" not in runs["ce"]["tags"]
    assert runs["ce-scl[temperature=0.3,learning_rate=0.0005]"]["hparams"]["temperature"] == 0.3


def test_variant_training_settings_are_checked(experiment_files):
    base = yaml.safe_load(experiment_files().read_text())
    with pytest.raises(ConfigError, match=r"methods\[0\]: training: unknown key 'lr' \(allowed: .*batch_size"):
        parse_config({**base, "methods": [{"name": "ce", "training": {"lr": 1}}]})
    with pytest.raises(ConfigError, match=r"methods\[0\]: training: each of batch_size must be >= 1, got 0$"):
        parse_config({**base, "methods": [{"name": "ce", "training": {"batch_size": 0}}]})  # its declaration's bound
    with pytest.raises(ConfigError, match=r"ce\[bf16=True,fp16=True\]: choose one of fp16 and bf16"):
        parse_config({**base, "methods": [{"name": "ce", "training": {"fp16": True, "bf16": True}}]})  # TrainConfig's
    with pytest.raises(ConfigError, match=r"methods\[0\]: training: Input should be a valid dictionary"):
        parse_config({**base, "methods": [{"name": "ce", "training": 16}]})
    with pytest.raises(ConfigError, match="listed twice"):
        parse_config({**base, "methods": ["ce", {"name": "ce", "training": {}}]})


def _source_csv(path: Path) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["text", "label"])
        writer.writeheader()
        writer.writerows({"text": r["sentence"], "label": r["sentiment"]} for r in sentiment_rows(20, seed=5))
    return path


def _spy_on_encoder_loads(monkeypatch) -> list[tuple[str, str]]:
    """(model folder or name, method) of every model the training code builds, in order."""
    from contrastfit.modeling import ContrastiveClassifier

    calls = []
    original = ContrastiveClassifier.from_encoder.__func__

    def spy(cls, model, method, *args, **kwargs):
        calls.append((str(model), method))
        return original(cls, model, method, *args, **kwargs)

    monkeypatch.setattr(ContrastiveClassifier, "from_encoder", classmethod(spy))
    return calls


def test_transfer_trains_one_source_per_method_variant_and_each_target_starts_from_its_own(
        experiment_files, tmp_path, tiny_encoder_dir, monkeypatch, capsys):
    import numpy as np
    from safetensors.numpy import load_file

    source_data = _source_csv(tmp_path / "source.csv")
    config = load_config(experiment_files(
        methods=["ce", {"name": "ce-scl", "temperature": 0.3}],
        protocol={"kind": "transfer", "source": {"data": str(source_data), "shots": 6}, "shots": 4, "samples": 2},
        # keep the last step (on 4 validation rows every step ties, and the earliest, still in warm-up, would win)
        training={"epochs": 1, "batch_size": 4, "learning_rate": 1e-3, "min_steps": 1, "select_best": False}))
    calls = _spy_on_encoder_loads(monkeypatch)
    run_experiment(config, progress=False)
    out = Path(config.output)
    folders = {"ce": out / "sources" / "ce", "ce-scl[temperature=0.3]": out / "sources" / "ce-scl_temperature=0.3"}
    assert sorted(p.name for p in (out / "sources").iterdir() if p.is_dir()) == sorted(f.name for f in folders.values())
    sources = {k: json.loads((f / "results.json").read_text()) for k, f in folders.items()}
    # each source was trained with its target row's method and hyper-parameters, on the source data
    assert sources["ce"]["method"] == "ce" and sources["ce-scl[temperature=0.3]"]["method"] == "ce-scl"
    assert sources["ce-scl[temperature=0.3]"]["hparams"]["temperature"] == 0.3
    assert all(s["data"]["train_size"] == 12 and s["tags"]["role"] == "transfer source" for s in sources.values())
    weights = {k: load_file(str(f / "encoder" / "model.safetensors")) for k, f in folders.items()}
    assert any(not np.array_equal(weights["ce"][name], weights["ce-scl[temperature=0.3]"][name]) for name in weights["ce"])
    # two source trainings (from the base model), then every target run from its own method's source
    encoder = {k: str(f / "encoder") for k, f in folders.items()}
    base = str(tiny_encoder_dir)
    assert [c for c in calls if c[0] == base] == [(base, "ce"), (base, "ce-scl")]
    targets = [c for c in calls if c[0] != base]
    assert sorted(targets) == sorted([(encoder["ce"], "ce")] * 2 + [(encoder["ce-scl[temperature=0.3]"], "ce-scl")] * 2)
    with ResultsStore(out / STORE_NAME) as store:
        runs = store.done()
    assert len(runs) == 4
    for r in runs:
        src = r["tags"]["transfer_source"]
        assert src["key"] == r["tags"]["variant"] and src["method"] == r["method"] and not src["shared"]
        assert r["model"] == encoder[r["tags"]["variant"]] == src["encoder"]
        assert src["train_hash"] == sources[r["tags"]["variant"]]["data"]["train_hash"]
    # a second runner finds everything done and trains no source again
    calls.clear()
    capsys.readouterr()
    run_experiment(config, progress=False)
    assert calls == [] and "(0 new, 4 done earlier)" in capsys.readouterr().out


def test_transfer_source_method_override_shares_one_source(experiment_files, tmp_path, tiny_encoder_dir, monkeypatch):
    source_data = _source_csv(tmp_path / "source.csv")
    raw = yaml.safe_load(experiment_files().read_text())
    with pytest.raises(ConfigError, match="protocol: source: hparams needs method"):
        parse_config({**raw, "protocol": {"kind": "transfer", "source": {"data": "x", "hparams": {"temperature": 0.1}}}})
    with pytest.raises(ConfigError, match="protocol: source: method 'ce' has no hyper-parameter 'temperature'"):
        parse_config({**raw, "protocol": {"kind": "transfer", "source": {"data": "x", "method": "ce",
                                                                         "hparams": {"temperature": 0.1}}}})
    config = load_config(experiment_files(
        methods=["ce", "ce-scl"],
        protocol={"kind": "transfer", "source": {"data": str(source_data), "shots": 6, "method": "ce-scl",
                                                 "hparams": {"temperature": 0.2}}, "shots": 4}))
    calls = _spy_on_encoder_loads(monkeypatch)
    run_experiment(config, progress=False)
    out = Path(config.output)
    shared = out / "sources" / "ce-scl_temperature=0.2"
    assert [p.name for p in (out / "sources").iterdir() if p.is_dir()] == [shared.name]
    assert [c for c in calls if c[0] == str(tiny_encoder_dir)] == [(str(tiny_encoder_dir), "ce-scl")]
    assert sorted(c for c in calls if c[0] != str(tiny_encoder_dir)) == [(str(shared / "encoder"), "ce"),
                                                                        (str(shared / "encoder"), "ce-scl")]
    with ResultsStore(out / STORE_NAME) as store:
        assert {(r["method"], r["tags"]["transfer_source"]["method"], r["tags"]["transfer_source"]["shared"])
                for r in store.done()} == {("ce", "ce-scl", True), ("ce-scl", "ce-scl", True)}
    # the same output folder with a different source is refused, not silently reused
    other = load_config(experiment_files(
        methods=["ce", "ce-scl"], seeds=[1],
        protocol={"kind": "transfer", "source": {"data": str(source_data), "shots": 4, "method": "ce-scl",
                                                 "hparams": {"temperature": 0.2}}, "shots": 4}))
    with pytest.raises(ConfigError, match="trained with other settings"):
        run_experiment(other, progress=False)


def _reinitialised_encoder(source: Path, folder: Path, seed: int) -> Path:
    """The tiny encoder's architecture and tokenizer with weights drawn from another seed."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(seed)
    BertModel(BertConfig.from_pretrained(source)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(source, local_files_only=True).save_pretrained(folder)
    return folder


def test_models_compare_encoders_on_the_same_samples(experiment_files, tmp_path, tiny_encoder_dir, capsys):
    import shutil

    enc_a = shutil.copytree(tiny_encoder_dir, tmp_path / "enc_a")
    enc_b = _reinitialised_encoder(tiny_encoder_dir, tmp_path / "enc_b", seed=1)
    raw = yaml.safe_load(experiment_files(methods=["ce", "ce-scl"], report=True,
                                          protocol={"kind": "few-shot", "shots": 4, "samples": 2}).read_text())
    del raw["model"]
    raw["models"] = [str(enc_a), str(enc_b)]
    raw["baseline"] = "enc_a/ce"
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    config = load_config(path)
    assert config.encoders == (("enc_a", str(enc_a)), ("enc_b", str(enc_b)))
    capsys.readouterr()
    run_experiment(config, progress=False)
    out = Path(config.output)
    with ResultsStore(out / STORE_NAME) as store:
        runs = store.done()
    # models x methods x samples, every record with its model
    variants = ["enc_a/ce", "enc_a/ce-scl", "enc_b/ce", "enc_b/ce-scl"]
    assert sorted((r["tags"]["variant"], r["tags"]["sample"]) for r in runs) == [(v, s) for v in variants for s in (0, 1)]
    for r in runs:
        label = r["tags"]["model"]
        assert r["model"] == str({"enc_a": enc_a, "enc_b": enc_b}[label]) and r["tags"]["variant"].startswith(label + "/")
    # the same samples for both encoders; different encoders give different training
    by = {(r["tags"]["variant"], r["tags"]["sample"]): r for r in runs}
    for v in ("ce", "ce-scl"):
        for sample in (0, 1):
            a, b = by[(f"enc_a/{v}", sample)], by[(f"enc_b/{v}", sample)]
            assert a["data"]["train_hash"] == b["data"]["train_hash"]
            assert a["training"]["train_loss"] != b["training"]["train_loss"]
    # the summary and the report label (and group) the rows by model, the baseline named with its model
    summary = json.loads((out / "summary.json").read_text())
    assert [(r["variant"], r["model"]) for r in summary["rows"]] == [
        ("enc_a/ce", "enc_a"), ("enc_a/ce-scl", "enc_a"), ("enc_b/ce", "enc_b"), ("enc_b/ce-scl", "enc_b")]
    assert summary["rows"][0]["is_baseline"] and summary["rows"][2]["baseline"] == "enc_a/ce"
    # with the other encoder's baseline, the rows stay grouped by encoder, that encoder first
    from contrastfit.experiments.records import as_records
    from contrastfit.experiments.summary import summary_table

    rows = summary_table(as_records(runs), ["accuracy"], baseline="enc_b/ce-scl")
    assert [r["variant"] for r in rows[:4]] == ["enc_b/ce-scl", "enc_b/ce", "enc_a/ce", "enc_a/ce-scl"]
    table = (out / "summary.md").read_text()
    assert all(f"| {v} " in table for v in variants)
    report = (out / "report.md").read_text()
    assert f"{enc_a}, {enc_b}" in report and "enc_b/ce-scl" in report


def test_augmentation_runs_train_on_originals_plus_copies(experiment_files):
    config = load_config(experiment_files(methods=["ce"], protocol={"kind": "augmentation", "augmenter": "swap",
                                                                    "ratio": 3, "rate": 0.5, "shots": 4}))
    run_experiment(config, progress=False)
    with ResultsStore(Path(config.output) / STORE_NAME) as store:
        (run,) = store.done()
    assert run["tags"]["setting"] == "shots=4,ratio=3,rate=0.5"
    assert run["data"]["train_size"] == 8 * 4  # 8 originals + 3 copies of each
    aug = run["tags"]["sampling"]["augmentation"]
    assert (aug["augmenter"], aug["ratio"], aug["rate"], aug["rows_original"], aug["rows_added"]) == ("swap", 3, 0.5, 8, 24)


def test_the_main_jobs_methods_run_and_report_in_an_experiment(experiment_files):
    """The main job compares the default recipe with the linear probe and SetFit: all of them go
    through the runner, its analyses and the report (a probe has no training log)."""
    from contrastfit.experiments.analyses import available_analyses

    config = load_config(experiment_files(methods=["linear-probe", "setfit", "ce-scl-lr"], baseline="linear-probe",
                                          analyses=[a for a in available_analyses() if a != "attributions"], report=True,
                                          training={"batch_size": 4, "learning_rate": 1e-3, "min_steps": 2}))
    run_experiment(config, progress=False)
    summary = json.loads((Path(config.output) / "summary.json").read_text())
    assert {r["variant"] for r in summary["rows"]} == {"linear-probe", "setfit", "ce-scl-lr"}
    assert (Path(config.output) / "report.md").is_file()


# ---------------------------------------------------------------------------------------------
# Run identity: an edited config never reuses finished runs; a damaged store is named and rebuilt
# ---------------------------------------------------------------------------------------------

def _done_runs(out: Path) -> dict[str, dict]:
    with ResultsStore(out / STORE_NAME) as store:
        return {r["tags"]["run_id"]: r for r in store.done()}


EDITS = {  # edit: (--set overrides, what the identity records of the edited run)
    "epochs": (["training.epochs=2"], lambda spec: spec["training"]["epochs"] == 2),
    "learning_rate": (["training.learning_rate=1e-4"], lambda spec: spec["training"]["learning_rate"] == 1e-4),
    "hparam": (["methods=[{name: ce-scl, temperature: 0.3}]"], lambda spec: spec["hparams"]["temperature"] == 0.3),
    "data content": ([], lambda spec: True),
    "data path": (None, lambda spec: spec["data"]["name"].endswith("train2.csv")),
    "a setting added later": (["training.wise_ft=0.5", "training.refit_head=true"],
                              lambda spec: spec["training"]["wise_ft"] == 0.5),
}


def test_a_setting_added_later_leaves_the_identities_made_before_it_as_they_were():
    """An unset setting that identities made before it did not hold (ADDED_SETTINGS) is left out, so
    upgrading does not redo finished runs; set, it is part of the identity."""
    from contrastfit.identity import ADDED_SETTINGS, run_identity

    assert "wise_ft" in ADDED_SETTINGS
    before = {"batch_size": 16, "learning_rate": None, "output": "runs/a"}
    ident = [run_identity("train", method="ce-scl-lr", hparams={}, seed=0, model=None, settings=settings, data={})
             for settings in (before, {**before, "wise_ft": None}, {**before, "wise_ft": 0.5})]
    assert ident[0] == ident[1] and "wise_ft" not in ident[1]["spec"]["settings"]
    assert ident[2]["sha256"] != ident[0]["sha256"] and ident[2]["spec"]["settings"]["wise_ft"] == 0.5


def test_the_summary_keeps_the_configs_order_when_a_method_is_trained_again(experiment_files, tmp_path):
    """A method whose runs are redone (its settings edited) finishes last, yet keeps its row: the
    summary follows the config (its plan), not the order in which runs finished."""
    from contrastfit.experiments.records import load_records

    path = experiment_files(methods=[{"name": "ce-scl", "temperature": 0.1}, "ce-scl-lr"])
    run_experiment(load_config(path), progress=False)
    edited = load_config(path, ["methods=[{name: ce-scl, temperature: 0.3}, ce-scl-lr]"])
    summary = run_experiment(edited, progress=False)
    assert [r.method for r in load_records(tmp_path / "out")] == ["ce-scl", "ce-scl-lr"]
    assert [row["method"] for row in summary["rows"]] == ["ce-scl", "ce-scl-lr"]
    assert summary["rows"][0]["is_baseline"]  # the first variant of the config is the default baseline


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_edited_config_makes_new_runs_beside_the_old_ones(experiment_files, tmp_path, edit, capsys):
    from contrastfit.experiments.records import load_records

    path = experiment_files(methods=[{"name": "ce-scl", "temperature": 0.1}])
    out = tmp_path / "out"
    run_experiment(load_config(path), progress=False)
    (first,) = _done_runs(out).values()
    overrides, recorded = EDITS[edit]
    if edit == "data content":  # the same path, other rows
        write_rows_csv(tmp_path / "train.csv", sentiment_rows(30, seed=9))
    if edit == "data path":  # another file with the same rows
        (tmp_path / "train2.csv").write_bytes((tmp_path / "train.csv").read_bytes())
        overrides = [f"data={tmp_path / 'train2.csv'}"]
    edited = load_config(path, overrides)
    capsys.readouterr()
    summary = run_experiment(edited, progress=False)
    printed = capsys.readouterr().out
    assert "1 runs (1 new, 0 done earlier)" in printed  # never the old run
    assert "1 finished run(s) of other configs stay in results.sqlite, left out of the summary" in printed
    runs = _done_runs(out)
    assert len(runs) == 2 and runs[first["tags"]["run_id"]] == first  # the old run is kept as it was
    (new,) = [r for rid, r in runs.items() if rid != first["tags"]["run_id"]]
    assert recorded(new["tags"]["run_identity"]["spec"])
    if edit == "epochs":
        assert new["training"]["steps"] == 2 * first["training"]["steps"]
        assert "made with other settings (changed: training.epochs)" in printed
    if edit == "data content":
        assert new["data"]["train_hash"] != first["data"]["train_hash"] and "data.train_hash" in printed
    # experiment.json, the summary and the report's records are the edited config's, and only its
    assert json.loads((out / "experiment.json").read_text()) == edited.raw
    (row,) = summary["rows"]
    assert row["n"] == 1 and row["variant"] == new["tags"]["variant"]
    assert [r.run_id for r in load_records(out)] == [new["tags"]["run_id"]]
    assert json.loads((out / "summary.json").read_text())["rows"][0]["n"] == 1
    # the unchanged config reuses its runs: back to the first config, nothing is trained
    if edit == "data content":
        write_rows_csv(tmp_path / "train.csv", sentiment_rows(30, seed=1))
    capsys.readouterr()
    run_experiment(load_config(path), progress=False)
    assert "1 runs (0 new, 1 done earlier)" in capsys.readouterr().out
    assert [r.run_id for r in load_records(out)] == [first["tags"]["run_id"]]


def test_runs_recorded_without_an_identity_are_trained_again(experiment_files, tmp_path, capsys):
    from contrastfit.experiments.records import load_records

    out = tmp_path / "out"
    with ResultsStore(out / STORE_NAME) as store:  # a store of an older contrastfit: run ids without identity
        store.finish("ce-shots=4-sample0-seed0", {"method": "ce", "seed": 0, "metrics": {"test": {"accuracy": 1.0}},
                                                  "tags": {"run_id": "ce-shots=4-sample0-seed0", "variant": "ce",
                                                           "setting": "shots=4", "sample": 0}})
    run_experiment(load_config(experiment_files(methods=["ce"])), progress=False)
    printed = capsys.readouterr().out
    assert "1 finished run(s) in" in printed and "carry no run identity (made by an older contrastfit)" in printed
    assert "1 runs (1 new, 0 done earlier)" in printed
    (record,) = load_records(out)
    assert record.identity is not None and record.run_id.startswith("ce-shots=4-sample0-seed0-")
    assert record.run_id.endswith(record.identity[:10])


def test_a_damaged_store_is_named_in_one_line_and_rebuilt_from_the_results_json_files(experiment_files, tmp_path,
                                                                                      capsys):
    from contrastfit.cli import main

    path = experiment_files(methods=["ce", "ce-scl"])
    out = tmp_path / "out"
    assert main(["experiment", str(path), "--quiet"]) == 0
    before = _done_runs(out)
    store = out / STORE_NAME
    for extra in (Path(f"{store}-wal"), Path(f"{store}-shm")):
        extra.unlink(missing_ok=True)
    store.write_bytes(b"\0garbage where the database was" * 64)
    capsys.readouterr()
    for argv in (["experiment", str(path), "--quiet"], ["report", str(out)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"contrastfit: error: {store} is not a readable results store")
        assert "contrastfit experiment CONFIG --rebuild-store" in err
    # one finished run's results.json was cut short too: reported, trained again; the other is imported
    ce_scl = next(rid for rid in before if rid.startswith("ce-scl-"))
    written = out / "runs" / ce_scl / "results.json"
    written.write_text(written.read_text()[:100])
    assert main(["experiment", str(path), "--quiet", "--rebuild-store"]) == 0
    printed = capsys.readouterr().out
    assert f"{written}: unreadable, truncated?" in printed and "2 runs (1 new, 1 done earlier)" in printed
    assert len(list(out.glob("results.sqlite.broken-*"))) == 1 and (written.parent / "results.json.unreadable").is_file()
    after = _done_runs(out)
    assert set(after) == set(before)
    ce = next(rid for rid in before if rid != ce_scl)
    assert after[ce] == before[ce]  # restored from its results.json, not trained again
    assert after[ce_scl]["timings"] != before[ce_scl]["timings"]  # trained again
    assert json.loads(written.read_text()) == after[ce_scl]


def test_a_truncated_results_json_of_a_finished_run_is_rewritten_from_the_store(experiment_files, tmp_path, capsys):
    path = experiment_files(methods=["ce"])
    out = tmp_path / "out"
    run_experiment(load_config(path), progress=False)
    (run_id, record), = _done_runs(out).items()
    written = out / "runs" / run_id / "results.json"
    written.write_text(written.read_text()[:100])  # cut short (the store is intact)
    capsys.readouterr()
    run_experiment(load_config(path), progress=False)
    printed = capsys.readouterr().out
    assert "1 runs (0 new, 1 done earlier)" in printed  # nothing retrained
    (line,) = [ln for ln in printed.splitlines() if ln.startswith(str(written))]
    assert "unreadable, truncated?" in line and line.endswith("rewritten from the store's record")
    assert json.loads(written.read_text()) == record == _done_runs(out)[run_id]
    assert not list(written.parent.glob(".results.json.*"))  # written atomically: no temporary file left
    capsys.readouterr()
    run_experiment(load_config(path), progress=False)  # whole now: nothing said
    assert str(written) not in capsys.readouterr().out


def test_an_edited_label_descriptions_file_makes_new_runs(experiment_files, tmp_path, capsys):
    """The identity holds the descriptions' content, not the file's path."""
    descriptions = tmp_path / "labels.csv"
    descriptions.write_text("label,description\nnegative,bad\npositive,good\n")
    path = experiment_files(methods=["zero-shot"], training={"label_descriptions": str(descriptions)})
    run_experiment(load_config(path), progress=False)
    (first,) = _done_runs(tmp_path / "out").values()
    assert first["tags"]["run_identity"]["spec"]["training"]["label_descriptions"] == {"negative": "bad",
                                                                                     "positive": "good"}
    assert first["data"]["label_descriptions"] == {"negative": "bad", "positive": "good"}
    descriptions.write_text("label,description\nnegative,dull\npositive,good\n")
    capsys.readouterr()
    run_experiment(load_config(path), progress=False)
    assert "1 runs (1 new, 0 done earlier)" in capsys.readouterr().out
    # the same descriptions inline: the first run's identity again, reused
    inline = experiment_files(methods=["zero-shot"], training={"label_descriptions": {"negative": "bad",
                                                                                     "positive": "good"}})
    run_experiment(load_config(inline), progress=False)
    assert "1 runs (0 new, 1 done earlier)" in capsys.readouterr().out


def test_a_changed_method_training_default_makes_new_runs(experiment_files, tmp_path, capsys, monkeypatch):
    """The identity holds the learning rate and minimum steps the run fills in from the method, so a
    release that changes them does not reuse runs made with the old ones."""
    from contrastfit.methods import get_method

    path = experiment_files(methods=["ce"], training={"epochs": 1, "batch_size": 4})
    run_experiment(load_config(path), progress=False)
    (first,) = _done_runs(tmp_path / "out").values()
    assert first["tags"]["run_identity"]["spec"]["training"]["learning_rate"] == 5e-5
    monkeypatch.setattr(get_method("ce").cls, "training_defaults", {"learning_rate": 1e-4})
    capsys.readouterr()
    run_experiment(load_config(path), progress=False)
    assert "1 runs (1 new, 0 done earlier)" in capsys.readouterr().out
