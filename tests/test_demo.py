"""`make demo` (examples/quickstart.yaml) keeps the default recipe's model of one sample, ready for `predict`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import sentiment_rows, write_rows_csv
from contrastfit.errors import ConfigError
from contrastfit.experiments import load_config, parse_config, run_experiment
from contrastfit.shapes import DEFAULT_METHOD

QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart.yaml"


def test_the_quickstart_keeps_the_default_recipes_model_and_predict_loads_it(tmp_path, tiny_encoder_dir, capsys):
    from contrastfit.cli import main

    raw = yaml.safe_load(QUICKSTART.read_text(encoding="utf-8"))
    assert raw["keep_model"] == DEFAULT_METHOD and raw["output"] == "runs/quickstart"
    # the same config, shrunk: the tiny encoder, a toy data set, two of its methods, 2 samples of 4 per class
    raw.update(data=str(write_rows_csv(tmp_path / "train.csv", sentiment_rows(30, seed=1))), model=str(tiny_encoder_dir),
               data_options={"label_column": "sentiment",
                             "test_data": str(write_rows_csv(tmp_path / "test.csv", sentiment_rows(8, seed=2)))},
               methods=["ce", DEFAULT_METHOD], baseline="ce", protocol={"kind": "few-shot", "shots": 4, "samples": 2},
               validation_size=8, training={"epochs": 1, "batch_size": 4, "learning_rate": 1e-3, "min_steps": 1},
               analyses=[], report=False, output=str(tmp_path / "runs" / "quickstart"))
    config = parse_config(raw)
    run_experiment(config, progress=False)
    out = Path(config.output)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith(f"model of {DEFAULT_METHOD} shots=4 sample=0 seed=0: {out / 'model'} (a copy of ")
    assert lines[-1].endswith(f'predict with: contrastfit predict {out / "model"} "a fine film"')
    # exactly one run kept its model: the default recipe's, sample 0; the others kept their results only
    with_model = [p.parent for p in (out / "runs").glob("*/contrastfit.json")]
    assert len(list((out / "runs").glob("*/results.json"))) == 4 and len(with_model) == 1
    record = json.loads((with_model[0] / "results.json").read_text())
    assert record["method"] == DEFAULT_METHOD and record["tags"]["sample"] == 0
    assert (out / "model" / "results.json").read_bytes() == (with_model[0] / "results.json").read_bytes()
    assert main(["predict", str(out / "model"), "a fine film"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["text"] == "a fine film" and row["label"] in ("negative", "positive")
    # a second invocation trains nothing and points at the same copy
    run_experiment(config, progress=False)
    printed = capsys.readouterr().out
    assert "(0 new, 4 done earlier)" in printed and printed.strip().splitlines()[-1] == lines[-1]


def test_keep_model_must_name_a_variant_of_the_grid(tmp_path):
    raw = yaml.safe_load(QUICKSTART.read_text(encoding="utf-8"))
    assert load_config(QUICKSTART).keep_model == "ce-scl-lr"
    with pytest.raises(ConfigError, match=r"keep_model 'ce-scl-lr' is not a variant of this config \(ce, ce-scl\)"):
        parse_config({**raw, "methods": ["ce", "ce-scl"], "baseline": "ce"})
    with pytest.raises(ConfigError, match="keep_model: keeps a run of the methods' grid"):
        parse_config({**raw, "search": {"method": "ce-scl", "space": {"temperature": {"choices": [0.1]}}}})
