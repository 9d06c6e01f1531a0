"""The few-line Python API (issue #21 §3): ``train`` on texts and labels, a DataFrame, a
``datasets.Dataset``, a dict of columns or a list of rows; no output folder; no progress bars."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import numpy as np
import pytest

import contrastfit
from contrastfit import ContrastiveClassifier, train
from contrastfit.errors import ConfigError, DataError

from conftest import sentiment_rows, write_sentiment_csv

README = Path(__file__).resolve().parents[1] / "README.md"


def _readme_snippet() -> str:
    """The first code block of the README's Python section, as the README has it."""
    section = README.read_text(encoding="utf-8").split("\n## Python\n", 1)[1]
    match = re.match(r"\s*```python\n(.*?)```", section, re.S)
    assert match, "the Python section starts with a python code block"
    return match.group(1)


def _fast(tiny_encoder_dir, **kw):
    """The tiny encoder and a short schedule: what the tests add to the README's calls."""
    return dict(dict(model=str(tiny_encoder_dir), epochs=2, batch_size=8, learning_rate=1e-3, method="ce",
                     progress=False), **kw)


def _rows():
    rows = sentiment_rows()
    return [r["sentence"] for r in rows], [r["sentiment"] for r in rows]


def test_the_readme_snippet_runs_as_written(tiny_encoder_dir, monkeypatch, capsys, tmp_path):
    """The README's snippet, verbatim, with only the encoder swapped for the tiny one (and a learning
    rate and step count it learns with; the real MiniLM predicts the comment's labels with the
    defaults): it trains, predicts what the comment says, prints nothing else and leaves nothing on disk."""
    snippet = _readme_snippet()
    assert "train(texts=texts, labels=labels, progress=False)" in snippet
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(contrastfit, "train", functools.partial(train, model=str(tiny_encoder_dir),
                                                                learning_rate=1e-3, min_steps=60))
    namespace: dict = {}
    exec(compile(snippet, str(README), "exec"), namespace)
    out, err = capsys.readouterr()
    expected = re.search(r"print\(.*\)\s+# (.*)", snippet).group(1)
    assert out == expected + "\n"
    assert "%|" not in err and "it/s" not in err
    result = namespace["result"]
    assert result["method"] == "ce-scl-lr" and result["data"]["source"]["rows"] == 8
    assert list(tmp_path.iterdir()) == []  # no runs/ folder, no output


def test_texts_and_labels_train_without_an_output_folder_and_save_later(tiny_encoder_dir, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where the run's temporary folder goes
    (tmp_path / "tmp").mkdir()
    monkeypatch.chdir(tmp_path)
    texts, labels = _rows()
    result = train(texts=texts, labels=labels, **_fast(tiny_encoder_dir))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"] and list((tmp_path / "tmp").iterdir()) == []
    assert result.model.label_names == ["negative", "positive"]  # sorted, as a file's
    source = result["data"]["source"]
    assert source["kind"] == "memory" and source["rows"] == 24 and len(source["hash"]) == 16
    assert "/" not in json.dumps(source.to_dict())  # no path anywhere
    # 24 rows: 10% held out for validation, as for a file
    assert (result["data"]["train_size"], result["data"]["validation_size"]) == (21, 3)
    assert set(result.metrics) == {"validation"}
    # saved later: the folder loads and predicts the same, and keeps the record's data section
    folder = result.model.save_pretrained(tmp_path / "saved")
    probe = ["good fun film", "awful dull plot", "the movie was very weak"]
    loaded = ContrastiveClassifier.from_pretrained(folder, device=result.model.device)
    np.testing.assert_array_equal(loaded.predict_logits(probe), result.model.predict_logits(probe))
    saved = json.loads((folder / "contrastfit.json").read_text())
    assert saved["data"]["source"] == source.to_dict() and saved["data"]["train_hash"] == result["data"]["train_hash"]


def test_validation_is_held_out_only_where_the_run_chooses_something_on_it(tiny_encoder_dir):
    from contrastfit.methods import available_methods
    from contrastfit.config import TrainConfig, validation_split_for

    texts, labels = _rows()  # 24 rows
    fast = dict(model=str(tiny_encoder_dir), batch_size=8, progress=False)
    # the default recipe fits a logistic head and chooses nothing on validation: every row trains
    result = train(texts=texts, labels=labels, min_steps=2, **fast)
    assert result["method"] == "ce-scl-lr" and result["data"]["source"]["validation_split"] == 0.0
    assert result["data"]["train_size"] == 24 and "validation" not in result.metrics
    # one whose kept step is the best on validation holds 10% out, as does an explicit split
    assert train(texts=texts, labels=labels, method="ce", epochs=1, **fast)["data"]["train_size"] == 21
    asked = train(texts=texts, labels=labels, min_steps=2, validation_split=0.1, **fast)
    assert (asked["data"]["train_size"], asked["data"]["validation_size"]) == (21, 3)
    # the rule for every method: a step, a head epoch (AdamW heads) or label thresholds chosen there
    chooses = {name for name in available_methods() if validation_split_for(TrainConfig(method=name)) == 0.1}
    assert {name for name in available_methods()} - chooses == {"ce-scl-lr", "setfit", "linear-probe", "zero-shot",
                                                                 "distill-cosine"}
    assert {"ce", "supcl-seq", "simcse-unsup", "lacon"} <= chooses
    assert validation_split_for(TrainConfig(method="ce", select_best=False)) == 0.0
    assert validation_split_for(TrainConfig(multi_label=True)) == 0.1  # thresholds on validation
    assert validation_split_for(TrainConfig(method="ce", validation_split=0.0)) == 0.0


def test_in_memory_data_is_the_same_data_as_the_file(tiny_encoder_dir, tmp_path):
    """Every in-memory form of the 24 rows gives the rows, labels, split and hashes the CSV file gives
    (one normalisation and one hold-out rule for both), and the same model."""
    import datasets
    import pandas as pd

    csv_path = write_sentiment_csv(tmp_path / "toy.csv")
    rows = sentiment_rows()
    texts, labels = _rows()
    frame = pd.DataFrame(rows, index=range(100, 124))  # the index is not data
    forms = {
        "texts and labels": dict(texts=texts, labels=labels),
        "(texts and labels)": dict(data=(texts, labels)),
        "DataFrame": dict(data=frame, text_column="sentence", label_column="sentiment"),
        "Dataset": dict(data=datasets.Dataset.from_list(rows), label_column="sentiment"),
        "dict of columns": dict(data={"sentence": texts, "sentiment": np.array(labels)}, label_column="sentiment"),
        "list of rows": dict(data=rows, label_column="sentiment"),
    }
    from_file = train(data=str(csv_path), label_column="sentiment", output=str(tmp_path / "file"),
                      **_fast(tiny_encoder_dir, epochs=1))
    keys = ("train_size", "train_hash", "validation_size", "validation_hash", "label_names")
    hashes = set()
    for name, given in forms.items():
        result = train(**given, **_fast(tiny_encoder_dir, epochs=1))
        assert {k: result["data"][k] for k in keys} == {k: from_file["data"][k] for k in keys}, name
        source = result["data"]["source"]
        assert (source["kind"], source["form"], source["rows"]) == ("memory", name.strip("()"), 24)
        hashes.add(source["hash"])
        assert result["training"]["train_loss"] == pytest.approx(from_file["training"]["train_loss"], rel=1e-5), name
    assert len(hashes) == 1  # the rows, as normalised: the same whatever form they came in
    from contrastfit.training import TrainConfig  # a config holding the DataFrame: the same

    config = TrainConfig(data=frame, text_column="sentence", label_column="sentiment", **_fast(tiny_encoder_dir, epochs=1))
    result = train(config)
    assert result["data"]["train_hash"] == from_file["data"]["train_hash"] and config.data is frame
    # the data as train()'s first argument, as SetFit's and sentence-transformers' trainers take it
    result = train(frame, text_column="sentence", label_column="sentiment", **_fast(tiny_encoder_dir, epochs=1))
    assert result["data"]["train_hash"] == from_file["data"]["train_hash"]
    assert result["data"]["source"]["form"] == "DataFrame"
    result = train(str(csv_path), label_column="sentiment", **_fast(tiny_encoder_dir, epochs=1))
    assert result["data"]["train_hash"] == from_file["data"]["train_hash"]
    with pytest.raises(ConfigError, match=r"give the training data once: as train\(\)'s first argument"):
        train(frame, data=frame)


def test_string_labels_are_stripped_and_sorted_and_numbers_stay_numbers(tiny_encoder_dir):
    texts, labels = _rows()
    spaced = [f"  {label} " for label in labels]
    result = train(texts=texts, labels=spaced, **_fast(tiny_encoder_dir, epochs=1))
    assert result.model.label_names == ["negative", "positive"]
    ints = [2 if label == "positive" else 10 for label in labels]  # numeric order, not text order
    result = train(texts=texts, labels=ints, **_fast(tiny_encoder_dir, epochs=1))
    assert result.model.label_names == ["2", "10"]


def test_validation_and_test_data_in_memory(tiny_encoder_dir):
    import pandas as pd

    texts, labels = _rows()
    test = pd.DataFrame({"text": ["good fun", "awful plot", "superb film"], "label": ["positive", "negative", "positive"]})
    result = train(texts=texts[:16], labels=labels[:16], validation_data=(texts[16:], labels[16:]), test_data=test,
                   **_fast(tiny_encoder_dir, epochs=1))
    data = result["data"]
    assert (data["train_size"], data["validation_size"], data["test_size"]) == (16, 8, 3)
    assert data["source"]["validation_data"]["kind"] == "memory" and data["source"]["validation_data"]["rows"] == 8
    assert data["source"]["test_data"] == {"kind": "memory", "form": "DataFrame", "rows": 3,
                                           "hash": data["test_hash"]}
    assert data["source"]["validation_split"] is None
    assert set(result.metrics) == {"validation", "test"}


def test_a_dataframe_validation_split_with_a_label_the_training_data_lacks_is_refused(tiny_encoder_dir):
    texts, labels = _rows()
    with pytest.raises(DataError, match=r"validation_data \(texts and labels, 2 rows\), column 'label': label "
                                        r"'neutral' \(row 2\) is not one of the labels \(negative, positive\)"):
        train(texts=texts, labels=labels, validation_data=(["good", "film"], ["positive", "neutral"]),
              **_fast(tiny_encoder_dir))


@pytest.mark.parametrize("kwargs,message", [
    (dict(texts=["good film", "bad film", " "], labels=["p", "n", "p"]),
     "data (texts and labels, 3 rows): text column 'text' has 1 empty or white-space-only text(s) (first at row 3)"),
    (dict(texts=["good film", None, "bad"], labels=["p", "n", "p"]),
     "data (texts and labels, 3 rows): text column 'text' has 1 missing value(s) (first at row 2)"),
    (dict(texts=["good film", "bad film"], labels=["p", "n", "p"]),
     "data: 2 texts and 3 labels; give one label per text"),
    (dict(texts="good film", labels=["p"]),
     "data: texts must be a list (one item a row), got 'good film'"),
    (dict(texts=[1, 2, 3], labels=["p", "n", "p"]),
     "data (texts and labels, 3 rows): text column 'text' row 1 is 1 (int), not a text"),
    (dict(texts=["good", "bad", "fun"], labels=["p", "p", "p"]),
     "data (texts and labels, 3 rows): every row has the label 'p' (column 'label'); a classifier needs at least "
     "two classes"),
    (dict(texts=["good", "bad"], labels=["pos", "Pos"]),
     "data (texts and labels, 2 rows), column 'label': labels 'Pos' (1 row) and 'pos' (1 row) differ only in case; "
     "write each class one way"),
    (dict(data={"text", "label"}),
     "data must be a built-in name, a file path, (texts, labels), a pandas DataFrame, a datasets.Dataset, a dict "
     "of columns or a list of row dicts; got {'label', 'text'} (set)"),
    (dict(data={"text": ["a", "b"], "label": ["p"]}),
     "data: the columns differ in length (text: 2, label: 1)"),
    (dict(data=([], [])), "data has no rows"),
    (dict(data=[{"review": "good", "y": "p"}, {"review": "bad", "y": "n"}]),
     "data (list of rows, 2 rows) has no label column 'label' (columns: review, y)"),
])
def test_bad_in_memory_data_gets_one_line_naming_the_value(tiny_encoder_dir, kwargs, message):
    with pytest.raises(DataError) as err:
        train(**kwargs, **_fast(tiny_encoder_dir))
    assert str(err.value) == message


def test_in_memory_data_refusals_of_a_dataframe_and_a_dataset_dict(tiny_encoder_dir):
    import datasets
    import pandas as pd

    frame = pd.DataFrame([["good", "p", "x"], ["bad", "n", "y"]], columns=["text", "label", "label"])
    with pytest.raises(DataError) as err:
        train(data=frame, **_fast(tiny_encoder_dir))
    assert str(err.value) == "data: column 'label' appears twice in the DataFrame; rename or remove one"
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["a"], "label": [0]}),
                               "test": datasets.Dataset.from_dict({"text": ["a"], "label": [0]})})
    with pytest.raises(DataError) as err:
        train(data=dd, **_fast(tiny_encoder_dir))
    assert str(err.value) == ("data is a datasets.DatasetDict (splits: train, test); give one split, e.g. "
                              "data=dd['train'], validation_data=dd['validation']")
    big = pd.DataFrame({"text": ["good film"] * 50, "label": ["p", "n"] * 25, "other": list(range(50))})
    with pytest.raises(DataError) as err:
        train(data=big, validation_data=big.values, **_fast(tiny_encoder_dir))  # an array: not one of the forms
    assert "\n" not in str(err.value) and str(err.value).startswith("validation_data must be a built-in name")


def test_data_is_given_once(tiny_encoder_dir, tmp_path):
    texts, labels = _rows()
    with pytest.raises(ConfigError, match=r"^texts= and labels= go together \(one label per text\); got only texts=$"):
        train(texts=texts, **_fast(tiny_encoder_dir))
    with pytest.raises(ConfigError, match=r"^give the training data once: texts= and labels=, or data=$"):
        train(texts=texts, labels=labels, data="mr", **_fast(tiny_encoder_dir))
    with pytest.raises(DataError, match=r"^validation_data in memory goes with training data in memory or a local "
                                        r"file, not with 'mr', which has its own splits$"):
        train(data="mr", validation_data=(texts, labels), **_fast(tiny_encoder_dir))
    for name in ("resume", "keep_checkpoints"):
        with pytest.raises(ConfigError, match=rf"^{name}=True needs an output folder \(output=FOLDER\)"):
            train(texts=texts, labels=labels, **{name: True}, **_fast(tiny_encoder_dir))


def test_an_output_folder_still_gets_the_model_and_the_record(tiny_encoder_dir, tmp_path):
    texts, labels = _rows()
    result = train(texts=texts, labels=labels, output=tmp_path / "run", **_fast(tiny_encoder_dir, epochs=1))
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record["data"]["source"]["kind"] == "memory" and record["data"]["train_hash"] == result["data"]["train_hash"]
    assert (tmp_path / "run" / "head.safetensors").is_file() and (tmp_path / "run" / "README.md").is_file()


def test_progress_false_prints_no_bar_of_any_library(tiny_encoder_dir, tmp_path, capfd):
    """``progress=False``: no bar on stderr from the Trainer, datasets' map (tokenize), transformers'
    weight loading or writing, a file's split generation; and each library's own setting is back
    afterwards. With ``progress=True`` those bars are there."""
    import datasets
    from transformers.utils import logging as hf_logging

    def bars(err: str) -> list[str]:
        return [line for line in re.split(r"[\r\n]", err) if "%|" in line or "it/s" in line or "examples/s" in line]

    csv_path = write_sentiment_csv(tmp_path / "toy.csv")
    # the libraries' own settings on, whatever an earlier test in this process left (the CLI's --quiet
    # turns them off for its process), so that "back afterwards" means back to on
    datasets.enable_progress_bars()
    hf_logging.enable_progress_bar()
    capfd.readouterr()
    train(data=str(csv_path), label_column="sentiment", output=str(tmp_path / "quiet"),
          **_fast(tiny_encoder_dir, epochs=1))
    out, err = capfd.readouterr()
    assert bars(err) == [] and out == ""
    texts, labels = _rows()
    train(texts=texts, labels=labels, **_fast(tiny_encoder_dir, epochs=1))
    out, err = capfd.readouterr()
    assert bars(err) == [] and out == ""
    assert datasets.is_progress_bar_enabled() and hf_logging.is_progress_bar_enabled()
    train(texts=texts, labels=labels, **_fast(tiny_encoder_dir, epochs=1, progress=True))
    out, err = capfd.readouterr()
    loud = " ".join(bars(err))
    assert "tokenize" in loud and "Loading weights" in loud and "ce: " in out


def test_several_processes_need_an_output_folder(tiny_encoder_dir, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it: each process would have its own temporary folder
    texts, labels = _rows()
    with pytest.raises(ConfigError) as err:
        train(texts=texts, labels=labels, **_fast(tiny_encoder_dir))
    assert str(err.value) == "2 processes train one model in one output folder: give output=FOLDER"
