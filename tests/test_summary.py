"""The one summary: what the runner prints and writes (summary.json, summary.md) is the report's
summary table, for a classification and a regression experiment (the runner's own table used to
leave regression cells blank and print MSE x 100)."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import numpy as np
import pytest
import yaml

from contrastfit.experiments.report import format_summary, summarise
from contrastfit.experiments.store import STORE_NAME, ResultsStore
from test_report import METRICS, SHOTS, VARIANTS, build_experiment


def _table(text: str) -> dict[tuple[str, str], dict[str, str]]:
    """A Markdown table's body as ``{(first cell, second cell): {header: cell}}``."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    return {(r[0], r[1]): dict(zip(header, r)) for r in rows}


def _pct(values) -> str:
    values = np.asarray(values, dtype=float)
    return f"{100 * values.mean():.1f} ± {100 * values.std(ddof=1):.1f}"


def _raw(values) -> str:
    values = np.asarray(values, dtype=float)
    return f"{values.mean():.4g} ± {values.std(ddof=1):.2g}"


def test_summary_of_a_classification_experiment(tmp_path):
    folder = tmp_path / "exp"
    results = build_experiment(folder, seed=9, settings=SHOTS, with_npz=False)
    summary = summarise(folder)
    assert summary["metrics"] == METRICS and summary["baseline"] == "ce" and summary["name"] == "exp"
    json.dumps(summary, allow_nan=False)  # strict JSON: no NaN
    table = _table(format_summary(summary))
    assert list(table) == [(s, v[1]) for s in ("shots=4", "shots=16") for v in VARIANTS]
    for (setting, variant), cells in table.items():
        runs = [r for r in results if r["tags"]["setting"] == setting and r["tags"]["variant"] == variant]
        assert cells["runs"] == "3"
        for m in METRICS:
            assert cells[f"test {m}"] == _pct([r["metrics"]["test"][m] for r in runs])
        assert cells["val accuracy"] == _pct([r["metrics"]["validation"]["accuracy"] for r in runs])
        assert cells["train s"] == f"{np.mean([r['timings']['train_s'] for r in runs]):.0f}"


def _regression_store(folder: Path) -> list[dict]:
    rng = np.random.default_rng(0)
    results = []
    with ResultsStore(folder / STORE_NAME) as store:
        for variant in ("ce", "simcse-sup"):
            for s in (0, 1, 2):
                test = {"pearson": float(rng.uniform(0.7, 0.9)), "spearman": float(rng.uniform(0.7, 0.9)),
                        "mse": float(rng.uniform(0.5, 1.5))}
                result = {"method": variant, "hparams": {}, "seed": s, "timings": {"train_s": 2.0 + s},
                          "log_history": [], "data": {"task": "regression", "label_names": None, "test_hash": "t"},
                          "metrics": {"validation": {k: v + 0.01 for k, v in test.items()}, "test": test},
                          "tags": {"variant": variant, "setting": "full", "sample": 0, "params": {},
                                   "run_id": f"{variant}-{s}"}}
                store.finish(f"{variant}-{s}", result)
                results.append(result)
    return results


def test_summary_of_a_regression_experiment(tmp_path):
    folder = tmp_path / "stsb"
    results = _regression_store(folder)
    # the config names the classification metrics (the runner's default), the runs have none of them
    (folder / "experiment.json").write_text(json.dumps({"name": "stsb", "metrics": ["accuracy", "f1"]}))
    summary = summarise(folder)
    assert summary["metrics"] == ["pearson", "spearman", "mse"]
    table = _table(format_summary(summary))
    for variant in ("ce", "simcse-sup"):
        runs = [r for r in results if r["method"] == variant]
        cells = table[("full", variant)]
        assert cells["test pearson"] == _pct([r["metrics"]["test"]["pearson"] for r in runs])
        assert cells["test spearman"] == _pct([r["metrics"]["test"]["spearman"] for r in runs])
        assert cells["test mse"] == _raw([r["metrics"]["test"]["mse"] for r in runs])  # not x 100
        assert cells["val pearson"] == _pct([r["metrics"]["validation"]["pearson"] for r in runs])
        assert cells["train s"] == "3"
        assert "–" not in cells.values()
    assert "mse raw, the others in %" in format_summary(summary)


def test_runner_prints_and_writes_the_report_summary_for_a_regression_target(tmp_path, tiny_encoder_dir, capsys):
    from conftest import sentiment_rows
    from contrastfit.experiments import load_config, run_experiment

    rng = random.Random(0)

    def write(path: Path, rows) -> Path:
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=["sentence", "score"])
            writer.writeheader()
            for r in rows:  # a continuous rating: a regression task
                writer.writerow({"sentence": r["sentence"],
                                 "score": (1.5 if r["sentiment"] == "positive" else -1.5) + rng.uniform(-0.5, 0.5)})
        return path

    raw = {"name": "rating", "data": str(write(tmp_path / "train.csv", sentiment_rows(20, seed=1))),
           "model": str(tiny_encoder_dir),
           "data_options": {"label_column": "score", "test_data": str(write(tmp_path / "test.csv", sentiment_rows(6, seed=2)))},
           "methods": ["ce"], "protocol": {"kind": "few-shot", "train_size": 16, "samples": 2}, "seeds": [0],
           "validation_size": 8, "training": {"epochs": 1, "batch_size": 4, "learning_rate": 1e-3, "min_steps": 1},
           "analyses": [], "report": False, "output": str(tmp_path / "out")}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    summary = run_experiment(load_config(tmp_path / "config.yaml"), progress=False)
    out = tmp_path / "out"
    printed = capsys.readouterr().out
    with ResultsStore(out / STORE_NAME) as store:
        runs = store.done()
    assert len(runs) == 2 and all(r["data"]["task"] == "regression" for r in runs)
    assert json.loads((out / "summary.json").read_text()) == summary
    written = (out / "summary.md").read_text(encoding="utf-8")
    assert written.strip() in printed
    (row,) = summary["rows"]
    assert (row["variant"], row["n"], row["selection_metric"]) == ("ce", 2, "pearson")
    cells = _table(written)[("N=16", "ce")]
    for metric, fmt in (("pearson", _pct), ("spearman", _pct), ("mse", _raw)):
        values = [r["metrics"]["test"][metric] for r in runs]
        assert row["metrics"][metric]["values"] == pytest.approx(values)
        assert cells[f"test {metric}"] == fmt(values)
    assert cells["val pearson"] == _pct([r["metrics"]["validation"]["pearson"] for r in runs])


def test_a_cell_of_one_run_shows_the_value_without_a_std():
    from contrastfit.experiments.summary import format_stat

    assert format_stat({"n": 1, "mean": 0.7391, "std": float("nan")}, "accuracy") == "73.9"
    assert format_stat({"n": 2, "mean": 0.7391, "std": 0.012}, "accuracy") == "73.9 ± 1.2"
    assert format_stat({"n": 1, "mean": 0.5, "std": 0.0}, "mse") == "0.5"
    assert format_stat({"n": 0, "mean": None}, "accuracy") == "–"
