"""LaCon Sec. 4.2: minority classes get ``minority_size`` training examples, the others
``minority_size * rho`` (rounded), for rho in ``ratios``. Default minority classes: the first half of
the classes in label order (``num_labels // 2``, at least one; class 0 for a binary task); override
with names or ids. ``params`` lists the minority and majority class names for per-class F1 reporting.
Validation / test as in :mod:`.few_shot` (not re-balanced)."""

from __future__ import annotations

from typing import Annotated, Iterable, Literal, Sequence, Union

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveInt, WrapValidator

from ...data.loading import TextData
from ...data.sampling import derive_seed, per_class_indices
from ...errors import ConfigError, DataError
from ..fields import as_written, explained, one_or_more
from .base import (ProtocolOptions, ProtocolRun, check_samples, check_seed, derived, int_values, labels_of,
                   register_protocol, require_classes, validation_subset)


class Imbalance(ProtocolOptions):
    kind: Literal["imbalance"]
    ratios: one_or_more(Annotated[float, Field(ge=1), WrapValidator(as_written)]) = Field([1, 3, 5, 10, 20],
        description="rho: the other classes get minority_size x rho examples each")
    minority_size: PositiveInt = Field(32, description="training examples of each minority class")
    minority_classes: Annotated[one_or_more(Union[str, NonNegativeInt]) | None,
                                explained("must be class names or class ids (integers >= 0)")] = Field(None,
        description="class names or ids (default: the first half of the classes)")
    samples: PositiveInt = Field(1, description="training-set samples drawn per ratio")
    order = 40
    no_multi_label = "it sizes minority and majority classes by each text's one class, and a text with a label set is in several"


def _class_ids(data: TextData, classes: Iterable[str | int], what: str) -> list[int]:
    ids = []
    for c in classes:
        if isinstance(c, str):
            if c not in data.label_names:
                raise ConfigError(f"{what}: unknown class '{c}' (classes: {', '.join(data.label_names)})")
            ids.append(data.label_names.index(c))
        elif isinstance(c, (int, np.integer)) and not isinstance(c, bool) and 0 <= c < data.num_labels:
            ids.append(int(c))
        else:
            raise ConfigError(f"{what}: {c!r} is not a class name or an id in 0..{data.num_labels - 1}")
    return sorted(set(ids))


@register_protocol(Imbalance)
def imbalance(
    data: TextData,
    ratios: Sequence[float] = (1, 3, 5, 10, 20),
    minority_size: int = 32,
    minority_classes: Sequence[str | int] | None = None,
    samples: int = 1,
    seed: int = 0,
    validation_size: int | None = None,
) -> list[ProtocolRun]:
    """LaCon's imbalanced training sets: ``minority_size`` per minority class, ``minority_size * rho`` per other class.

    Sample ``s`` is drawn with ``derive_seed(seed, "train", s)`` for every rho.
    """
    require_classes(data, "imbalance")
    seed, samples = check_seed(seed), check_samples(samples)
    minority_size = int_values(minority_size, "minority_size")[0]
    ratios = [ratios] if isinstance(ratios, (int, float, np.integer, np.floating)) else list(ratios)
    if not ratios:
        raise ConfigError("imbalance needs at least one ratio")
    for rho in ratios:
        if isinstance(rho, bool) or not isinstance(rho, (int, float, np.integer, np.floating)) or not rho >= 1:
            raise ConfigError(f"imbalance ratios must be numbers >= 1, got {rho!r}")
    if minority_classes is None:
        minority = list(range(max(1, data.num_labels // 2)))
    else:
        minority = _class_ids(data, [minority_classes] if isinstance(minority_classes, (str, int, np.integer)) else minority_classes,
                              "minority_classes")
    majority = [c for c in range(data.num_labels) if c not in minority]
    if not minority or not majority:
        raise ConfigError("imbalance needs at least one minority and one majority class")
    names = data.label_names
    labels = labels_of(data.train)
    counts = np.bincount(labels, minlength=data.num_labels)
    validation, vinfo = validation_subset(data, validation_size, seed)
    runs = []
    for rho in ratios:
        major_size = int(round(minority_size * rho))
        quotas = {c: (minority_size if c in minority else major_size) for c in range(data.num_labels)}
        for c, q in quotas.items():
            if counts[c] < q:
                raise DataError(f"imbalance rho={rho} needs {q} training examples of class '{names[c]}' "
                                f"but the training split of '{data.name}' has {counts[c]}")
        label = f"rho={rho:g}"
        params = {"rho": rho, "minority_size": minority_size, "majority_size": major_size,
                  "minority_classes": [names[c] for c in minority], "majority_classes": [names[c] for c in majority]}
        for s in range(samples):
            sseed = derive_seed(seed, "train", s)
            train = data.train.select(per_class_indices(labels, quotas, sseed))
            runs.append(ProtocolRun(label, s, dict(params), derived(data, train, validation, data.test),
                                    {"protocol": "imbalance", "seed": seed, "sample": s, "method": "per-class quotas",
                                     "sample_seed": sseed, "quotas": {names[c]: q for c, q in quotas.items()},
                                     **vinfo, "test": "split"}))
    return runs
