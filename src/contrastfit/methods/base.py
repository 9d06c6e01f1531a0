"""What a method is, and the registry that maps CLI names to methods.

A method decides, for one training batch, which forward passes to run (views), which losses to
combine, and which head predicts. It is an ``nn.Module`` living inside the model, so any
parameters it owns (SoftTriple centres, label embeddings, ...) are trained by the optimizer and
saved with the model. Adding a method means one new file in ``contrastfit/methods`` that
subclasses :class:`Method` and registers itself; a *preset* is an existing method under another
name with another paper's defaults (:func:`register_preset`).

A method declares its hyper-parameters once, as a nested model (the way an analysis declares its
``Options``)::

    class Hparams(Hparams):
        temperature: float = hparam(0.3, "SupCon temperature", gt=0, flag="T")

each with its type, default, bounds and help (:func:`hparam`). Everything else derives from that
class: the validation of what a user gives (:func:`resolve_hparams`: names, types, bounds, finiteness,
one line naming the method, the hyper-parameter and the value, :func:`contrastfit.schema.field_error`),
``contrastfit train``'s ``--NAME`` options (the fields declared with ``flag``; every one is also
``--param NAME=VALUE``), an experiment's ``methods[].hparams`` and ``search.space`` checks, ``contrastfit
methods`` and the docs' table of each method's hyper-parameters. Checks that need the data or several
values at once (LaCon's heads dividing the projection width) stay in the method's ``__init__``.

Why a nested pydantic model: it is how every other user-written mapping is declared (an analysis'
``Options``, a protocol's options, :class:`contrastfit.schema.Schema`), so one formatter words every
error, and a method that extends another extends its model (``ce-scl-lr``'s is ``ce-scl``'s plus the
logistic head's). Unlike the other schemas it converts text (the command line gives ``"0.3"``), as
the hand-written coercion it replaces did; the resolved values keep their declared types (an int
stays an int), so run identities do not change. A preset (:func:`register_preset`) keeps a dict of
defaults over its class's, checked by the class's model; the training-set-size defaults
(:meth:`Method.size_defaults`) are checked when the method is built.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar, Mapping, Sequence

import torch
import torch.nn.functional as F
from pydantic import ConfigDict, Field, ValidationError
from torch import nn

from ..errors import ConfigError
from ..heads import build_head
from ..outputs import LABEL_SETS, OutputForm, for_task
from ..schema import Schema, field_error


class Hparams(Schema):
    """Base of a method's hyper-parameters (``Method.Hparams``): unknown names are refused, and a value
    is converted to the declared type where it means the same (the command line gives text: ``"0.3"``
    is 0.3, ``"3"`` is 3, ``"0.1,0.2"`` a tuple), but a non-finite number (``temperature=inf`` would make
    every logit 0) only where a field allows it."""

    model_config = ConfigDict(strict=False, allow_inf_nan=False)


def hparam(default: Any, help: str, *, flag: bool | str = False, **constraints: Any) -> Any:
    """One hyper-parameter: its ``default``, ``help`` (``contrastfit methods``, the docs' table, the
    option's help), its bounds and other constraints (pydantic's ``Field``: ``ge``, ``gt``, ``le``,
    ``lt``, ``min_length``, ``allow_inf_nan``) and ``flag``: True (or the name of its value in
    ``--help``) for an option of its own in ``contrastfit train``, ``--name-with-dashes``."""
    return Field(default, description=help, json_schema_extra={"flag": flag} if flag else None, **constraints)


def comma_separated(value: Any) -> Any:
    """``"0.0,0.1"`` -> ``["0.0", "0.1"]`` (the command line's spelling of a tuple); anything else as is."""
    return [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value


class HeadStage(Hparams):
    """Stage 2 of a two-stage method (frozen encoder, head trained on cached features)."""

    head_epochs: int = hparam(100, "stage 2: epochs of AdamW over the cached features (the best on "
                              "validation is kept)", ge=1)
    head_learning_rate: float = hparam(1e-3, "stage 2: AdamW's learning rate", gt=0)
    head_batch_size: int = hparam(32, "stage 2: batch size", ge=1)


class LogisticHead(Hparams):
    """A head fitted as a logistic regression (``head_solver = "logistic"``)."""

    head_C: float = hparam(1.0, "stage 2: inverse regularisation strength of the logistic regression "
                           "(scikit-learn's default, SetFit's head)", gt=0)
    label_prior: float = hparam(0.0, "stage 2: the label names (as text, encoded like the training texts) join the "
                                "logistic regression's data, each weighing as much as this many times its "
                                "class's mean number of examples (0: not used)", ge=0)

    @classmethod
    def of(cls, method: "Method") -> "LogisticHead":
        """The logistic head's settings of ``method``: its own when it declares them, else the declared
        defaults (a method trained with ``--refit-head``)."""
        return method.hp if isinstance(method.hp, cls) else cls()


@dataclass
class LossOutput:
    """What :meth:`Method.training_loss` returns: the objective, the logits of the head when the pass
    computed them, and the unweighted terms by name (logged as ``loss_<name>``)."""

    loss: torch.Tensor
    logits: torch.Tensor | None = None
    parts: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class ParamGroup:
    """Parameters of the model that train with their own optimiser settings (one optimiser
    parameter group).

    ``params``: the parameter objects themselves (e.g. ``[self.soft_triple.centers]``); ``lr``: their
    learning rate; ``weight_decay``: theirs, or None for the Trainer's rule (``--weight-decay`` for
    weight matrices, 0 for biases and LayerNorm); ``name``: what the optimiser group is called (in
    logs and the optimiser's state). Every other trainable parameter uses the main settings.
    """

    name: str
    params: Sequence[nn.Parameter]
    lr: float
    weight_decay: float | None = None

    def __post_init__(self):
        self.params = list(self.params)
        if not self.params:
            raise ValueError(f"parameter group '{self.name}' holds no parameters")
        if not self.lr > 0:
            raise ValueError(f"parameter group '{self.name}': lr must be > 0, got {self.lr}")
        if self.weight_decay is not None and self.weight_decay < 0:
            raise ValueError(f"parameter group '{self.name}': weight_decay must be >= 0, got {self.weight_decay}")


class Method(nn.Module):
    """Base class: cross-entropy (or MSE for regression) on a linear head over the pooled embedding.

    Subclasses set ``name``, ``Hparams`` (every hyper-parameter the method reads, with the paper's
    value: see the module docstring), ``reference`` and override :meth:`training_loss`.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    reference: ClassVar[str] = ""
    Hparams: ClassVar[type[Hparams]] = Hparams
    #: The loss needs in-batch positives (the default ``--sampler balanced`` gives them); training such
    #: a method with ``--sampler random`` warns.
    contrastive: ClassVar[bool] = False
    #: The loss contrasts each row with the other rows of its batch as negatives (SimCSE's InfoNCE):
    #: like a contrastive method's, its term is 0 at every step with a batch of one, which is refused
    #: (:func:`contrastfit.shapes.check_batch_size`).
    in_batch_negatives: ClassVar[bool] = False
    head_kind: ClassVar[str] = "linear"
    #: Two stages (SupCL-Seq, SimCSE, DiffCSE): stage 1 trains the encoder with
    #: :meth:`training_loss` on the Trainer; stage 2 freezes the encoder, encodes the training set
    #: once and trains the head on the cached features (:func:`contrastfit.head_stage.train_head`).
    #: Such methods' ``Hparams`` subclass :class:`HeadStage`.
    frozen_head_stage: ClassVar[bool] = False
    #: How stage 2 fits the head: ``"adamw"`` (epochs of AdamW on the task loss) or ``"logistic"``
    #: (scikit-learn's logistic regression copied into the linear head, as SetFit does).
    head_solver: ClassVar[str] = "adamw"
    #: False for methods that never update the encoder (the linear probe): no Trainer stage.
    trains_encoder: ClassVar[bool] = True
    #: Training settings of the method's own recipe (``learning_rate``, ``min_steps``, ``wise_ft``), used where
    #: the user gives none (:func:`contrastfit.trainer.with_method_defaults`).
    training_defaults: ClassVar[dict[str, Any]] = {}
    #: Gradient caching (``--gradient-cache``, :mod:`contrastfit.gradcache`): True when the loss
    #: reads the encoder only through ``model.encoder(...)`` calls (each call is then embedded in
    #: chunks and replayed, with its dropout masks); otherwise a one-line reason why not, with which
    #: a run asking for caching is refused.
    gradient_cache: ClassVar[bool | str] = True
    #: Cross-batch memory (``--memory-size``, :mod:`contrastfit.memory`): True when the loss has a
    #: SupCon-style term that contrasts with the memory's rows (``self.memory``, set while training)
    #: as extra candidates and enqueues what it contrasted; other methods are refused with a one-line
    #: error naming them.
    cross_batch_memory: ClassVar[bool] = False

    def __init__(self, num_labels: int, hidden_size: int, task: str = "classification", **hparams: Any):
        super().__init__()
        if task not in ("classification", "regression"):
            raise ConfigError(f"unknown task '{task}'")
        #: the hyper-parameters, typed, as the method reads them: ``self.hp.temperature``, ``self.hp.lambda_``
        self.hp = self.Hparams.model_validate(validate_hparams(f"method '{self.name}'", self.Hparams, hparams))
        #: a :class:`contrastfit.memory.CrossBatchMemory` while training with ``--memory-size``, else None
        self.memory = None
        self.num_labels = num_labels
        self.hidden_size = hidden_size
        self.task = task

    # -- heads and prediction ------------------------------------------------------------------
    @property
    def num_outputs(self) -> int:
        return 1 if self.task == "regression" else self.num_labels

    @property
    def outputs(self) -> OutputForm:
        """What the logits mean (:mod:`contrastfit.outputs`): a value for regression, else one class."""
        return for_task(self.task)

    def build_head(self) -> nn.Module:
        return build_head(self.head_kind, self.hidden_size, self.num_outputs)

    def head_features(self, model: nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """What the head reads (default: the pooled sentence embedding); stage 2 caches these."""
        return model.encoder(**inputs).pooled

    def embedding(self, model: nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The sentence embedding analyses see (``model.embed``): the pooled embedding by default;
        methods that compare in another space (LaCon's projection) return that."""
        return model.encoder(**inputs).pooled

    def anchors(self, model: nn.Module) -> torch.Tensor | None:
        """Class anchors in the :meth:`embedding` space, drawn with the t-SNE (LaCon's label
        embeddings); None for methods without them."""
        return None

    def predict_logits(self, model: nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits (or the regression value, shape (batch, 1)) used at inference."""
        return model.head(self.head_features(model, inputs))

    @classmethod
    def size_defaults(cls, n_train: int) -> dict[str, Any]:
        """Paper defaults that depend on the training-set size (Sosnowski et al. tune per N).
        Applied under the user's own values; empty for most methods."""
        return {}

    @classmethod
    def training_steps(cls, train_labels, batch_size: int) -> int | None:
        """The number of optimisation steps the method's own recipe takes for this training set
        (e.g. SetFit's one epoch over its sampled pairs), or None for the generic rule (3 epochs,
        at least ``min_steps`` steps). ``--epochs`` overrides it."""
        return None

    # -- training ------------------------------------------------------------------------------
    def prepare(self, model: nn.Module, train_dataset) -> None:
        """Called once before training with the tokenised training set (columns ``input_ids``,
        ``attention_mask``, ``labels``, ...), e.g. to build DiffCSE's corpus-unigram generator or
        to initialise label embeddings. Default: nothing."""

    def param_groups(self, model: nn.Module) -> list[ParamGroup]:
        """Parameters of ``model`` (the method's own, or its head's) that train with their own
        learning rate, e.g. SoftTriple's centres at 1e-2 (pitfall 3). Default: none; everything
        trains with the main settings."""
        return []

    def task_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy (Gunel Eq. 2, multi-class form), or MSE for a regression target."""
        if self.task == "regression":
            return F.mse_loss(logits.squeeze(-1).float(), labels.float())
        return F.cross_entropy(logits.float(), labels.long())

    def training_loss(self, model: nn.Module, inputs: dict[str, torch.Tensor], labels: torch.Tensor) -> LossOutput:
        raise NotImplementedError

    @property
    def hparams(self) -> dict[str, Any]:
        """The hyper-parameters by their names (``lambda``), as the run's record and the saved model keep
        them: a copy of :attr:`hp`, the one the method reads."""
        return self.hp.model_dump(by_alias=True)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.hparams.items())


class NormalizedFeaturesMethod(Method):
    """A method whose head is a logistic regression on the L2-normalised pooled embedding (the linear
    probe, SetFit, the default ``ce-scl-lr``), fitted after the encoder stage; needs class labels and
    ``head_C`` (:class:`LogisticHead`)."""

    frozen_head_stage = True
    head_solver = "logistic"

    def __init__(self, num_labels, hidden_size, task="classification", **hparams):
        super().__init__(num_labels, hidden_size, task, **hparams)
        if task != "classification":
            raise ConfigError(f"{self.name} needs class labels (its head is a logistic regression); use 'ce' for a regression target")

    def head_features(self, model, inputs):
        return F.normalize(model.encoder(**inputs).pooled.float(), p=2, dim=-1)

    # -- label names as anchors ----------------------------------------------------------------
    #: the tokenised label texts (C rows), set by :meth:`prepare` when the label names may be used
    label_inputs: dict[str, torch.Tensor] | None = None

    def prepare(self, model, train_dataset) -> None:
        super().prepare(model, train_dataset)
        self.label_inputs = None
        descriptions = model.info.label_descriptions  # --label-descriptions
        self.anchor_note = label_anchor_problem(model.label_names, train_dataset, descriptions)
        if not self.uses_label_names():
            return
        if self.anchor_note is not None:
            warnings.warn(f"{self.name}: the label names are not used ({self.anchor_note})", stacklevel=2)
            return
        texts = [descriptions.get(str(n)) or label_text(n) for n in model.label_names]
        self.label_inputs = dict(model.tokenizer(texts, padding=True, return_tensors="pt"))

    def uses_label_names(self) -> bool:
        """Whether the run encodes the label names (as anchors or as a prior of the head)."""
        return getattr(self.hp, "label_prior", 0) > 0 or getattr(self.hp, "label_anchors", False)

    def label_features(self, model) -> torch.Tensor | None:
        """The head features of the label texts (C, d), or None when label names are not used."""
        if self.label_inputs is None:
            return None
        inputs = {k: v.to(model.device) for k, v in self.label_inputs.items()}
        return self.head_features(model, inputs)



_CODE = re.compile(r"^[A-Z0-9_.-]{1,5}$|^[0-9.+-]+$")


def label_text(name: str) -> str:
    """The text a label name is encoded as: ``Social_Preventive_Medicine`` -> ``social preventive medicine``."""
    return re.sub(r"[_\s]+", " ", str(name)).strip().lower()


def label_anchor_problem(label_names, train_dataset, descriptions: Mapping[str, str] | None = None) -> str | None:
    """Why the label names cannot serve as anchors, or None: most names must be words (not codes such
    as ``ABBR`` or ``0``) or have a description (``descriptions``: label -> text, from
    ``--label-descriptions``), and the texts single (a pair's label, e.g. BoolQ's yes/no, says nothing a
    text alone is like)."""
    if not label_names:
        return "no label names"
    described = set(descriptions or ())
    codes = [n for n in label_names
             if str(n) not in described and (_CODE.match(str(n)) or len(label_text(n)) < 2)]
    if len(codes) * 2 > len(label_names):
        return f"label names look like codes ({', '.join(map(str, codes[:3]))})"
    if "token_type_ids" in train_dataset.column_names and any(1 in row for row in train_dataset["token_type_ids"][:50]):
        return "text pairs"
    return None


def validate_hparams(owner: str, model: type[Hparams], given: Mapping[str, Any]) -> dict[str, Any]:
    """``model``'s defaults updated with ``given`` (None: the default), as the declared types; an unknown
    name or a value the declaration refuses is a one-line :class:`ConfigError` naming ``owner`` (e.g.
    ``method 'ce-scl'``)."""
    names = [f.alias or n for n, f in model.model_fields.items()]  # `lambda`, a Python keyword, is an alias
    unknown = sorted(set(given) - set(names))
    if unknown:
        known = ", ".join(sorted(names)) or "none"
        raise ConfigError(f"{owner} has no hyper-parameter {', '.join(map(repr, unknown))} (it has: {known})")
    try:
        return model.model_validate({k: v for k, v in given.items() if v is not None}).model_dump(by_alias=True)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        raise ConfigError(f"{owner}: {field_error(model, error)}") from None


def resolve_hparams(method: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The hyper-parameters of the registered ``method`` (a preset's defaults included) with ``given``
    over its defaults, checked against the method's ``Hparams`` (:func:`validate_hparams`)."""
    return get_method(method).resolve(given)


@dataclass(frozen=True)
class MethodSpec:
    """A registered name: the method class and its defaults (the class's ``Hparams`` defaults, or a
    preset's over them)."""

    name: str
    cls: type[Method]
    defaults: dict[str, Any]
    description: str
    reference: str
    size_table: Callable[[int], dict[str, Any]] | None = None
    #: the method's form for label sets (``--multi-label``), declared in its file with
    #: :func:`register_label_sets`; None: the method takes one label per text only
    label_sets: type[Method] | None = None

    def defaults_for(self, n_train: int | None) -> dict[str, Any]:
        """The defaults, with the paper's training-set-size-dependent values for ``n_train``."""
        if n_train is None:
            return dict(self.defaults)
        sized = self.size_table(n_train) if self.size_table else self.cls.size_defaults(n_train)
        return {**self.defaults, **sized}

    def resolve(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """This name's defaults with ``given`` over them (None: the default), checked against the class's
        ``Hparams`` (:func:`validate_hparams`)."""
        given = {k: v for k, v in given.items() if v is not None}
        return validate_hparams(f"method '{self.name}'", self.cls.Hparams, {**self.defaults, **given})

    def create(self, num_labels: int, hidden_size: int, task: str = "classification", **hparams: Any) -> Method:
        method = self.cls(num_labels, hidden_size, task, **self.resolve(hparams))
        method.registered_name = self.name
        return method


_REGISTRY: dict[str, MethodSpec] = {}


def register_method(cls: type[Method]) -> type[Method]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    if not cls.name or cls.name in _REGISTRY:
        raise RuntimeError(f"method name {cls.name!r} is empty or taken")
    if not (isinstance(cls.Hparams, type) and issubclass(cls.Hparams, Hparams)):
        raise RuntimeError(f"method {cls.name!r}: Hparams must subclass contrastfit.methods.base.Hparams")
    _REGISTRY[cls.name] = MethodSpec(cls.name, cls, cls.Hparams().model_dump(by_alias=True), cls.description, cls.reference)
    return cls


def register_label_sets(name: str) -> Callable[[type[Method]], type[Method]]:
    """Class decorator, in the file of the method registered as ``name``: ``cls`` is that method's form
    for label sets (``--multi-label``; :class:`LabelSetsLoss` gives it the task loss of label sets)."""
    def register(cls: type[Method]) -> type[Method]:
        spec = _REGISTRY[name]
        if spec.label_sets is not None:
            raise RuntimeError(f"method {name!r} already has a form for label sets")
        _REGISTRY[name] = replace(spec, label_sets=cls)
        return cls
    return register


def register_preset(name: str, base: str, defaults: dict[str, Any], description: str, reference: str,
                    size_table: Callable[[int], dict[str, Any]] | None = None) -> None:
    """Register ``base`` under ``name`` with other default hyper-parameters (and, optionally, other
    training-set-size-dependent defaults)."""
    spec = _REGISTRY[base]
    merged = validate_hparams(f"method '{name}'", spec.cls.Hparams, {**spec.defaults, **defaults})  # the preset itself
    _REGISTRY[name] = MethodSpec(name, spec.cls, merged, description, reference, size_table)


def get_method(name: str) -> MethodSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown method '{name}' (available: {', '.join(sorted(_REGISTRY))})") from None


def available_methods() -> dict[str, MethodSpec]:
    return dict(sorted(_REGISTRY.items()))


# -- label sets (``--multi-label``): each method's form is declared in its own file (register_label_sets)

#: What ``--multi-label`` trains where no method is given.
DEFAULT_MULTILABEL_METHOD = "ce-scl-lr"


class LabelSetsLoss:
    """The task loss of label sets, mixed into a method's form for them: **BCE with logits**, averaged
    over texts and labels (each label an independent yes/no, read at inference as ``sigmoid(logit)``
    against the label's threshold); labels are (batch, labels) multi-hot floats. Cross-batch memory is
    not supported (its queue holds one label per row)."""

    multi_label = True
    cross_batch_memory = False
    outputs = LABEL_SETS  # each label's sigmoid against its threshold

    def task_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


def multilabel_methods() -> dict[str, type[Method]]:
    """Every registered method that has a form for label sets: name -> that form."""
    return {name: spec.label_sets for name, spec in sorted(_REGISTRY.items()) if spec.label_sets is not None}


def check_multilabel_method(name: str | None) -> str:
    """``name`` (default :data:`DEFAULT_MULTILABEL_METHOD`) where it has a form for label sets, else a
    one-line :class:`ConfigError` naming those that do."""
    name = name or DEFAULT_MULTILABEL_METHOD
    if get_method(name).label_sets is None:
        raise ConfigError(f"method '{name}' has no multi-label form; with --multi-label use one of "
                          f"{', '.join(multilabel_methods())} (default {DEFAULT_MULTILABEL_METHOD})")
    return name


def label_name_hparams(name: str) -> dict[str, Any]:
    """The hyper-parameters of method ``name`` that use the label names, at the value that turns them
    off: the multi-label forms' defaults (turned on only when given)."""
    defaults = get_method(name).defaults
    return {k: v for k, v in (("label_prior", 0.0), ("label_anchors", False)) if k in defaults}


def create_multilabel_method(name: str, num_labels: int, hidden_size: int, **hparams: Any) -> Method:
    """The form for label sets of method ``name``: the single-label method's defaults with the label
    names off (:func:`label_name_hparams`), under ``hparams``."""
    spec = get_method(check_multilabel_method(name))
    given = {k: v for k, v in hparams.items() if v is not None}
    method = spec.label_sets(num_labels, hidden_size, "classification",
                             **{**spec.defaults, **label_name_hparams(spec.name), **given})
    method.registered_name = spec.name
    return method

