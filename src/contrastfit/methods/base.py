"""What a method is, and the registry that maps CLI names to methods.

A method decides, for one training batch, which forward passes to run (views), which losses to
combine, and which head predicts. It is an ``nn.Module`` living inside the model, so any
parameters it owns (SoftTriple centres, label embeddings, ...) are trained by the optimizer and
saved with the model. Adding a method means one new file in ``contrastfit/methods`` that
subclasses :class:`Method` and registers itself; a *preset* is an existing method under another
name with another paper's defaults (e.g. ``ce-supcon`` is ``ce-scl`` with Sosnowski et al.'s
values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from ..heads import build_head


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

    Subclasses set ``name``, ``defaults`` (every hyper-parameter the method reads, with the paper's
    value), ``reference`` and override :meth:`training_loss`.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    reference: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}
    #: The loss needs in-batch positives (the default ``--sampler balanced`` gives them); training such
    #: a method with ``--sampler random`` warns.
    contrastive: ClassVar[bool] = False
    #: The loss contrasts each row with the other rows of its batch as negatives (SimCSE's InfoNCE):
    #: like a contrastive method's, its term is 0 at every step with a batch of one, which is refused
    #: (:func:`contrastfit.training.check_batch_size`).
    in_batch_negatives: ClassVar[bool] = False
    #: Float hyper-parameters that may take a non-finite value, and which (e.g. SimCSE's
    #: ``hard_negative_weight`` of -inf); every other non-finite value is refused (:func:`resolve_hparams`).
    non_finite_ok: ClassVar[dict[str, tuple[float, ...]]] = {}
    head_kind: ClassVar[str] = "linear"
    #: Two stages (SupCL-Seq, SimCSE, DiffCSE): stage 1 trains the encoder with
    #: :meth:`training_loss` on the Trainer; stage 2 freezes the encoder, encodes the training set
    #: once and trains the head on the cached features (:func:`contrastfit.training.train_head`).
    #: Such methods include :data:`HEAD_STAGE_DEFAULTS` in their ``defaults``.
    frozen_head_stage: ClassVar[bool] = False
    #: How stage 2 fits the head: ``"adamw"`` (epochs of AdamW on the task loss) or ``"logistic"``
    #: (scikit-learn's logistic regression copied into the linear head, as SetFit does).
    head_solver: ClassVar[str] = "adamw"
    #: False for methods that never update the encoder (the linear probe): no Trainer stage.
    trains_encoder: ClassVar[bool] = True
    #: Training settings of the method's own recipe (``learning_rate``, ``min_steps``), used where
    #: the user gives none (:func:`contrastfit.training.with_method_defaults`).
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
        self.hparams = resolve_hparams(self.name, self.defaults, hparams, type(self).non_finite_ok)
        #: a :class:`contrastfit.memory.CrossBatchMemory` while training with ``--memory-size``, else None
        self.memory = None
        self.num_labels = num_labels
        self.hidden_size = hidden_size
        self.task = task

    def check_hparam(self, key: str, *, gt: float | None = None, ge: float | None = None,
                     le: float | None = None, note: str = "") -> None:
        """One-line :class:`ConfigError` unless ``self.hparams[key]`` is in range: ``gt=0`` (> 0),
        ``ge=1`` (>= 1), ``ge=0, le=1`` (in [0, 1]), ``gt=0, le=1`` (in (0, 1]); ``note`` is added
        in parentheses (e.g. what 0 means)."""
        value = self.hparams[key]
        low = gt if gt is not None else ge
        ok = (math.isfinite(value) and (gt is None or value > gt) and (ge is None or value >= ge)
              and (le is None or value <= le))
        if le is None:
            expected = f"> {gt}" if gt is not None else f">= {ge}"
        else:
            expected = f"in {'(' if gt is not None else '['}{low}, {le}]"
        if not ok:
            raise ConfigError(f"{self.name}: {key} must be {expected}{f' ({note})' if note else ''}, got {value}")

    # -- heads and prediction ------------------------------------------------------------------
    @property
    def num_outputs(self) -> int:
        return 1 if self.task == "regression" else self.num_labels

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

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.hparams.items())


class NormalizedFeaturesMethod(Method):
    """A method whose head is a logistic regression on the L2-normalised pooled embedding (the linear
    probe, SetFit, the default ``ce-scl-lr``), fitted after the encoder stage; needs class labels and
    ``head_C``."""

    frozen_head_stage = True
    head_solver = "logistic"

    def __init__(self, num_labels, hidden_size, task="classification", **hparams):
        super().__init__(num_labels, hidden_size, task, **hparams)
        if task != "classification":
            raise ConfigError(f"{self.name} needs class labels (its head is a logistic regression); use 'ce' for a regression target")
        self.check_hparam("head_C", gt=0)

    def head_features(self, model, inputs):
        return F.normalize(model.encoder(**inputs).pooled.float(), p=2, dim=-1)



def resolve_hparams(method: str, defaults: dict[str, Any], given: dict[str, Any],
                    non_finite_ok: dict[str, tuple[float, ...]] | None = None) -> dict[str, Any]:
    """Defaults updated with ``given``; unknown names, values of the wrong type and non-finite numbers
    (NaN, inf, -inf: ``temperature=inf`` would make every logit 0) are refused with one line, except
    the values ``non_finite_ok`` allows by name (default: the registered method's
    :attr:`Method.non_finite_ok`)."""
    if non_finite_ok is None:
        spec = _REGISTRY.get(method)
        non_finite_ok = spec.cls.non_finite_ok if spec is not None else {}
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        known = ", ".join(sorted(defaults)) or "none"
        raise ConfigError(f"method '{method}' has no hyper-parameter {', '.join(map(repr, unknown))} (it has: {known})")
    out = dict(defaults)
    for key, value in given.items():
        if value is None:
            continue
        default = defaults[key]
        try:
            if isinstance(default, tuple):
                items = value.split(",") if isinstance(value, str) else list(value)
                kind = type(default[0]) if default else float
                value = tuple(kind(v.strip() if isinstance(v, str) else v) for v in items if str(v).strip())
                if not value:
                    raise ValueError
            elif isinstance(default, str):
                value = str(value)
            elif isinstance(default, bool):
                value = value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")
            elif isinstance(default, int):
                if float(value) != int(float(value)):
                    raise ValueError
                value = int(float(value))
            elif isinstance(default, float):
                value = float(value)
        except (TypeError, ValueError, OverflowError):
            kind = "comma-separated list" if isinstance(default, tuple) else type(default).__name__
            raise ConfigError(f"method '{method}': hyper-parameter '{key}' must be a {kind}, got {value!r}") from None
        allowed = non_finite_ok.get(key, ())
        for number in value if isinstance(value, tuple) else (value,):
            if isinstance(number, float) and not math.isfinite(number) and number not in allowed:
                also = f" (or {', '.join(map(str, allowed))})" if allowed else ""
                raise ConfigError(f"method '{method}': hyper-parameter '{key}' must be a finite number{also}, "
                                  f"got {number}")
        out[key] = value
    return out


#: Stage-2 hyper-parameters of two-stage methods (frozen encoder, head on cached features).
HEAD_STAGE_DEFAULTS: dict[str, Any] = {"head_epochs": 100, "head_learning_rate": 1e-3, "head_batch_size": 32}
#: Stage-2 hyper-parameter of methods whose head is a logistic regression (``head_solver = "logistic"``):
#: the inverse regularisation strength, scikit-learn's default (SetFit's head).
LOGISTIC_HEAD_DEFAULTS: dict[str, Any] = {"head_C": 1.0}


@dataclass(frozen=True)
class MethodSpec:
    name: str
    cls: type[Method]
    defaults: dict[str, Any]
    description: str
    reference: str
    size_table: Callable[[int], dict[str, Any]] | None = None

    def defaults_for(self, n_train: int | None) -> dict[str, Any]:
        """The defaults, with the paper's training-set-size-dependent values for ``n_train``."""
        if n_train is None:
            return dict(self.defaults)
        sized = self.size_table(n_train) if self.size_table else self.cls.size_defaults(n_train)
        return {**self.defaults, **sized}

    def create(self, num_labels: int, hidden_size: int, task: str = "classification", **hparams: Any) -> Method:
        merged = {**self.defaults, **{k: v for k, v in hparams.items() if v is not None}}
        method = self.cls(num_labels, hidden_size, task, **merged)
        method.registered_name = self.name
        return method


_REGISTRY: dict[str, MethodSpec] = {}


def register_method(cls: type[Method]) -> type[Method]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    if not cls.name or cls.name in _REGISTRY:
        raise RuntimeError(f"method name {cls.name!r} is empty or taken")
    _REGISTRY[cls.name] = MethodSpec(cls.name, cls, dict(cls.defaults), cls.description, cls.reference)
    return cls


def register_preset(name: str, base: str, defaults: dict[str, Any], description: str, reference: str,
                    size_table: Callable[[int], dict[str, Any]] | None = None) -> None:
    """Register ``base`` under ``name`` with other default hyper-parameters (and, optionally, other
    training-set-size-dependent defaults)."""
    spec = _REGISTRY[base]
    resolve_hparams(name, spec.defaults, defaults)  # validate the preset itself
    _REGISTRY[name] = MethodSpec(name, spec.cls, {**spec.defaults, **defaults}, description, reference, size_table)


def get_method(name: str) -> MethodSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown method '{name}' (available: {', '.join(sorted(_REGISTRY))})") from None


def available_methods() -> dict[str, MethodSpec]:
    return dict(sorted(_REGISTRY.items()))
