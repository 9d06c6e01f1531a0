"""The one training job and its task shapes: the job calls each step of the run's shape, in order, and
what a shape returns is what the run uses and records."""

from __future__ import annotations

import pytest

import contrastfit.training as training
from contrastfit import train
import contrastfit.pretrain as pretrain_module
from contrastfit.shapes import LABEL_SETS, SINGLE_LABEL, LabelSets, Pretraining, TaskShape, shape_for
from contrastfit.config import TrainConfig

STEPS = ("check", "load", "validation_split", "sample", "configure", "choose_method", "setup", "hparams",
         "build_model", "schedule", "validation_choices", "selection_metric", "compute_metrics", "fit", "fits_head",
         "fit_head", "finish", "evaluate", "conclude", "selection", "describe", "examples", "label")


class SpyShape(TaskShape):
    """The single-label shape, noting each step the job asks of it, settling one entry of its own."""

    def __init__(self):
        self.calls: list[str] = []

    def __getattribute__(self, name):
        if name in STEPS:
            object.__getattribute__(self, "calls").append(name)
        return object.__getattribute__(self, name)

    def finish(self, model, validation):
        return {"settled_by": "spy"}

    def label(self, method):
        return f"{method} (spy)"


def test_each_config_gets_its_shape():
    assert shape_for(TrainConfig()) is SINGLE_LABEL and type(SINGLE_LABEL) is TaskShape
    assert shape_for(TrainConfig(multi_label=True)) is LABEL_SETS and isinstance(LABEL_SETS, LabelSets)


def test_the_job_runs_the_shapes_steps_in_order_and_records_what_it_settles(tmp_path, tiny_encoder_dir,
                                                                          sentiment_csv, monkeypatch, capsys):
    spy = SpyShape()
    monkeypatch.setattr(training, "shape_for", lambda config: spy)
    result = train(method="linear-probe", data=str(sentiment_csv), text_column="sentence", label_column="sentiment",
                   model=str(tiny_encoder_dir), output=str(tmp_path / "run"), progress=True, use_cpu=True)
    assert tuple(dict.fromkeys(spy.calls)) == STEPS  # each step asked first in this order
    assert spy.calls.count("fit_head") == 1  # the head stage once (no LP-FT probe asked for)
    assert result["training"]["settled_by"] == "spy"
    assert "linear-probe (spy)" in capsys.readouterr().out  # the closing line names the run as the shape does


@pytest.mark.parametrize("shape", [SINGLE_LABEL, LABEL_SETS])
def test_a_shape_that_chooses_on_validation_holds_rows_out_for_it(shape):
    chooses = shape.chooses_on_validation(TrainConfig(method="ce-scl-lr"))
    assert chooses is (shape is LABEL_SETS)  # label sets choose thresholds; the default recipe nothing


def test_stage_1_pretraining_is_the_one_job_with_its_own_shape(tmp_path, tiny_encoder_dir, monkeypatch):
    """`pretrain` hands the job a Pretraining shape: the corpus is its data, epochs and max_steps its
    schedule, no head stage follows and nothing is evaluated; what it writes is an encoder folder."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"sentence number {i} of the corpus" for i in range(12)), encoding="utf-8")
    shapes = []
    job = pretrain_module._train

    def spy(config, text_data, callbacks, keep, shape=None):
        shapes.append(shape)
        return job(config, text_data, callbacks, keep, shape=shape)

    monkeypatch.setattr(pretrain_module, "_train", spy)
    result = pretrain_module.pretrain("simcse-unsup", str(corpus), str(tmp_path / "enc"), model=str(tiny_encoder_dir),
                                      batch_size=4, max_steps=2, max_texts=10, progress=False, use_cpu=True)
    (shape,) = shapes
    assert isinstance(shape, Pretraining) and (shape.max_texts, shape.max_steps) == (10, 2)
    assert shape.schedule(TrainConfig(epochs=1.0), [0] * 10) == (1.0, 2)
    assert not shape.fits_head(None, TrainConfig(refit_head=True)) and not shape.chooses_on_validation(TrainConfig())
    assert result["kind"] == "pretrain" and result["training"]["steps"] == 2 and result["data"]["n_texts"] == 10
    assert "metrics" not in result or not result["metrics"]  # nothing evaluated
    assert sorted(p.name for p in (tmp_path / "enc").iterdir()) == [".contrastfit",
        "1_Pooling", "config.json", "contrastfit_pretrain.json", "model.safetensors", "tokenizer.json",
        "tokenizer_config.json"]
