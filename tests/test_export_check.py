"""The export's own check: on the model's own data (its test or validation split), on a file the user
names (--check-data), or on the built-in sentences with a line saying why."""

from __future__ import annotations

import json

import pytest

from conftest import sentiment_rows, write_rows_csv
from contrastfit import ContrastiveClassifier, train
from contrastfit.errors import ModelError
from contrastfit.export import CHECK_ROWS, VERIFY_TEXTS, export_onnx

pytest.importorskip("onnxruntime")

NOTE = "checking on the 8 built-in sentences instead (--check-data FILE checks on texts of yours)"


def _saved(tmp_path, encoder, data=None, labels=("negative", "positive")):
    model = ContrastiveClassifier.from_encoder(str(encoder), "ce", list(labels))
    if data is not None:
        model.info.data = data
    folder = tmp_path / "run"
    model.save_pretrained(folder)
    return folder


def _lines(err: str) -> list[str]:
    """contrastfit's lines on stderr (not the libraries' progress bars)."""
    return [line for line in err.splitlines() if line.startswith("contrastfit:")]


def _written(folder) -> dict:
    return json.loads((folder / "export.json").read_text(encoding="utf-8"))


def test_an_int8_export_is_checked_on_the_test_split_of_its_built_in_data(tmp_path, tiny_encoder_dir, capsys):
    run = _saved(tmp_path, tiny_encoder_dir, {"name": "mr", "source": {"kind": "builtin", "name": "mr"},
                                              "task": "classification", "text_pair": False})
    # thresholds open: the tiny random encoder's int8 graph is far from its float one (what matters: the fields)
    meta = export_onnx(run, tmp_path / "int8", quantize="int8", max_prob_diff=1.0, min_agreement=0.0)
    assert _lines(capsys.readouterr().err) == []  # no fallback
    check = meta["verification"]
    assert check == _written(tmp_path / "int8")["verification"]
    assert check["texts"] == CHECK_ROWS == 256 and check["batch_sizes"] == [1, 3, 256]
    assert check["check_data"] == {"kind": "model data", "source": "mr", "split": "test", "rows": 853, "texts": 256,
                                   "description": "256 of the 853 rows of the test split of mr"}
    for key in ("label_agreement", "decisive_agreement", "max_prob_diff"):  # agreement, away from ties, largest diff
        assert 0.0 <= check[key] <= 1.0
    assert 0 <= check["near_ties"] <= 256
    # the float graph was checked on the same texts
    assert meta["quantization"]["float_verification"]["check_data"] == check["check_data"]
    assert meta["quantization"]["float_verification"]["texts"] == 256


def test_a_trained_model_is_checked_on_its_own_test_file_then_validation_split(tmp_path, tiny_encoder_dir, capsys):
    data = write_rows_csv(tmp_path / "train.csv", sentiment_rows(15, seed=1))
    test = write_rows_csv(tmp_path / "test.csv", sentiment_rows(5, seed=2))
    train(method="ce", data=str(data), test_data=str(test), label_column="sentiment", output=str(tmp_path / "run"),
          model=str(tiny_encoder_dir), epochs=1, batch_size=8, learning_rate=1e-3, progress=False)
    capsys.readouterr()
    meta = export_onnx(tmp_path / "run", tmp_path / "a")
    assert meta["verification"]["check_data"] == {"kind": "model data", "source": str(data.resolve()), "split": "test",
                                                  "rows": 10, "texts": 10,
                                                  "description": f"all 10 rows of the test split of {data.resolve()}"}
    assert meta["verification"]["texts"] == 10 and meta["verification"]["same_predictions"]
    test.unlink()  # its test file gone: the validation rows held out of the training file (10% of 30)
    meta = export_onnx(tmp_path / "run", tmp_path / "b")
    assert meta["verification"]["check_data"]["split"] == "validation"
    assert meta["verification"]["texts"] == meta["verification"]["check_data"]["rows"] == 3
    assert _lines(capsys.readouterr().err) == []
    # the training file gone too: the built-in sentences, with a line saying why
    data.unlink()
    meta = export_onnx(tmp_path / "run", tmp_path / "c")
    (err,) = _lines(capsys.readouterr().err)
    assert err.startswith(f"contrastfit: export: {data.resolve()}, the data ")
    assert err.endswith(f"was trained on, is no longer there; {NOTE}")
    check = _written(tmp_path / "c")["verification"]
    assert check["texts"] == len(VERIFY_TEXTS) == 8
    assert check["check_data"]["kind"] == "built-in sentences" and NOTE in check["check_data"]["note"]


@pytest.mark.parametrize("data, reason", [
    (None, "records no data it was trained on"),
    ({"source": {"kind": "memory", "form": "(texts, labels)", "rows": 4, "hash": "x"}},
     "was trained on in-memory data, which cannot be read again"),
    ({"source": {"kind": "local", "path": "/nonexistent/train.csv", "label_column": "sentiment"}},
     "/nonexistent/train.csv, the data"),
])
def test_a_model_whose_data_cannot_be_read_falls_back_with_the_note(tmp_path, tiny_encoder_dir, capsys, data, reason):
    from contrastfit.cli import main

    run = _saved(tmp_path, tiny_encoder_dir, data)
    assert main(["export", str(run), "--output", str(tmp_path / "onnx")]) == 0
    captured = capsys.readouterr()
    (err,) = _lines(captured.err)
    assert err.startswith("contrastfit: export: ") and reason in err and err.endswith(NOTE)
    assert captured.out.rstrip().endswith("; texts: the 8 built-in sentences")
    check_data = _written(tmp_path / "onnx")["verification"]["check_data"]
    assert check_data["kind"] == "built-in sentences" and check_data["texts"] == 8 and reason in check_data["note"]


def test_check_data_files_are_used_capped_and_named(tmp_path, tiny_encoder_dir, capsys):
    from contrastfit.cli import main

    run = _saved(tmp_path, tiny_encoder_dir)  # records no data: the file is what it is checked on, without a note
    table = tmp_path / "reviews.csv"
    table.write_text("id,review_text\n" + "".join(f"{i},a fine film number {i}\n" for i in range(70)), encoding="utf-8")
    assert main(["export", str(run), "--output", str(tmp_path / "capped"), "--quantize", "int8", "--max-prob-diff", "1",
                 "--min-agreement", "0", "--check-data", str(table), "--text-column", "review_text",
                 "--check-rows", "50"]) == 0
    captured = capsys.readouterr()
    assert _lines(captured.err) == []
    assert "of 50 texts" in captured.out and captured.out.rstrip().endswith(f"; texts: 50 of the 70 rows of {table}")
    check = _written(tmp_path / "capped")["verification"]
    assert check["texts"] == 50 and check["check_data"]["kind"] == "file"
    assert check["check_data"]["source"] == str(table) and check["check_data"]["rows"] == 70
    assert check["batch_sizes"] == [1, 3, 50]
    # a text file under the cap: every line
    lines = tmp_path / "texts.txt"
    lines.write_text("good film\n\nbad plot\nthe story was dull\n", encoding="utf-8")
    assert main(["export", str(run), "--output", str(tmp_path / "all"), "--check-data", str(lines)]) == 0
    assert _written(tmp_path / "all")["verification"]["check_data"]["texts"] == 3
    assert "matches PyTorch on 3 texts" in capsys.readouterr().out
    # one-line errors: a missing file, a bad count, both ways of naming the texts
    for argv, message in (
            (["--check-data", str(tmp_path / "missing.txt")], "missing.txt: no such file"),
            (["--check-data", str(lines), "--check-rows", "0"], "--check-rows 0: give a number of texts >= 1"),
            (["--check-data", str(lines), "--verify-file", str(lines)], "--verify-file and --check-data both name")):
        assert main(["export", str(run), "--output", str(tmp_path / "o"), *argv]) == 2
        (err,) = _lines(capsys.readouterr().err)
        assert err.startswith("contrastfit: error:") and message in err
        assert not (tmp_path / "o").exists()


def test_a_failed_int8_check_names_its_texts_in_its_one_line(tmp_path, tiny_encoder_dir):
    run = _saved(tmp_path, tiny_encoder_dir)
    lines = tmp_path / "texts.txt"
    lines.write_text("".join(f"a fine film number {i}\n" for i in range(20)), encoding="utf-8")
    with pytest.raises(ModelError, match=r"^export --quantize int8: .*; nothing written to .* \(checked on 10 of the "
                                         r"20 rows of .*texts\.txt\)$"):
        export_onnx(run, tmp_path / "int8", quantize="int8", max_prob_diff=0.0, check_data=lines, check_rows=10)
    assert not (tmp_path / "int8").exists()
    with pytest.raises(ModelError, match="whole number >= 1"):
        export_onnx(run, tmp_path / "x", check_data=lines, check_rows=0)


def test_the_probability_bound_holds_for_99_percent_of_the_texts_and_the_largest_is_recorded():
    """One text in 200 whose probability moves by 0.3 does not fail an int8 check bounded at 0.05; the
    largest difference is recorded beside the 99th percentile."""
    import numpy as np

    from contrastfit.export import _parity
    from contrastfit.outputs import CLASSES

    rng = np.random.default_rng(0)
    reference = rng.normal(size=(200, 2)) * 3

    class Served:
        outputs, temperature = CLASSES, 1.0

        def predict_logits(self, texts, pairs=None):
            index = [int(t) for t in texts]
            out = reference[index] + 0.01
            out[[k for k, i in enumerate(index) if i == 7], 0] += 2.0  # one text moves far
            return out

    check = _parity(Served(), reference, [str(i) for i in range(200)], None, "classification")
    assert check["max_prob_diff"] > 0.1 > 0.05 > check["prob_diff_p99"]
    assert check["texts"] == 200 and check["batch_sizes"] == [1, 3, 200]
