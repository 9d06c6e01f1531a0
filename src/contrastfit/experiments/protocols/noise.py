"""Gunel et al. Sec. 4.2 (simulated, see :mod:`contrastfit.data.noise`): a few-shot sample (or the full
training split) with label flips and/or word noise applied to the TRAINING rows only; validation and
test stay clean. Rates are crossed with each other and with the few-shot values."""

from __future__ import annotations

import itertools
from typing import Literal, Sequence

from pydantic import Field

from ...data.loading import TextData
from ...data.noise import TEXT_NOISE_KINDS, add_text_noise, flip_labels
from ...data.sampling import derive_seed
from ...errors import ConfigError
from ..fields import Rate, one_or_more
from .base import (ProtocolRun, Sampled, check_samples, check_seed, derived, draw_train, few_shot_settings,
                   rate_values, register_protocol, require_classes, validation_subset)


class Noise(Sampled):
    kind: Literal["noise"]
    label_noise: one_or_more(Rate) = Field([0.0], description="rates of training labels flipped to another class")
    text_noise: one_or_more(Rate) | None = Field(None, description="rates of words changed in the training texts")
    text_noise_kind: Literal[TEXT_NOISE_KINDS] = Field("deletion",  # type: ignore[valid-type]
        description="how a word is changed")
    order = 50
    no_multi_label = "its label noise flips each text's one class to another"


@register_protocol(Noise)
def noise(
    data: TextData,
    label_noise: float | Sequence[float] = (0.0,),
    text_noise: float | Sequence[float] | None = None,
    text_noise_kind: str = "deletion",
    shots: int | Sequence[int] | None = None,
    train_size: int | Sequence[int] | None = None,
    validation_size: int | None = None,
    seed: int = 0,
    samples: int = 1,
) -> list[ProtocolRun]:
    """Noisy training sets: few-shot sample (or the full training split) + label and/or word noise.

    Sample ``s`` is the same rows as :func:`few_shot` sample ``s`` (``derive_seed(seed, "train", s)``)
    at every noise level; labels are flipped with ``derive_seed(seed, "label_noise", s)`` (so the
    flips are nested across rates) and then words noised with ``derive_seed(seed, "text_noise", s)``.
    Validation and test are never noised. Labels: ``[<few-shot>,]label_noise=r[,text_noise=t]``.
    A clean (all rates 0) full-training-set setting has one run only, its samples being identical.
    """
    seed, samples = check_seed(seed), check_samples(samples)
    label_rates = rate_values(label_noise, "label_noise")
    if any(r > 0 for r in label_rates):
        require_classes(data, "label noise")
    text_rates: list[float | None] = [None] if text_noise is None else rate_values(text_noise, "text_noise")
    if text_noise is not None and text_noise_kind not in TEXT_NOISE_KINDS:
        raise ConfigError(f"unknown text noise kind '{text_noise_kind}' (available: {', '.join(TEXT_NOISE_KINDS)})")
    base = few_shot_settings(shots, train_size, data)
    validation, vinfo = validation_subset(data, validation_size, seed)
    runs = []
    for (base_label, base_params), lrate, trate in itertools.product(base, label_rates, text_rates):
        parts = [] if not base_params else [base_label]
        parts.append(f"label_noise={lrate:g}")
        params = {**base_params, "label_noise": lrate}
        if trate is not None:
            parts.append(f"text_noise={trate:g}")
            params.update(text_noise=trate, text_noise_kind=text_noise_kind)
        label = ",".join(parts)
        n_samples = samples if (base_params or lrate > 0 or (trate or 0) > 0) else 1
        for s in range(n_samples):
            train, info = draw_train(data, data.train, base_params, derive_seed(seed, "train", s))
            records = {}
            if lrate > 0:
                train, records["label_noise"] = flip_labels(train, lrate, data.num_labels, derive_seed(seed, "label_noise", s))
            if trate is not None and trate > 0:
                train, records["text_noise"] = add_text_noise(train, text_noise_kind, trate, derive_seed(seed, "text_noise", s))
            runs.append(ProtocolRun(label, s, params.copy(), derived(data, train, validation, data.test),
                                    {"protocol": "noise", "seed": seed, "sample": s, **info, **records, **vinfo,
                                     "test": "split"}))
    return runs
