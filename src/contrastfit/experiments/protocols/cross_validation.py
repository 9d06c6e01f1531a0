"""Sosnowski et al.: the pool is the training split, or a stratified sample of ``train_size`` of it;
scikit-learn's (Repeated)StratifiedKFold (shuffled, ``random_state=seed``) splits it into ``folds``.
Fold ``i``: train = the other folds, validation = the data's validation split (or its fixed subset),
test = the held-out fold (as Sosnowski et al.). ``test="split"`` instead evaluates every fold on the
data's own test split (the held-out fold is then unused). ``fold_train_size`` trains each fold on a
stratified sample of that size from the other folds (few-shot training, full-pool testing). All folds
share one setting label ``folds=k`` (``folds=k,N=n`` with ``fold_train_size``), so tables average over
folds; the fold is the run's ``sample`` (``repeat * folds + fold_index``) and ``params`` also has
``fold`` and ``repeat``. Label sets (multi-label data) have no one class per row to stratify by: they
are split by plain (Repeated)KFold, as a regression target is, and their pool and fold samples are
random draws."""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field, PositiveInt

from ...data.loading import TextData
from ...data.multilabel import is_multilabel, random_subset
from ...data.sampling import derive_seed, sample_stratified
from ...errors import ConfigError, DataError
from .base import (ProtocolOptions, ProtocolRun, check_seed, derived, int_values, labels_of, register_protocol,
                   validation_subset)


class CrossValidation(ProtocolOptions):
    kind: Literal["cross-validation"]
    folds: Annotated[int, Field(ge=2)] = Field(5, description="folds of the stratified k-fold")
    train_size: PositiveInt | None = Field(None,
        description="the pool: a stratified sample of the training split (default: all of it)")
    repeats: PositiveInt = Field(1, description="repetitions of the k-fold, each with its own shuffle")
    test: Literal["fold", "split"] = Field("fold",
        description="fold: score on the held-out fold; split: on the data's test split")
    fold_train_size: PositiveInt | None = Field(None,
        description="a stratified sample of this size of each fold's training part")
    order = 30
    no_multi_label = None  # label sets: plain k-fold and random draws, as for a regression target


@register_protocol(CrossValidation)
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

    seed = check_seed(seed)
    multi_label = is_multilabel(data)
    folds = int_values(folds, "folds", minimum=2)[0]
    repeats = int_values(repeats, "repeats")[0]
    if test not in ("fold", "split"):
        raise ConfigError(f"cross-validation test must be 'fold' or 'split', got {test!r}")
    if fold_train_size is not None:
        fold_train_size = int_values(fold_train_size, "fold_train_size")[0]
    if test == "split" and data.test is None:
        raise DataError(f"data set '{data.name}' has no test split (cross-validation test='split')")
    pool, pool_info = data.train, {"pool": "train split"}
    if train_size is not None:
        n = int_values(train_size, "train_size")[0]
        if n > len(data.train):
            raise DataError(f"train_size {n} is larger than the training split of '{data.name}' ({len(data.train)} rows)")
        pseed = derive_seed(seed, "pool")
        if multi_label:
            pool = random_subset(data.train, n, pseed)
            pool_info = {"pool": "random sample of the train split", "train_size": n, "pool_seed": pseed}
        else:
            pool = sample_stratified(data.train, n, pseed)
            pool_info = {"pool": "stratified sample of the train split", "train_size": n, "pool_seed": pseed}
    if folds > len(pool):
        raise DataError(f"{folds} folds need at least {folds} rows; the pool has {len(pool)}")
    validation, vinfo = validation_subset(data, validation_size, seed)
    if data.label_names is None or multi_label:  # no one class per row to stratify by
        splitter = RepeatedKFold(n_splits=folds, n_repeats=repeats, random_state=seed)
        y = None
    else:
        splitter = RepeatedStratifiedKFold(n_splits=folds, n_repeats=repeats, random_state=seed)
        y = labels_of(pool)
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
            train = (random_subset if multi_label else sample_stratified)(train, fold_train_size, fseed)
            fold_info = {"fold_train_size": fold_train_size, "sample_seed": fseed}
        params = {"folds": folds, "fold": i + 1, "repeat": r + 1, "train_size": len(pool) if train_size is not None else None}
        if fold_train_size is not None:
            params["fold_train_size"] = fold_train_size
        runs.append(ProtocolRun(label, j, params, derived(data, train, validation, held if test == "fold" else data.test),
                                {"protocol": "cross-validation", "seed": seed, "sample": j, "folds": folds,
                                 "repeats": repeats, "fold": i + 1, "repeat": r + 1, **pool_info,
                                 "splitter": type(splitter).__name__, "test": "held-out fold" if test == "fold" else "split",
                                 "heldout_rows": len(held), **fold_info, **vinfo}))
    return runs
