"""Multi-task experiments (a config with ``tasks:``) on the tiny encoder: the schema and its one-line
errors, the run of every variant (single-task, multi-task, after a SimCSE / DiffCSE stage 1) into the
results store, resuming after a killed variant, the summary table and the report."""

from __future__ import annotations

import csv
import json
import math
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from conftest import WORDS, sentiment_rows
from contrastfit.cli import main
from contrastfit.errors import ConfigError
from contrastfit.experiments import MultiTaskExperimentConfig, load_config, parse_config, run_experiment
from contrastfit.experiments.multitask import multitask_summary, summary_tables, task_corpus, variant_units
from contrastfit.experiments.page import render_fragment
from contrastfit.experiments.store import STORE_NAME, ResultsStore
from contrastfit.multitask import Task
from contrastfit.pretrain import read_pretrain_record

EXAMPLE = Path(__file__).parent.parent / "examples" / "cs224n_multitask.yaml"


def base_run_id(run_id: str) -> str:
    """A run id without the run identity that ends it (``multi-task-seed0-1a2b3c4d5e``)."""
    return re.sub(r"-[0-9a-f]{10}$", "", run_id)


def _write(path: Path, fieldnames, rows) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _sts_rows(n: int, seed: int):
    rng = random.Random(seed)
    return [{"sentence1": " ".join(rng.sample(WORDS, 3)), "sentence2": " ".join(rng.sample(WORDS, 3)),
             "score": round(rng.uniform(0, 5), 3)} for _ in range(n)]


@pytest.fixture()
def task_files(tmp_path):
    """Two tasks with training and test files: sentiment classes and sentence-pair scores."""
    return {
        "sent": _write(tmp_path / "sent.csv", ["sentence", "sentiment"], sentiment_rows(12, seed=1)),
        "sent_test": _write(tmp_path / "sent_test.csv", ["sentence", "sentiment"], sentiment_rows(4, seed=2)),
        "sts": _write(tmp_path / "sts.csv", ["sentence1", "sentence2", "score"], _sts_rows(30, 3)),
        "sts_test": _write(tmp_path / "sts_test.csv", ["sentence1", "sentence2", "score"], _sts_rows(8, 4)),
    }


@pytest.fixture()
def tiny_mlm_dir(tmp_path, tiny_encoder_dir):
    """A tiny randomly initialised masked LM with the tiny encoder's vocabulary: a DiffCSE generator."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_encoder_dir, local_files_only=True)
    torch.manual_seed(1)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)
    folder = tmp_path / "tiny-mlm"
    BertForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _raw(tmp_path, tiny_encoder_dir, task_files, **overrides):
    raw = {
        "name": "tiny-mt", "model": str(tiny_encoder_dir),
        "tasks": [{"name": "sent", "data": str(task_files["sent"]), "label_column": "sentiment",
                   "test_data": str(task_files["sent_test"]), "validation_size": 4},
                  {"name": "sts", "data": str(task_files["sts"]), "label_column": "score",
                   "test_data": str(task_files["sts_test"])}],
        "steps_per_task": 2,
        "training": {"batch_size": 8, "learning_rate": 1.0e-3, "eval_steps": 2},
        "pretrain": {"simcse": {"method": "simcse-unsup", "max_texts": 30, "batch_size": 8, "learning_rate": 1.0e-3,
                                "max_steps": 2}},
        "variants": [{"name": "single-task", "mode": "single"},
                     {"name": "multi-task", "mode": "multitask", "schedule": "round-robin"},
                     {"name": "multi-task after SimCSE", "mode": "multitask", "pretrain": "simcse"}],
        "output": str(tmp_path / "out"),
    }
    raw.update(overrides)
    return raw


def _config_file(tmp_path, raw) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# The schema
# ---------------------------------------------------------------------------------------------

def test_the_example_is_a_multitask_experiment():
    config = load_config(EXAMPLE)
    assert isinstance(config, MultiTaskExperimentConfig)
    assert [t.name for t in config.tasks] == ["mr", "boolq", "vader"]
    assert [(t.type, t.train_size) for t in config.tasks] == [(None, 1000), ("pair-classification", 1000),
                                                              ("regression", 1000)]
    assert [(v.mode, v.schedule, v.pretrain) for v in config.variants] == [
        ("single", None, None), ("multitask", "round-robin", None), ("multitask", "round-robin", "simcse"),
        ("multitask", "round-robin", "diffcse")]
    assert {k: (e.method, e.corpus, e.max_texts) for k, e in config.pretrain.items()} == {
        "simcse": ("simcse-unsup", "tasks", 512), "diffcse": ("diffcse", "tasks", 512)}
    assert config.steps_per_task == 20 and config.training.head_learning_rate == 1e-3
    assert config.training.save_checkpoints is False  # an experiment's runs keep no checkpoints unless asked


BAD = [
    ({"colour": 1}, r"exp.yaml: unknown key 'colour' \(allowed: model, name, output, pretrain, report, save_models, "
                    r"seeds, steps_per_task, tasks, training, variants\)"),
    ({"tasks": [{"name": "a", "data": "mr", "colour": 1}]}, r"exp.yaml: tasks\[0\]: unknown key 'colour' \(allowed: .*batch_size"),
    ({"tasks": [{"name": "a"}]}, r"exp.yaml: tasks\[0\]: data: Field required"),
    ({"tasks": [{"name": "a", "data": "mr", "weight": 0}]}, r"exp.yaml: tasks\[0\]: weight must be > 0, got 0"),
    ({"tasks": [{"name": "a", "data": "mr", "hparams": {"lambda": 0.5}}]}, r"tasks\[0\]: .*give the objective too"),
    ({"tasks": [{"name": "a", "data": "mr"}, {"name": "a", "data": "boolq"}]}, "task names must be distinct; 'a'"),
    ({"variants": [{"name": "v", "mode": "sometimes"}]}, r"variants\[0\]: mode must be one of single, multitask, got 'sometimes'"),
    ({"variants": [{"name": "v", "mode": "single", "schedule": "temperature"}]}, r"variants\[0\]: schedule and "
                                                                                  "temperature are for mode multitask"),
    ({"variants": [{"name": "v", "mode": "multitask", "pretrain": "x"}]}, r"pretrain 'x' is not in the pretrain section"),
    ({"variants": [{"name": "v", "mode": "multitask", "training": {"select_on": "nope"}}]},
     r"exp.yaml: variant 'v': select_on must be 'average' or a task name \(sent, sts\)"),
    ({"pretrain": {"x": {"method": "simcse-unsup", "lr": 1}}}, r"exp.yaml: pretrain.x: unknown key 'lr' \(allowed: "),
    ({"pretrain": {"x": {"method": "bert"}}}, r"pretrain.x: method must be one of simcse-unsup, simcse-sup, diffcse, got 'bert'"),
    ({"pretrain": {"x": {"method": "simcse-unsup", "batch_size": 0}}}, r"pretrain.x: batch_size must be >= 1, got 0"),
    ({"pretrain": {"x": {"method": "simcse-unsup", "hparams": {"tau": 1}}}}, "method 'simcse-unsup' has no hyper-parameter 'tau'"),
    ({"steps_per_task": 0}, "steps_per_task must be > 0, got 0"),
    ({"training": {"lr": 1}}, r"exp.yaml: training: unknown key 'lr' \(allowed: .*head_learning_rate"),
    ({"training": {"learning_rate": "2e-5"}}, r"training: learning_rate must be float, got '2e-5' \(YAML reads 2e-5 as text: write 2.0e-5\)"),
    ({"training": {"epochs": 2}}, "give steps_per_task or training.epochs, not both"),
]


@pytest.mark.parametrize("change, message", BAD)
def test_config_errors_are_one_line_naming_file_and_key(tmp_path, tiny_encoder_dir, task_files, change, message):
    raw = _raw(tmp_path, tiny_encoder_dir, task_files, **change)
    with pytest.raises(ConfigError, match=message) as err:
        parse_config(raw, "exp.yaml")
    assert "\n" not in str(err.value)


def test_a_bad_config_is_exit_2_from_the_command_line(tmp_path, tiny_encoder_dir, task_files, capsys):
    path = _config_file(tmp_path, _raw(tmp_path, tiny_encoder_dir, task_files, steps_per_task="20"))
    assert main(["experiment", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"contrastfit: error: {path}: steps_per_task must be int, got '20'"
    assert not (tmp_path / "out").exists()
    assert main(["experiment", str(path), "--set", "steps_per_task=2", "--search", "optuna"]) == 2
    assert "is a multi-task experiment; --search runs a single-task config" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Running it
# ---------------------------------------------------------------------------------------------

class Killed(Exception):
    """What a kill of the runner looks like to the store (any exception: it marks the run failed)."""


def _spy(monkeypatch, fail_on: str | None = None) -> list[str]:
    """Record the output folder of every train_multitask call (and raise, as a kill would, when it ends with
    ``fail_on``); and of every stage-1 pretrain call."""
    import contrastfit.training as mt
    import contrastfit.pretrain as pt

    monkeypatch.undo()  # the real functions, not an earlier spy
    calls: list[str] = []
    real_train, real_pretrain = mt.train_multitask, pt.pretrain

    def train(*args, **kwargs):
        # the folder, without the run identity that ends a run id (runs/multi-task-seed0-1a2b3c4d5e)
        folder = re.sub(r"-[0-9a-f]{10}(?=/|$)", "", Path(kwargs["output"]).relative_to(Path(kwargs["output"]).parents[1]).as_posix())
        calls.append(folder)
        if fail_on is not None and folder.endswith(fail_on):
            raise Killed(kwargs["output"])
        return real_train(*args, **kwargs)

    def pretrain(method, data, output, **kwargs):
        calls.append(f"pretrain {method}")
        return real_pretrain(method, data, output, **kwargs)

    monkeypatch.setattr(mt, "train_multitask", train)
    monkeypatch.setattr(pt, "pretrain", pretrain)
    return calls


def test_every_variant_runs_resumes_after_a_kill_and_is_reported(tmp_path, tiny_encoder_dir, task_files, tiny_mlm_dir,
                                                                 monkeypatch, capsys):
    raw = _raw(tmp_path, tiny_encoder_dir, task_files)
    raw["pretrain"]["diffcse"] = {"method": "diffcse", "max_texts": 30, "batch_size": 8, "learning_rate": 1.0e-3,
                                  "max_steps": 2, "hparams": {"generator": str(tiny_mlm_dir)}}
    raw["variants"].append({"name": "multi-task after DiffCSE", "mode": "multitask", "pretrain": "diffcse"})
    config = load_config(_config_file(tmp_path, raw))
    out = Path(config.output)

    # 1. killed while the second variant trains: the first is done in the store, the second failed
    calls = _spy(monkeypatch, fail_on="runs/multi-task-seed0")
    with pytest.raises(Killed):
        run_experiment(config, progress=False)
    assert calls == ["single-task-seed0/sent", "single-task-seed0/sts", "runs/multi-task-seed0"]
    with ResultsStore(out / STORE_NAME) as store:
        assert {base_run_id(r["run_id"]): r["status"] for r in store.all()} == {"single-task-seed0": "done",
                                                                                "multi-task-seed0": "failed"}
    # 2. run again: the finished variant is skipped, the others run (each stage-1 encoder trained once)
    calls = _spy(monkeypatch)
    summary = run_experiment(config, progress=False)
    assert calls == ["runs/multi-task-seed0", "pretrain simcse-unsup", "runs/multi-task-after-simcse-seed0",
                     "pretrain diffcse", "runs/multi-task-after-diffcse-seed0"]
    # 3. and again: nothing left to train
    calls = _spy(monkeypatch)
    assert run_experiment(config, progress=False) == summary and calls == []

    with ResultsStore(out / STORE_NAME) as store:
        records = {r["variant"]: r for r in store.done()}
    assert list(records) == ["single-task", "multi-task", "multi-task after SimCSE", "multi-task after DiffCSE"]
    for name, record in records.items():
        # every task's data hashes and metrics, and the average of the selection metrics
        assert set(record["tasks"]) == {"sent", "sts"}
        for task in record["tasks"].values():
            assert all(len(task["data"][f"{s}_hash"]) == 16 for s in ("train", "validation", "test"))
            assert {"validation", "test"} <= set(task["metrics"])
        test = record["metrics"]["test"]
        pearson = record["tasks"]["sts"]["metrics"]["test"]["pearson"]
        assert test["sent"]["accuracy"] == record["tasks"]["sent"]["metrics"]["test"]["accuracy"]
        assert test["average"] == pytest.approx((test["sent"]["accuracy"] + (0.0 if math.isnan(pearson) else pearson)) / 2)
        assert record["seed"] == 0 and record["tags"]["run_id"] == record["runs"][next(iter(record["runs"]))]["folder"].split("/")[1]
        assert record["tags"]["run_id"].endswith("-" + record["tags"]["run_identity"]["sha256"][:10])
    # the same samples in every variant
    hashes = {n: {r["tasks"][n]["data"]["train_hash"] for r in records.values()} for n in ("sent", "sts")}
    assert all(len(h) == 1 for h in hashes.values())
    # steps: a single-task run steps_per_task, a multi-task run that many per task
    single = records["single-task"]
    assert set(single["runs"]) == {"sent", "sts"} and all(r["training"]["steps"] == 2 for r in single["runs"].values())
    assert single["stage1"] is None and single["model"] == str(tiny_encoder_dir)
    multi = records["multi-task"]["runs"]["multitask"]
    assert multi["training"]["steps"] == 4 and multi["schedule"]["batches_per_task"] == {"sent": 2, "sts": 2}
    # stage 1: trained on the tasks' unlabelled training texts, from the experiment's model; the runs start from it
    for variant, method in (("multi-task after SimCSE", "simcse-unsup"), ("multi-task after DiffCSE", "diffcse")):
        record = records[variant]
        stage1 = record["stage1"]
        assert stage1["method"] == method and record["model"] == stage1["encoder"] == str(out / stage1["folder"])
        pre = read_pretrain_record(stage1["encoder"])
        assert pre.base_model == str(tiny_encoder_dir) and pre.training.steps == 2 and pre.seed == 0
        assert record["timings"]["stage1_s"] == stage1["train_s"] > 0
        corpus = Path(stage1["encoder"] + ".corpus.txt").read_text(encoding="utf-8").splitlines()
        assert corpus == task_corpus(config.tasks, 30, 0) and pre.data.n_texts == 30
    assert read_pretrain_record(records["multi-task after DiffCSE"]["stage1"]["encoder"]).hparams["generator"] == \
        str(tiny_mlm_dir)

    # the summary: one row per variant, each task's test selection metric and the average, in %
    rows = {r["variant"]: r for r in summary["rows"]}
    assert summary["tasks"] == ["sent", "sts"] and summary["metrics"] == {"sent": "accuracy", "sts": "pearson"}
    assert rows["multi-task"]["tasks"]["sent"]["test"]["values"] == [records["multi-task"]["metrics"]["test"]["sent"]["accuracy"]]
    lines = (out / "summary.md").read_text().splitlines()
    assert [c.strip() for c in lines[0].strip("|").split("|")] == ["variant", "sent accuracy", "sts pearson", "average",
                                                                   "train s"]
    first = [c.strip() for c in lines[2].strip("|").split("|")]
    assert first[0] == "single-task"
    assert first[1] == f"{100 * records['single-task']['metrics']['test']['sent']['accuracy']:.1f}"  # one seed: no std
    assert first[3] == f"{100 * records['single-task']['metrics']['test']['average']:.1f}"  # one seed: no std
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))
    report = (out / "report.md").read_text()
    assert report.startswith("# Multi-task experiment report: tiny-mt") and lines[2] in report
    assert "Stage 1" in report and "diffcse" in report and (out / "report.html").is_file()
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    assert lines[0] in capsys.readouterr().out
    assert main(["compare", str(out), str(out)]) == 2
    assert "compare lines up single-task experiments" in capsys.readouterr().err


def test_an_edited_multitask_config_gets_new_run_ids(tmp_path, tiny_encoder_dir, task_files):
    """A (variant, seed) run's id ends with its identity: an unchanged config keeps every id (its runs
    are reused), an edited one (steps, a variant's settings, a task's data content) gets new ones."""
    def ids(**overrides) -> dict[str, str]:
        config = load_config(_config_file(tmp_path, _raw(tmp_path, tiny_encoder_dir, task_files, **overrides)))
        return {base_run_id(u.run_id): u.run_id for u in variant_units(config, tmp_path / "out", progress=False)}

    first = ids()
    assert list(first) == ["single-task-seed0", "multi-task-seed0", "multi-task-after-simcse-seed0"]
    assert ids() == first
    assert all(ids(steps_per_task=3)[k] != first[k] for k in first)
    variants = [{"name": "single-task", "mode": "single", "training": {"learning_rate": 1.0e-4}},
                {"name": "multi-task", "mode": "multitask", "schedule": "round-robin"}]
    edited = ids(variants=variants)
    assert edited["single-task-seed0"] != first["single-task-seed0"] and edited["multi-task-seed0"] == first["multi-task-seed0"]
    _write(task_files["sts"], ["sentence1", "sentence2", "score"], _sts_rows(30, 7))  # same path, other rows
    assert all(ids()[k] != first[k] for k in first)


def test_task_corpus_is_the_unlabelled_training_texts(task_files):
    from contrastfit import load_data

    tasks = [Task("s", str(task_files["sent"]), label_column="sentiment"), Task("p", str(task_files["sts"]),
                                                                             label_column="score")]
    texts = task_corpus(tasks, None, seed=0)
    s_train = load_data(str(task_files["sent"]), label_column="sentiment").train
    p_data = load_data(str(task_files["sts"]), label_column="score")
    expected = set(s_train["text"]) | set(p_data.train["text"]) | set(p_data.train["text_pair"])
    assert set(texts) == expected and len(texts) == len(expected)  # both sentences of a pair, no repeats
    held_out = set(p_data.validation["text"]) | set(p_data.validation["text_pair"])
    assert not (held_out - expected) & set(texts)  # no validation text that is not also a training text
    assert task_corpus(tasks, None, seed=0) == texts and task_corpus(tasks, None, seed=1) != texts
    assert task_corpus(tasks, 10, seed=0) == texts[:10]


def _record(variant, seed, acc, r, train_s, stage1_s=0.0):
    spec = {"sent": {"type": "classification", "metric": "accuracy"}, "sts": {"type": "regression", "metric": "pearson"}}
    test = {"sent": {"accuracy": acc, "f1": acc, "macro_f1": acc, "mcc": 2 * acc - 1},
            "sts": {"pearson": r, "spearman": r, "mse": 1.5}}
    return {"kind": "multitask-variant", "variant": variant, "mode": "single", "seed": seed,
            "tasks": {n: {"spec": s} for n, s in spec.items()},
            "metrics": {"test": {**test, "average": (acc + (0.0 if math.isnan(r) else r)) / 2}},
            "timings": {"train_s": train_s, "stage1_s": stage1_s}, "tags": {"run_id": f"{variant}-seed{seed}"}}


def test_summary_table_has_the_readme_shape():
    records = [_record("single", 0, 0.7, 0.5, 10), _record("single", 1, 0.8, float("nan"), 20),
               _record("multi", 0, 0.75, 0.55, 30, stage1_s=6)]
    summary = multitask_summary(records, ["sent", "sts"], ["multi", "single"])
    assert [r["variant"] for r in summary["rows"]] == ["multi", "single"]
    single = summary["rows"][1]
    assert single["tasks"]["sts"]["test"]["values"] == [0.5]  # an undefined r is left out of the mean
    assert single["average"]["test"]["mean"] == pytest.approx((0.6 + 0.4) / 2)
    assert single["average"]["test"]["std"] == pytest.approx(np.std([0.6, 0.4], ddof=1))
    text = render_fragment(summary_tables(summary)[:1])
    assert [re.sub("-+", "-", line.replace(" ", "")) for line in text.splitlines()[:4]] == [
        "|variant|sentaccuracy|stspearson|average|trains|",
        "|:-|-:|-:|-:|-:|",
        "|multi|75.0|55.0|65.0|36|",
        "|single|75.0±7.1|50.0|50.0±14.1|15|",
    ]
    with pytest.raises(Exception, match="no finished multi-task variant runs"):
        multitask_summary([{"method": "ce"}])
