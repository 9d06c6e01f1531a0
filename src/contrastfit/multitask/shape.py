"""The multi-task task shape, :class:`MultiTask`: one encoder, one head per task, trained together on the
one job (:func:`contrastfit.training.train`'s steps; :func:`contrastfit.training.train_multitask` gives
the job this shape). What it changes:

* **data**: every task's data, loaded and sampled as a single-task run's with the task's options
  (:class:`TaskData`: each task's splits and its resolved :class:`~contrastfit.multitask.tasks.TaskSpec`);
* **model and batches**: a :class:`~contrastfit.multitask.model.MultiTaskModel`; the training batches come
  from :class:`~contrastfit.multitask.schedule.TaskBatchSampler` (one task per batch, in the order of the
  schedule), the Trainer's batches (:class:`~contrastfit.trainer.ContrastfitTrainer`'s ``batch_sampler``); :class:`MultiTaskCollator` pads a
  batch and adds its ``task_ids``; the model's forward dispatches on them to the task's head and
  objective (times the task's weight); each task's loss (and the parts of ``ce-scl``) is logged as
  ``loss_<task>``;
* **optimiser**: ``learning_rate`` for the encoder and ``head_learning_rate`` for the heads (the report's
  1e-6 and 1e-3, Sec. 5.3.3; our defaults are 5e-5 and 1e-3);
* **evaluation and selection**: every task on its validation split (accuracy, Pearson's r for
  regression, or the task's ``metric``) and their **average**; the kept checkpoint is the one with the
  best average (``select_on="average"``) or the best value of one task (``select_on=NAME``), ties broken
  by the lower mean validation loss; every evaluation, each task's own best step and the kept step are
  recorded;
* **no head stage**;
* **the record** (kind ``multitask``): each task's spec, data description (source, sample, sizes and
  hashes of the training, validation and test rows) and metrics, the schedule and the batches each
  task really got, the selection history, timings and library versions; the folder holds
  ``encoder/``, ``heads.safetensors`` and ``contrastfit.json``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Sequence

import datasets
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import DataCollatorWithPadding, TrainerCallback

from ..config import TrainConfig, load_config_data
from ..data import TextData
from ..data.loading import LABEL, TEXT, TEXT_PAIR, VALIDATION_SPLIT
from ..data.overlap import row_sketch
from ..distributed import launched_processes
from ..encoders import default_pooling
from ..errors import ConfigError
from ..evaluation.metrics import classification_metrics, probability_metrics, regression_metrics
from ..identity import run_identity
from ..pipeline import (LOWER_IS_BETTER, SELECTION_KEY, TrainResult, fit, make_trainer,
                        selection_record, tie_broken, trainer_arguments, write_outputs)
from ..record import Record
from ..shapes import SINGLE_LABEL, PreparedData, Run, TaskShape
from ..methods.base import ParamGroup
from ..trainer import ContrastfitTrainer
from ..versions import library_versions
from .model import MultiTaskModel
from .schedule import TaskBatchSampler
from .tasks import Task, TaskSpec, resolve_task

_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass
class TaskData:
    """A multi-task run's data: each task's splits (its seed's sample drawn) and its resolved spec."""

    prepared: dict[str, PreparedData]
    specs: list[TaskSpec]

    @property
    def validation_sets(self) -> dict[str, datasets.Dataset]:
        """Each task's validation split, where it has rows."""
        return {s.name: v for s in self.specs if (v := self.prepared[s.name].validation) is not None and len(v) > 0}


# ---------------------------------------------------------------------------------------------
# Data: tokenised rows of every task, one data set, a collator that keeps a batch's task
# ---------------------------------------------------------------------------------------------

def tokenize_rows(model: MultiTaskModel, spec: TaskSpec, ds: datasets.Dataset) -> list[dict[str, Any]]:
    """The task's rows tokenised (no padding) as its head reads them, with ``labels``."""
    enc = model.encode_inputs(spec, ds[TEXT], ds[TEXT_PAIR] if spec.pairs else None)
    labels = ds[LABEL]
    keys = list(enc)
    return [{**{k: enc[k][i] for k in keys}, "labels": labels[i]} for i in range(len(ds))]


class TaskRows(Dataset):
    """The tasks' tokenised rows, concatenated in task order (the sampler's global indices); each
    row carries its ``task_ids``."""

    def __init__(self, parts: Sequence[list[dict[str, Any]]]):
        self.rows = [{**row, "task_ids": t} for t, part in enumerate(parts) for row in part]
        self.sizes = [len(p) for p in parts]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.rows[index]


class MultiTaskCollator:
    """Pads a batch of one task's rows (both sentences of a separately encoded pair, each to its own
    longest) and adds ``labels`` (long for classes, float for regression) and ``task_ids``."""

    def __init__(self, tokenizer, tasks: Sequence[TaskSpec]):
        self.pad = DataCollatorWithPadding(tokenizer)
        self.tasks = list(tasks)

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        ids = {int(r["task_ids"]) for r in rows}
        if len(ids) != 1:
            raise ValueError(f"a batch mixes tasks {sorted(ids)}: each batch must hold one task")
        t = ids.pop()
        spec = self.tasks[t]
        batch = dict(self.pad([{k: r[k] for k in _INPUTS if k in r} for r in rows]))
        if spec.separate:
            second = self.pad([{k: r[f"{k}_b"] for k in _INPUTS if f"{k}_b" in r} for r in rows])
            batch.update({f"{k}_b": v for k, v in second.items()})
        dtype = torch.float32 if spec.type == "regression" else torch.long
        batch["labels"] = torch.tensor([r["labels"] for r in rows], dtype=dtype)
        batch["task_ids"] = torch.full((len(rows),), t, dtype=torch.long)
        return batch


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------

def evaluate_task(model: MultiTaskModel, task: str, ds: datasets.Dataset, batch_size: int = 64) -> dict[str, Any]:
    """Metrics of ``task`` on a labelled split (accuracy, F1, macro-F1, MCC, per-class scores and the
    confusion matrix; or Pearson, Spearman and MSE), plus its ``loss`` (cross-entropy or MSE)."""
    spec = model.task(task)
    logits = model.predict_logits(ds[TEXT], ds[TEXT_PAIR] if spec.pairs else None, task=task, batch_size=batch_size)
    labels = np.asarray(ds[LABEL])
    if spec.type == "regression":
        out = regression_metrics(labels, logits[:, 0])
        out["loss"] = out["mse"]
        return out
    out = classification_metrics(labels, logits.argmax(axis=1), spec.label_names)
    out.update(probability_metrics(logits, labels.astype(int)))
    out["loss"] = out["nll"]
    return out


def selection_value(spec: TaskSpec, metrics: dict[str, Any]) -> float:
    """The task's contribution to model selection: its metric, negated where lower is better (mse); an
    undefined correlation (constant predictions) counts as 0."""
    value = float(metrics[spec.metric])
    if math.isnan(value):
        return 0.0
    return -value if spec.metric in LOWER_IS_BETTER else value


def summarize(model: MultiTaskModel, per_task: dict[str, dict[str, Any]], select_on: str = "average") -> dict[str, float]:
    """Flat scalar scores of one evaluation: ``<task>_<metric>`` for the headline metrics, ``average`` (the
    mean of the tasks' selection values), ``loss`` (mean of the tasks' losses) and ``selection_score``."""
    flat: dict[str, float] = {}
    values = {}
    for name, m in per_task.items():
        spec = model.task(name)
        for key, value in m.items():
            if isinstance(value, (int, float)) and key != "n":
                flat[f"{name}_{key}"] = float(value)
        values[name] = selection_value(spec, m)
    flat["average"] = float(np.mean(list(values.values())))
    flat["loss"] = float(np.mean([per_task[n]["loss"] for n in per_task]))
    chosen = flat["average"] if select_on == "average" else values[select_on]
    flat[SELECTION_KEY] = tie_broken(chosen, flat["loss"])
    return flat


# ---------------------------------------------------------------------------------------------
# Trainer
# ---------------------------------------------------------------------------------------------

def task_train_config(config: Any, task: Task) -> TrainConfig:
    """The single-task options of ``task`` (data, columns, sampling) as a :class:`TrainConfig`, so that its
    data are loaded and sampled exactly as ``train`` does."""
    data_task = None if task.type is None else ("regression" if task.type == "regression" else "classification")
    return TrainConfig(data=task.data, text_column=task.text_column, text_pair_column=task.text_pair_column,
                       label_column=task.label_column, validation_data=task.validation_data, test_data=task.test_data,
                       # every task's validation split scores the kept step
                       validation_split=VALIDATION_SPLIT if task.validation_split is None else task.validation_split,
                       task=data_task, shots=task.shots,
                       train_size=task.train_size, validation_size=task.validation_size, seed=config.seed,
                       sample_seed=config.sample_seed, sample_index=config.sample_index)


def schedule_steps(config: Any, steps_per_epoch: int) -> int:
    """Total optimisation steps (see :class:`MultiTaskConfig`)."""
    per_update = config.gradient_accumulation_steps
    if config.max_steps is not None:
        return int(config.max_steps)
    if config.epochs is not None:
        return max(1, math.ceil(config.epochs * steps_per_epoch / per_update))
    return max(math.ceil(3 * steps_per_epoch / per_update), config.min_steps)



class MultiTaskResult(TrainResult):
    """The run's record (the contents of ``results.json``) with the trained :class:`MultiTaskModel` as
    ``.model`` (loaded from the output folder on first use when the run had finished earlier)."""

    model_class = MultiTaskModel


# ---------------------------------------------------------------------------------------------
# The shape
# ---------------------------------------------------------------------------------------------

class MultiTask(TaskShape):
    """Several tasks on one encoder, a head each (the module docstring). ``tasks``: the run's checked
    :class:`~contrastfit.multitask.tasks.Task` list; the run's settings are a
    :class:`~contrastfit.multitask.config.MultiTaskConfig`."""

    def __init__(self, tasks: Sequence[Task]):
        self.tasks = list(tasks)

    result_class = MultiTaskResult

    def check(self, config: Any) -> None:
        if launched_processes() > 1:
            # each batch is one task's, and a sharded batch sampler would hand the processes of one step
            # different tasks: the gradients all-reduced together would mix heads, the gathered rows labels
            raise ConfigError(f"multi-task training runs in one process; launched with {launched_processes()} "
                              "processes: run it without torchrun / accelerate launch")

    def chooses_on_validation(self, config: Any) -> bool:
        return True  # every task's validation split scores the kept step

    def load(self, config: Any, memory: dict[str, Any]) -> dict[str, TextData]:
        """Each task's data, loaded as a single-task run with the task's options loads it."""
        return {task.name: load_config_data(task_train_config(config, task)) for task in self.tasks}

    def sample(self, config: Any, data: dict[str, TextData]) -> TaskData:
        """Each task's sample, drawn as a single-task run draws it, and its resolved spec."""
        prepared: dict[str, PreparedData] = {}
        specs: list[TaskSpec] = []
        for task in self.tasks:
            p = prepared[task.name] = SINGLE_LABEL.sample(task_train_config(config, task), data[task.name])
            labels = p.train[LABEL]
            label_range = [float(min(labels)), float(max(labels))] if p.data.label_names is None else None
            specs.append(resolve_task(task, label_names=p.data.label_names, pairs=p.data.has_pairs,
                                      data_name=task.data, label_range=label_range))
        return TaskData(prepared, specs)

    def configure(self, config: Any, prepared: TaskData) -> Any:
        return config  # each task's objective is in its spec

    def setup(self, run: Run, callbacks: list[TrainerCallback] | None) -> None:
        """The model (a head per task), every task's tokenised rows, the task schedule and the Trainer."""
        config, data = run.config, run.prepared
        run.pooling = config.pooling or default_pooling(config.model)
        model = run.model = MultiTaskModel.from_encoder(config.model, data.specs, pooling=run.pooling,
                                                        max_length=config.max_length,
                                                        trust_remote_code=config.trust_remote_code)
        rows = TaskRows([tokenize_rows(model, spec, data.prepared[spec.name].train) for spec in data.specs])
        specs = data.specs
        sampler = TaskBatchSampler(
            rows.sizes, [spec.batch_size or config.batch_size for spec in specs], config.schedule,
            temperature=config.temperature, seed=config.seed,
            labels=[data.prepared[s.name].train[LABEL] if s.contrastive else None for s in specs],
            balanced=[s.contrastive for s in specs])
        eval_sets = data.validation_sets
        if config.select_on != "average" and config.select_on not in eval_sets:
            raise ConfigError(f"select_on={config.select_on!r}, but that task has no validation split")
        run.selecting = config.select_best and bool(eval_sets)
        run.batches = sampler
        run.trainer = _build_trainer(config, model, rows, sampler, schedule_steps(config, len(sampler)),
                                     eval_sets if run.selecting else None, callbacks)

    def fit(self, run: Run, output: Path) -> bool:
        run.fitted = fit(run.trainer, output, run.resumed_from)
        return not run.fitted.interrupted

    def evaluate(self, run: Run) -> dict[str, Any]:
        """``{task: {split: metrics}}`` on each task's validation and (``evaluate_test``) test rows."""
        return _evaluate_tasks(run.model, run.prepared.specs, run.prepared.prepared, run.config.evaluate_test)

    def conclude(self, run: Run, output: Path | None) -> TrainResult:
        """The record of kind ``multitask`` (each task's spec, data and metrics, the schedule, the
        training), the model's info, both written into ``output``."""
        config, model, trainer, data = run.config, run.model, run.trainer, run.prepared
        specs, per_task = data.specs, run.metrics
        sampler = run.batches
        metrics = _task_metrics(model, per_task)
        training = {
            "steps": trainer.state.global_step, "max_steps": trainer.args.max_steps, "steps_per_epoch": len(sampler),
            "batch_size": config.batch_size, "learning_rate": config.learning_rate,
            "head_learning_rate": config.head_learning_rate or config.learning_rate,
            "weight_decay": config.weight_decay, "warmup_ratio": config.warmup_ratio,
            "gradient_accumulation_steps": config.gradient_accumulation_steps, "max_length": model.max_length,
            "pooling": run.pooling, "fp16": config.fp16, "bf16": config.bf16, "train_loss": run.fitted.train_loss,
            "selection": _selection_record(trainer, model, data.validation_sets, config) if run.selecting else None,
            "resumed_from": run.fitted.resumed_from,
        }
        names = [s.name for s in specs]
        schedule = _schedule_record(config, sampler, names, trainer.state.global_step)
        task_records = {s.name: {"spec": s.to_dict(),
                                 "data": SINGLE_LABEL.describe(task_train_config(config, t), data.prepared[s.name]),
                                 "metrics": per_task[s.name]} for s, t in zip(specs, self.tasks)}
        record = _record(config, specs, task_records, schedule, training, metrics, run.clock.timings,
                         trainer.state.log_history)
        model.info.update(base_model=config.model, seed=config.seed, schedule=schedule, training=training,
                          data={name: {**rec["data"], "train_rows": row_sketch(data.prepared[name].train)}
                                for name, rec in task_records.items()},
                          versions=record.versions)
        return write_outputs(MultiTaskResult, config, model, record, output,
                             label=f"multitask ({', '.join(names)})", shown=metrics)


def _record(config: Any, specs: list[TaskSpec], task_records: dict[str, Any], schedule: dict[str, Any],
            training: dict[str, Any], metrics: dict[str, Any], timings: dict[str, float],
            log_history: list[dict[str, Any]]) -> Record:
    """The run's ``multitask`` record, with its identity: the settings, the resolved tasks and their data."""
    settings = {f.name: getattr(config, f.name) for f in fields(config) if f.name != "tasks"}
    return Record(
        kind="multitask", base_model=config.model, seed=config.seed, tasks=task_records, schedule=schedule,
        select_on=config.select_on, training=training, metrics=metrics, timings=timings,
        versions=library_versions(), tags=config.tags, log_history=log_history,
        identity=run_identity("multitask", method=None, hparams={}, seed=config.seed, model=config.model,
                              settings={**settings, "tasks": [s.to_dict() for s in specs]},
                              data={name: rec["data"] for name, rec in task_records.items()}, tags=config.tags))


def _evaluate_tasks(model: MultiTaskModel, specs: list[TaskSpec], prepared: dict[str, PreparedData],
                    evaluate_test: bool) -> dict[str, dict[str, Any]]:
    """``{task: {split: metrics}}`` on each task's validation and (with ``evaluate_test``) test rows."""
    per_task: dict[str, dict[str, Any]] = {s.name: {} for s in specs}
    for split in ("validation", "test"):
        if split == "test" and not evaluate_test:
            continue
        for s in specs:
            ds = getattr(prepared[s.name], split)
            if ds is not None and len(ds) > 0:
                per_task[s.name][split] = evaluate_task(model, s.name, ds)
    return per_task


def _task_metrics(model: MultiTaskModel, per_task: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The record's ``metrics``: per split, the average over the tasks and each task's headline metrics."""
    metrics: dict[str, Any] = {}
    for split in ("validation", "test"):
        scored = {name: m[split] for name, m in per_task.items() if split in m}
        if scored:
            summary = summarize(model, scored)
            metrics[split] = {"average": summary["average"],
                              **{name: _headline(model.task(name), m) for name, m in scored.items()}}
    return metrics


def _schedule_record(config: Any, sampler: TaskBatchSampler, names: list[str], steps: int) -> dict[str, Any]:
    """The record's ``schedule``: its name, each task's probability and batch size, the batches each got."""
    return {"name": config.schedule, "temperature": config.temperature if config.schedule == "temperature" else None,
            "probabilities": dict(zip(names, map(float, sampler.probabilities))),
            "batch_sizes": dict(zip(names, sampler.batch_sizes)),
            "batches_per_task": dict(zip(names, sampler.task_counts(steps * config.gradient_accumulation_steps)))}


def _headline(spec: TaskSpec, m: dict[str, Any]) -> dict[str, float]:
    keys = ("pearson", "spearman", "mse") if spec.type == "regression" else ("accuracy", "f1", "macro_f1", "mcc")
    return {k: float(m[k]) for k in keys}


def _build_trainer(config: Any, model: MultiTaskModel, rows: TaskRows, sampler: TaskBatchSampler,
                   total_steps: int, eval_sets: dict[str, datasets.Dataset] | None,
                   callbacks: list[TrainerCallback] | None = None) -> ContrastfitTrainer:
    """The Trainer of one multi-task run: ``train``'s (:func:`contrastfit.pipeline.trainer_arguments`,
    :func:`contrastfit.pipeline.make_trainer`) with the task schedule's batches, the heads at
    ``head_learning_rate`` and every task scored on its validation split."""
    evaluating = bool(eval_sets)
    args = trainer_arguments(config, max_steps=total_steps, total_steps=total_steps, evaluating=evaluating,
                             train_batch_size=max(sampler.batch_sizes))
    head_lr = config.head_learning_rate or config.learning_rate

    def evaluator(model: MultiTaskModel, batch_size: int) -> dict[str, float]:
        per_task = {name: evaluate_task(model, name, ds, batch_size=batch_size) for name, ds in eval_sets.items()}
        return summarize(model, per_task, config.select_on)

    return make_trainer(
        ContrastfitTrainer, config, args, evaluating=evaluating, callbacks=callbacks,
        model=model, train_dataset=rows, eval_dataset=eval_sets or None,
        data_collator=MultiTaskCollator(model.tokenizer, model.tasks),
        batch_sampler=lambda rows, batch_size, seed: sampler,
        param_groups=lambda m: [ParamGroup("heads", list(m.heads.parameters()), head_lr)],
        evaluator=evaluator if evaluating else None)


def _selection_record(trainer: ContrastfitTrainer, model: MultiTaskModel, eval_sets: dict[str, Any],
                      config: Any) -> dict[str, Any]:
    history = selection_record(trainer, config.early_stopping_patience)
    evals, best_step = history["evaluations"], history["best_step"]
    per_task_best = {}
    for name in eval_sets:
        spec = model.task(name)
        key = f"{name}_{spec.metric}"
        scored = [e for e in evals if key in e]
        if scored:
            best = max(scored, key=lambda e: selection_value(spec, {spec.metric: e[key]}))
            per_task_best[name] = {"metric": spec.metric, "best_step": best["step"], "best_value": best[key]}
    kept = next((e for e in evals if e["step"] == best_step), None)
    return {"select_on": config.select_on, "best_step": best_step,
            "best_average": kept["average"] if kept else None,
            "per_task_best": per_task_best, "evaluations": evals, "stopped_early": history["stopped_early"],
            "rule": "every task is scored on its validation split at each evaluation; the checkpoint with the best "
                    + ("average of the tasks' selection metrics" if config.select_on == "average"
                       else f"{config.select_on} selection metric")
                    + ", ties broken by the lower mean validation loss, is kept (Trainer load_best_model_at_end)"}
