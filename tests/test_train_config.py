"""TrainConfig: one validator driven by the fields (types from the annotations, choices and bounds
from each field's ``setting``), parametrised over every field so that a new field is checked too."""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest

from contrastfit.errors import ConfigError
from contrastfit.config import OPTION_GROUPS, TrainConfig

FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
HINTS = typing.get_type_hints(TrainConfig)
#: Text settings that take any string (paths, names, columns): a new text setting with neither
#: ``choices`` nor a ``check`` must be added here on purpose.
FREE_TEXT = {"data", "model", "text_column", "text_pair_column", "label_column", "validation_data", "test_data",
             "report_to"}


def _kinds(name: str) -> list:
    kind = HINTS[name]
    if typing.get_origin(kind) is dict:
        return [dict]
    return [k for k in (typing.get_args(kind) or (kind,)) if k is not type(None)]


def _wrong_type(name: str):
    """A value of another type than the field's annotation allows."""
    kind = _kinds(name)[0]
    return {bool: 1, int: "3", float: "0.5", str: 3, dict: ["a", "list"]}[kind]


def _check(**values) -> str:
    with pytest.raises(ConfigError) as err:
        TrainConfig(**values).validate()
    message = str(err.value)
    assert "\n" not in message
    return message


def test_the_defaults_are_valid():
    TrainConfig().validate()


@pytest.mark.parametrize("name", list(FIELDS))
def test_every_field_is_declared_with_a_setting(name):
    meta = FIELDS[name].metadata
    assert meta.get("help"), f"{name}: declare it with setting(default, help, ...)"
    assert meta.get("group") in (None, *OPTION_GROUPS)
    kinds = _kinds(name)
    if kinds[0] in (int, float):
        assert meta["bounds"], f"{name}: a number needs its range (ge/gt/le/lt)"
    if kinds[0] is str:
        assert meta["choices"] or meta["check"] or name in FREE_TEXT, f"{name}: choices, check, or FREE_TEXT"


@pytest.mark.parametrize("name", list(FIELDS))
def test_every_field_refuses_a_value_of_the_wrong_type(name):
    value = _wrong_type(name)
    message = _check(**{name: value})
    assert message.startswith(f"{name} must be "), message
    assert message.endswith(f"got {value!r}"), message


def _out_of_range(bound: str, limit, kind):
    """A value just outside ``bound`` (and the limit itself for strict bounds)."""
    if bound in ("gt", "lt"):
        return limit
    step = -1 if bound == "ge" else 1
    return limit + step if kind is int else math.nextafter(float(limit), step * math.inf)


BOUNDED = [(name, bound, limit) for name, f in FIELDS.items() for bound, limit in f.metadata.get("bounds", {}).items()]


@pytest.mark.parametrize("name,bound,limit", BOUNDED, ids=[f"{n}-{b}" for n, b, _ in BOUNDED])
def test_every_bounded_field_refuses_a_value_out_of_range_and_takes_the_limit(name, bound, limit):
    kind = _kinds(name)[0]
    value = _out_of_range(bound, limit, kind)
    message = _check(**{name: value})
    assert message.startswith(f"{name} must be ") and message.endswith(f"got {value!r}"), message
    if bound in ("ge", "le"):  # an inclusive limit is a valid value (batch_size 1 needs random batches)
        TrainConfig(**{"sampler": "random", name: kind(limit)}).validate()


CHOICES = [(name, choice) for name, f in FIELDS.items() for choice in (f.metadata.get("choices") or ())]


@pytest.mark.parametrize("name", sorted({n for n, _ in CHOICES}))
def test_every_field_with_choices_refuses_another_value(name):
    message = _check(**{name: "no-such-choice"})
    assert message == f"{name} must be one of {', '.join(FIELDS[name].metadata['choices'])}, got 'no-such-choice'"


@pytest.mark.parametrize("name,choice", CHOICES)
def test_every_choice_is_accepted(name, choice):
    TrainConfig(**{name: choice}).validate()


@pytest.mark.parametrize("values,message", [
    ({"validation_size": "50"}, "validation_size must be int, got '50'"),
    ({"validation_size": 0}, "validation_size must be >= 1, got 0"),
    ({"validation_split": 1.0}, "validation_split must be in [0, 1), got 1.0"),
    ({"seed": -1}, "seed must be in [0, 4294967295], got -1"),
    ({"sample_index": -2}, "sample_index must be >= 0, got -2"),
    ({"learning_rate": 0}, "learning_rate must be > 0, got 0"),
    ({"learning_rate": "2e-5"}, "learning_rate must be float, got '2e-5' (YAML reads 2e-5 as text: write 2.0e-5)"),
    ({"learning_rate": "fast"}, "learning_rate must be float, got 'fast'"),  # the YAML hint only for numbers
    ({"weight_decay": math.nan}, "weight_decay must be a finite number, got nan"),
    ({"epochs": math.inf}, "epochs must be a finite number, got inf"),
    ({"batch_size": True}, "batch_size must be int, got True"),
    ({"max_length": 128.0}, "max_length must be int, got 128.0"),
    ({"fp16": "false"}, "fp16 must be true or false, got 'false'"),
    ({"text_column": 7}, "text_column must be a string, got 7"),
    ({"hparams": {1: 0.5}}, "hparams must be a mapping with text keys, got {1: 0.5}"),
    ({"metric_for_best": "acc"},
     "metric_for_best must be one of accuracy, f1, macro_f1, mcc, loss, mse, pearson, spearman, got 'acc'"),
    ({"method": "nope"}, "unknown method 'nope'"),
    ({"shots": 4, "train_size": 20}, "give either --shots (per class) or --train-size (total), not both"),
    ({"label_separator": ";"}, "--label-separator splits the label sets of multi-label data: give --multi-label"),
    ({"multi_label": True, "task": "regression"}, "--multi-label is classification into label sets: it does not go"),
    ({"fp16": True, "bf16": True}, "choose one of fp16 and bf16"),
    ({"batch_size": 1}, "the balanced sampler needs --batch-size >= 2 (or use --sampler random)"),
])
def test_messages_name_the_setting_and_the_value(values, message):
    assert _check(**values).startswith(message)


def test_an_int_is_a_float_and_none_is_allowed_where_the_annotation_says():
    TrainConfig(epochs=2, learning_rate=1, warmup_ratio=0, batch_size=1, sampler="random").validate()
    TrainConfig(shots=None, pooling=None, metric_for_best=None, method=None).validate()


def test_output_that_is_a_file_is_refused(tmp_path):
    file = tmp_path / "taken.txt"
    file.write_text("x", encoding="utf-8")
    assert _check(output=str(file)) == (f"output {file} is a file; --output takes a folder "
                                        "(for the model and results.json)")
    assert _check(output=str(file / "run")).startswith(f"output {file / 'run'} lies under {file}, which is a file")
    TrainConfig(output=str(tmp_path / "new" / "run")).validate()  # a folder to be made is fine
    assert not (tmp_path / "new").exists()  # validation creates nothing


def test_train_refuses_an_output_file_before_loading_anything(tmp_path):
    from contrastfit.training import train

    file = tmp_path / "taken.txt"
    file.write_text("x", encoding="utf-8")
    with pytest.raises(ConfigError, match="is a file"):  # the data name is bad too: the output is checked first
        train(data="no-such-data-set", output=str(file), model=str(tmp_path / "no-model"))


def test_train_without_data_is_one_line_and_no_builtin_set(tmp_path, monkeypatch):
    """No default data set: ``train()`` without data (or with only other settings) is refused before
    anything loads or any output folder is made, in one line."""
    from contrastfit import train
    from contrastfit.data import loading

    assert TrainConfig().data is None
    monkeypatch.setattr(loading, "load_data", lambda *a, **k: pytest.fail("no data should load"))
    for call in (lambda: train(), lambda: train(output=str(tmp_path / "run"), method="ce"),
                 lambda: train(TrainConfig(shots=8))):
        with pytest.raises(ConfigError, match=r"^train\(\) needs training data: data= .* or texts= and labels=; "
                                              r"there is no default data set$") as err:
            call()
        assert "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()


def test_the_train_command_without_data_says_so_in_one_line(tmp_path, capsys):
    """``contrastfit train`` without ``--data``: one line that it is needed (no argparse usage block),
    exit 2; with ``--output`` missing as well, the same line says so too."""
    from contrastfit.cli import NO_DATA, main

    with pytest.raises(SystemExit) as exc:
        main(["train", "--output", str(tmp_path / "run"), "--method", "ce"])
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"contrastfit: error: {NO_DATA}\n"
    assert "--data is needed" in NO_DATA and "no default data set" in NO_DATA
    with pytest.raises(SystemExit):
        main(["train"])
    assert capsys.readouterr().err == f"contrastfit: error: {NO_DATA} (--output is needed too)\n"
    with pytest.raises(SystemExit):  # another missing option: argparse's own message, as before
        main(["train", "--data", "mr"])
    assert "the following arguments are required: --output" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
