"""``contrastfit train --multi-label`` / ``train(..., multi_label=True)``: one multi-label run.

The same steps as a single-label run (:func:`contrastfit.training._train`), with label sets:

1. data: :func:`contrastfit.data.multilabel.load_multilabel`; ``--shots K`` draws a sample with at
   least K texts per label (:func:`~contrastfit.data.multilabel.sample_per_label`); ``--train-size`` /
   ``--validation-size`` draw plain random subsets (seeded like the single-label draws);
2. model: the encoder and a sigmoid head, with the multi-label form of the method
   (:mod:`contrastfit.multilabel.methods`; default ``ce-scl-lr``: BCE + Jaccard-weighted SupCon,
   then one-vs-rest logistic regressions on the frozen encoder);
3. training with the Trainer; batches from :class:`~contrastfit.data.multilabel.MultiLabelBatchSampler`
   (``--sampler balanced``, the default: every row gets a row sharing a label) or the library's shuffle
   (``--sampler random``); with ``--select-best`` the kept step is the best on validation at threshold
   0.5 by ``--metric-for-best`` (default micro-F1; ``f1`` is micro-F1, ``accuracy`` subset accuracy,
   ``macro_f1`` and ``loss`` (BCE) as named);
4. thresholds: per label, on the validation split
   (:func:`contrastfit.evaluation.multilabel.choose_thresholds`; 0.5 without one), kept in the model
   (``info["thresholds"]``, the folder's ``contrastfit.json``);
5. metrics on validation and test at those thresholds; the record (``results.json``) as for a
   single-label run, with ``data.multi_label`` true and ``training.thresholds``.

Not available with ``--multi-label`` (a one-line error): ``--memory-size``, and methods other than
``ce``, ``ce-scl``, ``ce-scl-lr``, ``linear-probe``.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding, PrinterCallback, TrainerCallback

from ..data.multilabel import MultiLabelBatchSampler, is_multilabel, label_counts, load_multilabel, sample_per_label
from ..data.sampling import derive_seed
from ..data.types import LABEL, TextData
from ..errors import ConfigError, DataError
from ..evaluation.multilabel import MULTILABEL_HEADLINE, choose_thresholds, multilabel_metrics, sigmoid
from .methods import check_multilabel_method, create_multilabel_method, fit_ovr_logistic

#: --metric-for-best -> the multi-label metric it selects on
SELECTION = {None: "micro_f1", "f1": "micro_f1", "accuracy": "subset_accuracy", "macro_f1": "macro_f1", "loss": "loss"}


def selection_metric(config) -> str:
    if config.metric_for_best not in SELECTION:
        raise ConfigError(f"--metric-for-best {config.metric_for_best} does not apply to multi-label data; use f1 "
                          "(micro-F1, the default), macro_f1, accuracy (subset accuracy) or loss")
    return SELECTION[config.metric_for_best]


def compute_metrics(label_names: list[str], metric: str, kit):
    """The Trainer's validation metrics at threshold 0.5, the BCE ``loss`` and the selection score
    (the metric, ties broken by the lower loss, as for single-label runs: ``kit.SELECTION_KEY``)."""
    SELECTION_KEY, TIE_BREAK = kit.SELECTION_KEY, kit.TIE_BREAK

    def compute(eval_pred) -> dict[str, float]:
        logits, labels = eval_pred.predictions, eval_pred.label_ids
        logits = np.asarray(logits[0] if isinstance(logits, tuple) else logits, dtype=np.float64)
        y = np.asarray(labels, dtype=np.float64)
        m = multilabel_metrics(y, sigmoid(logits) >= 0.5, label_names)
        out = {k: float(v) for k, v in m.items() if isinstance(v, (int, float))}
        loss = float(np.mean(np.logaddexp(0.0, logits) - y * logits))
        out["loss"] = loss
        if metric == "loss":
            out[SELECTION_KEY] = -loss
        else:
            out[SELECTION_KEY] = out[metric] + TIE_BREAK * (1.0 - math.tanh(loss))
        return out

    return compute


def _trainer_class(kit):
    class MultiLabelTrainer(kit.ContrastfitTrainer):
        """The Trainer with :class:`MultiLabelBatchSampler` batches (``balanced_batches``)."""

        def get_train_dataloader(self) -> DataLoader:
            if not self.balanced_batches:
                return super().get_train_dataloader()
            dataset = self._remove_unused_columns(self.train_dataset, description="training")
            sampler = MultiLabelBatchSampler(dataset["labels"], self._train_batch_size, seed=self.args.seed)
            loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=self.data_collator,
                                num_workers=self.args.dataloader_num_workers,
                                pin_memory=self.args.dataloader_pin_memory)
            return self.accelerator.prepare(loader)

    return MultiLabelTrainer


def load_data(config) -> TextData:
    return load_multilabel(config.data, text_column=config.text_column, text_pair_column=config.text_pair_column,
                           label_column=config.label_column, label_separator=config.label_separator,
                           validation_data=config.validation_data, test_data=config.test_data,
                           validation_split=config.validation_split)


def _random_subset(ds: datasets.Dataset, n: int, seed: int) -> datasets.Dataset:
    if n >= len(ds):
        return ds
    return ds.select(sorted(np.random.default_rng(seed).permutation(len(ds))[:n].tolist()))


def prepare(config, data: TextData) -> tuple[datasets.Dataset, datasets.Dataset | None]:
    seed = config.seed if config.sample_seed is None else config.sample_seed
    train_seed = derive_seed(seed, "train", config.sample_index)
    train = data.train
    if config.shots is not None:
        train = sample_per_label(train, config.shots, train_seed, data.label_names)
    elif config.train_size is not None:
        train = _random_subset(train, config.train_size, train_seed)
    validation = data.validation
    if validation is not None and config.validation_size is not None:
        validation = _random_subset(validation, config.validation_size, derive_seed(seed, "validation"))
    return train, validation


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
    """One-vs-rest logistic regressions on the frozen encoder's head features (``head_C``, default 1)."""
    t0 = time.perf_counter()
    features, labels = _features(model, train_ds, collator)
    C = float(model.method.hparams.get("head_C", 1.0))
    fit_ovr_logistic(model.head, features, labels, C=C, seed=seed)
    return {"solver": "one-vs-rest logistic", "C": C, "total_s": time.perf_counter() - t0}


def train_multilabel(config, text_data: TextData | None, callbacks: list[TrainerCallback] | None,
                     keep: bool, kit) -> Any:
    """One multi-label run of the validated ``config`` into ``config.output`` (see the module docstring).

    ``kit`` is :mod:`contrastfit.training` itself, handed over by ``training._train``: the Trainer
    subclass and the run helpers that single- and multi-label runs share (``tokenize_dataset``,
    ``trainer_arguments``, ``TrainResult``, ...). Importing that module here would close an import
    cycle with the hook that calls this function (``tests/test_data_imports.py`` forbids any)."""
    from transformers import set_seed

    from ..atomic import write_json_atomic
    from ..data.loading import data_hash
    from ..data.overlap import row_sketch
    from ..distributed import world
    from ..encoders import TextEncoder, default_pooling, load_backbone
    from ..evaluation import evaluate_model
    from ..methods import get_method
    from ..modeling import ContrastiveClassifier
    CHECKPOINT_DIR, RESULTS_NAME, TrainResult = kit.CHECKPOINT_DIR, kit.RESULTS_NAME, kit.TrainResult
    _selection_args, _stopped_early, evaluation_history = kit._selection_args, kit._stopped_early, kit.evaluation_history
    last_checkpoint, record_provenance, resolve_schedule = kit.last_checkpoint, kit.record_provenance, kit.resolve_schedule
    resume_checkpoint, tokenize_dataset, trainer_arguments = kit.resume_checkpoint, kit.tokenize_dataset, kit.trainer_arguments
    with_method_defaults, _weights_only_loading = kit.with_method_defaults, kit._weights_only_loading

    if config.memory_size is not None:
        raise ConfigError("--memory-size is not available with --multi-label (the memory holds one label per row)")
    metric = selection_metric(config)
    config = replace(config, method=check_multilabel_method(config.method))
    config = with_method_defaults(config)
    output = Path(config.output)
    results_path = output / RESULTS_NAME
    t0 = time.perf_counter()
    set_seed(config.seed)
    data = text_data or load_data(config)
    if not is_multilabel(data):
        raise DataError(f"data set '{data.name}' is not multi-label data (load it with "
                        "contrastfit.data.multilabel.load_multilabel)")
    names = data.label_names
    train, validation = prepare(config, data)
    pooling = config.pooling or default_pooling(config.model)
    hparams = {**get_method(config.method).defaults_for(len(train)), **config.hparams}
    backbone, tokenizer = load_backbone(config.model, trust_remote_code=config.trust_remote_code)
    encoder = TextEncoder(backbone, pooling)
    method = create_multilabel_method(config.method, len(names), encoder.hidden_size, **hparams)
    model = ContrastiveClassifier(encoder, tokenizer, method, names, config.max_length,
                                  info={"base_model": config.model, "multi_label": True})
    train_ds = tokenize_dataset(train, tokenizer, model.max_length)
    model.method.prepare(model, train_ds)
    epochs, max_steps = resolve_schedule(config, train_ds["labels"])
    selecting = (config.select_best and validation is not None and len(validation) > 0
                 and method.trains_encoder and not method.frozen_head_stage)
    eval_ds = tokenize_dataset(validation, tokenizer, model.max_length) if selecting else None

    steps_per_epoch = max(1, math.ceil(len(train_ds) / (config.batch_size * config.gradient_accumulation_steps)))
    total_steps = max_steps if max_steps > 0 else math.ceil(epochs * steps_per_epoch)
    selection_args = _selection_args(config, "classification", eval_ds, total_steps)
    callbacks = list(callbacks or [])
    if eval_ds is not None and config.early_stopping_patience:
        from transformers import EarlyStoppingCallback

        callbacks.append(EarlyStoppingCallback(early_stopping_patience=config.early_stopping_patience))
    args = trainer_arguments(config, epochs=epochs, max_steps=max_steps, selection=selection_args)
    collator = DataCollatorWithPadding(tokenizer)
    trainer = _trainer_class(kit)(
        model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds, data_collator=collator,
        compute_metrics=compute_metrics(names, metric, kit) if eval_ds is not None else None,
        balanced_batches=config.sampler == "balanced", gradient_cache_chunk=config.gradient_cache_chunk,
        callbacks=callbacks or None)
    if not config.progress:
        trainer.remove_callback(PrinterCallback)
    t_setup = time.perf_counter()
    resume_from = resume_checkpoint(output) if config.resume else None
    head_init = None
    if config.head_init == "probe" and resume_from is None:
        head_init = fit_head(model, train_ds, collator, config.seed)
    train_loss = None
    if method.trains_encoder:
        with _weights_only_loading(resume_from):
            train_output = trainer.train(resume_from_checkpoint=resume_from)
        train_loss = float(train_output.training_loss)
        if trainer.state.global_step < trainer.state.max_steps and not _stopped_early(trainer):
            return TrainResult({"interrupted_at_step": trainer.state.global_step,
                                "checkpoint": last_checkpoint(output)}, model)
    head_stage = None
    if method.frozen_head_stage or config.refit_head:
        head_stage = fit_head(model, train_ds, collator, config.seed)
    model.eval()
    # per-label thresholds on validation (0.5 without it)
    if validation is not None and len(validation) > 0:
        from ..data.types import TEXT, TEXT_PAIR

        pairs = validation[TEXT_PAIR] if TEXT_PAIR in validation.column_names else None
        probs = model.predict_proba(validation[TEXT], pairs)
        thresholds, rule = choose_thresholds(probs, np.asarray(validation[LABEL]))
    else:
        thresholds, rule = choose_thresholds(None, None)
    model.info["thresholds"] = thresholds or [0.5] * len(names)
    model.info["threshold_rule"] = rule
    t_train = time.perf_counter()

    metrics: dict[str, Any] = {}
    if validation is not None:
        metrics["validation"] = evaluate_model(model, validation)
    if config.evaluate_test and data.test is not None:
        metrics["test"] = evaluate_model(model, data.test)
    t_eval = time.perf_counter()

    training = {k: getattr(config, k) for k in (
        "batch_size", "learning_rate", "weight_decay", "warmup_ratio", "gradient_accumulation_steps",
        "max_length", "fp16", "bf16", "min_steps", "refit_head", "head_init", "sampler", "gradient_cache_chunk")}
    selection = None
    if selecting:
        evals, best_step = evaluation_history(trainer.state)
        best_value = next((e.get(metric) for e in evals if e["step"] == best_step), None)
        selection = {"metric": metric, "best_step": best_step, "best_value": best_value, "evaluations": evals,
                     "stopped_early": bool(config.early_stopping_patience)
                     and trainer.state.global_step < trainer.state.max_steps,
                     "rule": "the checkpoint with the best validation metric at threshold 0.5, ties broken by the "
                             "lower validation BCE, is kept (Trainer load_best_model_at_end)"}
    training.update(epochs=epochs if method.trains_encoder else 0, steps=trainer.state.global_step,
                    selection=selection, pooling=pooling, train_loss=train_loss, resumed_from=resume_from,
                    head_init=head_init, head_stage=head_stage, world_size=trainer.args.world_size,
                    thresholds=dict(zip(names, model.info["thresholds"])), threshold_rule=rule)
    seed = config.seed if config.sample_seed is None else config.sample_seed
    description = {
        "name": data.name, "source": data.source, "task": "classification", "multi_label": True,
        "label_names": names, "text_pair": data.has_pairs,
        "sampling": {"shots": config.shots, "shots_rule": "at least K texts per label" if config.shots else None,
                     "train_size": config.train_size, "validation_size": config.validation_size,
                     "sample_seed": seed, "sample_index": config.sample_index},
        "train_label_counts": dict(zip(names, label_counts(train).tolist())),
    }
    for split, ds in (("train", train), ("validation", validation), ("test", data.test)):
        if ds is not None:
            description[f"{split}_size"] = len(ds)
            description[f"{split}_hash"] = data_hash(ds)
    result = {
        "method": config.method,
        "multi_label": True,
        "hparams": method.hparams,
        "model": config.model,
        "seed": config.seed,
        "data": description,
        "training": training,
        "metrics": metrics,
        **record_provenance(trainer, config.tags, t0, t_setup, t_train, t_eval),
    }
    model.info.update({k: result[k] for k in ("model", "seed", "training", "versions")})
    model.info["base_model"] = config.model
    model.info["data"] = {**description, "train_rows": row_sketch(train)}
    if world()[0] != 0:
        return TrainResult(result, model)
    if keep:
        if config.save_model:
            model.save_pretrained(output)
        write_json_atomic(results_path, result)
        if config.save_model:
            from ..card import write_model_card

            write_model_card(output)
        if not config.keep_checkpoints:
            shutil.rmtree(output / CHECKPOINT_DIR, ignore_errors=True)
    if config.progress:
        summary = {split: {k: round(m[k], 4) for k in MULTILABEL_HEADLINE if k in m} for split, m in metrics.items()}
        print(f"{config.method} (multi-label): {json.dumps(summary)}  ({t_train - t_setup:.0f}s training)")
    return TrainResult(result, model)
