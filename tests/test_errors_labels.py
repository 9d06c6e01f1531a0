"""Labels are never guessed silently: inputs that used to load with a label set other than the one
written (numbers and words mixed, one label in two Unicode forms, label sets joined by another
separator or not marked as label sets, nulls and numbers in label lists, JSON booleans), a YAML key
given twice, and vague or two-line refusals of files are each answered in one line naming the file,
the column, the row or the value, by the command line (exit status 2) and the Python API alike.
"""

from __future__ import annotations

import json
import math
import unicodedata
from pathlib import Path

import pytest

from contrastfit.cli import main
from contrastfit.errors import ConfigError, DataError

NFC = unicodedata.normalize("NFC", "café")
NFD = unicodedata.normalize("NFD", "café")


def _write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def _jsonl(path: Path, rows: list[dict]) -> str:
    return _write(path, "".join(json.dumps(r) + "\n" for r in rows))


def _train(tiny_encoder_dir, tmp_path, *args: str) -> list[str]:
    return ["train", "--model", str(tiny_encoder_dir), "--quiet", "--epochs", "1", "--min-steps", "1",
            "--batch-size", "8", "--output", str(tmp_path / "run"), *args]


def _refused(argv: list[str], captured, *fragments: str, tmp_path: Path | None = None) -> str:
    """Run the CLI: exit status 2, exactly one line on standard error, holding every fragment."""
    code = main(argv)
    err = captured.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("contrastfit: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    if tmp_path is not None:
        assert not (tmp_path / "run").exists()  # refused before anything was written
    return lines[0]


def _api(tiny_encoder_dir, **kwargs) -> str:
    """``contrastfit.train(...)``'s refusal (a DataError in one line)."""
    from contrastfit import train

    with pytest.raises(DataError) as err:
        train(model=str(tiny_encoder_dir), epochs=1, batch_size=8, method="ce", progress=False, **kwargs)
    assert "\n" not in str(err.value)
    return str(err.value)


def _texts(n: int) -> list[str]:
    words = ["good film", "bad plot", "great actor", "dull story"]
    return [f"{words[i % 4]} {i}" for i in range(n)]


# -- numbers and words in one label column ------------------------------------------------------------

MIXED = [1, 0, "pos", "neg"] * 6


def test_jsonl_labels_mixing_numbers_and_words_are_refused(tiny_encoder_dir, tmp_path, capsys):
    data = _jsonl(tmp_path / "mixed.jsonl", [{"text": t, "label": y} for t, y in zip(_texts(24), MIXED)])
    _refused(_train(tiny_encoder_dir, tmp_path, "--data", data), capsys, "mixed.jsonl", "column 'label'",
             "mix numbers (1, 0)", "words ('pos', 'neg')", tmp_path=tmp_path)


def test_a_csv_of_0_and_1_with_one_word_is_refused(tiny_encoder_dir, tmp_path, capsys):
    rows = "".join(f"good film {i},1\nbad plot {i},0\n" for i in range(12)) + "a great actor,pos\n"
    data = _write(tmp_path / "mixed.csv", "text,label\n" + rows)
    _refused(_train(tiny_encoder_dir, tmp_path, "--data", data), capsys, "mixed.csv", "column 'label'",
             "mix numbers (1, 0)", "words ('pos')", tmp_path=tmp_path)


@pytest.mark.parametrize("form", ["texts and labels", "list of rows", "words only"])
def test_the_python_api_refuses_the_same_mix_in_the_same_words(tiny_encoder_dir, form):
    texts = _texts(24)
    if form == "texts and labels":
        kwargs = dict(texts=texts, labels=MIXED)
    elif form == "list of rows":
        kwargs = dict(data=[{"text": t, "label": y} for t, y in zip(texts, MIXED)])
    else:  # as a CSV reader hands them over: every label a string
        kwargs = dict(texts=texts, labels=[str(y) for y in MIXED])
    message = _api(tiny_encoder_dir, **kwargs)
    assert message == (f"data ({form if form != 'words only' else 'texts and labels'}, 24 rows), column 'label': "
                       "the labels mix numbers (1, 0) and words ('pos', 'neg'); write every class one way, "
                       "e.g. all as words")


# -- one label in two Unicode forms -------------------------------------------------------------------

def test_labels_equal_after_nfc_normalisation_are_refused_naming_both_spellings(tiny_encoder_dir, tmp_path, capsys):
    rows = "".join(f"good film {i},{NFC}\nbad plot {i},{NFD}\ndull story {i},tea\n" for i in range(5))
    data = _write(tmp_path / "cafe.csv", "text,label\n" + rows)
    line = _refused(_train(tiny_encoder_dir, tmp_path, "--data", data), capsys, "cafe.csv", "column 'label'",
                    "two Unicode forms", ascii(NFC), ascii(NFD), "(5 rows)", tmp_path=tmp_path)
    assert line.count(NFC) == 1 and line.count(NFD) == 1  # each spelling shown as written, once


def test_the_unicode_form_check_holds_for_label_sets_and_textdata_too():
    from contrastfit.data import TextData
    from contrastfit.data import load_data
    from contrastfit.data.multilabel import LabelSetReader
    from contrastfit.data.types import check_label_names

    with pytest.raises(DataError, match="two Unicode forms"):
        check_label_names([NFC, NFD], "where")
    with pytest.raises(DataError, match=r"data \(texts and labels, 4 rows\).*two Unicode forms"):
        load_data((_texts(4), [[NFC], [NFD, "tea"], ["tea"], [NFC]]), validation_split=0, labels=LabelSetReader())
    import datasets

    ds = datasets.Dataset.from_dict({"text": ["a"], "label": [0]})
    with pytest.raises(DataError, match="data set 'mine': labels 'caf.+two Unicode forms"):
        TextData("mine", ds, None, None, [NFC, NFD])


# -- multi-label: the separator, nulls and numbers in lists --------------------------------------------

def _semicolons(tmp_path: Path) -> str:
    rows = "".join(f"good film {i},food;service\nbad plot {i},food\ndull story {i},price\n" for i in range(6))
    return _write(tmp_path / "sets.csv", "text,label\n" + rows)


def test_label_sets_joined_by_another_separator_are_refused_naming_it(tiny_encoder_dir, tmp_path, capsys):
    _refused(_train(tiny_encoder_dir, tmp_path, "--multi-label", "--data", _semicolons(tmp_path)), capsys,
             "sets.csv", "column 'label'", "no label holds the separator '|'", "6 hold ';'", "'food;service'",
             "--label-separator ';'", tmp_path=tmp_path)
    from contrastfit.data import load_data
    from contrastfit.data.multilabel import LabelSetReader  # giving the separator splits them or keeps them whole

    path = _semicolons(tmp_path)
    assert load_data(path, labels=LabelSetReader(";"), validation_split=0).label_names == ["food", "price", "service"]
    assert load_data(path, labels=LabelSetReader("|"), validation_split=0).label_names == ["food", "food;service", "price"]


@pytest.mark.parametrize("bad, blank, fragments", [
    (["service", None], False, ["row 5 (line 5)", "null inside the label list ['service', None]"]),
    (["service", None], True, ["row 5 (line 6)", "null inside the label list ['service', None]"]),
    (["service", 1], False, ["row 5 (line 5)", "1 (int) inside a list of text labels ['service', 1]"]),
    ([1], False, ["row 5 (line 5)", "1 (int) inside a list of text labels [1]"]),
], ids=["null", "null-after-a-blank-line", "number-among-words", "number-alone"])
def test_nulls_and_numbers_in_jsonl_label_lists_are_refused_naming_the_line(tiny_encoder_dir, tmp_path, capsys, bad,
                                                                           blank, fragments):
    sets = [["food"], ["service"], ["food", "price"], ["price"], bad, ["food"]] * 4
    rows = "".join(json.dumps({"text": t, "label": s}) + "\n" for t, s in zip(_texts(24), sets))
    if blank:  # a blank line 2: the line of row 5 is 6
        rows = rows[:rows.index("\n") + 1] + "\n" + rows[rows.index("\n") + 1:]
    data = _write(tmp_path / "sets.jsonl", rows)
    _refused(_train(tiny_encoder_dir, tmp_path, "--multi-label", "--data", data), capsys, "sets.jsonl",
             "column 'label'", *fragments, tmp_path=tmp_path)


def test_the_python_api_refuses_nulls_and_numbers_in_label_lists(tiny_encoder_dir):
    message = _api(tiny_encoder_dir, texts=_texts(4), labels=[["food"], ["service", None], ["food"], ["price"]],
                   multi_label=True)
    assert message == ("data (texts and labels, 4 rows), column 'label': row 2: null inside the label list "
                       "['service', None]; leave it out (an empty list is a text with no label)")
    message = _api(tiny_encoder_dir, texts=_texts(4), labels=[["food"], ["service", 1], ["food"], ["price"]],
                   multi_label=True)
    assert "row 2: 1 (int) inside a list of text labels ['service', 1]" in message


# -- label sets without --multi-label ---------------------------------------------------------------

def test_labels_joined_by_a_bar_without_multi_label_get_the_hint(tiny_encoder_dir, tmp_path, capsys):
    rows = "".join(f"good film {i},food|service\nbad plot {i},food\ndull story {i},service\n" for i in range(6))
    data = _write(tmp_path / "bars.csv", "text,label\n" + rows)
    _refused(_train(tiny_encoder_dir, tmp_path, "--data", data), capsys, "bars.csv", "column 'label'",
             "'food|service'", "look like label sets", "--multi-label", "--label-separator", tmp_path=tmp_path)
    two = "".join(f"good film {i},food|service\nbad plot {i},price|food\n" for i in range(6))
    message = _api(tiny_encoder_dir, data=_write(tmp_path / "two.csv", "text,label\n" + two))
    assert "2 labels hold '|'" in message and "--multi-label" in message
    from contrastfit.data import load_data  # one '|' label whose parts are not labels stays a class

    rows = "".join(f"good film {i},yes|no\nbad plot {i},food\n" for i in range(6))
    data = load_data(_write(tmp_path / "one.csv", "text,label\n" + rows), validation_split=0)
    assert data.label_names == ["food", "yes|no"]


# -- booleans as written ---------------------------------------------------------------------------------

def test_json_booleans_are_named_as_written(tmp_path):
    from contrastfit.data import load_data

    rows = [{"text": t, "label": i % 2 == 0} for i, t in enumerate(_texts(12))]
    data = load_data(_jsonl(tmp_path / "flags.jsonl", rows), validation_split=0)
    assert data.label_names == ["false", "true"] and data.train["label"][:2] == [1, 0]
    rows = "".join(f"good film {i},True\nbad plot {i},false\n" for i in range(6))  # pandas reads both as booleans
    data = load_data(_write(tmp_path / "flags.csv", "text,label\n" + rows), validation_split=0)
    assert data.label_names == ["True", "false"]


# -- YAML: a key given twice -----------------------------------------------------------------------------

def test_an_experiment_config_with_a_key_given_twice_is_refused(tmp_path, capsys):
    config = _write(tmp_path / "exp.yaml", "name: twice\ndata: no-such-data.csv\nmodel: tiny\n"
                                           "methods: [linear-probe]\nseeds: [0]\nmethods: [ce]\n")
    _refused(["experiment", config], capsys, "exp.yaml", "key 'methods' is given twice", "lines 4 and 6")


def test_yaml_keys_given_twice_are_refused_in_every_yaml_the_package_reads(tmp_path):
    from contrastfit.data.descriptions import read_label_descriptions
    from contrastfit.experiments.config import apply_overrides, load_config

    nested = _write(tmp_path / "nested.yaml", "name: n\ndata: mr\nmethods: [ce]\ntraining:\n  batch_size: 8\n"
                                              "  epochs: 1\n  batch_size: 16\n")
    with pytest.raises(ConfigError, match=r"nested.yaml: key 'batch_size' is given twice \(lines 5 and 7\)"):
        load_config(nested)
    with pytest.raises(ConfigError, match=r"override 'training=\{a: 1, a: 2\}': key 'a' is given twice"):
        apply_overrides({}, ["training={a: 1, a: 2}"])
    described = _write(tmp_path / "labels.yaml", "pos: a good film\nneg: a bad film\npos: a fine film\n")
    with pytest.raises(ConfigError, match=r"labels.yaml: label 'pos' is described twice \(lines 1 and 3\)"):
        read_label_descriptions(described)
    described = _write(tmp_path / "labels.json", '{"pos": "a good film", "neg": "a bad film", "pos": "fine"}')
    with pytest.raises(ConfigError, match=r"labels.json: label 'pos' is described twice"):
        read_label_descriptions(described)
    from contrastfit.yamlfile import load_yaml

    merged = load_yaml("base: &b {x: 1, y: 2}\nrun:\n  <<: *b\n  y: 3\n")  # a merge key may be overridden
    assert merged["run"] == {"x": 1, "y": 3}


# -- files: one line, saying what the path is --------------------------------------------------------------

def test_a_malformed_jsonl_row_is_one_line_naming_the_line(tiny_encoder_dir, tmp_path, capfd):
    rows = '{"text": "good film", "label": "pos"}\n{"text": "bad plot", "label": "neg"\n{"text": "a", "label": "pos"}\n'
    data = _write(tmp_path / "broken.jsonl", rows)
    _refused(_train(tiny_encoder_dir, tmp_path, "--data", data), capfd, "broken.jsonl", "line 2 is not valid JSON",
             tmp_path=tmp_path)  # capfd: the datasets library's logger writes to the file descriptor


@pytest.mark.parametrize("kind", ["symlink-loop", "validation-symlink-loop", "folder", "folder-multi-label",
                                  "experiment-folder", "label-descriptions-folder"])
def test_a_symlink_loop_or_a_folder_is_called_what_it_is(tiny_encoder_dir, tmp_path, capsys, kind):
    loop = tmp_path / "loop.csv"
    loop.symlink_to(loop)
    folder = tmp_path / "table.csv"
    folder.mkdir()
    data = _write(tmp_path / "data.csv", "text,label\n" + "".join(f"good film {i},pos\nbad plot {i},neg\n"
                                                                   for i in range(6)))
    argv, fragments = {
        "symlink-loop": (_train(tiny_encoder_dir, tmp_path, "--data", str(loop)), [str(loop), "is a symlink loop"]),
        "validation-symlink-loop": (_train(tiny_encoder_dir, tmp_path, "--data", data, "--validation-data", str(loop)),
                                    [str(loop), "is a symlink loop"]),
        "folder": (_train(tiny_encoder_dir, tmp_path, "--data", str(folder)), [str(folder), "is a folder, not a file"]),
        "folder-multi-label": (_train(tiny_encoder_dir, tmp_path, "--multi-label", "--data", str(folder)),
                               [str(folder), "is a folder, not a file"]),
        "experiment-folder": (["experiment", str(folder)], [str(folder), "is a folder, not a file"]),
        "label-descriptions-folder": (_train(tiny_encoder_dir, tmp_path, "--data", data, "--label-descriptions",
                                             str(folder)), [str(folder), "is a folder, not a file"]),
    }[kind]
    _refused(argv, capsys, *fragments, tmp_path=tmp_path)


# -- in-memory data: the row and the value ------------------------------------------------------------------

@pytest.mark.parametrize("texts, labels, message", [
    (["good film", "bad plot", "dull story"], ["pos", math.nan, "neg"],
     "data (texts and labels, 3 rows): label column 'label' row 2 is nan, a missing label; give every text a label"),
    (["good film", math.nan, "dull story"], ["pos", "neg", "neg"],
     "data (texts and labels, 3 rows): text column 'text' row 2 is nan (float), not a text"),
    (["good film", "bad plot", 3.5], ["pos", "neg", "neg"],
     "data (texts and labels, 3 rows): text column 'text' row 3 is 3.5 (float), not a text"),
], ids=["nan-label", "nan-text", "number-text"])
def test_a_nan_label_or_a_text_that_is_not_a_string_is_named_with_its_row(tiny_encoder_dir, texts, labels, message):
    assert _api(tiny_encoder_dir, texts=texts, labels=labels) == message


def test_pretrain_and_predict_call_a_folder_or_a_symlink_loop_what_it_is(tmp_path, tiny_encoder_dir, capsys):
    from contrastfit.cli import main

    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "folder.txt").mkdir()
    saved = tmp_path / "run"
    from contrastfit.modeling import ContrastiveClassifier

    ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce", ["a", "b"]).save_pretrained(saved)
    capsys.readouterr()
    for argv, fragment in ((["pretrain", "--data", str(tmp_path / "folder.txt"), "--model", str(tiny_encoder_dir),
                             "--output", str(tmp_path / "enc")], "folder.txt: is a folder, not a file"),
                           (["predict", str(saved), "--file", str(tmp_path / "loop")], "loop: is a symlink loop"),
                           (["predict", str(saved), "--file", str(tmp_path / "folder.txt")], "is a folder, not a file")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and fragment in err, err
