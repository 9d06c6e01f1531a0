"""Gunel et al. Sec. 4.2 / 5.3: a few-shot sample (or the full training split) plus ``ratio`` augmented
copies of every training row (their 1:3 is ``ratio: 3``), labels kept, from a word-level augmenter,
WordNet synonyms or a Hugging Face model (:mod:`contrastfit.data.augment`); validation and test stay
clean. Ratios and rates are crossed with each other and with the few-shot values;
``sampling["augmentation"]`` records the augmenter and what it did."""

from __future__ import annotations

import itertools
from typing import Literal, Sequence

import numpy as np
from pydantic import Field, NonNegativeInt, field_validator, model_validator

from ...data.augment import (HUB_PREFIX, augment_dataset, augment_seed, check_augmenter, check_ratio, check_temperature,
                             hub_generator)
from ...data.loading import TextData
from ...data.sampling import derive_seed
from ...errors import ConfigError
from ..fields import PositiveNumber, Rate, asked, one_or_more
from .base import (ProtocolRun, Sampled, check_samples, check_seed, derived, draw_train, few_shot_settings,
                   rate_values, register_protocol, validation_subset)


class Augmentation(Sampled):
    kind: Literal["augmentation"]
    ratio: one_or_more(NonNegativeInt) = Field([3],
        description="augmented copies per training example (0: the clean baseline)")
    augmenter: str = Field("deletion", description="deletion, swap, insertion, synonym, hub:MODEL or hub:FORWARD+BACK")
    rate: one_or_more(Rate) = Field([0.1], description="rate of words changed")
    temperature: PositiveNumber | None = Field(None, description="sampling temperature of the hub: models")
    order = 80
    no_multi_label = None  # the copies keep their row's label set

    _augmenter = field_validator("augmenter")(lambda v: asked(check_augmenter, v))

    @model_validator(mode="after")
    def _temperature_for_hub(self):
        asked(check_temperature, self.temperature, self.augmenter)
        return self


@register_protocol(Augmentation)
def augmentation(
    data: TextData,
    ratio: int | Sequence[int] = 3,
    augmenter: str = "deletion",
    rate: float | Sequence[float] = 0.1,
    temperature: float | None = None,
    shots: int | Sequence[int] | None = None,
    train_size: int | Sequence[int] | None = None,
    validation_size: int | None = None,
    seed: int = 0,
    samples: int = 1,
) -> list[ProtocolRun]:
    """Augmented training sets: a few-shot sample (or the full training split) plus ``ratio``
    augmented copies of each of its rows, labels kept (Gunel et al.: 1:3, ``ratio=3``).

    ``augmenter``: ``deletion`` | ``swap`` | ``insertion`` (word-level, at word rate ``rate``),
    ``synonym`` (WordNet synonyms at rate ``rate``) or ``hub:NAME`` / ``hub:FORWARD+BACK`` (a
    Hugging Face paraphrase model / back-translation, sampled at ``temperature``; ``rate`` unused);
    see :mod:`contrastfit.data.augment`. Sample ``s`` is the same rows as :func:`few_shot` sample
    ``s`` (``derive_seed(seed, "train", s)``); its copies are drawn with ``augment_seed(seed, s)``,
    the same for every ratio (the copies at a smaller ratio are the first ones of a larger ratio).
    ``ratio: 0`` is the clean baseline (one setting, whatever the rates). Labels:
    ``[<few-shot>,]ratio=r[,rate=x]``. Validation and test are never augmented.
    """
    seed, samples = check_seed(seed), check_samples(samples)
    augmenter = check_augmenter(augmenter)
    ratios = [check_ratio(r) for r in ([ratio] if isinstance(ratio, (int, np.integer)) else list(ratio))]
    if not ratios:
        raise ConfigError("augmentation needs at least one ratio")
    hub = augmenter.startswith(HUB_PREFIX)
    rates = [None] if hub else rate_values(rate, "rate")
    temperature = check_temperature(temperature, augmenter)
    base = few_shot_settings(shots, train_size, data)
    validation, vinfo = validation_subset(data, validation_size, seed)
    generator = hub_generator(augmenter, temperature) if hub and any(ratios) else None  # loads the model once
    settings: list[tuple[int, float | None]] = []
    for r, x in itertools.product(ratios, rates):
        key = (r, x if r else None)
        if key not in settings:
            settings.append(key)
    runs = []
    for (base_label, base_params), (r, x) in itertools.product(base, settings):
        parts = ([base_label] if base_params else []) + [f"ratio={r}"] + ([f"rate={x:g}"] if x is not None else [])
        params = {**base_params, "ratio": r, "augmenter": augmenter}
        if x is not None:
            params["rate"] = x
        if hub and temperature is not None:
            params["temperature"] = temperature
        for s in range(samples if (base_params or r) else 1):
            train, info = draw_train(data, data.train, base_params, derive_seed(seed, "train", s))
            train, record = augment_dataset(train, augmenter, r, 0.0 if x is None else x, augment_seed(seed, s),
                                            temperature=temperature, generator=generator)
            runs.append(ProtocolRun(",".join(parts), s, dict(params), derived(data, train, validation, data.test),
                                    {"protocol": "augmentation", "seed": seed, "sample": s, **info,
                                     "augmentation": record, **vinfo, "test": "split"}))
    return runs
