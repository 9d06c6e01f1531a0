"""The experiment configuration schema (experiments/schema.py): one-line errors naming the file and
the key, types not coerced, training keys derived from TrainConfig, protocol models in step with the
protocol functions, the parsed objects as what the plan reads, and no import cycle in experiments/."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import datasets
import pytest

from contrastfit.data import TextData
from contrastfit.errors import ConfigError
from contrastfit.experiments import parse_config
from contrastfit.experiments import schema
from contrastfit.config import TrainConfig

BASE = {"data": "mr", "methods": ["ce", {"name": "ce-scl", "temperature": [0.1, 0.3]}], "output": "runs/x",
        "protocol": {"kind": "few-shot", "shots": 4}}


def _error(**changes) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config({**BASE, **changes}, "exp.yaml")
    message = str(info.value)
    assert "\n" not in message and message.startswith("exp.yaml: ")
    return message


@pytest.mark.parametrize("changes, needle", [
    # types are not coerced, values are checked when the file is read (not when a run starts)
    ({"validation_size": "500"}, "exp.yaml: validation_size must be int, got '500'"),
    ({"validation_size": 0}, "exp.yaml: validation_size must be > 0, got 0"),
    ({"protocol": {"kind": "few-shot", "shots": 4, "samples": 1.5}},
     "exp.yaml: protocol: samples must be int, got 1.5"),
    ({"protocol": {"kind": "few-shot", "shots": "4"}}, "exp.yaml: protocol: each of shots must be int, got '4'"),
    ({"protocol": {"kind": "few-shot", "shots": 4, "train_size": 20}},
     "exp.yaml: protocol: give either shots (per class) or train_size (in total), not both"),
    ({"protocol": {"kind": "noise", "label_noise": [0.1, 1.5]}},
     "exp.yaml: protocol: each of label_noise must be in [0, 1], got 1.5"),
    ({"protocol": {"kind": "imbalance", "ratios": [0.5]}}, "exp.yaml: protocol: each of ratios must be >= 1, got 0.5"),
    ({"protocol": {"kind": "cross-validation", "folds": 1}}, "exp.yaml: protocol: folds must be >= 2, got 1"),
    ({"protocol": {"kind": "augmentation", "augmenter": "backtranslate"}},
     "exp.yaml: protocol: augmenter: unknown augmenter 'backtranslate'"),
    ({"seeds": ["1"]}, "exp.yaml: each of seeds must be int, got '1'"),
    ({"seeds": [-1]}, "exp.yaml: each of seeds must be >= 0, got -1"),
    ({"top_k": 0}, "exp.yaml: top_k must be > 0, got 0"),
    ({"report": "yes"}, "exp.yaml: report must be true or false, got 'yes'"),
    ({"data_options": {"validation_split": 1.5}}, "exp.yaml: data_options: validation_split must be in [0, 1), got 1.5"),
    ({"training": {"batch_size": "16"}}, "exp.yaml: training: batch_size must be int, got '16'"),
    ({"methods": [{"name": "ce-scl", "temperature": "warm"}]},
     "exp.yaml: methods[0]: method 'ce-scl': temperature must be float, got 'warm'"),
    ({"methods": ["ce", "nope"]}, "exp.yaml: methods[1]: name: unknown method 'nope'"),
    ({"methods": []}, "exp.yaml: methods: Value should have at least 1 item"),
    ({"search": {"method": "ce-scl", "space": {"temperature": {"low": 0.1}}}},
     "exp.yaml: search: space.temperature: give a list of choices or {low, high}"),
    ({"search": {"method": "ce-scl", "space": {"lambda": ["high"]}}},
     "exp.yaml: search: space: method 'ce-scl': lambda must be float, got 'high'"),
    # unknown keys, named with the allowed ones of the mapping that holds them
    ({"protocol": {"kind": "few-shot", "shotz": 4}},
     "exp.yaml: protocol: unknown key 'shotz' (allowed: kind, samples, seed, shots, train_size)"),
    ({"protocol": {"kind": "transfer", "source": {"data": "imdb", "shot": 4}}},
     "exp.yaml: protocol: source: unknown key 'shot' (allowed: data, epochs, hparams, method, seed, shots, train_size)"),
    ({"training": {"lr": 1e-5}}, "exp.yaml: training: unknown key 'lr' (allowed: batch_size, "),
    ({"training": {"seed": 3}}, "exp.yaml: training: unknown key 'seed'"),  # the runner sets it (seeds:)
    ({"methods": [{"name": "ce", "training": {"epoch": 3}}]}, "exp.yaml: methods[0]: training: unknown key 'epoch'"),
    ({"methods": [{"name": "ce-scl", "temprature": 0.1}]},
     "exp.yaml: methods[0]: method 'ce-scl' has no hyper-parameter 'temprature' (it has: lambda, temperature)"),
    ({"attributions": {"example": 3}}, "exp.yaml: attributions: unknown key 'example' (allowed: baseline, examples"),
    ({"search": {"method": "ce-scl", "space": {"temperature": [0.1]}, "trails": 3}}, "exp.yaml: search: unknown key 'trails'"),
    # a wrong kind
    ({"protocol": {"kind": "fewshot", "shots": 4}}, "exp.yaml: protocol: unknown protocol kind 'fewshot' (available: few-shot"),
    ({"protocol": "k-fold"}, "exp.yaml: protocol: unknown protocol kind 'k-fold'"),
])
def test_bad_values_and_keys_are_refused_in_one_line_naming_the_key(changes, needle):
    assert needle in _error(**changes)


def test_values_are_parsed_and_kept_as_written():
    config = parse_config({**BASE, "methods": [{"name": "ce", "training": {"epochs": [1, 3], "learning_rate": 1.0e-4}}],
                           "training": {"epochs": 2}, "protocol": {"kind": "imbalance", "ratios": [1, 2.5]},
                           "seeds": 3, "analyses": "tsne"}, "exp.yaml")
    # an int given for a float setting stays an int: the labels (and the run ids) do not change
    assert [v.label for v in config.methods] == ["ce[epochs=1,learning_rate=0.0001]", "ce[epochs=3,learning_rate=0.0001]"]
    assert config.training.epochs == 2 and type(config.training.epochs) is int
    assert config.protocol.options() == {"ratios": [1, 2.5]}  # only what was given: the function's defaults hold
    assert config.seeds == [3] and config.analyses == ["tsne"]  # one value is a one-element list
    assert config.training.settings() == {"save_checkpoints": False, "epochs": 2}  # the experiment's default + given
    assert config.raw["seeds"] == 3  # experiment.json records the config as written


def test_analyses_are_the_registered_ones(monkeypatch):
    from contrastfit.experiments.analyses import available_analyses

    assert parse_config(BASE).analyses == available_analyses() and "tsne" in available_analyses()
    assert "exp.yaml: analyses: unknown analysis 'calibration' (available: tsne" in _error(analyses=["tsne", "calibration"])
    monkeypatch.setattr(schema, "available_analyses", lambda: ["tsne", "calibration"])  # a newly registered one
    assert parse_config({**BASE, "analyses": ["calibration"]}).analyses == ["calibration"]


@pytest.mark.parametrize("protocol, kind, options", [
    (None, "full", {}),
    ({}, "full", {}),
    ("full", "full", {}),
    ({"shots": 8}, "few-shot", {"shots": [8]}),
])
def test_protocol_shorthands(protocol, kind, options):
    raw = {k: v for k, v in BASE.items() if k != "protocol"}
    if protocol is not None:
        raw["protocol"] = protocol
    config = parse_config(raw)
    assert (config.protocol_kind, config.protocol.options()) == (kind, options)


def test_training_keys_are_trainconfigs_fields_but_the_runners():
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    assert schema.RUN_FIELDS <= fields  # a renamed field is noticed here
    assert set(schema.TRAINING_KEYS) == fields - schema.RUN_FIELDS
    assert set(schema.TRAINING_KEYS) >= {"epochs", "batch_size", "learning_rate", "save_steps", "select_best"}
    # the defaults are TrainConfig's, but for the experiment's own
    assert schema.Training().batch_size == TrainConfig().batch_size and schema.Training().save_checkpoints is False


def test_a_new_trainconfig_field_is_a_training_key():
    @dataclasses.dataclass
    class Extended(TrainConfig):
        label_smoothing: float = 0.0

    from contrastfit.experiments.fields import one_or_more
    from contrastfit.settings import declared_model

    training = declared_model(Extended, exclude=schema.RUN_FIELDS, defaults=schema.EXPERIMENT_TRAINING_DEFAULTS,
                              base=schema._TrainingBase)
    grid = declared_model(Extended, exclude=schema.RUN_FIELDS, each=one_or_more, base=schema._Settings)
    assert training.model_validate({"label_smoothing": 0.1}).settings()["label_smoothing"] == 0.1
    assert grid.model_validate({"label_smoothing": [0, 0.1]}).settings() == {"label_smoothing": [0, 0.1]}
    with pytest.raises(Exception, match="label_smoothing"):
        training.model_validate({"label_smoothing": "0.1"})


def test_multitask_keys_are_declared_by_the_dataclasses_and_pretrain():
    from contrastfit.multitask import MultiTaskConfig, Task
    from contrastfit.pretrain import PretrainOptions

    fields = {f.name for f in dataclasses.fields(MultiTaskConfig)}
    assert schema.MULTITASK_RUN_FIELDS <= fields
    assert set(schema.MultiTaskTraining.model_fields) == fields - schema.MULTITASK_RUN_FIELDS
    assert set(schema.MultiTaskTraining.model_fields) >= {"head_learning_rate", "select_on", "batch_size", "epochs"}
    assert schema.MultiTaskTraining().head_learning_rate == MultiTaskConfig().head_learning_rate
    assert schema.MultiTaskTraining().save_checkpoints is False  # the experiment's default
    assert set(schema.TaskEntry.model_fields) == {f.name for f in dataclasses.fields(Task)}
    assert schema.TaskEntry.model_fields["weight"].default == Task("a", "b").weight
    args = {f.name: f.default for f in dataclasses.fields(PretrainOptions) if f.name not in ("method", "data", "output")}
    assert set(schema.PretrainEntry.model_fields) == set(args) - schema.PRETRAIN_RUN_ARGS | {"method", "corpus"}
    checked = 0
    for name, field in schema.PretrainEntry.model_fields.items():
        if name in args and name != "model":  # the model defaults to the experiment's
            assert field.default == args[name], name
            checked += 1
    assert checked == len(set(args) - schema.PRETRAIN_RUN_ARGS) - 1  # every default of pretrain() but the model


@pytest.mark.parametrize("changes, needle", [
    ({"models": ["minilm-l6", "encoders/simcse"], "model": "minilm-l6"},
     "exp.yaml: give model (one encoder) or models (a list of encoders to compare), not both"),
    ({"models": ["a/enc", "b/enc"]}, "exp.yaml: models: two encoders are both named 'enc' in the tables"),
    ({"models": []}, "exp.yaml: models: Value should have at least 1 item"),
    ({"models": ["minilm-l6", 3]}, "exp.yaml: each of models must be a string, got 3"),
    ({"models": ["a", "b"], "search": {"method": "ce-scl", "space": {"temperature": [0.1]}}},
     "exp.yaml: search: runs on one encoder: give model, not models"),
    ({"models": ["a", "b"], "baseline": "c/ce"}, "exp.yaml: baseline 'c/ce' is not one of the methods"),
])
def test_models_errors(changes, needle):
    assert needle in _error(**changes)


def test_models_label_the_encoders():
    config = parse_config({**BASE, "models": ["minilm-l6", "encoders/simcse/", "owner/name"], "baseline": "simcse/ce"})
    assert config.encoders == (("minilm-l6", "minilm-l6"), ("simcse", "encoders/simcse/"), ("name", "owner/name"))
    assert parse_config({**BASE, "models": ["encoders/simcse"]}).encoders == ((None, "encoders/simcse"),)
    assert parse_config(BASE).encoders == ((None, "minilm-l6"),)


def test_protocol_models_declare_their_functions_keyword_arguments():
    functions = {kind: model.function for kind, model in schema.PROTOCOLS.items()}
    for kind, model in schema.PROTOCOLS.items():
        params = {n: p.default for n, p in inspect.signature(functions[kind]).parameters.items()
                  if n not in ("data", "validation_size")}  # validation_size is the experiment's own key
        fields = {n: f.default for n, f in model.model_fields.items() if n not in ("kind", "source")}
        assert set(fields) == set(params), kind
        for name, default in params.items():
            expected = list(default) if isinstance(default, tuple) else default
            got = fields[name]
            assert got == expected or got == [expected], (kind, name)


def test_data_options_are_load_datas_keyword_arguments():
    """``data_options`` is load_data's keyword arguments (same defaults), and ``multi_label`` with the
    ``label_separator`` of a LabelSetReader: TrainConfig's declarations of those settings."""
    from contrastfit.data import load_data
    from contrastfit.data.multilabel import LabelSetReader
    from contrastfit.config import TrainConfig

    params = {n: p.default for n, p in inspect.signature(load_data).parameters.items() if p.kind == p.KEYWORD_ONLY}
    del params["labels"]  # the reader the two below make: label sets, or one label a row
    declared = {n: f.default for n, f in schema.DataOptions.model_fields.items()}
    assert declared == {**params, "multi_label": False, "label_separator": None}
    assert "separator" in inspect.signature(LabelSetReader).parameters
    assert {n: TrainConfig.__dataclass_fields__[n].default for n in declared} == declared
    assert not set(declared) & set(schema.TRAINING_KEYS)  # one place each: data_options, not training


def _toy_data() -> TextData:
    def split(prefix: str, n: int) -> datasets.Dataset:
        return datasets.Dataset.from_dict({"text": [f"{prefix} {i}" for i in range(n)], "label": [i % 2 for i in range(n)]},
                                          features=datasets.Features({"text": datasets.Value("string"),
                                                                      "label": datasets.Value("int64")}))

    return TextData("toy", split("train", 40), split("val", 20), split("test", 10), ["neg", "pos"], {"kind": "test"})


def test_the_plan_reads_the_parsed_protocol():
    from contrastfit.experiments.plan import jobs, protocol_runs

    config = parse_config({**BASE, "protocol": {"kind": "few-shot", "shots": [2, 3], "samples": 2, "seed": 5},
                           "validation_size": 6, "seeds": [0, 1]})
    runs = protocol_runs(config, _toy_data())
    assert [(r.setting, r.sample, len(r.data.train), len(r.data.validation)) for r in runs] == [
        ("shots=2", 0, 4, 6), ("shots=2", 1, 4, 6), ("shots=3", 0, 6, 6), ("shots=3", 1, 6, 6)]
    assert {r.sampling["seed"] for r in runs} == {5}
    assert len(jobs(config, runs)) == 4 * 3 * 2  # runs x variants x seeds


EXAMPLES = sorted(Path(__file__).parent.parent.joinpath("examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_config_parses_into_its_schema(path):
    import yaml

    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    config = parse_config(raw, str(path))
    if "tasks" in raw:  # a multi-task config (examples/cs224n_multitask.yaml)
        assert isinstance(config, schema.MultiTaskExperiment)
        assert isinstance(config.training, schema.MultiTaskTraining) and config.tasks and config.variants
        assert all(isinstance(e, schema.PretrainEntry) for e in config.pretrain.values())
        return
    assert isinstance(config.protocol, tuple(schema.PROTOCOLS.values()))
    assert isinstance(config.training, schema.Training) and config.methods


# ---------------------------------------------------------------------------------------------
# The cycle finder on the experiments' old config <-> plan cycle (the package-wide test without a
# cycle is tests/test_data_imports.py's)
# ---------------------------------------------------------------------------------------------

def test_the_cycle_finder_finds_the_old_config_plan_cycle(tmp_path):
    from import_graph import find_cycle, import_graph

    package = tmp_path / "contrastfit" / "experiments"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from .config import parse\n")
    (package / "config.py").write_text("def parse():\n    from .plan import check_protocol\n")
    (package / "plan.py").write_text("from .config import ExperimentConfig\n")
    (package / "runner.py").write_text("from . import plan\nfrom contrastfit.experiments.config import parse\n")
    graph = import_graph(package, "contrastfit.experiments")
    assert graph["contrastfit.experiments.runner"] == {"contrastfit.experiments.plan", "contrastfit.experiments.config"}
    assert graph["contrastfit.experiments"] == {"contrastfit.experiments.config"}
    cycle = find_cycle(graph)
    assert cycle is not None and set(cycle) == {"contrastfit.experiments.config", "contrastfit.experiments.plan"}
    (package / "config.py").write_text("def parse():\n    pass\n")
    assert find_cycle(import_graph(package, "contrastfit.experiments")) is None


def test_floats_in_scientific_notation_without_a_dot_are_numbers(tmp_path):
    """PyYAML (YAML 1.1) reads ``5e-5`` as a string, which the strict schema refuses; configs and
    ``--set`` values read it as the float users mean."""
    from contrastfit.experiments.config import load_config

    cfg = tmp_path / "exp.yaml"
    cfg.write_text(f"name: x\ndata: mr\nmethods: [ce]\noutput: {tmp_path / 'out'}\ntraining: {{learning_rate: 5e-5, weight_decay: 1E-2}}\n")
    config = load_config(cfg)
    assert config.training.learning_rate == 5e-5 and config.training.weight_decay == 0.01
    assert load_config(cfg, ["training.learning_rate=2e-5"]).training.learning_rate == 2e-5
    assert load_config(cfg, ["training.learning_rate=3.0e-5"]).training.learning_rate == 3e-5
