"""What a task of a multi-task run is: its data, type, head, objective and weight.

A :class:`Task` is what the user writes (a Python object, or a mapping in a config); once its data are
loaded it is resolved into a :class:`TaskSpec`, the part the model needs to rebuild the task's head and
predict (it is saved in the model's ``contrastfit.json``).

Task types, heads and objectives (Behrman & Christoglou, CS224N report, Sec. 4.2, for the heads):

=====================  ==================================================  ==========================
type                   heads (first = default)                             objectives (first = default)
=====================  ==================================================  ==========================
classification         ``mlp`` (the report's sentiment head), ``linear``   ``ce``, ``ce-scl``
pair-classification    ``concat`` (the report's paraphrase head),          ``ce``, ``ce-scl``
                       ``joint``
regression, one text   ``mlp``, ``linear``                                 ``mse``
regression, pairs      ``cosine-mlp`` (the report's STS head), ``joint``   ``mse``
                       ``cosine``                                          ``cosine``
=====================  ==================================================  ==========================

Heads:

* ``linear``: dropout + one linear layer on the pooled embedding (BERT's head, Devlin et al. 2019);
* ``mlp``: ``hidden -> hidden/2 -> outputs``, ReLU, dropout 0.1 (the report's sentiment head);
* ``concat``: the two sentences **encoded separately** (``u``, ``v``), ``[u; v] -> hidden -> outputs``
  (the report's paraphrase head, :class:`~contrastfit.methods.simcse.PairConcatHead`);
* ``cosine-mlp``: ``cos(u, v) -> Linear(1, 10) -> ReLU -> Linear(10, 1)`` (the report's STS head,
  :class:`~contrastfit.methods.simcse.CosineRegressionHead`);
* ``cosine``: no parameters; the prediction is ``cos(u, v)`` mapped linearly from [0, 1] onto the
  training labels' [min, max];
* ``joint``: a linear head on the pair encoded jointly (``[CLS] a [SEP] b [SEP]``), as BERT does.

Objectives (each task's loss on its own batches, multiplied by the task's ``weight``):

* ``ce``: cross-entropy;
* ``ce-scl``: ``(1 - lambda) CE + lambda SupCon`` on the features the head reads (Gunel et al. 2021,
  Eq. 1-3; ``lambda`` and ``temperature`` default to ``ce-scl``'s 0.9 and 0.3); the task's batches
  then come from the class-balanced sampler, so that every class in a batch has a positive (pitfall 2);
* ``mse``: mean squared error of the head's output;
* ``cosine``: cosine-similarity regression (Sentence-BERT's regression objective, Reimers & Gurevych
  2019, Sec. 3): the squared error between ``cos(u, v)`` and the label scaled linearly from the
  training labels' [min, max] onto [0, 1].
"""

from __future__ import annotations

import re
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

from ..config import TrainConfig
from ..errors import ConfigError
from ..methods import Hparams, get_method
from ..methods.base import validate_hparams
from ..schema import parse
from ..settings import check_fields, same_as, setting, values_model

TASK_TYPES = ("classification", "pair-classification", "regression")
#: heads that read the two sentences of a pair encoded separately (u, v)
SEPARATE_PAIR_HEADS = ("concat", "cosine-mlp", "cosine")
#: (type, pairs) -> allowed heads, the first being the default
HEADS = {
    ("classification", False): ("mlp", "linear"),
    ("pair-classification", True): ("concat", "joint"),
    ("regression", False): ("mlp", "linear"),
    ("regression", True): ("cosine-mlp", "joint", "cosine"),
}
OBJECTIVES = {"classification": ("ce", "ce-scl"), "pair-classification": ("ce", "ce-scl"), "regression": ("mse", "cosine")}
#: the hyper-parameters each objective reads (ce-scl: the ce-scl method's, declared there)
OBJECTIVE_HPARAMS: dict[str, type[Hparams]] = {"ce": Hparams, "ce-scl": get_method("ce-scl").cls.Hparams,
                                               "mse": Hparams, "cosine": Hparams}
#: the selection metric of a task when none is given: higher is better, comparable across tasks
DEFAULT_METRIC = {"classification": "accuracy", "pair-classification": "accuracy", "regression": "pearson"}
CLASSIFICATION_METRICS = ("accuracy", "f1", "macro_f1", "mcc")
REGRESSION_METRICS = ("pearson", "spearman", "mse")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise ConfigError(f"name must be letters, digits, '_' or '-' (it names the head and metrics), got {name!r}")


@dataclass
class Task:
    """One task of a multi-task run, as the user describes it.

    ``data`` is anything :func:`contrastfit.load_data` takes (a built-in name such as ``mr``, ``boolq``
    or ``vader-tweets``, a local file, a Hub name) with the same column options as ``train``. ``type``,
    ``head`` and ``objective`` default from the data (see the module docstring). ``weight`` multiplies
    the task's loss. ``shots`` / ``train_size`` / ``validation_size`` draw the task's training sample
    and validation subset exactly as ``train`` does (``derive_seed``), from the run's seed. ``batch_size``
    overrides the run's batch size for this task (the report uses 8 / 8 / 32 for STS / SST /
    paraphrase). ``metric`` is the validation metric the task contributes to model selection
    (accuracy, or Pearson's r for regression); ``hparams`` are the objective's (``lambda``,
    ``temperature`` for ``ce-scl``).
    """

    name: str = setting(MISSING, "names the task's head and metrics", check=_check_name)
    data: str = setting(MISSING, "anything load_data takes: a built-in name, a local file, a Hub name")
    type: str | None = setting(None, "the task's type (default: from the data)", choices=TASK_TYPES)
    head: str | None = setting(None, "the task's head (default: the type's first, see HEADS)")
    objective: str | None = setting(None, "the task's objective (default: the type's first)",
                                    choices=tuple(OBJECTIVE_HPARAMS))
    weight: float = setting(1.0, "multiplies the task's loss", gt=0)
    text_column: str | None = same_as(TrainConfig, "text_column")
    text_pair_column: str | None = same_as(TrainConfig, "text_pair_column")
    label_column: str | None = same_as(TrainConfig, "label_column")
    validation_data: str | None = same_as(TrainConfig, "validation_data")
    test_data: str | None = same_as(TrainConfig, "test_data")
    validation_split: float | None = same_as(TrainConfig, "validation_split")
    shots: int | None = same_as(TrainConfig, "shots")
    train_size: int | None = same_as(TrainConfig, "train_size")
    validation_size: int | None = same_as(TrainConfig, "validation_size")
    batch_size: int | None = setting(None, "overrides the run's batch size for this task", ge=1)
    metric: str | None = setting(None, "the validation metric the task contributes to model selection")
    hparams: dict[str, Any] = setting(factory=dict, help="the objective's hyper-parameters")

    @classmethod
    def from_value(cls, value: "Task | dict[str, Any]", where: str = "tasks") -> "Task":
        """A :class:`Task` from itself or from a mapping (a config entry) that its declaration accepts: unknown
        keys, a missing ``name`` or ``data``, a bad value are a one-line :class:`ConfigError` naming ``where``."""
        if isinstance(value, Task):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: a task is a mapping with at least 'name' and 'data', got {value!r}")
        parse(values_model(cls), value, where)  # the keys and values it declares
        return cls(**value)

    def check(self) -> None:
        """What can be checked before loading the data (one-line :class:`ConfigError` otherwise)."""
        where = f"task '{self.name}'"
        try:
            check_fields(self)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if self.shots is not None and self.train_size is not None:
            raise ConfigError(f"{where}: give either shots (per class) or train_size (total), not both")
        if self.hparams and self.objective is None:  # the default objectives (ce, mse, cosine) have none
            raise ConfigError(f"{where}: hparams are the objective's: give the objective too (e.g. objective: ce-scl)")
        if self.objective is not None:
            objective_hparams(self.objective, self.hparams, where)


def objective_hparams(objective: str, given: dict[str, Any], where: str) -> dict[str, Any]:
    """The hyper-parameters of ``objective`` with ``given`` over their defaults, checked against their
    declaration (:data:`OBJECTIVE_HPARAMS`); a one-line :class:`ConfigError` naming ``where`` otherwise."""
    try:
        return validate_hparams(f"objective {objective}", OBJECTIVE_HPARAMS[objective], given)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


@dataclass
class TaskSpec:
    """A task resolved against its data: everything the model needs to build, train and reload the
    task's head (saved in ``contrastfit.json``)."""

    name: str
    type: str
    pairs: bool
    head: str
    objective: str
    weight: float
    label_names: list[str] | None
    metric: str
    hparams: dict[str, float]
    batch_size: int | None = None
    #: [min, max] of the training labels (regression; the ``cosine`` head and objective scale by it)
    label_range: list[float] | None = None

    @property
    def separate(self) -> bool:
        """The head reads the two sentences of a pair encoded separately."""
        return self.pairs and self.head in SEPARATE_PAIR_HEADS

    @property
    def num_outputs(self) -> int:
        return 1 if self.type == "regression" else len(self.label_names or [])

    @property
    def contrastive(self) -> bool:
        return self.objective == "ce-scl"

    @property
    def hp(self) -> Hparams:
        """The objective's hyper-parameters as their declared model (``spec.hp.temperature``)."""
        return OBJECTIVE_HPARAMS[self.objective].model_validate(self.hparams)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TaskSpec":
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


def resolve_task(task: Task, *, label_names: list[str] | None, pairs: bool, data_name: str,
                 label_range: list[float] | None = None) -> TaskSpec:
    """Check ``task`` against its loaded data and fill in the defaults (one-line errors naming the task)."""
    where = f"task '{task.name}'"
    regression = label_names is None
    kind = "regression" if regression else ("pair-classification" if pairs else "classification")
    ttype = task.type or kind
    if ttype == "regression" and not regression:
        raise ConfigError(f"{where}: type regression, but data '{data_name}' has class labels ({', '.join(label_names[:5])})")
    if ttype != "regression" and regression:
        raise ConfigError(f"{where}: type {ttype}, but data '{data_name}' has a numeric (regression) target")
    if ttype == "pair-classification" and not pairs:
        raise ConfigError(f"{where}: type pair-classification needs sentence pairs, but data '{data_name}' has one text "
                          "per row (name the second text's column with text_pair_column)")
    if ttype == "classification" and pairs:
        raise ConfigError(f"{where}: data '{data_name}' holds sentence pairs; use type pair-classification")
    if not regression and len(label_names) < 2:
        raise ConfigError(f"{where}: data '{data_name}' has a single class ({label_names[0]}); a classifier needs two")
    heads = HEADS[(ttype, pairs)]
    objectives = OBJECTIVES[ttype]
    head = task.head or ("cosine" if task.objective == "cosine" and pairs else heads[0])
    if head not in heads:
        shape = "sentence pairs" if pairs else "one text per row"
        raise ConfigError(f"{where}: head {head!r} does not fit a {ttype} task on {shape} (choose from {', '.join(heads)})")
    objective = task.objective or ("cosine" if head == "cosine" else objectives[0])
    if objective not in objectives:
        raise ConfigError(f"{where}: objective {objective!r} does not apply to a {ttype} task "
                          f"(choose from {', '.join(objectives)})")
    if (objective == "cosine") != (head == "cosine"):
        raise ConfigError(f"{where}: the cosine objective and the cosine head go together (sentence pairs, "
                          f"regression); got head {head!r} with objective {objective!r}")
    hparams = objective_hparams(objective, task.hparams, where)
    metric = task.metric or DEFAULT_METRIC[ttype]
    allowed = REGRESSION_METRICS if regression else CLASSIFICATION_METRICS
    if metric not in allowed:
        raise ConfigError(f"{where}: metric {metric!r} is not a {ttype} metric (choose from {', '.join(allowed)})")
    if head == "cosine" and (label_range is None or not label_range[1] > label_range[0]):
        raise ConfigError(f"{where}: the cosine head scales by the training labels' range, but they are all equal")
    return TaskSpec(name=task.name, type=ttype, pairs=pairs, head=head, objective=objective, weight=float(task.weight),
                    label_names=None if regression else list(label_names), metric=metric, hparams=hparams,
                    batch_size=task.batch_size, label_range=label_range)
