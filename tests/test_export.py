"""ONNX export verified against PyTorch, and serving the export with ONNX Runtime alone."""

from __future__ import annotations

import json

import numpy as np
import pytest

from contrastfit import ContrastiveClassifier
from contrastfit.errors import ModelError
from contrastfit.export import VERIFY_TEXTS, OnnxClassifier, export_onnx
from contrastfit.outputs import CLASSES

TEXTS = ["good fun film", "the plot was very dull and the actor was weak but the story was fine", "bad", "a great movie"]


def _saved(tmp_path, encoder, method, hparams=None, pairs=False, labels=("negative", "neutral", "positive")):
    model = ContrastiveClassifier.from_encoder(str(encoder), method, list(labels), hparams=hparams or {})
    if pairs:
        model.info.data = {"text_pair": True}
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


def _ops(path) -> set[str]:
    import onnx

    return {node.op_type for node in onnx.load(str(path)).graph.node}


def test_an_int8_export_is_quantised_checked_and_served(tmp_path, tiny_encoder_dir):
    run, model = _saved(tmp_path, tiny_encoder_dir, "ce")
    plain = export_onnx(run, tmp_path / "float")
    # the tiny random encoder's probabilities move by ~0.1 when quantised (MiniLM's: bench/quantize.py)
    meta = export_onnx(run, tmp_path / "int8", quantize="int8", max_prob_diff=0.25)
    q, check = meta["quantization"], meta["verification"]
    assert plain["quantization"] is None and "MatMulInteger" not in _ops(tmp_path / "float" / "model.onnx")
    # one self-contained int8 graph: the float weights file is gone, the weights are int8 MatMulInteger inputs
    assert sorted(p.name for p in (tmp_path / "int8").iterdir() if p.name.startswith("model.onnx")) == ["model.onnx"]
    assert {"MatMulInteger", "DynamicQuantizeLinear"} <= _ops(tmp_path / "int8" / "model.onnx")
    assert q["type"] == "int8" and q["bytes"] == (tmp_path / "int8" / "model.onnx").stat().st_size < q["float_bytes"]
    assert q["float_verification"]["max_abs_diff"] <= 1e-4 and q["float_verification"]["same_predictions"]
    assert json.loads((tmp_path / "int8" / "export.json").read_text())["quantization"]["type"] == "int8"
    # the recorded parity numbers are the int8 graph's, against PyTorch, within the thresholds
    served = OnnxClassifier(tmp_path / "int8")
    probs, want = served.predict_proba(list(VERIFY_TEXTS)), model.predict_proba(list(VERIFY_TEXTS))
    assert check["texts"] == 8 and check["batch_sizes"] == [1, 3, 8]
    assert check["max_prob_diff"] >= float(np.abs(probs - want).max()) - 1e-6  # the all-in-one batch is one it checks
    assert check["max_prob_diff"] > 1e-3  # int8, not the float graph
    assert check["max_prob_diff"] <= check["max_prob_diff_allowed"] == 0.25
    assert check["decisive_agreement"] >= check["min_label_agreement"] == 0.99
    assert served.predict(TEXTS) == model.predict(TEXTS)


class _Shifted:
    """A served model whose logits are PyTorch's plus a fixed shift (an int8 graph's error, made exact)."""

    outputs, temperature = CLASSES, 1.0

    def __init__(self, reference, shift):
        self.reference, self.shift = reference, shift

    def predict_logits(self, texts, pairs=None):
        rows = [int(t) for t in texts]
        return self.reference[rows] + self.shift


def test_int8_label_agreement_leaves_out_only_the_near_ties():
    from contrastfit.export import TIE_BAND, _parity

    # probabilities of class 1: 0.52 (a near tie: margin 0.04 < 2 * 0.05), 0.6, 0.9 and 0.1
    p1 = np.array([0.52, 0.6, 0.9, 0.1])
    reference = np.stack([np.zeros(4), np.log(p1 / (1 - p1))], axis=1)
    texts = ["0", "1", "2", "3"]
    # a shift that moves every probability by about 0.05 flips the near tie only
    check = _parity(_Shifted(reference, np.array([0.0, -0.2])), reference, texts, None, "classification")
    assert TIE_BAND == 0.05 and check["near_ties"] == 1
    assert check["label_agreement"] == 0.75 and check["decisive_agreement"] == 1.0
    # a larger shift also flips the decisive 0.6: it counts against the agreement
    check = _parity(_Shifted(reference, np.array([0.0, -0.6])), reference, texts, None, "classification")
    assert check["label_agreement"] == 0.5 and check["decisive_agreement"] == pytest.approx(2 / 3)


def test_an_int8_export_past_the_thresholds_writes_nothing(tmp_path, tiny_encoder_dir, capsys):
    from contrastfit.cli import main

    run, _ = _saved(tmp_path, tiny_encoder_dir, "ce")
    out = tmp_path / "int8"
    with pytest.raises(ModelError, match=r"^export --quantize int8: the int8 model's labels agree with PyTorch's on "
                                         r"\d+\.\d% of the \d texts PyTorch does not call within 0\.05 of a tie "
                                         r"\(at least 99\.0% required\) and its probabilities "
                                         r"differ by up to 0\.\d{3} on 99% of the texts \(at most 0 allowed; largest "
                                         r"0\.\d{3}\); nothing written"):
        export_onnx(run, out, quantize="int8", max_prob_diff=0.0)
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".int8")]
    # the command line: one line with the numbers either way
    assert main(["export", str(run), "--output", str(out), "--quantize", "int8", "--max-prob-diff", "0.25"]) == 0
    line = capsys.readouterr().out.strip()
    assert "int8" in line and "labels agree with PyTorch's on 100.0% of 8 texts" in line and "\n" not in line
    assert main(["predict", str(out), "good fun film"]) == 0  # predict (and serve) read it as any export
    assert json.loads(capsys.readouterr().out)["label"] in ("negative", "neutral", "positive")
    assert main(["export", str(run), "--output", str(tmp_path / "o2"), "--quantize", "int8", "--max-prob-diff", "0"]) == 2
    # (the model records no data: first the line saying it is checked on the built-in sentences)
    note, err = capsys.readouterr().err.strip().split("\n")
    assert note.startswith("contrastfit: export: ") and note.endswith("checking on the 8 built-in sentences instead "
                                                                     "(--check-data FILE checks on texts of yours)")
    assert err.startswith("contrastfit: error: export --quantize int8:")
    assert not (tmp_path / "o2").exists()
    assert main(["export", str(run), "--output", str(tmp_path / "o3"), "--quantize", "int8", "--min-agreement", "1.5"]) == 2
    assert "fractions between 0 and 1" in capsys.readouterr().err
    assert main(["export", str(run), "--output", str(tmp_path / "o4"), "--max-prob-diff", "0.1"]) == 2
    assert "--max-prob-diff checks an int8 export: add --quantize int8" in capsys.readouterr().err
    assert not (tmp_path / "o4").exists()


def test_int8_quantisation_survives_stale_shape_annotations(tmp_path, tiny_encoder_dir, monkeypatch):
    """Some exporter versions (torch 2.11's) annotate intermediate values with the example batch's
    shapes; onnx's shape inference inside quantize_dynamic then fails ("[ShapeInferenceError] Inferred
    shape and existing shape differ in dimension 0"). The quantiser drops the annotations and goes on."""
    import onnx

    from contrastfit.export import _quantize

    run, _ = _saved(tmp_path, tiny_encoder_dir, "ce")
    folder = tmp_path / "float"
    export_onnx(run, folder)
    proto = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    # an annotation that contradicts what inference finds: the first projection's output 99 wide (it is 32)
    out = next(node.output[0] for node in proto.graph.node if node.op_type == "MatMul")
    del proto.graph.value_info[:]
    proto.graph.value_info.append(onnx.helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, ["b", "s", 99]))
    onnx.save(proto, str(folder / "model.onnx"))
    import onnxruntime.quantization as ortq

    real = ortq.quantize_dynamic

    def strict(model_input, model_output, **kwargs):  # as onnxruntime's quantiser does where it failed
        onnx.shape_inference.infer_shapes_path(str(model_input), str(tmp_path / "checked.onnx"), strict_mode=True)
        return real(model_input, model_output, **kwargs)

    monkeypatch.setattr(ortq, "quantize_dynamic", strict)
    with pytest.raises(Exception, match="ShapeInferenceError"):
        strict(folder / "model.onnx", tmp_path / "plain.onnx")
    q = _quantize(folder, "int8", per_channel=False, reduce_range=False, op_types=None)
    assert q["type"] == "int8" and "MatMulInteger" in _ops(folder / "model.onnx")
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith("model.onnx")) == ["model.onnx"]
