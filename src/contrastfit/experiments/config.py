"""Experiment configuration: a YAML file naming data, model, methods, a protocol, seeds and an
output folder. The schema is declared once, in :mod:`contrastfit.experiments.schema`; here the
parsed config becomes the :class:`ExperimentConfig` the runner, plan and search read: its method
entries expanded into :class:`MethodVariant` s (every point of their grids), each variant's
hyper-parameters checked by the method's own schema and its merged training settings by
``TrainConfig.validate``. Bad input is a one-line ConfigError naming the file and the key; the
docs/reference/experiment-yaml.md documents the whole schema (its tables generated from :mod:`.schema`).

.. code-block:: yaml

    name: mr-fewshot
    data: mr                       # built-in name, local file or Hub name
    model: minilm-l6
    methods: [ce, {name: ce-scl, lambda: 0.9, temperature: [0.1, 0.3]}]   # lists are grids
    # a method entry's own `training:` overrides the top-level one for that entry's variants
    # (lists are grids here too: Gunel's batch-size ablation)
    #   methods: [{name: ce-scl, training: {batch_size: [16, 64, 256]}}]
    protocol: {kind: few-shot, shots: [8, 32], samples: 5}                # one file per kind: protocols/
    seeds: [0, 1, 2]
    validation_size: 256           # stratified validation subset (Gunel: ~500)
    training: {batch_size: 16, learning_rate: 5.0e-5}                     # TrainConfig's settings: schema.TRAINING_KEYS
    baseline: ce                   # p-values of every other method against this one
    top_k: 3                       # also report the mean of the top 3 runs by validation (Gunel)
    analyses: [tsne, alignment_uniformity, distance_groups, error_analysis, learning_curves, confusion,
               attributions]
    attributions: {examples: 3, samples: 25}   # Shapley values of the words of 3 test examples
    output: runs/mr-fewshot

``models: [minilm-l6, encoders/simcse]`` instead of ``model:`` trains every run on each encoder
(the runs' variants are then labelled ``MODEL/VARIANT``, e.g. ``simcse/ce``).

A config with ``tasks:`` is a multi-task experiment (:class:`MultiTaskExperimentConfig`, run by
:mod:`contrastfit.experiments.multitask`; schema :class:`~contrastfit.experiments.schema.MultiTaskExperiment`)::

    name: cs224n-multitask
    tasks: [{name: mr, data: mr, train_size: 1000}, {name: vader, data: vader-tweets, type: regression}]
    steps_per_task: 20
    training: {batch_size: 16, head_learning_rate: 1.0e-3}       # MultiTaskConfig's settings
    pretrain: {simcse: {method: simcse-unsup, corpus: tasks, max_texts: 512}}
    variants:
      - {name: single-task, mode: single}
      - {name: multi-task, mode: multitask, schedule: round-robin}
      - {name: multi-task after SimCSE, mode: multitask, pretrain: simcse}
    output: runs/cs224n-multitask
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml
from pydantic import Field

from ..data.loading import VALIDATION_SPLIT, file_problem
from ..errors import ConfigError
from ..methods.base import resolve_hparams
from ..shapes import check_multilabel_config
from ..multitask.config import MultiTaskConfig
from ..config import TrainConfig, load_config_data
from ..yamlfile import DuplicateKeyError, UniqueKeyLoader, load_yaml
from .schema import (TRAINING_KEYS, Experiment, MultiTaskExperiment, MultiTaskVariant, as_list, model_label,
                     parse_experiment)

__all__ = ["RUN_DATA_OPTIONS", "TRAINING_KEYS", "ExperimentConfig", "MethodVariant", "MultiTaskExperimentConfig",
           "apply_overrides", "load_config", "load_experiment_data", "multitask_settings", "parse_config", "run_config"]


@dataclass(frozen=True)
class MethodVariant:
    """One method with one set of hyper-parameters (one point of its grid) and, optionally, its own
    training settings (``training:`` in its method entry), which override the experiment's
    ``training:`` for this variant only. Values are kept as written (they make the label)."""

    method: str
    hparams: tuple[tuple[str, Any], ...] = ()
    training: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        """``method``, or ``method[h=v,...,t=v,...]``: hyper-parameters, then training settings,
        each sorted by name (e.g. ``ce-scl[temperature=0.1,batch_size=64]``)."""
        items = (*self.hparams, *self.training)
        if not items:
            return self.method
        return f"{self.method}[" + ",".join(f"{k}={v}" for k, v in items) + "]"


class ExperimentConfig(Experiment):
    """A parsed experiment config (:class:`~contrastfit.experiments.schema.Experiment`) with its
    ``methods`` expanded into variants, and the mapping as written (``raw``, overrides included:
    what ``experiment.json`` records). Build it with :func:`parse_config` or :func:`load_config`."""

    methods: tuple[MethodVariant, ...]  # type: ignore[assignment]
    raw: dict[str, Any] = Field(default_factory=dict, exclude=True)

    @property
    def protocol_kind(self) -> str:
        return self.protocol.kind

    @property
    def encoders(self) -> tuple[tuple[str | None, str], ...]:
        """``(label, model)`` of every encoder the runs train: with several ``models``, each labelled by
        :func:`~contrastfit.experiments.schema.model_label`; else the one model, unlabelled."""
        if self.models is not None and len(self.models) > 1:
            return tuple((model_label(m), m) for m in self.models)
        return ((None, self.models[0] if self.models else self.model),)


class MultiTaskExperimentConfig(MultiTaskExperiment):
    """A parsed multi-task experiment config (:class:`~contrastfit.experiments.schema.MultiTaskExperiment`)
    with the mapping as written (``raw``, overrides included). Every variant's settings
    (:func:`multitask_settings`) were checked by ``MultiTaskConfig.validate``."""

    raw: dict[str, Any] = Field(default_factory=dict, exclude=True)


def multitask_settings(config: MultiTaskExperiment, variant: MultiTaskVariant) -> dict[str, Any]:
    """The ``MultiTaskConfig`` settings of ``variant``'s runs: the experiment's ``training:`` with the
    variant's own on top, its ``schedule`` / ``temperature``; a single-task run selects on its one task
    (``select_on: average``)."""
    settings = {**config.training.settings(), **variant.training.settings()}
    if variant.mode == "single":
        settings["select_on"] = "average"
    settings.update({k: getattr(variant, k) for k in ("schedule", "temperature") if getattr(variant, k) is not None})
    return settings


def _parse_multitask(experiment: MultiTaskExperiment, raw: dict[str, Any], where: str) -> MultiTaskExperimentConfig:
    tasks = [t.model_dump() for t in experiment.tasks]
    for v in experiment.variants:
        try:
            MultiTaskConfig(tasks=tasks if v.mode == "multitask" else tasks[:1], **multitask_settings(experiment, v)).validate()
        except ConfigError as exc:
            raise ConfigError(f"{where}: variant {v.name!r}: {exc}") from None
    values = {name: getattr(experiment, name) for name in MultiTaskExperiment.model_fields}
    return MultiTaskExperimentConfig.model_construct(_fields_set=set(experiment.model_fields_set), **values, raw=raw)


#: The data options a run's TrainConfig carries: the runs of label sets are multi-label runs.
RUN_DATA_OPTIONS = ("multi_label", "label_separator")


def run_config(experiment: Experiment, variant: MethodVariant, **run: Any) -> TrainConfig:
    """The TrainConfig of ``variant``'s runs (``run``: what the runner sets for each one, e.g. output and
    seed): its method and hyper-parameters, the experiment's ``training:`` with the variant's own on top,
    and of ``data_options`` the keys in :data:`RUN_DATA_OPTIONS` (the rest only read the data, which the
    runner loads once and hands each run)."""
    # Trainer checkpoints inside a run are off by default (schema.EXPERIMENT_TRAINING_DEFAULTS: a
    # killed few-shot run is simply redone); `training: {save_checkpoints: true, save_steps: N}` turns
    # them on, and a restarted runner then resumes the interrupted run from its last checkpoint.
    data = experiment.data_options.settings()
    return TrainConfig(method=variant.method, hparams=dict(variant.hparams),
                       **{k: data[k] for k in RUN_DATA_OPTIONS if k in data},
                       **{**experiment.training.settings(), **dict(variant.training)}, **run)


def load_experiment_data(experiment: Experiment):
    """The experiment's data, read once for all its runs as ``contrastfit train`` reads it
    (:func:`contrastfit.config.load_config_data`): ``data`` with ``data_options``; label sets with
    ``multi_label`` (:class:`contrastfit.data.multilabel.LabelSetReader`)."""
    options = experiment.data_options.settings()
    if options.get("validation_split") is None:  # read once for every method, and the tables report validation
        options["validation_split"] = VALIDATION_SPLIT
    return load_config_data(TrainConfig(data=experiment.data, **options))


def _variants(experiment: Experiment, where: str) -> tuple[MethodVariant, ...]:
    """Every variant of every ``methods`` entry: each combination of its list-valued hyper-parameters
    and list-valued training settings. Hyper-parameters are checked by the method's own schema
    (``resolve_hparams``), the experiment's training settings with the variant's on top by
    ``TrainConfig.validate``, as each run will be."""
    variants = []
    for i, entry in enumerate(experiment.methods):
        grid = {k: as_list(v) for k, v in entry.hparams.items()}
        empty = next((k for k, values in grid.items() if not values), None)
        if empty is not None:  # itertools.product over it: no variant, so no run at all
            raise ConfigError(f"{where}: methods[{i}] ({entry.name}): {empty}: [] makes the grid empty (no runs); "
                              "give at least one value")
        for name, values in grid.items():
            for value in values:
                try:
                    resolve_hparams(entry.name, {name: value})
                except ConfigError as exc:
                    raise ConfigError(f"{where}: methods[{i}]: {exc}") from None
        training = entry.training.settings()
        keys, tkeys = sorted(grid), sorted(training)
        variants += [MethodVariant(entry.name, tuple(zip(keys, combo)), tuple(zip(tkeys, tcombo)))
                     for combo in itertools.product(*(grid[k] for k in keys))
                     for tcombo in itertools.product(*(training[k] for k in tkeys))]
    for v in variants:
        try:
            run_config(experiment, v).validate()
        except ConfigError as exc:
            raise ConfigError(f"{where}: {v.label}: {exc}") from None
    if experiment.data_options.multi_label:  # each run trains the multi-label form of its method
        for v in variants:
            try:
                check_multilabel_config(run_config(experiment, v))
            except ConfigError as exc:
                raise ConfigError(f"{where}: {v.label}: {exc}") from None
    labels = [v.label for v in variants]
    if len(set(labels)) != len(labels):
        dup = sorted({x for x in labels if labels.count(x) > 1})
        raise ConfigError(f"{where}: method variant(s) {', '.join(dup)} listed twice")
    return tuple(variants)


def parse_config(raw: dict[str, Any], where: str = "config") -> ExperimentConfig | MultiTaskExperimentConfig:
    """``raw`` (a config mapping) checked and expanded; a one-line ConfigError naming ``where`` otherwise.
    A config with ``tasks:`` is a multi-task experiment (:class:`MultiTaskExperimentConfig`)."""
    experiment = parse_experiment(raw, where)
    if isinstance(experiment, MultiTaskExperiment):
        return _parse_multitask(experiment, raw, where)
    variants = _variants(experiment, where)
    names = {v.label for v in variants} | {v.method for v in variants}
    if experiment.models is not None and len(experiment.models) > 1:
        names |= {f"{model_label(m)}/{n}" for m in experiment.models for n in names}
    if experiment.baseline is not None and experiment.baseline not in names:
        raise ConfigError(f"{where}: baseline '{experiment.baseline}' is not one of the methods "
                          f"({', '.join(sorted(names))})")
    labels = [v.label for v in variants]
    if experiment.models is not None and len(experiment.models) > 1:
        labels = [f"{model_label(m)}/{v}" for m in experiment.models for v in labels]
    if experiment.keep_model is not None and experiment.keep_model not in labels:
        raise ConfigError(f"{where}: keep_model '{experiment.keep_model}' is not a variant of this config "
                          f"({', '.join(labels)})")
    values = {name: getattr(experiment, name) for name in Experiment.model_fields}
    return ExperimentConfig.model_construct(_fields_set=set(experiment.model_fields_set),
                                            **{**values, "methods": variants, "raw": raw})


class _YamlLoader(UniqueKeyLoader):
    """PyYAML's safe loader, reading ``5e-5`` and ``1E3`` as floats, as YAML 1.2 and every user do
    (PyYAML follows YAML 1.1, where a float needs a dot, and would hand the schema the string ``'5e-5'``),
    and refusing a key given twice in one mapping (:class:`~contrastfit.yamlfile.UniqueKeyLoader`:
    PyYAML would keep the last silently)."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def read_yaml(text: str) -> Any:
    """One YAML document (configs and ``--set`` values), with :class:`_YamlLoader`; a key given twice
    raises :class:`~contrastfit.yamlfile.DuplicateKeyError`."""
    return load_yaml(text, _YamlLoader)


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str], where: str = "config") -> dict[str, Any]:
    """``raw`` with each ``"dotted.key=value"`` set (the value read as YAML: ``3``, ``[20, 100]``,
    ``{kind: full}``); intermediate mappings are created when missing. Returns a new dict."""
    import copy

    out = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip() or any(not part for part in key.strip().split(".")):
            raise ConfigError(f"{where}: override {item!r} is not KEY=VALUE (e.g. protocol.samples=3)")
        try:
            value = read_yaml(text) if text.strip() else None
        except DuplicateKeyError as exc:
            raise ConfigError(f"{where}: override {item!r}: {exc.describe()}") from None
        except yaml.YAMLError:
            raise ConfigError(f"{where}: override {item!r}: the value is not valid YAML") from None
        parts = key.strip().split(".")
        node = out
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif isinstance(child, str) and depth == 0 and part == "protocol":
                child = node[part] = {"kind": child}
            if not isinstance(child, dict):
                raise ConfigError(f"{where}: override {item!r}: {'.'.join(parts[:depth + 1])} is not a mapping")
            node = child
        node[parts[-1]] = value
    return out


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> ExperimentConfig | MultiTaskExperimentConfig:
    """Read and check the YAML config at ``path``, after ``overrides`` (``KEY=VALUE`` strings,
    dotted keys, see :func:`apply_overrides`)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"experiment config {path}: {file_problem(path) or 'no such file'}")
    try:
        raw = read_yaml(path.read_text(encoding="utf-8"))
    except DuplicateKeyError as exc:
        raise ConfigError(f"experiment config {path}: {exc.describe()}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"experiment config {path}: not valid YAML{at}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"experiment config {path}: not valid UTF-8") from None
    if overrides:
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
        raw = apply_overrides(raw, overrides, str(path))
    return parse_config(raw, str(path))
