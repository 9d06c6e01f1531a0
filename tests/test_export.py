"""ONNX export verified against PyTorch, and serving the export with ONNX Runtime alone."""

from __future__ import annotations

import json

import numpy as np
import pytest

from contrastfit import ContrastiveClassifier
from contrastfit.errors import ModelError
from contrastfit.export import OnnxClassifier, export_onnx

TEXTS = ["good fun film", "the plot was very dull and the actor was weak but the story was fine", "bad", "a great movie"]


def _saved(tmp_path, encoder, method, hparams=None, pairs=False, labels=("negative", "neutral", "positive")):
    model = ContrastiveClassifier.from_encoder(str(encoder), method, list(labels), hparams=hparams or {})
    if pairs:
        model.info["data"] = {"text_pair": True}
    folder = tmp_path / f"run-{method}"
    model.save_pretrained(folder)
    return folder, model.eval()


@pytest.mark.parametrize("method, hparams", [("ce", {}), ("lacon", {"heads": 2}), ("lacon-fusion", {"heads": 2}),
                                             ("ce-softtriple", {}), ("simcse-sup", {})])
def test_export_serves_the_same_logits_as_pytorch(tmp_path, tiny_encoder_dir, method, hparams):
    run, model = _saved(tmp_path, tiny_encoder_dir, method, hparams)
    meta = export_onnx(run, tmp_path / "onnx")
    check = meta["verification"]
    assert check["same_predictions"] and check["max_abs_diff"] <= 1e-4 and check["batch_sizes"] == [1, 3, 8]
    assert json.loads((tmp_path / "onnx" / "export.json").read_text())["label_names"] == ["negative", "neutral", "positive"]
    served = OnnxClassifier.from_pretrained(tmp_path / "onnx")
    # texts it was not verified on, in one padded batch and one at a time
    np.testing.assert_allclose(served.predict_logits(TEXTS), model.predict_logits(TEXTS), atol=1e-4)
    np.testing.assert_allclose(served.predict_logits(TEXTS, batch_size=1), model.predict_logits(TEXTS), atol=1e-4)
    assert served.predict(TEXTS) == model.predict(TEXTS)


def test_export_of_a_pair_model_and_a_calibrated_one(tmp_path, tiny_encoder_dir):
    run, model = _saved(tmp_path, tiny_encoder_dir, "ce", pairs=True, labels=("no", "yes"))
    config = json.loads((run / "contrastfit.json").read_text())
    config["calibration"] = {"temperature": 2.5}
    (run / "contrastfit.json").write_text(json.dumps(config))
    meta = export_onnx(run, tmp_path / "onnx", texts=["good film", "bad plot"], pairs=["great story", "dull actor"])
    assert meta["text_pair"] and meta["temperature"] == 2.5 and meta["verification"]["texts"] == 2
    served = OnnxClassifier(tmp_path / "onnx")
    firsts, seconds = ["a fun film", "weak"], ["not good", "the story was boring"]
    calibrated = ContrastiveClassifier.from_pretrained(run)
    np.testing.assert_allclose(served.predict_proba(firsts, seconds), calibrated.predict_proba(firsts, seconds), atol=1e-5)


def test_a_failed_verification_writes_nothing(tmp_path, tiny_encoder_dir, capsys):
    from contrastfit.cli import main

    run, _ = _saved(tmp_path, tiny_encoder_dir, "ce")
    out = tmp_path / "onnx"
    with pytest.raises(ModelError, match=r"ONNX Runtime's logits differ from PyTorch's by .* \(tolerance -1\); nothing written"):
        export_onnx(run, out, atol=-1.0)
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".onnx")]
    with pytest.raises(ModelError, match="no export.json"):
        OnnxClassifier(tmp_path)
    # the command line: one line on success, one-line errors
    verify = tmp_path / "verify.txt"
    verify.write_text("good film\nbad plot\n", encoding="utf-8")
    assert main(["export", str(run), "--output", str(out), "--verify-file", str(verify)]) == 0
    assert "ONNX Runtime matches PyTorch on 2 texts in batches of 1, 2" in capsys.readouterr().out
    assert main(["export", str(tmp_path / "missing"), "--output", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("contrastfit: error:") and "\n" not in err
