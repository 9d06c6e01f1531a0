"""The experiment configuration schema, declared once (pydantic models on :class:`contrastfit.schema.Schema`).

Every mapping of an experiment config is one model here: the top level (:class:`Experiment`), its
``protocol:`` (a union discriminated on ``kind`` of the registered protocols' models, each declared in
its own file of :mod:`.protocols` with its function), ``training:`` (exactly the
fields of :class:`contrastfit.config.TrainConfig` an experiment may set, derived from that
dataclass), the ``methods`` entries, ``data_options``, ``attributions``, ``search`` and where the runs
train (``executor``, ``ray``, ``slurm``: the declarations of :mod:`.executors`); and a
multi-task experiment (a config with ``tasks:``, :class:`MultiTaskExperiment`): its ``tasks``
(:class:`TaskEntry`, the fields of :class:`contrastfit.multitask.Task`), ``training``
(:class:`MultiTaskTraining`, the fields of :class:`contrastfit.multitask.MultiTaskConfig` an experiment
may set), ``pretrain`` entries (:class:`PretrainEntry`, the keyword arguments of
:func:`contrastfit.pretrain.pretrain`) and ``variants`` (:class:`MultiTaskVariant`). Unknown keys
are refused, types are not coerced (``validation_size: "500"`` is an error, not 500), and
:func:`parse_experiment` reports the first problem in one line naming the file and the key, relative
to the innermost mapping that holds it::

    exp.yaml: protocol: unknown key 'shotz' (allowed: kind, samples, seed, shots, train_size)
    exp.yaml: methods[1]: training: each of batch_size must be int, got '16'

(the wording of a value a field declares otherwise is :func:`contrastfit.schema.field_error`'s, the same
as ``contrastfit train``'s for that setting).

The value types (:mod:`.fields`), shared with the protocol files, follow these conventions:

* A value that may be "one or a list" (``shots``, ``ratios``, ``seeds``, grid values, ...) is parsed
  as a list.
* Numbers are kept as written: an int given for a float field stays an int, so the labels of
  method variants (``ce[epochs=3]``) and the run ids built from them do not change.
* What other modules already validate is asked of them, not repeated: method names
  (:func:`contrastfit.methods.get_method`), hyper-parameter names and values
  (:func:`contrastfit.methods.base.resolve_hparams`, the methods' own schema), augmenters
  (:func:`contrastfit.data.augment.check_augmenter`). The ``training:``, ``tasks:`` and ``pretrain:``
  models are the declarations of TrainConfig / MultiTaskConfig, Task and PretrainOptions
  (:func:`contrastfit.settings.declared_model`: each setting's type, choices, bounds and default,
  checked here, worded as ``train`` words them); what depends on other settings or runs a field's own ``check`` is
  ``TrainConfig.validate``'s when the variants are built (:mod:`.config`), because a method entry's
  own settings are merged over the experiment's first.

A protocol model's options are the keyword arguments of its function (the runner calls
``function(data, **protocol.options())``); ``tests/test_experiment_schema.py`` checks that names
and defaults agree.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, Union

from pydantic import (BaseModel, BeforeValidator, Field, NonNegativeInt, PositiveInt, ValidationError,
                      ValidationInfo, field_validator, model_validator)

from ..encoders import DEFAULT_MODEL
from ..errors import ConfigError
from ..evaluation.attributions import BASELINES, EXPLAIN
from ..methods.base import check_multilabel_method
from ..multitask.schedule import SCHEDULES
from ..multitask.tasks import Task
from ..multitask.config import MultiTaskConfig
from ..pretrain import PRETRAIN_METHODS, PretrainOptions
from ..schema import Schema, describe_error
from ..settings import declared_model, declared_type
from ..config import TrainConfig
from .analyses import available_analyses
from .executors import ExecutorChoice, RayOptions, SlurmOptions
from .fields import (Number, PositiveNumber, as_list, asked, explained, hparams_of, invalid, method_name,
                     one_or_more)
from .protocols import ProtocolOptions, registered_protocols

__all__ = [
    "DATA_OPTIONS", "MULTITASK_RUN_FIELDS", "PROTOCOLS", "RUN_FIELDS", "TRAINING_KEYS", "Attributions", "DataOptions", "Experiment",
    "MethodEntry", "MultiTaskExperiment", "MultiTaskTraining", "MultiTaskVariant", "PretrainEntry", "Protocol",
    "Ray", "Search", "Slurm", "SearchDimension", "TaskEntry", "Training", "TrainingGrid", "as_list", "model_label",
    "parse_experiment",
]


# ---------------------------------------------------------------------------------------------
# training: TrainConfig's experiment-settable fields
# ---------------------------------------------------------------------------------------------

#: TrainConfig fields an experiment does not set under ``training:``: the runner sets them for each
#: run from the experiment's other keys (``methods``, ``model``, ``seeds``, ``output``,
#: ``save_models``, ...) or from the data the protocol drew (``data``, ``data_options``, the sample),
#: and its tables need every run's test metrics (``evaluate_test``). Every other TrainConfig field
#: is a ``training:`` key.
#: TrainConfig's data settings that are ``data_options:`` keys (:data:`DataOptions`): how the experiment
#: reads ``data`` once for all its runs, so no method entry may set them.
DATA_OPTIONS = ("text_column", "text_pair_column", "label_column", "validation_data", "test_data", "validation_split",
                "task", "multi_label", "label_separator")
RUN_FIELDS = frozenset({
    "method", "hparams", "data", "model", "output", "seed", "tags", "save_model", "resume", "progress",
    "evaluate_test", *DATA_OPTIONS,
    "shots", "train_size", "validation_size", "sample_seed", "sample_index",
})
#: Where an experiment's default differs from TrainConfig's: its runs keep no Trainer checkpoints
#: unless asked (a killed few-shot run is simply redone).
EXPERIMENT_TRAINING_DEFAULTS: dict[str, Any] = {"save_checkpoints": False}


class _Settings(Schema):
    def settings(self) -> dict[str, Any]:
        """The keys given, as keyword arguments (what was not given keeps its default where it is used)."""
        return self.model_dump(exclude_unset=True)


class _TrainingBase(_Settings):
    def settings(self) -> dict[str, Any]:
        """The settings given, over the experiment's defaults (:data:`EXPERIMENT_TRAINING_DEFAULTS`):
        the keyword arguments of every run's TrainConfig."""
        return {**EXPERIMENT_TRAINING_DEFAULTS, **super().settings()}


Training = declared_model(
    TrainConfig, exclude=RUN_FIELDS, defaults=EXPERIMENT_TRAINING_DEFAULTS, number=Number, base=_TrainingBase,
    name="Training", doc="``training:``: TrainConfig's experiment-settable fields, with TrainConfig's defaults.")
TrainingGrid = declared_model(
    TrainConfig, exclude=RUN_FIELDS, number=Number, each=one_or_more, base=_Settings, name="TrainingGrid",
    doc="A method entry's own ``training:``: the same keys, each value one setting or a list (a grid).")
#: The keys of ``training:`` (TrainConfig's fields but :data:`RUN_FIELDS`).
TRAINING_KEYS = tuple(Training.model_fields)


# ---------------------------------------------------------------------------------------------
# methods, data_options, attributions
# ---------------------------------------------------------------------------------------------

class MethodEntry(Schema):
    """One ``methods:`` entry: a method name, or a mapping with ``name``, hyper-parameters at the
    top level of the mapping (a list value is a grid) and ``training`` (settings for this entry's
    variants only, over the experiment's ``training:``; a list value is a grid). Hyper-parameter
    names and values are checked against the method's own schema when the variants are built."""

    name: str = Field(description="the method (`contrastfit methods`)")
    hparams: dict[str, Any] = Field(default_factory=dict,
        description="the method's hyper-parameters, written at the top level of the entry (a list value is a grid)")
    training: TrainingGrid = Field(default_factory=TrainingGrid,  # type: ignore[valid-type]
        description="settings for this entry's variants only, over the experiment's training: (a list value is "
                    "a grid)")

    @model_validator(mode="before")
    @classmethod
    def _hparams_at_top_level(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"name": data}
        if isinstance(data, dict):
            own = {k: data[k] for k in ("name", "training") if k in data}
            return {**own, "hparams": {k: v for k, v in data.items() if k not in own}}
        return data

    _name = field_validator("name")(method_name)


class _DataOptionsBase(_Settings):
    @model_validator(mode="after")
    def _train_config_checks(self):
        asked(TrainConfig(**self.settings()).validate)  # e.g. label_separator without multi_label
        return self


DataOptions = declared_model(
    TrainConfig, exclude={f.name for f in dataclasses.fields(TrainConfig)} - set(DATA_OPTIONS), number=Number,
    base=_DataOptionsBase, name="DataOptions",
    doc="``data_options:``: how to read a local file or Hub data set, TrainConfig's declarations of "
        ":data:`DATA_OPTIONS` (``load_data``'s keyword arguments; ``multi_label``: label sets, read by "
        "``load_data`` with a ``LabelSetReader`` of ``label_separator``), checked by ``TrainConfig.validate``.")


class Attributions(Schema):
    """``attributions:``: the token-attribution analysis. ``examples``: a count N (the first N test
    examples of at most ``max_words`` words, then the shortest others) or a list of test indices;
    ``samples``: Shapley orderings per example; ``baseline``: how an absent word is removed."""

    examples: Annotated[Union[NonNegativeInt, list[NonNegativeInt]],
                        explained("must be a count or a list of test-set indices (integers >= 0)")] = Field(3,
        description="the first N test examples of at most max_words words, topped up with the shortest longer ones; "
                    "or a list of test indices")
    samples: PositiveInt = Field(EXPLAIN.samples, description="Shapley value sampling: random word orderings per example")
    baseline: Literal[BASELINES] = Field(EXPLAIN.baseline,  # type: ignore[valid-type]
        description="an absent word is masked out of attention (remove) or replaced by the mask token (mask)")
    max_words: PositiveInt = Field(50, description="longest example (in words) taken first when examples is a count")


# ---------------------------------------------------------------------------------------------
# protocol: one model per kind
# ---------------------------------------------------------------------------------------------

#: The options model of each protocol ``kind`` (one file each in :mod:`.protocols`, registered there).
PROTOCOLS: dict[str, type[ProtocolOptions]] = registered_protocols()
Protocol = Annotated[Union[tuple(PROTOCOLS.values())], Field(discriminator="kind")]


def _protocol_shorthands(value: Any) -> Any:
    """No ``protocol`` (or an empty one): ``full``; a string: that kind; a mapping without ``kind``: ``few-shot``."""
    if value is None or value == {}:
        value = {"kind": "full"}
    elif isinstance(value, str):
        value = {"kind": value}
    elif isinstance(value, dict) and "kind" not in value:
        value = {"kind": "few-shot", **value}
    if isinstance(value, dict) and value["kind"] not in PROTOCOLS:
        raise invalid(f"unknown protocol kind {value['kind']!r} (available: {', '.join(PROTOCOLS)})")
    return value


# ---------------------------------------------------------------------------------------------
# search
# ---------------------------------------------------------------------------------------------

class SearchDimension(Schema):
    """One hyper-parameter of a search space: a list of choices, or ``{low, high}`` (optional
    ``log``, ``step``); an int range where the method's default and both bounds are ints."""

    choices: Annotated[list[Any], Field(min_length=1)] | None = Field(None,
        description="the values to choose from (a list given for the dimension is this)")
    low: Number | None = Field(None, description="lowest value of a range")
    high: Number | None = Field(None, description="highest value of a range")
    log: bool = Field(False, description="sample the range on a log scale")
    step: PositiveNumber | None = Field(None,
        description="step of the range (an int range where the default and both bounds are ints)")

    @model_validator(mode="before")
    @classmethod
    def _list_is_choices(cls, data: Any) -> Any:
        return {"choices": data} if isinstance(data, list) else data

    @model_validator(mode="after")
    def _choices_or_range(self):
        if (self.choices is None) == (self.low is None or self.high is None) or (
                self.choices is not None and (self.low, self.high, self.step) != (None, None, None)):
            raise invalid("give a list of choices or {low, high} (optional log, step)")
        if self.choices is None and not self.low <= self.high:
            raise invalid(f"low ({self.low}) is above high ({self.high})")
        return self


class Search(Schema):
    """``search:``: an Optuna study over ``method``'s hyper-parameters (``space``), scored on the
    validation ``metric`` (see :mod:`.search`)."""

    method: str = Field(description="the method whose hyper-parameters are searched")
    space: Annotated[dict[str, SearchDimension], Field(min_length=1)] = Field(
        description="each searched name (a hyper-parameter of the method) and its dimension")
    trials: PositiveInt = Field(20, description="trials of the study")
    metric: str | None = Field(None,
        description="validation metric to optimise (default: the headline one: accuracy; pearson for a regression "
                    "target; micro_f1 on label sets)")
    storage: str | None = Field(None,
        description="Optuna storage: journal, journal:PATH or a database URL (default: in memory)")
    study: str | None = Field(None, description="study name in the storage (to add trials to a study)")
    direction: Literal["maximize", "minimize"] = Field("maximize", description="maximize or minimize the metric")

    _method = field_validator("method")(method_name)

    @field_validator("storage")
    @classmethod
    def _storage_form(cls, storage: str | None) -> str | None:
        """``journal``, ``journal:PATH`` (Optuna's journal file) or a database URL (:mod:`.studies`)."""
        if storage is not None and not (storage == "journal" or storage.startswith("journal:") or "://" in storage):
            raise invalid(f"storage must be journal, journal:PATH (a file on a shared folder) or a database URL "
                          f"(sqlite:///FILE, postgresql://HOST/DB, ...), got {storage!r}")
        return storage

    @field_validator("space")
    @classmethod
    def _space_of_the_method(cls, space: dict[str, SearchDimension], info: ValidationInfo):
        if "method" in info.data:  # else the method is refused already
            for name, dim in space.items():
                for value in dim.choices if dim.choices is not None else (dim.low, dim.high):
                    hparams_of(info.data["method"], {name: value})
        return space


# ---------------------------------------------------------------------------------------------
# executor, ray, slurm: where the grid's runs train (declared in .executors, as the CLI's options are)
# ---------------------------------------------------------------------------------------------

#: ``executor:``: ``local``, ``ray`` or ``slurm`` (:class:`.executors.ExecutorChoice`).
ExecutorName = declared_type(str, ExecutorChoice.__dataclass_fields__["executor"].metadata)
Ray = declared_model(RayOptions, number=Number, base=_Settings, name="Ray",
                     doc="``ray:``: the Ray cluster and each run's task (:class:`.executors.RayOptions`).")
Slurm = declared_model(SlurmOptions, number=Number, base=_Settings, name="Slurm",
                       doc="``slurm:``: submitit's executor and each array task's resources "
                           "(:class:`.executors.SlurmOptions`).")


# ---------------------------------------------------------------------------------------------
# The experiment
# ---------------------------------------------------------------------------------------------

def model_label(model: str) -> str:
    """How the tables name an encoder of ``models:``: the last part of its path or Hub name
    (``minilm-l6``, ``encoders/simcse`` -> ``simcse``, ``owner/name`` -> ``name``)."""
    return PurePosixPath(model.replace("\\", "/").rstrip("/")).name or model


class Experiment(Schema):
    """An experiment config: what ``contrastfit experiment CONFIG.yaml`` runs (docs/reference/experiment-yaml.md).
    ``models`` (instead of ``model``) compares encoders on the same protocol and samples: every run
    of every method on each of them, labelled ``MODEL/VARIANT`` (:func:`model_label`)."""

    name: str = Field("experiment", description="experiment name (tags every run)")
    data: str = Field(description="built-in name, local file or Hub name, read once for every run")
    model: str = Field(DEFAULT_MODEL, description="the encoder, as train's --model")
    models: one_or_more(Annotated[str, Field(min_length=1)]) | None = Field(None,
        description="instead of model: encoders to compare on the same protocol runs, samples and seeds")
    methods: one_or_more(MethodEntry) = Field(
        description="method names, or mappings {name, hyper-parameters, training}; a list value is a grid")
    protocol: Annotated[Protocol, BeforeValidator(_protocol_shorthands)] = Field(
        default_factory=lambda: PROTOCOLS["full"](kind="full"),
        description="how the training sets are drawn: a kind and its options (a kind alone: protocol: full; a mapping "
                    "without kind: few-shot)")
    seeds: one_or_more(NonNegativeInt) = Field([0], description="training seeds (initialisation and batch order)")
    validation_size: PositiveInt | None = Field(None,
        description="a stratified validation subset drawn once from the validation split (never from the training "
                    "sample); none: the whole split")
    training: Training = Field(default_factory=Training,  # type: ignore[valid-type]
        description="train's settings for every run, but those the runner sets for each run")
    data_options: DataOptions = Field(default_factory=DataOptions,
        description="how data is read (columns, held-out files and split, label sets)")
    save_models: bool = Field(False, description="keep every run's model (false: results only)")
    keep_model: Annotated[str, Field(min_length=1)] | None = Field(None,
        description="a variant label whose first run keeps its model, copied to OUTPUT/model")
    metrics: one_or_more(str) = Field(["accuracy", "f1", "macro_f1", "mcc"],
        description="the tables' metrics (of those the runs have; a regression target falls back to pearson, "
                    "spearman, mse)")
    baseline: str | None = Field(None,
        description="the method or variant the p-values compare against (default: ce if listed, else the first)")
    top_k: PositiveInt | None = Field(None,
        description="also report mean and std of the k best runs by validation score per cell")
    analyses: Annotated[list[str], BeforeValidator(as_list)] = Field(default_factory=available_analyses,
        description="the report's analyses (default: every registered one)")
    attributions: Attributions = Field(default_factory=Attributions, description="options of the attributions analysis")
    report: bool = Field(True, description="write report.md and report.html at the end")
    search: Search | None = Field(None, description="an Optuna study instead of the grid")
    executor: ExecutorName = Field("local",  # type: ignore[valid-type]
        description="where the grid's runs train: local, ray or slurm (--executor overrides it)")
    ray: Ray = Field(default_factory=Ray,  # type: ignore[valid-type]
        description="the Ray cluster and each run's task (executor: ray)")
    slurm: Slurm = Field(default_factory=Slurm,  # type: ignore[valid-type]
        description="submitit's executor and each array task's resources (executor: slurm)")
    output: str = Field(description="output folder")

    @field_validator("analyses")
    @classmethod
    def _registered(cls, names: list[str]) -> list[str]:
        unknown = [n for n in names if n not in available_analyses()]
        if unknown:
            raise invalid(f"unknown analysis {unknown[0]!r} (available: {', '.join(available_analyses())})")
        return names

    @model_validator(mode="after")
    def _one_model_key(self):
        if self.models is None:
            return self
        if "model" in self.model_fields_set:
            raise invalid("give model (one encoder) or models (a list of encoders to compare), not both")
        labels = [model_label(m) for m in self.models]
        repeated = sorted({x for x in labels if labels.count(x) > 1})
        if repeated:
            raise invalid(f"models: two encoders are both named {repeated[0]!r} in the tables (the last part of "
                           f"their path); rename one folder")
        if self.search is not None:
            raise invalid("search: runs on one encoder: give model, not models")
        return self

    @model_validator(mode="after")
    def _multi_label_protocol(self):
        """Label sets (``data_options.multi_label``) run only through the protocols written for them; a
        ``search:`` on them searches a method with a multi-label form (the methods' grid is checked the
        same way in :mod:`.config`)."""
        if not self.data_options.multi_label:
            return self
        reason = self.protocol.no_multi_label
        if reason is not None:
            raise invalid(f"protocol '{self.protocol.kind}' does not run on multi-label data "
                          f"(data_options.multi_label): {reason}")
        if self.search is not None:
            try:
                check_multilabel_method(self.search.method)
            except ConfigError as exc:
                raise invalid(f"search: {exc}") from None
        return self

    @model_validator(mode="after")
    def _transfer_sources_on_ray(self):
        if self.executor == "ray" and self.protocol.kind == "transfer":
            raise invalid("executor ray: a transfer protocol trains each source model once, in OUTPUT/sources, "
                          "which Ray workers do not share; run it with executor local or slurm")
        return self

    @model_validator(mode="after")
    def _keep_model_of_the_grid(self):
        if self.keep_model is not None and self.search is not None:
            raise invalid("keep_model: keeps a run of the methods' grid; a search: config has none to keep")
        return self


# ---------------------------------------------------------------------------------------------
# A multi-task experiment (a config with `tasks:`)
# ---------------------------------------------------------------------------------------------

#: MultiTaskConfig fields a multi-task experiment does not set under ``training:``: the runner sets them
#: for each run from the experiment's other keys (``tasks``, ``model`` / a variant's encoder, ``seeds``,
#: ``output``, ``save_models``, a variant's ``schedule`` and ``temperature``, ``steps_per_task``), and
#: its tables need every run's test metrics.
MULTITASK_RUN_FIELDS = frozenset({
    "tasks", "output", "model", "seed", "sample_seed", "sample_index", "schedule", "temperature", "max_steps",
    "resume", "progress", "save_model", "evaluate_test", "tags",
})
#: As for single-task experiments: no resumable Trainer checkpoints inside a run unless asked.
MULTITASK_TRAINING_DEFAULTS: dict[str, Any] = {"save_checkpoints": False}
#: :class:`contrastfit.pretrain.PretrainOptions` an experiment's ``pretrain:`` entry does not set: the
#: runner sets them (the corpus, the output folder, the experiment's seed, its progress switch);
#: ``method`` is the entry's own (required).
PRETRAIN_RUN_ARGS = frozenset({"method", "data", "output", "seed", "progress"})

class _TaskBase(_Settings):
    @model_validator(mode="after")
    def _task_checks(self):
        asked(Task(**self.model_dump()).check)
        return self


TaskEntry = declared_model(
    Task, number=Number, base=_TaskBase, name="TaskEntry",
    doc="A ``tasks:`` entry: the fields of :class:`contrastfit.multitask.Task` (``name`` and ``data`` required), "
        "checked by ``Task.check``.")


class _MultiTaskTrainingBase(_Settings):
    def settings(self) -> dict[str, Any]:
        """The settings given, over :data:`MULTITASK_TRAINING_DEFAULTS`: keyword arguments of every run's
        ``MultiTaskConfig``."""
        return {**MULTITASK_TRAINING_DEFAULTS, **super().settings()}


MultiTaskTraining = declared_model(
    MultiTaskConfig, exclude=MULTITASK_RUN_FIELDS, defaults=MULTITASK_TRAINING_DEFAULTS, number=Number,
    base=_MultiTaskTrainingBase, name="MultiTaskTraining",
    doc="A multi-task experiment's ``training:``: MultiTaskConfig's experiment-settable fields, with its defaults.")
MultiTaskTrainingOverride = declared_model(
    MultiTaskConfig, exclude=MULTITASK_RUN_FIELDS, number=Number, each=lambda kind: kind, base=_Settings,
    name="MultiTaskTrainingOverride", doc="A variant's own ``training:``: the same keys, over the experiment's.")


class _PretrainBase(Schema):
    """A ``pretrain:`` entry: stage 1 on a corpus of its own (:func:`contrastfit.pretrain.pretrain`).
    ``corpus``: ``tasks`` (the unlabelled texts of the tasks' training splits, both sentences of a pair,
    de-duplicated, shuffled with the seed, the first ``max_texts``), a text file (one text per line), a
    table or a data set name; ``model``: the encoder it starts from (default: the experiment's)."""

    method: Literal[PRETRAIN_METHODS] = Field(description="the stage-1 method")  # type: ignore[valid-type]
    corpus: Annotated[str, Field(min_length=1)] = Field("tasks",
        description="tasks (the tasks' unlabelled training texts), a text file, a table or a data set name")
    model: str | None = Field(None, description="the encoder it starts from (default: the experiment's)")

    @model_validator(mode="after")
    def _method_hparams(self):
        if self.hparams:
            hparams_of(self.method, self.hparams)
        return self


#: A ``pretrain:`` entry: :class:`_PretrainBase`'s keys and the declared :class:`contrastfit.pretrain.PretrainOptions`.
PretrainEntry = declared_model(PretrainOptions, exclude=PRETRAIN_RUN_ARGS | {"model"}, number=Number,
                               base=_PretrainBase, name="PretrainEntry")


class MultiTaskVariant(Schema):
    """A ``variants:`` entry. ``mode: single``: one run per task, alone; ``mode: multitask``: one run on
    every task, with ``schedule`` (default round-robin; ``temperature`` for the temperature schedule).
    The encoder is the experiment's ``model``, the variant's own ``model``, or ``pretrain: NAME``, the
    stage-1 encoder of that ``pretrain:`` entry; ``training`` overrides the experiment's for this variant."""

    name: Annotated[str, Field(min_length=1)] = Field(description="the variant's name in the tables")
    mode: Literal["single", "multitask"] = Field(
        description="single: one run per task, alone; multitask: one run on every task")
    schedule: Literal[SCHEDULES] | None = Field(None,  # type: ignore[valid-type]
        description="multitask: how tasks take turns (default round-robin)")
    temperature: PositiveNumber | None = Field(None, description="the temperature of schedule: temperature")
    model: Annotated[str, Field(min_length=1)] | None = Field(None,
        description="this variant's encoder (default: the experiment's)")
    pretrain: str | None = Field(None, description="start from the stage-1 encoder of this pretrain: entry")
    training: MultiTaskTrainingOverride = Field(default_factory=MultiTaskTrainingOverride,  # type: ignore[valid-type]
        description="settings for this variant, over the experiment's training:")

    @model_validator(mode="after")
    def _consistent(self):
        if self.mode == "single" and (self.schedule is not None or self.temperature is not None):
            raise invalid("schedule and temperature are for mode multitask (a single-task run has one task)")
        if self.temperature is not None and self.schedule != "temperature":
            raise invalid("temperature goes with schedule: temperature")
        if self.model is not None and self.pretrain is not None:
            raise invalid("give model (an encoder) or pretrain (a stage-1 encoder of the pretrain section), not both")
        return self


class MultiTaskExperiment(Schema):
    """A multi-task experiment (docs/how-to/multi-task.md): one encoder with a head per task, its
    ``variants`` compared on the same ``tasks`` and samples, for every seed. ``steps_per_task``: the
    batches each task gets in every variant (a single-task run trains that many steps, a multi-task run
    that many times the number of tasks); without it the runs follow MultiTaskConfig's step rule."""

    name: str = Field("experiment", description="experiment name (tags every run)")
    model: str = Field(DEFAULT_MODEL, description="the encoder, as train's --model")
    tasks: Annotated[list[TaskEntry], Field(min_length=1)] = Field(  # type: ignore[valid-type]
        description="the tasks, each with its data and head")
    variants: Annotated[list[MultiTaskVariant], Field(min_length=1)] = Field(
        description="what is compared: single-task and multi-task runs")
    steps_per_task: PositiveInt | None = Field(None,
        description="batches each task gets in every variant (default: MultiTaskConfig's step rule)")
    training: MultiTaskTraining = Field(default_factory=MultiTaskTraining,  # type: ignore[valid-type]
        description="MultiTaskConfig's settings for every run, but those the runner sets")
    pretrain: dict[str, PretrainEntry] = Field(default_factory=dict,  # type: ignore[valid-type]
        description="stage-1 encoders by name, for variants' pretrain:")
    seeds: one_or_more(NonNegativeInt) = Field([0], description="training seeds")
    save_models: bool = Field(False, description="keep every run's model (false: results only)")
    report: bool = Field(True, description="write report.md and report.html at the end")
    output: str = Field(description="output folder")

    @model_validator(mode="after")
    def _consistent(self):
        for what, names in (("task", [t.name for t in self.tasks]), ("variant", [v.name for v in self.variants])):
            repeated = sorted({n for n in names if names.count(n) > 1})
            if repeated:
                raise invalid(f"{what} names must be distinct; {repeated[0]!r} is given twice")
        for v in self.variants:
            if v.pretrain is not None and v.pretrain not in self.pretrain:
                known = ", ".join(self.pretrain) or "none"
                raise invalid(f"variant {v.name!r}: pretrain {v.pretrain!r} is not in the pretrain section ({known})")
            if self.steps_per_task is not None and "epochs" in {**self.training.settings(), **v.training.settings()}:
                raise invalid(f"variant {v.name!r}: give steps_per_task or training.epochs, not both")
        return self


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------

def _schemas_in(annotation: Any) -> tuple[str | None, list[type[BaseModel]]]:
    """(container, models) of a field's type: ``"list"`` or ``"dict"`` where the models sit inside one."""
    container, models, stack = None, [], [annotation]
    while stack:
        hint = stack.pop()
        origin = typing.get_origin(hint)
        if origin is Annotated:
            stack.append(typing.get_args(hint)[0])
        elif origin is list:
            container = "list"
            stack.extend(typing.get_args(hint))
        elif origin is dict:
            container = "dict"
            stack.append(typing.get_args(hint)[1])
        elif origin in (Union, types.UnionType):
            stack.extend(typing.get_args(hint))
        elif isinstance(hint, type) and issubclass(hint, BaseModel):
            models.append(hint)
    return container, models


def _innermost(model: type[BaseModel], data: Any, loc: tuple, where: str) -> tuple[type[BaseModel], Any, str]:
    """The innermost mapping on the error path ``loc`` that a schema of its own validates: (its model,
    its data, its name such as ``exp.yaml: methods[1]: training``). The union tag pydantic puts in
    the path of a protocol (its ``kind``) is skipped."""
    path = list(loc)
    while path and isinstance(data, dict) and path[0] in model.model_fields and path[0] in data:
        name = path.pop(0)
        container, members = _schemas_in(model.model_fields[name].annotation)
        if not members:
            break
        value, label = data[name], f"{where}: {name}"
        if container == "list":
            items = as_list(value)
            if not path or not isinstance(path[0], int) or path[0] >= len(items):
                break
            value, label = items[path[0]], f"{label}[{path.pop(0)}]"
        elif container == "dict":
            if not path or not isinstance(value, dict) or path[0] not in value:
                break
            value, label = value[path[0]], f"{label}.{path.pop(0)}"
        if len(members) > 1:  # a union discriminated on `kind`: the tag comes next in the path
            tag = path.pop(0) if path else None
            members = [m for m in members if "kind" in m.model_fields
                       and tag in typing.get_args(m.model_fields["kind"].annotation)]
            if len(members) != 1:
                break
            value = _protocol_shorthands(value)
        model, data, where = members[0], value, label
    return model, data, where


def parse_experiment(raw: Any, where: str) -> Experiment | MultiTaskExperiment:
    """``raw`` (the YAML mapping) as an :class:`Experiment`, or as a :class:`MultiTaskExperiment` when it
    has ``tasks``; otherwise a one-line ConfigError that names ``where`` (the file) and the key,
    relative to the innermost mapping that holds it (so an unknown key is listed with the allowed ones
    of that mapping)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping at the top level, got {type(raw).__name__}")
    schema = MultiTaskExperiment if "tasks" in raw else Experiment
    try:
        return schema.model_validate(raw)
    except ValidationError as exc:
        model, data, at = _innermost(schema, raw, exc.errors()[0]["loc"], where)
        if model is not schema:
            try:
                model.model_validate(data)
            except ValidationError as inner:
                raise ConfigError(describe_error(inner, at, model)) from None
        raise ConfigError(describe_error(exc, where, schema)) from None
