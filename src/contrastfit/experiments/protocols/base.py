"""What a protocol is, the registry that the config schema and the plan read, and the helpers the
protocols share.

A protocol is one file in this package: a function that takes the full
:class:`~contrastfit.data.TextData` and its options and returns a list of :class:`ProtocolRun`, and
the schema of those options (its ``protocol:`` mapping in a config), registered together::

    class Halves(Sampled):                    # the options: the function's keyword arguments, with its
        kind: Literal["halves"]               # defaults (Sampled: shots, train_size, samples; all: seed)
        order = 90                            # where the kind is listed (smaller first)

    @register_protocol(Halves)
    def halves(data, shots=None, train_size=None, samples=1, validation_size=None, seed=0):
        ...                                   # -> list[ProtocolRun]

The runner calls ``function(data, **protocol.options())`` (``validation_size``, the experiment's own
key, is passed where the function takes it); ``tests/test_experiment_schema.py`` checks that every
registered options model declares its function's keyword arguments and defaults.

Multi-label data (``data_options: {multi_label: true}``): a protocol that runs on label sets says so
with ``no_multi_label = None``; every other one (the default, so a new protocol is refused until it
is written for label sets) names why not, and the config is refused in one line when it is read. The
shared helpers draw from label sets themselves: :func:`draw_train` takes at least K texts per label
(:func:`~contrastfit.data.multilabel.sample_per_label`) or a plain random subset, and
:func:`validation_subset` a plain random subset, with the single-label draws' seeds.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import datasets
import numpy as np
from pydantic import Field, NonNegativeInt, PositiveInt, model_validator

from ...data.loading import LABEL, TextData
from ...data.multilabel import is_multilabel, random_subset, sample_per_label
from ...data.noise import check_rate
from ...data.sampling import derive_seed, sample_per_class, sample_stratified
from ...errors import ConfigError, DataError
from ...schema import Schema
from ..fields import Counts, invalid

__all__ = ["ProtocolOptions", "ProtocolRun", "Sampled", "one_sample_size", "register_protocol", "registered_protocols"]


@dataclass
class ProtocolRun:
    """One point of a protocol: the data a run trains, validates and tests on."""

    setting: str                 # table label, e.g. "shots=16", "N=100", "fold=2/5", "rho=10"
    sample: int                  # index of the training-set sample (or fold) within the setting
    params: dict[str, Any]       # the setting's values, for the table
    data: TextData               # train / validation / test of this run
    sampling: dict[str, Any] = field(default_factory=dict)  # how it was drawn (provenance)


# ---------------------------------------------------------------------------------------------
# Options and the registry
# ---------------------------------------------------------------------------------------------

class ProtocolOptions(Schema):
    """Base of a protocol's options: ``kind`` (a ``Literal`` of its one name) and the keyword arguments
    of its function; every protocol has a sampling ``seed``."""

    seed: NonNegativeInt = Field(0, description="base seed of the protocol's draws (each sample has its own stream)")
    #: where the kind is listed (smaller first)
    order: ClassVar[int] = 1000
    #: why the protocol does not run on multi-label data (``data_options.multi_label``), in a few words
    #: for the one-line refusal; None where it does (its function draws with the helpers below)
    no_multi_label: ClassVar[str | None] = "it was not written for label sets"
    #: the function that draws the runs (set by :func:`register_protocol`)
    function: ClassVar[Callable[..., list[ProtocolRun]]]

    def options(self) -> dict[str, Any]:
        """The options given, as keyword arguments of the protocol's function."""
        return self.model_dump(exclude_unset=True, exclude={"kind", "source"})


def one_sample_size(shots: Any, train_size: Any) -> None:
    if shots is not None and train_size is not None:
        raise invalid("give either shots (per class) or train_size (in total), not both")


class Sampled(ProtocolOptions):
    """Few-shot training sets: ``shots`` per class or ``train_size`` in total (one value or a list),
    ``samples`` of each; neither: the whole training split."""

    shots: Counts | None = Field(None, description="examples per class (K-shot); one value or a list")
    train_size: Counts | None = Field(None, description="examples in total, stratified by class; one value or a list")
    samples: PositiveInt = Field(1, description="training-set samples drawn per setting")

    @model_validator(mode="after")
    def _shots_or_train_size(self):
        one_sample_size(self.shots, self.train_size)
        return self


_REGISTRY: dict[str, type[ProtocolOptions]] = {}


def register_protocol(options: type[ProtocolOptions]) -> Callable[[Callable], Callable]:
    """Function decorator: register the function as the protocol whose options are ``options``, under
    the one name of its ``kind``."""
    if not (isinstance(options, type) and issubclass(options, ProtocolOptions)):
        raise TypeError(f"register_protocol needs a ProtocolOptions subclass, got {options!r}")
    kinds = typing.get_args(options.model_fields["kind"].annotation) if "kind" in options.model_fields else ()
    if len(kinds) != 1 or kinds[0] in _REGISTRY:
        raise RuntimeError(f"protocol {options.__name__}: kind must be a Literal of one name not taken, got {kinds!r}")

    def register(function: Callable) -> Callable:
        options.function = staticmethod(function)
        _REGISTRY[kinds[0]] = options
        return function

    return register


def registered_protocols() -> dict[str, type[ProtocolOptions]]:
    """The options model of every registered protocol by kind, in ``order``."""
    return dict(sorted(_REGISTRY.items(), key=lambda item: (item[1].order, item[0])))


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------

def check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"the protocol seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def check_samples(samples: Any) -> int:
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1:
        raise ConfigError(f"samples must be a positive integer, got {samples!r}")
    return int(samples)


def int_values(value: Any, what: str, minimum: int = 1) -> list[int]:
    """An int or a sequence of ints as a list, each checked to be >= ``minimum``."""
    given = [value] if isinstance(value, (int, np.integer)) else list(value)
    if not given:
        raise ConfigError(f"{what} needs at least one value")
    out = []
    for v in given:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
            raise ConfigError(f"{what} values must be integers >= {minimum}, got {v!r}")
        out.append(int(v))
    return out


def rate_values(value: Any, what: str) -> list[float]:
    given = [value] if isinstance(value, (int, float, np.integer, np.floating)) else list(value)
    if not given:
        raise ConfigError(f"{what} needs at least one value")
    return [check_rate(v, what) for v in given]


def require_classes(data: TextData, protocol: str) -> None:
    if data.label_names is None:
        raise ConfigError(f"the {protocol} protocol needs class labels; '{data.name}' has a regression target")


def derived(data: TextData, train: datasets.Dataset, validation: datasets.Dataset | None,
            test: datasets.Dataset | None, label_names: list[str] | None = None) -> TextData:
    return TextData(name=data.name, train=train, validation=validation, test=test,
                    label_names=list(data.label_names) if label_names is None and data.label_names is not None
                    else label_names, source=dict(data.source), label_type=data.label_type)


def validation_subset(data: TextData, validation_size: int | None, seed: int) -> tuple[datasets.Dataset | None, dict[str, Any]]:
    """The validation split, or a stratified subset of it drawn once from ``seed`` (of label sets: a
    plain random subset, as ``train --multi-label --validation-size`` draws it)."""
    validation = data.validation
    if validation_size is None:
        return validation, {"validation": "split", "validation_rows": None if validation is None else len(validation)}
    int_values(validation_size, "validation_size")
    if validation is None:
        raise DataError(f"data set '{data.name}' has no validation split to take validation_size={validation_size} from")
    vseed = derive_seed(seed, "validation")
    if is_multilabel(data):
        subset = random_subset(validation, int(validation_size), vseed)
        return subset, {"validation": "random subset", "validation_size": int(validation_size),
                        "validation_seed": vseed, "validation_rows": len(subset)}
    subset = sample_stratified(validation, int(validation_size), vseed)
    return subset, {"validation": "stratified subset", "validation_size": int(validation_size),
                    "validation_seed": vseed, "validation_rows": len(subset)}


def few_shot_settings(shots: Any, train_size: Any, data: TextData) -> list[tuple[str, dict[str, Any]]]:
    """(label, params) per few-shot value; ``[("full", {})]`` without shots / train_size."""
    if shots is not None and train_size is not None:
        raise ConfigError("give either shots (per class) or train_size (in total), not both")
    if shots is not None:
        if data.label_names is None:
            raise ConfigError(f"shots (per class) needs class labels; '{data.name}' has a regression target; use train_size")
        return [(f"shots={k}", {"shots": k}) for k in int_values(shots, "shots")]
    if train_size is not None:
        return [(f"N={n}", {"train_size": n}) for n in int_values(train_size, "train_size")]
    return [("full", {})]


def draw_train(data: TextData, train: datasets.Dataset, params: dict[str, Any], sample_seed: int) -> tuple[datasets.Dataset, dict]:
    """The training sample of one run: ``shots`` per class (of label sets: at least K texts per label),
    ``train_size`` in total (stratified; of label sets: a plain random subset), or all of ``train``."""
    if is_multilabel(data) and "shots" in params:
        return (sample_per_label(train, params["shots"], sample_seed, data.label_names),
                {"method": "per-label", "shots": params["shots"], "shots_rule": "at least K texts per label",
                 "sample_seed": sample_seed})
    if is_multilabel(data) and "train_size" in params:
        if params["train_size"] > len(train):
            raise DataError(f"train_size {params['train_size']} is larger than the training split of "
                            f"'{data.name}' ({len(train)} rows)")
        return (random_subset(train, params["train_size"], sample_seed),
                {"method": "random", "train_size": params["train_size"], "sample_seed": sample_seed})
    if "shots" in params:
        return (sample_per_class(train, params["shots"], sample_seed, data.label_names),
                {"method": "per-class", "shots": params["shots"], "sample_seed": sample_seed})
    if "train_size" in params:
        if params["train_size"] > len(train):
            raise DataError(f"train_size {params['train_size']} is larger than the training split of "
                            f"'{data.name}' ({len(train)} rows)")
        return (sample_stratified(train, params["train_size"], sample_seed),
                {"method": "stratified", "train_size": params["train_size"], "sample_seed": sample_seed})
    return train, {"method": "full"}


def labels_of(ds: datasets.Dataset) -> np.ndarray:
    return np.asarray(ds[LABEL][:])  # a list in one go (iterating a Column formats row by row)
