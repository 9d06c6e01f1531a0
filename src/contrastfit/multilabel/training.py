"""``contrastfit train --multi-label`` / ``train(..., multi_label=True)``: the multi-label job.

A job on the pipeline (:mod:`contrastfit.pipeline`), as the single-task one
(:func:`contrastfit.training.train`, which hands label-set data here) is, with the same Trainer
(:func:`contrastfit.trainer.build_trainer`: the batches of
:class:`~contrastfit.data.multilabel.MultiLabelBatchSampler` with ``--sampler balanced``) and the same
:class:`~contrastfit.record.Record` (kind ``train``, ``data.multi_label`` true). What differs:

1. the data: ``--shots K`` draws a sample with at least K texts per label
   (:func:`~contrastfit.data.multilabel.sample_per_label`); ``--train-size`` / ``--validation-size``
   draw plain random subsets (seeded like the single-label draws);
2. the model: the encoder and a sigmoid head with the multi-label form of the method
   (:mod:`contrastfit.multilabel.methods`; default ``ce-scl-lr``: BCE + Jaccard-weighted SupCon, then
   one-vs-rest logistic regressions on the frozen encoder, :func:`fit_head`);
3. selection (``--select-best``): the best step on validation at threshold 0.5 by ``--metric-for-best``
   (:data:`SELECTION`; default micro-F1), ties broken by the lower validation BCE;
4. the thresholds: per label, on the validation split
   (:func:`contrastfit.evaluation.multilabel.choose_thresholds`; 0.5 without one), kept in the model
   (``info["thresholds"]``, the folder's ``contrastfit.json``) and the record (``training.thresholds``,
   ``training.threshold_rule``); the metrics on validation and test are at those thresholds.

Not available with ``--multi-label`` (a one-line error): ``--memory-size``, and methods other than
``ce``, ``ce-scl``, ``ce-scl-lr``, ``linear-probe``.
"""

from __future__ import annotations

import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch
from torch.utils.data import DataLoader
from transformers import TrainerCallback

from ..data.multilabel import is_multilabel, label_counts, random_subset, sample_per_label
from ..data.descriptions import attach_label_descriptions
from ..data.loading import data_hash
from ..data.overlap import row_sketch
from ..data.sampling import derive_seed
from ..data.types import LABEL, TEXT, TEXT_PAIR, TextData
from ..encoders import TextEncoder, default_pooling, load_backbone
from ..errors import ConfigError, DataError
from ..evaluation import evaluate_model, headline
from ..evaluation.multilabel import choose_thresholds, multilabel_metrics, sigmoid
from ..identity import run_identity
from ..methods import get_method
from ..methods.base import LogisticHead
from ..modeling import ContrastiveClassifier
from ..pipeline import (SELECTION_KEY, Clock, TrainResult, WeightInterpolation, fit, resume_checkpoint,
                        selection_record, tie_broken, write_outputs)
from ..record import Record
from ..trainer import build_trainer, resolve_schedule, tokenize_dataset, with_method_defaults
from ..versions import library_versions
from .methods import (MULTILABEL_METHODS, check_multilabel_method, create_multilabel_method, fit_ovr_logistic,
                      label_name_hparams)

#: --metric-for-best -> the multi-label metric it selects on
SELECTION = {None: "micro_f1", "f1": "micro_f1", "accuracy": "subset_accuracy", "macro_f1": "macro_f1", "loss": "loss"}


def selection_metric(config) -> str:
    if config.metric_for_best not in SELECTION:
        raise ConfigError(f"--metric-for-best {config.metric_for_best} does not apply to multi-label data; use f1 "
                          "(micro-F1, the default), macro_f1, accuracy (subset accuracy) or loss")
    return SELECTION[config.metric_for_best]


def check_multilabel_config(config) -> str:
    """What a multi-label run refuses before it loads anything (each a one-line ConfigError): a method
    without a multi-label form, ``--memory-size`` and a ``--metric-for-best`` without a multi-label
    meaning. Returns the metric that selects the kept step. An experiment config calls it for every
    variant when it is read (:mod:`contrastfit.experiments.config`)."""
    if config.memory_size is not None:
        raise ConfigError("--memory-size is not available with --multi-label (the memory holds one label per row)")
    check_multilabel_method(config.method)
    return selection_metric(config)


def compute_metrics(label_names: list[str], metric: str):
    """The Trainer's validation metrics at threshold 0.5, the BCE ``loss`` and the selection score
    (the metric, ties broken by the lower loss: :func:`contrastfit.pipeline.tie_broken`)."""

    def compute(eval_pred) -> dict[str, float]:
        logits, labels = eval_pred.predictions, eval_pred.label_ids
        logits = np.asarray(logits[0] if isinstance(logits, tuple) else logits, dtype=np.float64)
        y = np.asarray(labels, dtype=np.float64)
        m = multilabel_metrics(y, sigmoid(logits) >= 0.5, label_names)
        out = {k: float(v) for k, v in m.items() if isinstance(v, (int, float))}
        out["loss"] = loss = float(np.mean(np.logaddexp(0.0, logits) - y * logits))
        out[SELECTION_KEY] = -loss if metric == "loss" else tie_broken(out[metric], loss)
        return out

    return compute


def prepare(config, data: TextData) -> tuple[datasets.Dataset, datasets.Dataset | None]:
    """The seed's training sample (``--shots``: at least K per label; ``--train-size``) and validation subset."""
    seed = config.seed if config.sample_seed is None else config.sample_seed
    train_seed = derive_seed(seed, "train", config.sample_index)
    train = data.train
    if config.shots is not None:
        train = sample_per_label(train, config.shots, train_seed, data.label_names)
    elif config.train_size is not None:
        train = random_subset(train, config.train_size, train_seed)
    validation = data.validation
    if validation is not None and config.validation_size is not None:
        validation = random_subset(validation, config.validation_size, derive_seed(seed, "validation"))
    return train, validation


def describe(config, data: TextData, train: datasets.Dataset, validation: datasets.Dataset | None) -> dict[str, Any]:
    """The record's ``data``: as a single-label run's, with ``multi_label`` and each label's training count."""
    names = data.label_names
    out = {"name": data.name, "source": data.source, "task": "classification", "multi_label": True,
           "label_names": names, "text_pair": data.has_pairs,
           "sampling": {"shots": config.shots, "shots_rule": "at least K texts per label" if config.shots else None,
                        "train_size": config.train_size, "validation_size": config.validation_size,
                        "sample_seed": config.seed if config.sample_seed is None else config.sample_seed,
                        "sample_index": config.sample_index},
           "train_label_counts": dict(zip(names, label_counts(train).tolist()))}
    for split, ds in (("train", train), ("validation", validation), ("test", data.test)):
        if ds is not None:
            out[f"{split}_size"] = len(ds)
            out[f"{split}_hash"] = data_hash(ds)
    return out


@torch.no_grad()
def _features(model, ds: datasets.Dataset, collator) -> tuple[torch.Tensor, torch.Tensor]:
    was = model.training
    model.eval()
    feats, labels = [], []
    try:
        for batch in DataLoader(ds, batch_size=64, shuffle=False, collate_fn=collator):
            batch = {k: v.to(model.device) for k, v in batch.items()}
            labels.append(batch.pop("labels").float().cpu())
            feats.append(model.method.head_features(model, batch).float().cpu())
    finally:
        model.train(was)
    return torch.cat(feats), torch.cat(labels)


def fit_head(model, train_ds: datasets.Dataset, collator, seed: int) -> dict[str, Any]:
    """One-vs-rest logistic regressions on the frozen encoder's head features (``head_C``),
    with each label's name as a weighted positive of its own label where ``label_prior`` > 0."""
    t0 = time.perf_counter()
    features, labels = _features(model, train_ds, collator)
    head = LogisticHead.of(model.method)
    C, prior = float(head.head_C), float(head.label_prior)
    anchors = None
    if prior > 0 and hasattr(model.method, "label_features"):
        was = model.training
        model.eval()
        with torch.no_grad():
            anchors = model.method.label_features(model)
        model.train(was)
    fit_ovr_logistic(model.head, features, labels, C=C, seed=seed, anchors=anchors, prior=prior)
    stage = {"solver": "one-vs-rest logistic", "C": C, "total_s": time.perf_counter() - t0}
    if prior > 0:  # whether the label names joined the fit, or why not
        stage["label_prior"] = "used" if anchors is not None else getattr(model.method, "anchor_note", None)
    return stage


def validation_thresholds(model, validation: datasets.Dataset | None) -> tuple[list[float], str]:
    """Each label's threshold, chosen on ``validation`` (0.5 without it), and the rule that chose them."""
    if validation is None or len(validation) == 0:
        thresholds, rule = choose_thresholds(None, None)
    else:
        pairs = validation[TEXT_PAIR] if TEXT_PAIR in validation.column_names else None
        thresholds, rule = choose_thresholds(model.predict_proba(validation[TEXT], pairs),
                                             np.asarray(validation[LABEL]))
    return thresholds or [0.5] * len(model.label_names), rule


def train_multilabel(config, data: TextData, callbacks: list[TrainerCallback] | None, keep: bool) -> TrainResult:
    """One multi-label run of the validated ``config`` on ``data`` (label sets) into ``config.output``
    (see the module docstring); with ``keep`` False (a temporary folder) nothing is saved there."""
    from transformers import set_seed

    metric = check_multilabel_config(config)
    if not is_multilabel(data):
        raise DataError(f"data set '{data.name}' is not multi-label data (load it with "
                        "contrastfit.data.multilabel.load_multilabel)")
    config = replace(config, method=check_multilabel_method(config.method))
    config = with_method_defaults(config, MULTILABEL_METHODS[config.method])  # the multi-label form's schedule
    output = Path(config.output)
    clock = Clock()
    set_seed(config.seed)
    names = data.label_names
    train, validation = prepare(config, data)
    pooling = config.pooling or default_pooling(config.model)
    # the single-label defaults with the label names off (the multi-label forms' defaults), under the user's
    hparams = {**get_method(config.method).defaults_for(len(train)), **label_name_hparams(config.method), **config.hparams}
    backbone, tokenizer = load_backbone(config.model, trust_remote_code=config.trust_remote_code)
    encoder = TextEncoder(backbone, pooling)
    method = create_multilabel_method(config.method, len(names), encoder.hidden_size, **hparams)
    model = ContrastiveClassifier(encoder, tokenizer, method, names, config.max_length,
                                  info={"base_model": config.model, "multi_label": True})
    train_ds = tokenize_dataset(train, tokenizer, model.max_length)
    descriptions = attach_label_descriptions(model, config)
    method.prepare(model, train_ds)
    epochs, max_steps = resolve_schedule(config, train_ds["labels"])
    selecting = (config.select_best and validation is not None and len(validation) > 0
                 and method.trains_encoder and not method.frozen_head_stage)
    eval_ds = tokenize_dataset(validation, tokenizer, model.max_length) if selecting else None
    trainer = build_trainer(config, model, train_ds, epochs, max_steps=max_steps, eval_ds=eval_ds, callbacks=callbacks,
                            compute_metrics=compute_metrics(names, metric))
    clock.mark("setup")
    resume_from = resume_checkpoint(output) if config.resume else None
    head_init = None
    if config.head_init == "probe" and resume_from is None:
        head_init = fit_head(model, train_ds, trainer.data_collator, config.seed)
    interpolation = WeightInterpolation.for_run(config.wise_ft, method, config.refit_head, model.encoder)
    fitted = None
    if method.trains_encoder:
        fitted = fit(trainer, output, resume_from)
        if fitted.interrupted:
            return TrainResult(fitted.interrupted, model)
    wise_ft = interpolation and interpolation.apply(model.encoder)
    head_stage = None
    if method.frozen_head_stage or config.refit_head:
        head_stage = fit_head(model, train_ds, trainer.data_collator, config.seed)
    model.eval()
    thresholds, rule = validation_thresholds(model, validation)
    model.info.update(thresholds=thresholds, threshold_rule=rule)
    clock.mark("train")

    metrics: dict[str, Any] = {}
    if validation is not None:
        metrics["validation"] = evaluate_model(model, validation)
    if config.evaluate_test and data.test is not None:
        metrics["test"] = evaluate_model(model, data.test)
    clock.mark("eval")

    training = {k: getattr(config, k) for k in (
        "batch_size", "learning_rate", "weight_decay", "warmup_ratio", "gradient_accumulation_steps",
        "max_length", "fp16", "bf16", "min_steps", "refit_head", "head_init", "sampler", "gradient_cache_chunk")}
    selection = None
    if selecting:
        history = selection_record(trainer, config.early_stopping_patience)
        best_value = next((e.get(metric) for e in history["evaluations"] if e["step"] == history["best_step"]), None)
        selection = {"metric": metric, "best_value": best_value, **history,
                     "rule": "the checkpoint with the best validation metric at threshold 0.5, ties broken by the "
                             "lower validation BCE, is kept (Trainer load_best_model_at_end)"}
    training.update(epochs=epochs if method.trains_encoder else 0, steps=trainer.state.global_step,
                    selection=selection, pooling=pooling, train_loss=fitted and fitted.train_loss,
                    resumed_from=resume_from, head_init=head_init, wise_ft=wise_ft, head_stage=head_stage,
                    world_size=trainer.args.world_size, warmup_steps=getattr(trainer, "scheduled_warmup_steps", None),
                    thresholds=dict(zip(names, thresholds)), threshold_rule=rule)
    description = describe(config, data, train, validation)
    if descriptions:
        description["label_descriptions"] = descriptions
    record = Record(
        kind="train", method=config.method, hparams=method.hparams, model=config.model, seed=config.seed,
        data=description, training=training, metrics=metrics, timings=clock.timings, versions=library_versions(),
        tags=config.tags, log_history=trainer.state.log_history,
        identity=run_identity("train", method=config.method, hparams=method.hparams, seed=config.seed,
                              model=config.model, settings={f.name: getattr(config, f.name) for f in fields(config)},
                              data=description, tags=config.tags))
    # the folder keeps digests of the training rows (calibrate and evaluate check for them) and the thresholds
    model.info.update(model=config.model, seed=config.seed, data={**description, "train_rows": row_sketch(train)},
                      training=training, versions=record.versions, base_model=config.model)
    return write_outputs(TrainResult, config, model, record, output if keep else None,
                         label=f"{config.method} (multi-label)", shown={s: headline(m) for s, m in metrics.items()})
