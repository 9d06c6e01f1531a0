"""LaCon Sec. 4.5: for each ``k`` in ``num_classes`` and sample ``s``, a random subset of ``k`` classes
(the first ``k`` of a permutation seeded by ``(seed, s)``, so the subsets of one sample are nested as
``k`` grows); all three splits are filtered to those classes and the labels remapped to ``0..k-1`` in
the original label order, with the matching label names. Optionally a few-shot sample of the filtered
training split (LaCon: 1000 per class). ``params`` holds ``num_classes`` only; the chosen class names
are in ``sampling``."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Annotated, Literal, Sequence

import datasets
import numpy as np
from pydantic import Field

from ...data.loading import LABEL, TextData
from ...data.sampling import derive_seed
from ...errors import ConfigError
from ..fields import one_or_more
from .base import (ProtocolRun, Sampled, check_samples, check_seed, draw_train, few_shot_settings, int_values,
                   labels_of, register_protocol, require_classes, validation_subset)


class Classes(Sampled):
    kind: Literal["classes"]
    num_classes: one_or_more(Annotated[int, Field(ge=2)]) = Field([2, 3, 4, 5],
        description="sizes of the random class subsets")
    order = 60
    no_multi_label = "it keeps the texts of a class subset and renumbers their one class"


def _select_classes(ds: datasets.Dataset | None, labels: np.ndarray | None, classes: list[int]) -> datasets.Dataset | None:
    """Rows of ``ds`` (with ``labels``) in ``classes`` (sorted ids), labels remapped to 0..k-1 in that order."""
    if ds is None:
        return None
    keep = np.flatnonzero(np.isin(labels, classes))
    remap = np.full(max(int(labels.max(initial=0)), max(classes)) + 1, -1, dtype=np.int64)
    remap[classes] = np.arange(len(classes))
    subset = ds.select(keep)
    columns = subset.to_dict()
    columns[LABEL] = remap[labels[keep]].tolist()
    return datasets.Dataset.from_dict(columns, features=ds.features)


@register_protocol(Classes)
def class_sweep(
    data: TextData,
    num_classes: int | Sequence[int] = (2, 3, 4, 5),
    shots: int | Sequence[int] | None = None,
    train_size: int | Sequence[int] | None = None,
    samples: int = 1,
    seed: int = 0,
    validation_size: int | None = None,
) -> list[ProtocolRun]:
    """LaCon's class-number sweep: ``k`` random classes per sample, splits filtered, labels remapped.

    The classes of sample ``s`` are the first ``k`` (then sorted) of a permutation drawn with
    ``derive_seed(seed, "classes", s)``; the training sample (if ``shots`` / ``train_size``) uses
    ``derive_seed(seed, "train", s)``; the validation subset (if ``validation_size``) is a stratified
    subset of the filtered validation split drawn with ``derive_seed(seed, "validation")``.
    """
    require_classes(data, "class sweep")
    seed, samples = check_seed(seed), check_samples(samples)
    ks = int_values(num_classes, "num_classes", minimum=2)
    for k in ks:
        if k > data.num_labels:
            raise ConfigError(f"num_classes {k} is more than '{data.name}' has ({data.num_labels} classes)")
    base = few_shot_settings(shots, train_size, data)
    split_labels = {split: None if getattr(data, split) is None else labels_of(getattr(data, split))
                    for split in ("train", "validation", "test")}
    runs = []
    for k, (base_label, base_params) in itertools.product(ks, base):
        label = f"classes={k}" + ("" if not base_params else f",{base_label}")
        for s in range(samples):
            order = np.random.default_rng(derive_seed(seed, "classes", s)).permutation(data.num_labels)
            classes = sorted(order[:k].tolist())
            names = [data.label_names[c] for c in classes]
            sub = TextData(name=data.name, label_names=names, source=dict(data.source), label_type=data.label_type,
                           **{split: _select_classes(getattr(data, split), split_labels[split], classes)
                              for split in ("train", "validation", "test")})
            train, info = draw_train(sub, sub.train, base_params, derive_seed(seed, "train", s))
            validation, vinfo = validation_subset(sub, validation_size, seed)
            runs.append(ProtocolRun(label, s, {"num_classes": k, **base_params},
                                    dataclasses.replace(sub, train=train, validation=validation),
                                    {"protocol": "class-sweep", "seed": seed, "sample": s, "classes": names,
                                     "class_ids": classes, "classes_seed": derive_seed(seed, "classes", s),
                                     **info, **vinfo, "test": "split (filtered)"}))
    return runs
