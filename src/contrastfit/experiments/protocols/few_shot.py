"""Gunel et al. / LaCon few-shot: ``shots`` per class (K-shot) or ``train_size`` in total (stratified,
Gunel's N = 20 / 100 / 1000), ``samples`` training-set samples per value. Validation: the data's
validation split (disjoint from train), or a stratified subset of ``validation_size`` drawn once
(fixed across samples and settings, as Gunel draws ~500 once). Test: the test split. Without
``shots`` / ``train_size``: one ``full`` run."""

from __future__ import annotations

from typing import Literal, Sequence

from ...data.loading import TextData
from ...data.sampling import derive_seed
from .base import (ProtocolRun, Sampled, check_samples, check_seed, derived, draw_train, few_shot_settings,
                   register_protocol, validation_subset)


class FewShot(Sampled):
    kind: Literal["few-shot"]
    order = 10
    no_multi_label = None  # label sets: at least K texts per label, or a random N


@register_protocol(FewShot)
def few_shot(
    data: TextData,
    shots: int | Sequence[int] | None = None,
    train_size: int | Sequence[int] | None = None,
    samples: int = 1,
    validation_size: int | None = None,
    seed: int = 0,
) -> list[ProtocolRun]:
    """``samples`` training-set samples per few-shot value; fixed validation; the test split.

    Sample ``s`` is drawn with ``derive_seed(seed, "train", s)``. Without ``shots`` and
    ``train_size`` the whole training split is one ``full`` run (whatever ``samples`` is).
    """
    seed, samples = check_seed(seed), check_samples(samples)
    settings = few_shot_settings(shots, train_size, data)
    validation, vinfo = validation_subset(data, validation_size, seed)
    runs = []
    for label, params in settings:
        for s in range(samples if params else 1):
            sseed = derive_seed(seed, "train", s)
            train, info = draw_train(data, data.train, params, sseed)
            runs.append(ProtocolRun(label, s, dict(params), derived(data, train, validation, data.test),
                                    {"protocol": "few-shot", "seed": seed, "sample": s, **info, **vinfo,
                                     "test": "split"}))
    return runs
