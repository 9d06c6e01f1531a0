"""Evaluation protocols of the papers: which train / validation / test rows each run sees.

Every protocol function takes the full :class:`~contrastfit.data.TextData` and its options and
returns a list of :class:`ProtocolRun`; the runner crosses these with methods and training seeds.
Nothing is trained here. All functions are deterministic: the same arguments give the same rows
(compare :func:`contrastfit.data.data_hash` of the splits).

Seeds
    ``seed`` is the protocol's *sampling* seed, independent of the training seeds. Each random draw
    uses its own integer seed from :func:`derive_seed`, ``SeedSequence([seed, stream, index])``
    (first 32-bit word), with a fixed ``stream`` per purpose (training sample, validation subset,
    CV pool, label noise, text noise, class subset) and ``index`` the sample number ``s``. So the
    training sample ``s`` depends on ``(seed, s)`` only: sample ``s`` of ``N=20`` and of ``N=100``
    share a seed, and the same sample ``s`` is used at every noise level (paired comparisons).

Protocols
    :func:`few_shot`
        Gunel et al. / LaCon few-shot: ``shots`` per class (K-shot) or ``train_size`` in total
        (stratified, Gunel's N = 20 / 100 / 1000), ``samples`` training-set samples per value.
        Validation: the data's validation split (disjoint from train), or a stratified subset of
        ``validation_size`` drawn once (fixed across samples and settings, as Gunel draws ~500
        once). Test: the test split. Without ``shots`` / ``train_size``: one ``full`` run.
    :func:`cross_validation`
        Sosnowski et al.: the pool is the training split, or a stratified sample of
        ``train_size`` of it; scikit-learn's (Repeated)StratifiedKFold (shuffled,
        ``random_state=seed``) splits it into ``folds``. Fold ``i``: train = the other folds,
        validation = the data's validation split (or its fixed subset), test = the held-out fold
        (as Sosnowski et al.). ``test="split"`` instead evaluates every fold on the data's own test
        split (the held-out fold is then unused). ``fold_train_size`` trains each fold on a
        stratified sample of that size from the other folds (few-shot training, full-pool
        testing). All folds share one setting label ``folds=k`` (``folds=k,N=n`` with
        ``fold_train_size``), so tables average over folds; the fold is the run's ``sample``
        (``repeat * folds + fold_index``) and ``params`` also has ``fold`` and ``repeat``.
    :func:`imbalance`
        LaCon Sec. 4.2: minority classes get ``minority_size`` training examples, the others
        ``minority_size * rho`` (rounded), for rho in ``ratios``. Default minority classes: the
        first half of the classes in label order (``num_labels // 2``, at least one; class 0 for a
        binary task); override with names or ids. ``params`` lists the minority and majority class
        names for per-class F1 reporting. Validation / test as in :func:`few_shot` (not re-balanced).
    :func:`noise`
        Gunel et al. Sec. 4.2 (simulated, see :mod:`contrastfit.data.noise`): a few-shot sample (or
        the full training split) with label flips and/or word noise applied to the TRAINING rows
        only; validation and test stay clean. Rates are crossed with each other and with the
        few-shot values.
    :func:`augmentation`
        Gunel et al. Sec. 4.2 / 5.3: a few-shot sample (or the full training split) plus ``ratio``
        augmented copies of every training row (their 1:3 is ``ratio: 3``), labels kept, from a
        word-level augmenter, WordNet synonyms or a Hugging Face model (:mod:`contrastfit.data.augment`);
        validation and test stay clean. Ratios and rates are crossed with each other and with the
        few-shot values; ``sampling["augmentation"]`` records the augmenter and what it did.
    :func:`class_sweep`
        LaCon Sec. 4.5: for each ``k`` in ``num_classes`` and sample ``s``, a random subset of ``k``
        classes (the first ``k`` of a permutation seeded by ``(seed, s)``, so the subsets of one
        sample are nested as ``k`` grows); all three splits are filtered to those classes and the
        labels remapped to ``0..k-1`` in the original label order, with the matching label names.
        Optionally a few-shot sample of the filtered training split (LaCon: 1000 per class).
        ``params`` holds ``num_classes`` only; the chosen class names are in ``sampling``.
    :func:`transfer_target`
        Gunel et al. Sec. 5 (transfer): :func:`few_shot` on the target data set (Gunel: 20 per
        class); the runner starts these runs from a source-task model.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import datasets
import numpy as np

from ..data.loading import LABEL, TextData
from ..data.augment import (HUB_PREFIX, augment_dataset, augment_seed, check_augmenter, check_ratio, check_temperature,
                            hub_generator)
from ..data.noise import TEXT_NOISE_KINDS, add_text_noise, check_rate, flip_labels
from ..data.sampling import STREAMS, derive_seed, per_class_indices, sample_per_class, sample_stratified  # noqa: F401
from ..errors import ConfigError, DataError



@dataclass
class ProtocolRun:
    """One point of a protocol: the data a run trains, validates and tests on."""

    setting: str                 # table label, e.g. "shots=16", "N=100", "fold=2/5", "rho=10"
    sample: int                  # index of the training-set sample (or fold) within the setting
    params: dict[str, Any]       # the setting's values, for the table
    data: TextData               # train / validation / test of this run
    sampling: dict[str, Any] = field(default_factory=dict)  # how it was drawn (provenance)


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------

def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"the protocol seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def _check_samples(samples: Any) -> int:
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1:
        raise ConfigError(f"samples must be a positive integer, got {samples!r}")
    return int(samples)


def _values(value: Any, what: str, minimum: int = 1) -> list[int]:
    """An int or a sequence of ints as a list, each checked to be >= ``minimum``."""
    values = [value] if isinstance(value, (int, np.integer)) else list(value)
    if not values:
        raise ConfigError(f"{what} needs at least one value")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
            raise ConfigError(f"{what} values must be integers >= {minimum}, got {v!r}")
        out.append(int(v))
    return out


def _rates(value: Any, what: str) -> list[float]:
    values = [value] if isinstance(value, (int, float, np.integer, np.floating)) else list(value)
    if not values:
        raise ConfigError(f"{what} needs at least one value")
    return [check_rate(v, what) for v in values]


def _require_classes(data: TextData, protocol: str) -> None:
    if data.label_names is None:
        raise ConfigError(f"the {protocol} protocol needs class labels; '{data.name}' has a regression target")


def _derived(data: TextData, train: datasets.Dataset, validation: datasets.Dataset | None,
             test: datasets.Dataset | None, label_names: list[str] | None = None) -> TextData:
    return TextData(name=data.name, train=train, validation=validation, test=test,
                    label_names=list(data.label_names) if label_names is None and data.label_names is not None
                    else label_names, source=dict(data.source))


def _validation(data: TextData, validation_size: int | None, seed: int) -> tuple[datasets.Dataset | None, dict[str, Any]]:
    """The validation split, or a stratified subset of it drawn once from ``seed``."""
    validation = data.validation
    if validation_size is None:
        return validation, {"validation": "split", "validation_rows": None if validation is None else len(validation)}
    _values(validation_size, "validation_size")
    if validation is None:
        raise DataError(f"data set '{data.name}' has no validation split to take validation_size={validation_size} from")
    vseed = derive_seed(seed, "validation")
    subset = sample_stratified(validation, int(validation_size), vseed)
    return subset, {"validation": "stratified subset", "validation_size": int(validation_size),
                    "validation_seed": vseed, "validation_rows": len(subset)}


def _few_shot_settings(shots: Any, train_size: Any, data: TextData) -> list[tuple[str, dict[str, Any]]]:
    """(label, params) per few-shot value; ``[("full", {})]`` without shots / train_size."""
    if shots is not None and train_size is not None:
        raise ConfigError("give either shots (per class) or train_size (in total), not both")
    if shots is not None:
        if data.label_names is None:
            raise ConfigError(f"shots (per class) needs class labels; '{data.name}' has a regression target; use train_size")
        return [(f"shots={k}", {"shots": k}) for k in _values(shots, "shots")]
    if train_size is not None:
        return [(f"N={n}", {"train_size": n}) for n in _values(train_size, "train_size")]
    return [("full", {})]


def _draw_train(data: TextData, train: datasets.Dataset, params: dict[str, Any], sample_seed: int) -> tuple[datasets.Dataset, dict]:
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


def _labels(ds: datasets.Dataset) -> np.ndarray:
    return np.asarray(ds[LABEL][:])  # a list in one go (iterating a Column formats row by row)


# ---------------------------------------------------------------------------------------------
# Protocols
# ---------------------------------------------------------------------------------------------

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
    seed, samples = _check_seed(seed), _check_samples(samples)
    settings = _few_shot_settings(shots, train_size, data)
    validation, vinfo = _validation(data, validation_size, seed)
    runs = []
    for label, params in settings:
        for s in range(samples if params else 1):
            sseed = derive_seed(seed, "train", s)
            train, info = _draw_train(data, data.train, params, sseed)
            runs.append(ProtocolRun(label, s, dict(params), _derived(data, train, validation, data.test),
                                    {"protocol": "few-shot", "seed": seed, "sample": s, **info, **vinfo,
                                     "test": "split"}))
    return runs


def transfer_target(
    data: TextData,
    shots: int | Sequence[int] | None = None,
    train_size: int | Sequence[int] | None = None,
    samples: int = 1,
    validation_size: int | None = None,
    seed: int = 0,
) -> list[ProtocolRun]:
    """:func:`few_shot` on the transfer target (the runner starts them from a source model)."""
    runs = few_shot(data, shots=shots, train_size=train_size, samples=samples, validation_size=validation_size, seed=seed)
    for run in runs:
        run.sampling["protocol"] = "transfer-target"
    return runs


def cross_validation(
    data: TextData,
    folds: int = 5,
    train_size: int | None = None,
    seed: int = 0,
    repeats: int = 1,
    validation_size: int | None = None,
    test: str = "fold",
    fold_train_size: int | None = None,
) -> list[ProtocolRun]:
    """Stratified k-fold cross-validation over the training split (or a stratified sample of it).

    ``test="fold"`` (default, Sosnowski et al.): each run is tested on its held-out fold.
    ``test="split"``: each run is tested on the data's test split instead. ``sample`` is
    ``repeat * folds + fold_index``; every fold has the setting label ``folds=k``.

    ``fold_train_size`` (the other reading of Sosnowski et al.'s "40-fold cross-validation with
    20 / 100 training examples"): each fold trains on a stratified sample of that many rows of
    the other folds (``derive_seed(seed, "train", sample)``) instead of all of them, so the
    training set stays few-shot while the held-out folds cover the whole pool.
    """
    from sklearn.model_selection import RepeatedKFold, RepeatedStratifiedKFold

    seed = _check_seed(seed)
    folds = _values(folds, "folds", minimum=2)[0]
    repeats = _values(repeats, "repeats")[0]
    if test not in ("fold", "split"):
        raise ConfigError(f"cross-validation test must be 'fold' or 'split', got {test!r}")
    if fold_train_size is not None:
        fold_train_size = _values(fold_train_size, "fold_train_size")[0]
    if test == "split" and data.test is None:
        raise DataError(f"data set '{data.name}' has no test split (cross-validation test='split')")
    pool, pool_info = data.train, {"pool": "train split"}
    if train_size is not None:
        n = _values(train_size, "train_size")[0]
        if n > len(data.train):
            raise DataError(f"train_size {n} is larger than the training split of '{data.name}' ({len(data.train)} rows)")
        pseed = derive_seed(seed, "pool")
        pool = sample_stratified(data.train, n, pseed)
        pool_info = {"pool": "stratified sample of the train split", "train_size": n, "pool_seed": pseed}
    if folds > len(pool):
        raise DataError(f"{folds} folds need at least {folds} rows; the pool has {len(pool)}")
    validation, vinfo = _validation(data, validation_size, seed)
    if data.label_names is None:
        splitter = RepeatedKFold(n_splits=folds, n_repeats=repeats, random_state=seed)
        y = None
    else:
        splitter = RepeatedStratifiedKFold(n_splits=folds, n_repeats=repeats, random_state=seed)
        y = _labels(pool)
    runs = []
    for j, (train_idx, held_idx) in enumerate(splitter.split(np.zeros(len(pool)), y)):
        r, i = divmod(j, folds)
        # one setting for all folds (the table averages over folds, as the papers do); the fold is the sample
        label = f"folds={folds}" + (f",N={fold_train_size}" if fold_train_size is not None else "")
        train = pool.select(np.sort(train_idx))
        held = pool.select(np.sort(held_idx))
        fold_info = {}
        if fold_train_size is not None:
            fseed = derive_seed(seed, "train", j)
            if fold_train_size > len(train):
                raise DataError(f"fold_train_size {fold_train_size} is larger than the {len(train)} training rows of a fold")
            train = sample_stratified(train, fold_train_size, fseed)
            fold_info = {"fold_train_size": fold_train_size, "sample_seed": fseed}
        params = {"folds": folds, "fold": i + 1, "repeat": r + 1, "train_size": len(pool) if train_size is not None else None}
        if fold_train_size is not None:
            params["fold_train_size"] = fold_train_size
        runs.append(ProtocolRun(label, j, params, _derived(data, train, validation, held if test == "fold" else data.test),
                                {"protocol": "cross-validation", "seed": seed, "sample": j, "folds": folds,
                                 "repeats": repeats, "fold": i + 1, "repeat": r + 1, **pool_info,
                                 "splitter": type(splitter).__name__, "test": "held-out fold" if test == "fold" else "split",
                                 "heldout_rows": len(held), **fold_info, **vinfo}))
    return runs


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
    _require_classes(data, "imbalance")
    seed, samples = _check_seed(seed), _check_samples(samples)
    minority_size = _values(minority_size, "minority_size")[0]
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
    labels = _labels(data.train)
    counts = np.bincount(labels, minlength=data.num_labels)
    validation, vinfo = _validation(data, validation_size, seed)
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
            runs.append(ProtocolRun(label, s, dict(params), _derived(data, train, validation, data.test),
                                    {"protocol": "imbalance", "seed": seed, "sample": s, "method": "per-class quotas",
                                     "sample_seed": sseed, "quotas": {names[c]: q for c, q in quotas.items()},
                                     **vinfo, "test": "split"}))
    return runs


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
    seed, samples = _check_seed(seed), _check_samples(samples)
    label_rates = _rates(label_noise, "label_noise")
    if any(r > 0 for r in label_rates):
        _require_classes(data, "label noise")
    text_rates: list[float | None] = [None] if text_noise is None else _rates(text_noise, "text_noise")
    if text_noise is not None and text_noise_kind not in TEXT_NOISE_KINDS:
        raise ConfigError(f"unknown text noise kind '{text_noise_kind}' (available: {', '.join(TEXT_NOISE_KINDS)})")
    base = _few_shot_settings(shots, train_size, data)
    validation, vinfo = _validation(data, validation_size, seed)
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
            train, info = _draw_train(data, data.train, base_params, derive_seed(seed, "train", s))
            records = {}
            if lrate > 0:
                train, records["label_noise"] = flip_labels(train, lrate, data.num_labels, derive_seed(seed, "label_noise", s))
            if trate is not None and trate > 0:
                train, records["text_noise"] = add_text_noise(train, text_noise_kind, trate, derive_seed(seed, "text_noise", s))
            runs.append(ProtocolRun(label, s, params.copy(), _derived(data, train, validation, data.test),
                                    {"protocol": "noise", "seed": seed, "sample": s, **info, **records, **vinfo,
                                     "test": "split"}))
    return runs


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
    seed, samples = _check_seed(seed), _check_samples(samples)
    augmenter = check_augmenter(augmenter)
    ratios = [check_ratio(r) for r in ([ratio] if isinstance(ratio, (int, np.integer)) else list(ratio))]
    if not ratios:
        raise ConfigError("augmentation needs at least one ratio")
    hub = augmenter.startswith(HUB_PREFIX)
    rates = [None] if hub else _rates(rate, "rate")
    temperature = check_temperature(temperature, augmenter)
    base = _few_shot_settings(shots, train_size, data)
    validation, vinfo = _validation(data, validation_size, seed)
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
            train, info = _draw_train(data, data.train, base_params, derive_seed(seed, "train", s))
            train, record = augment_dataset(train, augmenter, r, 0.0 if x is None else x, augment_seed(seed, s),
                                            temperature=temperature, generator=generator)
            runs.append(ProtocolRun(",".join(parts), s, dict(params), _derived(data, train, validation, data.test),
                                    {"protocol": "augmentation", "seed": seed, "sample": s, **info,
                                     "augmentation": record, **vinfo, "test": "split"}))
    return runs


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
    _require_classes(data, "class sweep")
    seed, samples = _check_seed(seed), _check_samples(samples)
    ks = _values(num_classes, "num_classes", minimum=2)
    for k in ks:
        if k > data.num_labels:
            raise ConfigError(f"num_classes {k} is more than '{data.name}' has ({data.num_labels} classes)")
    base = _few_shot_settings(shots, train_size, data)
    split_labels = {split: None if getattr(data, split) is None else _labels(getattr(data, split))
                    for split in ("train", "validation", "test")}
    runs = []
    for k, (base_label, base_params) in itertools.product(ks, base):
        label = f"classes={k}" + ("" if not base_params else f",{base_label}")
        for s in range(samples):
            order = np.random.default_rng(derive_seed(seed, "classes", s)).permutation(data.num_labels)
            classes = sorted(order[:k].tolist())
            names = [data.label_names[c] for c in classes]
            sub = TextData(name=data.name, label_names=names, source=dict(data.source),
                           **{split: _select_classes(getattr(data, split), split_labels[split], classes)
                              for split in ("train", "validation", "test")})
            train, info = _draw_train(sub, sub.train, base_params, derive_seed(seed, "train", s))
            validation, vinfo = _validation(sub, validation_size, seed)
            runs.append(ProtocolRun(label, s, {"num_classes": k, **base_params},
                                    dataclasses.replace(sub, train=train, validation=validation),
                                    {"protocol": "class-sweep", "seed": seed, "sample": s, "classes": names,
                                     "class_ids": classes, "classes_seed": derive_seed(seed, "classes", s),
                                     **info, **vinfo, "test": "split (filtered)"}))
    return runs

