"""`contrastfit export --format setfit`: a folder the real SetFit library loads, with contrastfit's
probabilities and labels (to 1e-5), for every model whose head is a logistic regression; other
models refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from contrastfit.cli import main
from contrastfit.export import VERIFY_TEXTS
from contrastfit.modeling import ContrastiveClassifier
from contrastfit.setfit_format import SETFIT_CONFIG, SETFIT_HEAD, export_setfit

setfit = pytest.importorskip("setfit")

TEXTS = [*VERIFY_TEXTS, "what a waste of two hours", "I laughed and cried", "fine, I guess"]


def _saved(tmp_path, encoder, method: str, labels: list[str], temperature: float | None = None, **hparams):
    """A saved model of ``method`` whose head has random weights (as after training)."""
    torch.manual_seed(0)
    model = ContrastiveClassifier.from_encoder(str(encoder), method, labels, hparams=hparams)
    with torch.no_grad():
        for p in model.head.parameters():
            p.normal_(0, 3.0)
    if temperature is not None:
        model.info.calibration = {"temperature": temperature}
    folder = tmp_path / f"{method}-{len(labels)}"
    model.save_pretrained(folder)
    return folder, model


@pytest.mark.parametrize("method,labels,temperature", [
    ("ce-scl-lr", ["negative", "positive"], None),
    ("linear-probe", ["business", "sport", "tech"], 1.7),
    ("setfit", ["a", "b", "c", "d"], None),
])
def test_setfit_loads_the_export_and_gives_the_same_probabilities_and_labels(tmp_path, tiny_encoder_dir, capsys,
                                                                              method, labels, temperature):
    run, model = _saved(tmp_path, tiny_encoder_dir, method, labels, temperature)
    capsys.readouterr()
    out = tmp_path / "sf"
    assert main(["export", str(run), "--output", str(out), "--format", "setfit"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"wrote {out} ({SETFIT_CONFIG}, labels {', '.join(labels)})") and "\n" not in line
    assert json.loads((out / SETFIT_CONFIG).read_text())["labels"] == labels
    loaded = setfit.SetFitModel.from_pretrained(str(out))
    want = model.predict_proba(TEXTS)
    np.testing.assert_allclose(np.asarray(loaded.predict_proba(TEXTS)), want, atol=1e-5)
    assert list(loaded.predict(TEXTS)) == [labels[i] for i in want.argmax(1)]
    record = json.loads((out / "contrastfit_export.json").read_text())
    assert record["verification"]["max_prob_diff"] <= 1e-5 and record["verification"]["same_predictions"]
    assert record["temperature"] == (temperature or 1.0)


def test_models_without_a_setfit_equivalent_are_refused_in_one_line(tmp_path, tiny_encoder_dir, capsys):
    lacon, _ = _saved(tmp_path, tiny_encoder_dir, "lacon", ["a", "b"], heads=4)
    pairs, model = _saved(tmp_path / "p", tiny_encoder_dir, "ce-scl-lr", ["no", "yes"])
    model.info.data = {"text_pair": True}
    model.save_pretrained(pairs)
    capsys.readouterr()
    for run, fragment in ((lacon, "is a model whose head (LabelMatchingHead"), (pairs, "is a model of text pairs")):
        assert main(["export", str(run), "--output", str(tmp_path / "x"), "--format", "setfit"]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and fragment in err and "--format setfit needs a logistic-regression head" in err, err
        assert not (tmp_path / "x").exists()
    assert main(["export", str(lacon), "--output", str(tmp_path / "x"), "--format", "setfit", "--quantize", "int8"]) == 2
    assert "--quantize is an option of the ONNX export" in capsys.readouterr().err


def test_a_head_that_reads_other_features_is_refused_before_anything_is_written(tmp_path, tiny_encoder_dir, monkeypatch):
    run, model = _saved(tmp_path, tiny_encoder_dir, "linear-probe", ["a", "b"])
    from contrastfit.errors import ModelError
    from contrastfit.methods.base import NormalizedFeaturesMethod

    monkeypatch.setattr(NormalizedFeaturesMethod, "head_features",
                        lambda self, m, inputs: 2 * m.encoder(**inputs).pooled)
    with pytest.raises(ModelError, match="reads other features than the sentence embedding"):
        export_setfit(run, tmp_path / "sf")
    assert not (tmp_path / "sf").exists() and not (tmp_path / "sf" / SETFIT_HEAD).exists()
