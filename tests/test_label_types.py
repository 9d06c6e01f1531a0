"""Labels come back as they were given: a model trained on integer labels predicts ints, through save and
load (``label_type`` in ``contrastfit.json``); string labels stay strings."""

from __future__ import annotations

import json

import pytest

from contrastfit import ContrastiveClassifier, train

from conftest import sentiment_rows, write_sentiment_csv


def _fast(tiny_encoder_dir, **kw):
    return dict(dict(model=str(tiny_encoder_dir), epochs=1, batch_size=8, learning_rate=1e-3, method="ce",
                     progress=False), **kw)


def _rows():
    rows = sentiment_rows()
    return [r["sentence"] for r in rows], [r["sentiment"] for r in rows]


def _saved_and_loaded(result, folder):
    result.model.save_pretrained(folder, progress=False)
    return ContrastiveClassifier.from_pretrained(folder, progress=False)


@pytest.mark.parametrize("form", ["labels", "dataframe", "csv"])
def test_integer_labels_are_predicted_as_ints_through_save_and_load(tiny_encoder_dir, tmp_path, form):
    import pandas as pd

    texts, names = _rows()
    ints = [1 if name == "positive" else 0 for name in names]
    if form == "labels":
        result = train(texts=texts, labels=ints, **_fast(tiny_encoder_dir))
    elif form == "dataframe":
        result = train(pd.DataFrame({"text": texts, "stars": ints}), label_column="stars", **_fast(tiny_encoder_dir))
    else:
        path = tmp_path / "ints.csv"
        pd.DataFrame({"text": texts, "label": ints}).to_csv(path, index=False)
        result = train(data=str(path), **_fast(tiny_encoder_dir))
    assert result.model.label_names == ["0", "1"]  # the names stay strings (the card, the CLI's JSON)
    predicted = result.model.predict(texts[:6])
    assert all(type(p) is int for p in predicted) and set(predicted) <= {0, 1}
    assert result.model.labels == [0, 1]
    loaded = _saved_and_loaded(result, tmp_path / "model")
    assert json.loads((tmp_path / "model" / "contrastfit.json").read_text())["label_type"] == "int"
    again = loaded.predict(texts[:6])
    assert again == predicted and all(type(p) is int for p in again)
    # the rows `contrastfit predict` writes and `serve` answers {"texts": ...} with: the label as an int too
    from contrastfit.inference import prediction_rows

    row = prediction_rows(loaded, texts[:1], None)[0]
    assert row["label"] == predicted[0] and type(row["label"]) is int and set(row["probabilities"]) == {"0", "1"}


def test_string_labels_stay_strings_and_numbers_as_text_stay_text(tiny_encoder_dir, tmp_path):
    """Strings (also digits given as strings, as a JSON file may hold them) and booleans are not ints."""
    texts, names = _rows()
    result = train(texts=texts, labels=names, **_fast(tiny_encoder_dir))
    loaded = _saved_and_loaded(result, tmp_path / "names")
    assert "label_type" not in json.loads((tmp_path / "names" / "contrastfit.json").read_text())
    assert set(loaded.predict(texts)) <= {"negative", "positive"} and loaded.labels == ["negative", "positive"]
    digits = train(texts=texts, labels=["1" if n == "positive" else "0" for n in names], **_fast(tiny_encoder_dir))
    assert all(type(p) is str for p in _saved_and_loaded(digits, tmp_path / "digits").predict(texts[:4]))
    flags = train(texts=texts, labels=[n == "positive" for n in names], **_fast(tiny_encoder_dir))
    assert set(flags.model.predict(texts)) <= {"false", "true"}


def test_a_file_of_word_labels_and_a_regression_target_are_unchanged(tiny_encoder_dir, tmp_path):
    path = write_sentiment_csv(tmp_path / "toy.csv")
    result = train(data=str(path), label_column="sentiment", **_fast(tiny_encoder_dir))
    assert result.model.info.label_type is None and result.model.predict(["superb"])[0] in ("negative", "positive")
    texts, _ = _rows()
    scores = [float(i % 5) + 0.5 for i in range(len(texts))]
    regression = train(texts=texts, labels=scores, **_fast(tiny_encoder_dir))
    assert regression.model.labels is None and isinstance(regression.model.predict(texts[:1])[0], float)
