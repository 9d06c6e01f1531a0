"""The run record: what one training job made and everything that made it, written and read by one class.

Every job of the pipeline (:mod:`contrastfit.pipeline`) ends with a :class:`Record`: :func:`contrastfit.train`
and :func:`contrastfit.training.train_multitask` write it as ``results.json``,
:func:`contrastfit.pretrain.pretrain` as ``contrastfit_pretrain.json``; everything that reads a run back
(:mod:`contrastfit.experiments.records`, the model card, the experiment runner, the command line) reads it
through :meth:`Record.from_dict` and its attributes. The JSON is the dict of :meth:`Record.to_dict`::

    {"version": 1, "kind": "train" | "multitask" | "pretrain",
     "method", "hparams", "model", "seed",            # what trained (multitask: no method)
     "data",                                         # train: the data description; pretrain: the corpus
     "tasks", "schedule", "select_on",               # multitask only: each task's spec, data and metrics
     "training", "metrics", "timings", "versions",   # settings and steps; validation / test; phases; libraries
     "tags", "identity", "log_history"}              # the user's tags; the run identity; the Trainer's log

Every nested entry is a typed model (:class:`RunData` and its :class:`Sampling`, :class:`Corpus`,
:class:`Training` (one for every kind), :class:`Schedule`, :class:`TaskEntry`, :class:`Identity`, each
split's :class:`SplitMetrics`): readers ask
``record.training.steps`` or ``record.metrics["test"].accuracy``, never a dict. An entry
that another version wrote and this one does not declare is kept as written, so a record reads and
writes back unchanged; an entry of the wrong type is a one-line error.

``identity`` is the run's identity (:mod:`contrastfit.identity`): ``{"sha256", "spec"}``, the
content hash of everything that made the run; the experiment runner's (``tags.run_identity``) for a run it
made, else the job's own (:func:`contrastfit.identity.run_identity`).

Versions: a record without ``version`` (written before it existed, version 0) reads as version 1 (a
pre-training record's ``base_model``, ``base_model_path``, ``pooling``, ``max_length`` and ``corpus`` move
to ``model``, ``training`` and ``data``); a record of a later version than :data:`RECORD_VERSION` is refused
with one line (:class:`~contrastfit.errors.ContrastfitError`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Union

from pydantic import BaseModel, ConfigDict, ValidationError

from .atomic import write_json_atomic
from .errors import ContrastfitError, ModelError
from .identity import record_identity

__all__ = ["KINDS", "RECORD_VERSION", "RESULTS_NAME", "Calibration", "Corpus", "DataSource", "Identity", "ModelData",
           "Interrupted", "Metrics", "ModelConfig", "ModelInfo", "MultiTaskModelConfig", "MultiTaskModelInfo", "Record", "RunData",
           "Sampling", "Schedule", "Selection", "SplitMetrics", "TaskEntry", "Training", "parse_model_config", "read_record"]

#: The record of a run of ``train`` or ``train_multitask``, in its output folder.
RESULTS_NAME = "results.json"
#: The version :meth:`Record.to_dict` writes.
RECORD_VERSION = 1
KINDS = ("train", "multitask", "pretrain")
#: Version 0 pre-training records kept these at the top level; version 1 keeps them in ``training``.
_PRETRAIN_V0_TRAINING = ("base_model_path", "pooling", "max_length")


#: A number as written: an int stays an int, a float a float.
Number = Union[int, float]


class Entry(BaseModel, Mapping):
    """A nested entry of a record: what the writers put there, declared and typed. An entry a writer of
    another version added is kept as written (``extra``), and :meth:`to_dict` gives back the keys that
    were given, so a record reads and writes again unchanged.

    Read as attributes (``record.training.steps``) or, as the JSON has them, by key (``["steps"]``,
    ``.get``, ``in``, ``.items()``): a read-only mapping of the entries given, so ``"mse" in metrics`` is
    False for a classifier's."""

    model_config = ConfigDict(extra="allow")

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)

    def __getitem__(self, key: str) -> Any:
        if key not in self.model_fields_set:  # the entries given, extra ones included
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self):  # the entries given, in order (a Mapping's keys, not pydantic's (name, value) pairs)
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.model_fields_set)

    def __eq__(self, other: object) -> bool:
        """Equal to an entry of the same entries, or to a plain mapping of them (the JSON's)."""
        if isinstance(other, Mapping) and not isinstance(other, BaseModel):
            return self.to_dict() == dict(other)
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]  (mutable, like the dicts it stands for)


class Sampling(Entry):
    """How a run drew its training sample and validation subset."""

    shots: int | None = None
    #: label sets: ``at least K texts per label``
    shots_rule: str | None = None
    train_size: int | None = None
    validation_size: int | None = None
    sample_seed: int | None = None
    sample_index: int | None = None


class DataSource(Entry):
    """Where a run's data came from (``kind``: ``builtin``, ``local``, ``memory`` or ``hub``) and how it
    was read: what reads the same data again (evaluate, calibrate, export's check) needs."""

    kind: str | None = None
    name: str | None = None
    path: str | None = None
    package: str | None = None
    package_version: str | None = None
    config: str | None = None
    revision: str | None = None
    split_seed: int | None = None
    split_fractions: list[Number] | None = None
    #: in-memory data: the form it was given in, its rows and their hash
    form: str | None = None
    rows: int | None = None
    hash: str | None = None
    #: the validation and test data given beside the training data (a path, or a description)
    validation_data: Any = None
    test_data: Any = None
    validation_split: Number | None = None
    text_column: str | None = None
    text_pair_column: str | None = None
    label_column: str | None = None
    multi_label: bool | None = None
    label_separator: str | None = None


class RunData(Entry):
    """The data a training run learned from and was scored on (kind ``train``, and each task of a
    multi-task run): where it came from, its labels, how it was sampled, each split's size and hash."""

    name: str | None = None
    source: DataSource | None = None
    task: str | None = None
    multi_label: bool | None = None
    label_names: list[Union[str, int]] | None = None
    text_pair: bool | None = None
    sampling: Sampling | None = None
    #: label sets: each label's texts in the training sample
    train_label_counts: dict[str, int] | None = None
    train_size: int | None = None
    train_hash: str | None = None
    validation_size: int | None = None
    validation_hash: str | None = None
    test_size: int | None = None
    test_hash: str | None = None
    label_descriptions: dict[str, str] | None = None
    #: a training text per label, for the model card's widget
    examples: list[dict[str, str]] | None = None


class Corpus(Entry):
    """The corpus of stage-1 pre-training (kind ``pretrain``)."""

    kind: str | None = None
    path: str | None = None
    name: str | None = None
    split: str | None = None
    sha256: str | None = None
    labels: bool | None = None
    n_texts: int | None = None
    pairs: bool | None = None
    rows_hash: str | None = None
    max_texts: int | None = None


class Selection(Entry):
    """What validation selection did in a run: the metric, the kept step and its value, every evaluation,
    whether patience stopped it, the rule (a multi-task run: what it selected on, the kept average and
    each task's best)."""

    metric: str | None = None
    best_step: int | None = None
    best_value: Number | None = None
    evaluations: list[dict[str, Any]] | None = None
    stopped_early: bool | None = None
    rule: str | None = None
    select_on: str | None = None
    best_average: Number | None = None
    per_task_best: dict[str, dict[str, Any]] | None = None


class Training(Entry):
    """What a training run was set to do and did, whatever its kind: a run of one task (``train``), of
    several (``multitask``: also ``max_steps``, ``steps_per_epoch``, ``head_learning_rate``), or stage 1
    alone (``pretrain``: also ``max_steps``, ``base_model_path``). A record holds the entries its job wrote."""

    batch_size: int | None = None
    learning_rate: Number | None = None
    #: multi-task: the heads' learning rate
    head_learning_rate: Number | None = None
    weight_decay: Number | None = None
    warmup_ratio: Number | None = None
    gradient_accumulation_steps: int | None = None
    max_length: int | None = None
    fp16: bool | None = None
    bf16: bool | None = None
    min_steps: int | None = None
    refit_head: bool | None = None
    sampler: str | None = None
    gradient_cache_chunk: int | None = None
    memory_size: int | None = None
    epochs: Number | None = None
    max_steps: int | None = None
    steps: int | None = None
    #: multi-task: the steps of one pass of the task schedule
    steps_per_epoch: int | None = None
    #: validation selection: the metric, the kept step and its value, the evaluations, the rule
    selection: Selection | None = None
    pooling: str | None = None
    train_loss: Number | None = None
    resumed_from: str | None = None
    #: LP-FT's starting probe (its head stage), None without one
    head_init: Union[dict[str, Any], str] | None = None
    #: the weight interpolation: ``alpha``, the tensors mixed, the rule
    wise_ft: dict[str, Any] | None = None
    head_stage: dict[str, Any] | None = None
    world_size: int | None = None
    warmup_steps: int | None = None
    #: label sets: each label's threshold, and the rule that chose them
    thresholds: dict[str, float] | None = None
    threshold_rule: str | None = None
    #: stage 1: the local folder of the encoder it started from
    base_model_path: str | None = None


class Schedule(Entry):
    """A multi-task run's batch schedule: its name, each task's probability and batch size, the batches it got."""

    name: str | None = None
    temperature: Number | None = None
    probabilities: dict[str, float] | None = None
    batch_sizes: dict[str, int] | None = None
    batches_per_task: dict[str, int] | None = None


class SplitMetrics(Entry):
    """A run's scores on one split (``record.metrics[split]``): read as attributes
    (``record.metrics["test"].accuracy``) or by key (``["accuracy"]``). Which entries a run has depends
    on its task: classes, a regression target, label sets; a multi-task run's split holds ``average``
    and each task's headline metrics under its name."""

    n: int | None = None
    # classes (contrastfit.evaluation.metrics.classification_metrics; probability_metrics)
    accuracy: Number | None = None
    f1: Number | None = None
    macro_f1: Number | None = None
    mcc: Number | None = None
    nll: Number | None = None
    ece: Number | None = None
    loss: Number | None = None
    per_class: dict[str, Any] | None = None
    confusion_matrix: list[list[int]] | None = None
    # a regression target
    pearson: Number | None = None
    spearman: Number | None = None
    mse: Number | None = None
    # label sets (contrastfit.evaluation.multilabel)
    subset_accuracy: Number | None = None
    micro_f1: Number | None = None
    micro_precision: Number | None = None
    micro_recall: Number | None = None
    samples_f1: Number | None = None
    hamming_loss: Number | None = None
    per_label: dict[str, Any] | None = None
    # a multi-task run: the mean of the tasks' selection metrics (each task's metrics: extra entries)
    average: Number | None = None


#: ``{split: SplitMetrics}``
Metrics = dict[str, SplitMetrics]


class TaskEntry(Entry):
    """One task of a multi-task run: its resolved spec, its data and its metrics per split."""

    spec: dict[str, Any] | None = None
    data: RunData | None = None
    metrics: Metrics | None = None


class Interrupted(Entry):
    """A run a callback stopped before its planned steps (nothing of it is written): the step it
    reached and its last checkpoint (None: none kept, or it was in a temporary folder)."""

    at_step: int
    checkpoint: str | None = None


class Identity(Entry):
    """The run identity (:mod:`contrastfit.identity`): the content hash of everything that made the run."""

    sha256: str | None = None
    spec: dict[str, Any] | None = None


class Calibration(Entry):
    """A saved model's calibration (``contrastfit calibrate``): the temperature of its class
    probabilities, or one per label of label sets, and the fit's numbers."""

    #: label sets: ``per-label temperature``
    kind: str | None = None
    temperature: Number | None = None
    temperatures: list[Number] | None = None
    #: label sets: the labels whose temperature could not be fitted (kept at 1)
    not_fitted: list[str] | None = None
    n: int | None = None
    #: the rows it was fitted on (``contrastfit calibrate``)
    data: str | None = None
    nll_before: Number | None = None
    nll_after: Number | None = None
    ece_before: Number | None = None
    ece_after: Number | None = None


class ModelData(RunData):
    """A saved model's data: its run's :class:`RunData`, and a sketch of the training rows
    (:func:`contrastfit.data.overlap.row_sketch`) by which evaluate and calibrate find them again."""

    train_rows: dict[str, Any] | None = None


class ModelInfo(Entry):
    """What a saved model's ``contrastfit.json`` says, beside its method, labels and pooling, of how it was
    made and what was fitted to it since: the model's ``info``. Set an entry by assigning it (a dict is
    validated into its model); an entry another version wrote is kept. ``data`` and ``calibration`` read as
    empty entries where the folder has none (and ``label_descriptions`` as an empty mapping) (and are written only when set)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    base_model: str | None = None
    multi_label: bool | None = None
    #: ``--label-descriptions``: label -> the text the label-name methods encode for it
    label_descriptions: dict[str, str] = {}
    model: str | None = None
    seed: int | None = None
    data: ModelData = ModelData()
    training: Training | None = None
    versions: dict[str, str] | None = None
    #: ``int`` where the training labels were integers (predict gives ints back)
    label_type: str | None = None
    calibration: Calibration = Calibration()
    #: label sets: each label's threshold (in label order), and the rule that chose them
    thresholds: list[Number] | None = None
    threshold_rule: str | None = None
    #: the model card's metadata set by ``contrastfit push`` / ``write_model_card`` (license, language, data sets)
    card: dict[str, Any] = {}

    @classmethod
    def read(cls, raw: Mapping[str, Any] | ModelInfo | None, where: str = "the model's info") -> ModelInfo:
        """``raw`` (a ``contrastfit.json``'s entries, or a model's info) as this model; an entry of the
        wrong type is a one-line :class:`~contrastfit.errors.ModelError` naming ``where``."""
        if isinstance(raw, cls):
            return raw
        try:
            return cls.model_validate(dict(raw) if raw is not None else {})
        except ValidationError as exc:
            raise ModelError(f"{where}: {_first_error(exc)}") from None

    def update(self, **entries: Any) -> None:
        """Set several entries at once (each validated, as an assignment is)."""
        for name, value in entries.items():
            setattr(self, name, value)


class MultiTaskModelInfo(ModelInfo):
    """A multi-task model's info: ``data`` and ``calibration`` per task, and its ``schedule``."""

    data: dict[str, ModelData] = {}  # type: ignore[assignment]
    schedule: Schedule | None = None
    calibration: dict[str, Calibration] = {}  # type: ignore[assignment]


class _Folder(Entry):
    """What every model folder's ``contrastfit.json`` says beside the model's info, to build the model."""

    format_version: int | None = None
    pooling: str | None = None
    max_length: int | None = None


class ModelConfig(_Folder, ModelInfo):
    """A single-task model folder's ``contrastfit.json``, typed: what builds the model (its method and
    hyper-parameters, task, labels, pooling, length; the sentence-transformers files written beside it)
    and, in the same object, its info (:class:`ModelInfo`'s entries; :meth:`info` gives them alone)."""

    KIND: ClassVar[str | None] = None
    #: what is not the model's info (what :meth:`info` leaves out)
    BUILDS: ClassVar[tuple[str, ...]] = ("format_version", "method", "hparams", "task", "label_names", "pooling",
                                         "max_length", "sentence_transformers")
    INFO: ClassVar[type[ModelInfo]] = ModelInfo

    method: str | None = None
    hparams: dict[str, Any] = {}
    task: str | None = None
    label_names: list[str] | None = None
    #: the sentence-transformers files written at the folder's root (None: they could not be written faithfully)
    sentence_transformers: dict[str, Any] | None = None

    def info(self) -> ModelInfo:
        """The model's info: every entry but what builds the model."""
        return self.INFO.model_validate({k: v for k, v in self.to_dict().items() if k not in self.BUILDS})


class MultiTaskModelConfig(_Folder, MultiTaskModelInfo):
    """A multi-task model folder's ``contrastfit.json`` (``"kind": "multitask"``): its tasks (each with its
    labels and head), pooling and length, and its info (:class:`MultiTaskModelInfo`)."""

    KIND: ClassVar[str | None] = "multitask"
    BUILDS: ClassVar[tuple[str, ...]] = ("format_version", "kind", "tasks", "pooling", "max_length")
    INFO: ClassVar[type[ModelInfo]] = MultiTaskModelInfo

    kind: str | None = None
    tasks: list[dict[str, Any]] = []

    info = ModelConfig.info


def parse_model_config(raw: Mapping[str, Any], where: str) -> ModelConfig | MultiTaskModelConfig:
    """A ``contrastfit.json``'s entries as the config of its kind (``"kind": "multitask"``, else a
    single-task model's); an entry of the wrong type is a one-line :class:`~contrastfit.errors.ModelError`
    naming ``where``."""
    cls = MultiTaskModelConfig if raw.get("kind") == MultiTaskModelConfig.KIND else ModelConfig
    try:
        return cls.model_validate(dict(raw))
    except ValidationError as exc:
        raise ModelError(f"{where}: {_first_error(exc)}") from None


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    return f"an entry has the wrong type ({'.'.join(str(part) for part in error['loc'])}: {error['msg']})"


def metric_of(metrics: Mapping[str, Any], split: str, *names: str) -> Any:
    """A record's ``metrics[split][name]...`` (its ``metrics`` entry, typed or as read from a file), or
    None where a level is missing or not a mapping: how every reader looks up one number."""
    value: Any = metrics
    for key in (split, *names):
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


@dataclass
class Record(Mapping):
    """One run's record (see the module docstring). Entries a kind has not (``data`` of a multi-task run,
    ``tasks`` of a single-task one) are None and left out of :meth:`to_dict`. Read as attributes
    (``record.training.steps``), or by key as the JSON has it (``record["training"]["steps"]``: a
    read-only mapping of :meth:`to_dict`'s entries, typed)."""

    kind: str = "train"
    method: str | None = None
    #: the method's resolved hyper-parameters (multitask: None, each task's objective is in its spec)
    hparams: dict[str, Any] | None = None
    #: the encoder the run started from (a built-in name, a local folder or a Hub name); ``model`` in the JSON
    base_model: str | None = None
    seed: int | None = None
    #: train: the data (:class:`RunData`); pretrain: the corpus (:class:`Corpus`)
    data: RunData | Corpus | None = None
    #: multitask: each task's spec, data and metrics
    tasks: dict[str, TaskEntry] | None = None
    schedule: Schedule | None = None
    select_on: str | None = None
    training: Training = field(default_factory=dict)  # type: ignore[assignment]
    #: ``{split: SplitMetrics}`` (multitask: ``{split: {"average", task: headline metrics}}``)
    metrics: Metrics = field(default_factory=dict)
    #: seconds of the run's phases (``setup_s``, ``train_s``, ``eval_s``)
    timings: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    tags: dict[str, Any] = field(default_factory=dict)
    #: the run identity (None: a record written before identities)
    identity: Identity | None = None
    log_history: list[dict[str, Any]] = field(default_factory=list)
    #: a run a callback stopped (:class:`Interrupted`; such a record is returned, never written)
    interrupted: Interrupted | None = None
    version: int = RECORD_VERSION

    def __post_init__(self) -> None:
        """Each nested entry as its typed model (a writer may hand in plain dicts)."""
        self.data = _typed(Corpus if self.kind == "pretrain" else RunData, self.data)
        self.training = _typed(Training, self.training)
        self.identity = _typed(Identity, self.identity)
        self.schedule = _typed(Schedule, self.schedule)
        self.interrupted = _typed(Interrupted, self.interrupted)
        if self.tasks is not None:
            self.tasks = {name: _typed(TaskEntry, t) for name, t in self.tasks.items()}
        self.metrics = {split: _typed(SplitMetrics, m) for split, m in self.metrics.items()}

    # -- read by key, as the JSON has it

    def __getitem__(self, key: str) -> Any:
        name = _JSON_NAMES.get(key, key)
        value = getattr(self, name, None) if name in _FIELDS else None
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self):
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    def __eq__(self, other: object) -> bool:
        """Equal to a record (of any result class) or a mapping with the same JSON."""
        if isinstance(other, Record):
            return self.to_dict() == other.to_dict()
        if isinstance(other, Mapping):
            return self.to_dict() == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    # -- reading and writing

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``version`` first, then every entry that is not None, in field order."""
        out: dict[str, Any] = {"version": self.version}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "version" or value is None:
                continue
            if isinstance(value, Entry):
                value = value.to_dict()
            elif f.name in ("tasks", "metrics"):
                value = {name: entry.to_dict() for name, entry in value.items()}
            out[_FIELD_KEYS.get(f.name, f.name)] = value
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "a run record") -> Record:
        """The record of a ``results.json`` (or ``contrastfit_pretrain.json``) dict, of any version up to
        :data:`RECORD_VERSION`; a later version, an unknown kind or an entry of the wrong type is a
        one-line :class:`~contrastfit.errors.ContrastfitError` naming ``where``."""
        if not isinstance(raw, Mapping):
            raise ContrastfitError(f"{where} is not a mapping: {str(raw)[:60]!r}")
        values = dict(raw)
        version = values.pop("version", 0)
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise ContrastfitError(f"{where}: version is not a whole number >= 0 (got {version!r})")
        if version > RECORD_VERSION:
            raise ContrastfitError(f"{where} is of record version {version}, newer than this contrastfit reads "
                                   f"({RECORD_VERSION}); upgrade contrastfit to read it")
        if version == 0:
            values = _from_v0(values)
        kind = values.setdefault("kind", "train")
        if kind not in KINDS:
            raise ContrastfitError(f"{where}: unknown kind {kind!r} (one of {', '.join(KINDS)})")
        values = {_JSON_NAMES.get(k, k): v for k, v in values.items()}
        for name in ("hparams", "data", "tasks", "schedule", "training", "metrics", "timings", "versions", "tags",
                     "identity"):
            if values.get(name) is not None and not isinstance(values[name], Mapping):
                raise ContrastfitError(f"{where}: {name} is not a mapping (got {str(values[name])[:60]!r})")
        history = values.get("log_history")
        if history is not None and not isinstance(history, list):
            raise ContrastfitError(f"{where}: log_history is not a list")
        if values.get("tasks") is not None and not all(isinstance(t, Mapping) for t in values["tasks"].values()):
            raise ContrastfitError(f"{where}: a task of tasks is not a mapping")
        for split, scores in (values["metrics"].items() if values.get("metrics") is not None else ()):
            if not isinstance(scores, Mapping):
                raise ContrastfitError(f"{where}: metrics.{split} is not a mapping (got {str(scores)[:60]!r})")
        try:
            return cls(**{k: v for k, v in values.items() if k in _FIELDS and v is not None}, version=RECORD_VERSION)
        except ValidationError as exc:
            raise ContrastfitError(f"{where}: {_first_error(exc)}") from None

    def write(self, path: str | os.PathLike) -> Path:
        """Write :meth:`to_dict` to ``path`` as JSON, atomically."""
        return write_json_atomic(Path(path), self.to_dict())

    # -- what readers ask of it

    @property
    def identity_sha256(self) -> str | None:
        """The identity hash (``identity.sha256``, else that of ``tags.run_identity``), or None."""
        return record_identity({"identity": self.identity and self.identity.to_dict(), "tags": self.tags})

    def metric(self, split: str, *names: str) -> Any:
        """``metrics[split][name]`` (a multi-task run's: ``metrics[split][task][name]``), or None where the
        run did not score it (:func:`metric_of`)."""
        return metric_of(self.metrics, split, *names)

    @property
    def run_data(self) -> RunData:
        """The data of a single-task run (empty for another kind)."""
        return self.data if isinstance(self.data, RunData) else RunData()

    @property
    def task(self) -> str | None:
        """The data's task (``classification`` or ``regression``) of a single-task run."""
        return self.run_data.task

    @property
    def label_names(self) -> list[str] | None:
        return self.run_data.label_names


#: The record's attributes, and those whose JSON key is another (the encoder a run started from is ``model``).
_FIELDS = frozenset(f.name for f in fields(Record))
_FIELD_KEYS = {"base_model": "model"}
_JSON_NAMES = {key: name for name, key in _FIELD_KEYS.items()}


def _typed(model: type[Entry], value: Any) -> Any:
    """``value`` as ``model`` where a writer handed in a plain mapping (an entry or None: as it is)."""
    return model.model_validate(value) if isinstance(value, Mapping) and not isinstance(value, Entry) else value


def _from_v0(values: dict[str, Any]) -> dict[str, Any]:
    """A version-0 record's entries as version 1 has them."""
    if values.get("kind") == "pretrain":
        training = dict(values.get("training") or {})
        for key in _PRETRAIN_V0_TRAINING:
            if key in values:
                training[key] = values.pop(key)
        values["training"] = training
        values["model"] = values.pop("base_model", None)
        values["data"] = values.pop("corpus", None)
    return values


def read_record(path: str | os.PathLike) -> Record:
    """The :class:`Record` in the JSON file ``path``; a one-line
    :class:`~contrastfit.errors.ContrastfitError` when it is unreadable or not a record."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ContrastfitError(f"{path}: unreadable run record ({type(exc).__name__}: {str(exc)[:80]})") from None
    return Record.from_dict(raw, str(path))
