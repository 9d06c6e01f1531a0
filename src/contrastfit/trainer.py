"""The one Trainer of every run, whatever its task shape, and a classifier run's schedule.

:class:`ContrastfitTrainer` adds these to the library's Trainer, which keeps the rest
(optimiser and schedule, checkpoints and ``--resume``, mixed precision, torchrun / accelerate DDP,
logging integrations, progress bars):

* the task shape's training batches: for contrastive methods the class-balanced sampler
  (:class:`~contrastfit.data.ClassBalancedBatchSampler`, pitfall 2), for label sets
  :class:`~contrastfit.data.multilabel.MultiLabelBatchSampler`, for several tasks the task schedule
  (:class:`~contrastfit.multitask.schedule.TaskBatchSampler`); the sampler is built in
  :meth:`~ContrastfitTrainer.get_train_dataloader`, so it is what the trainer really feeds (pitfall 5);
* the parts of a composite loss (``ce``, ``scl``, a multi-task model's task objectives), which the
  model returns in its output (``ClassifierOutput.loss_parts``), are logged next to the total;
* parameters on their own learning rate: a method's (``Method.param_groups``), a multi-task model's heads;
* the task shape's evaluation where the library's loop does not fit (a multi-task run scores every task);
* with ``gradient_cache_chunk``, gradient caching in :meth:`ContrastfitTrainer.training_step`
  (:mod:`contrastfit.gradcache`): the whole batch in the loss, the encoder's memory of one chunk,
  also across DDP processes;
* a checkpoint's files get the umask's modes (:func:`checkpoint_modes`), not the private ``0o600`` of
  the temporary file safetensors writes through;
* with ``memory_size``, a cross-batch memory (:mod:`contrastfit.memory`) attached to the method for
  the duration of :meth:`ContrastfitTrainer.train` (in its checkpoints, not in the saved model).

:func:`tokenize_dataset`, :func:`with_method_defaults` and :func:`resolve_schedule` prepare a
classifier run's rows and schedule; :func:`build_trainer` builds its Trainer on the pipeline's steps
(:func:`contrastfit.pipeline.trainer_arguments`, :func:`contrastfit.pipeline.make_trainer`). The
training job (:mod:`contrastfit.training`, which re-exports all of it) builds its Trainer here, for
every task shape (:mod:`contrastfit.shapes`).
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any, Callable, Iterable

import datasets
from datasets.fingerprint import Hasher
import torch
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding, Trainer, TrainerCallback

from .atomic import umask_mode
from .data.types import LABEL, TEXT, TEXT_PAIR
from .evaluation.metrics import classification_metrics, regression_metrics
from .gradcache import GradientCache, check_gradient_cache
from .memory import attach_memory, check_checkpoint_memory, check_memory, detach_memory
from .methods import get_method
from .methods.base import Method, ParamGroup
from .pipeline import LOWER_IS_BETTER, SELECTION_KEY, grouped_optimizer, make_trainer, tie_broken, trainer_arguments
from .modeling import ContrastiveClassifier

DEFAULT_LEARNING_RATE = 5e-5
DEFAULT_MIN_STEPS = 60
#: Fewer optimisation steps than this leave the encoder close to the pretrained one: such a run warns.
MIN_USEFUL_STEPS = 10
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "labels")
#: ``(training rows, batch size, seed) -> batch sampler``: what a task shape gives the Trainer for its batches.
BatchSamplerFactory = Callable[[Any, int, int], Iterable[list[int]]]


def label_batches(sampler_class: Any) -> BatchSamplerFactory:
    """Batches of ``sampler_class(labels, batch_size, seed=seed)`` over the rows' ``labels`` (the
    class-balanced sampler, label sets' sampler)."""
    return lambda rows, batch_size, seed: sampler_class(rows["labels"], batch_size, seed=seed)


class ContrastfitTrainer(Trainer):
    """``transformers.Trainer`` for every task shape's model: the shape's training batches, the loss's
    terms logged, per-part learning rates, the shape's evaluation, gradient caching, a cross-batch
    memory, and checkpoints with the umask's modes.

    * ``batch_sampler(dataset, batch_size, seed)``: the sampler of the training batches (the
      class-balanced one, label sets' one, a multi-task schedule), built in
      :meth:`get_train_dataloader`, so it is what the trainer really feeds (pitfall 5); None: the
      library's shuffled batches;
    * ``param_groups(model)``: parameters on their own learning rate (:class:`~contrastfit.methods.ParamGroup`:
      a method's own, e.g. SoftTriple's centres, pitfall 3; a multi-task model's heads); every other
      trainable parameter at the main learning rate;
    * ``evaluator(model, batch_size)``: the validation metrics (``{name: value}``, with
      ``selection_score``) in place of the library's loop over ``eval_dataset`` (a multi-task run
      scores every task);
    * the terms the model returns in its output (``loss_parts``: a method's CE and contrastive terms,
      a multi-task model's task objectives) are added up in training, detached and where they are (no
      device synchronisation per step), until :meth:`log` reports each one's mean since the last log
      as ``loss_<name>`` (over the steps that returned that term);
    * ``gradient_cache_chunk`` and ``memory_size``: see :meth:`training_step` and :meth:`train`."""

    def __init__(self, *args, batch_sampler: BatchSamplerFactory | None = None,
                 param_groups: Callable[[torch.nn.Module], list[ParamGroup]] | None = None,
                 evaluator: Callable[[torch.nn.Module, int], dict[str, float]] | None = None,
                 gradient_cache_chunk: int | None = None, memory_size: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._part_sums: dict[str, tuple[torch.Tensor, int]] = {}  # loss part -> (sum since the last log, count)
        self.batch_sampler = batch_sampler
        self.param_groups = param_groups
        self.evaluator = evaluator
        self.gradient_cache_chunk = gradient_cache_chunk
        if gradient_cache_chunk is not None:
            check_gradient_cache(self._model().method, gradient_cache_chunk)
        self.memory_size = memory_size
        if memory_size is not None:
            check_memory(self._model().method, memory_size)

    def _model(self) -> torch.nn.Module:
        return self.accelerator.unwrap_model(self.model)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        parts = outputs.get("loss_parts") if isinstance(outputs, dict) else None
        if model.training and parts:
            for key, value in parts.items():
                value = value.detach().float().mean()  # the mean: DataParallel gathers one value per device
                total, count = self._part_sums.get(key, (0.0, 0))
                self._part_sums[key] = (total + value, count + 1)
        return (loss, outputs) if return_outputs else loss

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        """The library's schedule (linear warm-up, then linear decay), with the warm-up capped at
        ``num_training_steps - 1`` steps (:func:`capped_warmup`): the last step, at least, trains at a
        learning rate above 0 (a 1-step run with warm-up ratio 0.1 would otherwise take its only step at
        0 and save the pretrained encoder unchanged). A run of fewer than :data:`MIN_USEFUL_STEPS` steps
        warns, with its numbers (:func:`short_schedule_warning`). ``scheduled_warmup_steps`` is what the
        schedule used."""
        if self.lr_scheduler is not None:
            return self.lr_scheduler
        ratio_or_steps = self.args.warmup_steps
        self.scheduled_warmup_steps = capped_warmup(self.args.get_warmup_steps(num_training_steps), num_training_steps)
        if num_training_steps < MIN_USEFUL_STEPS:
            # attributed here, to contrastfit (the CLI hides transformers' own UserWarnings)
            warnings.warn(short_schedule_warning(self, num_training_steps), stacklevel=1)
        # the library reads an int >= 1 as steps and a fraction below 1 as a ratio (0: none)
        self.args.warmup_steps = self.scheduled_warmup_steps
        try:
            return super().create_scheduler(num_training_steps, optimizer)
        finally:
            self.args.warmup_steps = ratio_or_steps

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        """The library's save, then the umask's modes for a checkpoint's files (:func:`checkpoint_modes`):
        safetensors writes ``model.safetensors`` through a private (``0o600``) temporary file, which a
        killed run would otherwise leave behind."""
        super()._save(output_dir, state_dict)
        folder = output_dir if output_dir is not None else self.args.output_dir
        if self.args.should_save and os.path.dirname(os.path.abspath(folder)) == os.path.abspath(self.args.output_dir):
            checkpoint_modes(folder)

    def _save_checkpoint(self, model, trial) -> None:
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            checkpoint_modes(os.path.join(self._get_output_dir(trial=trial),
                                          f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"))

    def log(self, logs: dict[str, float], *args, **kwargs) -> None:
        if self._part_sums and "loss" in logs:
            for key, (total, count) in self._part_sums.items():
                logs[f"loss_{key}"] = round(float(total) / count, 6)
            self._part_sums = {}
        super().log(logs, *args, **kwargs)

    def training_step(self, model, inputs, num_items_in_batch=None):
        """With ``gradient_cache_chunk`` set: the library's step (loss on the whole batch, scaled for
        gradient accumulation, ``accelerator.backward`` with its mixed-precision scaling) runs with the
        encoder's calls embedded in chunks without a graph; then each chunk is re-encoded with the
        same random state and autocast and back-propagated with its cached gradient, which already
        carries those scalings (:mod:`contrastfit.gradcache`). Without it: the library's step."""
        if self.gradient_cache_chunk is None:
            return super().training_step(model, inputs, num_items_in_batch)
        from torch.nn.parallel import DistributedDataParallel

        # under DDP: the loss and every chunk but the last without gradient synchronisation, the last
        # chunk through the DDP forward, so that DDP all-reduces once (contrastfit.gradcache)
        ddp = model if isinstance(model, DistributedDataParallel) else None
        cache = GradientCache(self._model().encoder, self.gradient_cache_chunk, ddp=ddp)
        with cache.caching():
            loss = super().training_step(model, inputs, num_items_in_batch)
        cache.backward()
        return loss

    def train(self, *args, **kwargs):
        """The library's training. With ``memory_size``: an empty cross-batch memory is attached to the
        method first (:func:`contrastfit.memory.attach_memory`; a resumed run then loads the
        checkpoint's memory with the weights) and detached when training ends, so that the saved
        model does not carry it. A checkpoint to resume from must have been saved with the same
        memory size (or none without one)."""
        checkpoint = kwargs.get("resume_from_checkpoint", args[0] if args else None)
        if isinstance(checkpoint, (str, os.PathLike)):
            check_checkpoint_memory(checkpoint, self.memory_size)
        if self.memory_size is None:
            return super().train(*args, **kwargs)
        attach_memory(self._model(), self.memory_size)
        try:
            return super().train(*args, **kwargs)
        finally:
            detach_memory(self._model())

    def get_train_dataloader(self) -> DataLoader:
        if self.batch_sampler is None:
            return super().get_train_dataloader()
        dataset = self.train_dataset
        loader = DataLoader(
            dataset,
            batch_sampler=self.batch_sampler(dataset, self._train_batch_size, self.args.seed),
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory,
        )
        return self.accelerator.prepare(loader)

    def create_optimizer(self, model=None):
        """The Trainer's optimiser (:func:`contrastfit.pipeline.grouped_optimizer`): each of the
        ``param_groups`` at its own learning rate, and the main learning rate for every other trainable
        parameter."""
        if self.optimizer is not None:
            return self.optimizer
        model = self._model()
        trainable = {id(p) for p in model.parameters() if p.requires_grad}
        own = {}  # id(parameter) -> its ParamGroup
        for group in self.param_groups(model) if self.param_groups else []:
            for param in group.params:
                if id(param) not in trainable:
                    raise ValueError(f"parameter group '{group.name}' holds a parameter that is not a trainable "
                                     "parameter of the model")
                if id(param) in own:
                    raise ValueError(f"a parameter is in two parameter groups, '{own[id(param)].name}' and "
                                     f"'{group.name}'")
                own[id(param)] = group
        self.optimizer = grouped_optimizer(
            self, model, lambda name, param: (g.name, g.lr, g.weight_decay) if (g := own.get(id(param))) else None)
        return self.optimizer

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """The library's evaluation, or with an ``evaluator``, its metrics logged and returned as
        ``eval_<name>`` (``eval_selection_score`` is what the Trainer keeps the best checkpoint by)."""
        if self.evaluator is None:
            return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        scores = self.evaluator(self._model(), self.args.per_device_eval_batch_size)
        metrics = {f"{metric_key_prefix}_{k}": v for k, v in scores.items()}
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics


def checkpoint_modes(folder: str | os.PathLike) -> None:
    """Give the files of a Trainer checkpoint ``folder`` the mode the umask gives a new file
    (:func:`contrastfit.atomic.umask_mode`), as every other file contrastfit writes has; nothing when
    the folder is gone (rotated away)."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_file(follow_symlinks=False):
                mode = umask_mode(mode=entry.stat(follow_symlinks=False).st_mode)
                if entry.stat(follow_symlinks=False).st_mode & 0o7777 != mode:
                    os.chmod(entry.path, mode)
        except OSError:  # removed meanwhile (another process rotating checkpoints)
            continue


def capped_warmup(warmup_steps: int, total_steps: int) -> int:
    """Warm-up steps of a ``total_steps`` run: the library's (``ceil(ratio * total)``), but at most
    ``total_steps - 1``, so that the learning rate leaves 0 before the run ends."""
    return max(0, min(int(warmup_steps), total_steps - 1))


def short_schedule_warning(trainer: Trainer, total_steps: int) -> str:
    """The one-line warning for a run of fewer than :data:`MIN_USEFUL_STEPS` optimisation steps, with
    what made the number: e.g. ``1 optimisation step (8 examples, batch 16, 1 epoch, no warm-up): ...``."""
    args = trainer.args
    parts = []
    try:
        parts.append(f"{len(trainer.train_dataset)} examples")
    except TypeError:
        pass
    batch = getattr(trainer, "_train_batch_size", args.per_device_train_batch_size) * args.world_size
    parts.append(f"batch {batch}" + (f" x {args.gradient_accumulation_steps} accumulated"
                                     if args.gradient_accumulation_steps > 1 else ""))
    if args.max_steps <= 0:
        parts.append(f"{args.num_train_epochs:g} epoch{'' if args.num_train_epochs == 1 else 's'}")
    warmup = getattr(trainer, "scheduled_warmup_steps", 0)
    parts.append(f"{warmup} warm-up step{'' if warmup == 1 else 's'}" if warmup else "no warm-up")
    return (f"{total_steps} optimisation step{'' if total_steps == 1 else 's'} ({', '.join(parts)}): fewer than "
            f"{MIN_USEFUL_STEPS} steps leave the encoder close to the pretrained one; train longer (more epochs or "
            "examples, or leave --epochs out for at least --min-steps steps)")


def tokenize_dataset(ds: datasets.Dataset, tokenizer, max_length: int) -> datasets.Dataset:
    """Tokenise without padding (the collator pads each batch to its own longest sequence)."""
    has_pair = TEXT_PAIR in ds.column_names

    def encode(batch):
        enc = tokenizer(batch[TEXT], batch[TEXT_PAIR] if has_pair else None, truncation=True, max_length=max_length)
        enc["labels"] = batch[LABEL]
        return enc

    # A fingerprint of our own: datasets would otherwise hash ``encode`` by pickling the tokenizer it
    # closes over, 0.8 s a call (half of a few-shot run's time on a GPU). Nothing is cached either way.
    fingerprint = Hasher.hash([ds._fingerprint, type(tokenizer).__name__, getattr(tokenizer, "name_or_path", ""),
                               len(tokenizer), max_length, has_pair])
    out = ds.map(encode, batched=True, remove_columns=ds.column_names, desc="tokenize", load_from_cache_file=False,
                 new_fingerprint=fingerprint)
    return out.select_columns([c for c in MODEL_INPUTS if c in out.column_names])


def method_schedule(cls: Any) -> dict[str, Any]:
    """The learning rate and minimum steps a method of class ``cls`` trains with where they are left
    unset, and its WiSE-FT weight where it declares one: its ``training_defaults`` over the global ones
    (no minimum for a method with a step rule of its own,
    :meth:`~contrastfit.methods.base.Method.training_steps`: SetFit's pairs; no interpolation unless
    declared)."""
    schedule = {"learning_rate": DEFAULT_LEARNING_RATE, "min_steps": DEFAULT_MIN_STEPS, **cls.training_defaults}
    if cls.training_steps.__func__ is not Method.training_steps.__func__:
        schedule.pop("min_steps")
    return schedule


def with_method_defaults(config: Any, cls: Any = None) -> Any:
    """``config`` with the settings left at None filled in from the schedule of its method's class
    (``cls``, default: the registered method's; :func:`method_schedule`), else the global defaults."""
    from dataclasses import replace

    cls = cls or (get_method(config.method).cls if config.method else None)
    own = method_schedule(cls) if cls is not None else {}
    fill = {"learning_rate": own.get("learning_rate", DEFAULT_LEARNING_RATE),
            "min_steps": own.get("min_steps", DEFAULT_MIN_STEPS), "wise_ft": own.get("wise_ft")}
    return replace(config, **{k: v for k, v in fill.items() if getattr(config, k) is None})


def resolve_schedule(config: Any, train_labels) -> tuple[float, int]:
    """(epochs, max_steps) for the Trainer. ``--epochs`` wins; else the method's own step rule
    (:meth:`Method.training_steps`, e.g. SetFit's pair count); else 3 epochs, or as many as it takes
    to reach ``min_steps`` optimisation steps (a 32-example few-shot set would otherwise get 6)."""
    config = with_method_defaults(config)
    n_train = len(train_labels)
    if config.epochs is not None:
        return float(config.epochs), -1
    steps = get_method(config.method).cls.training_steps(train_labels, config.batch_size * config.gradient_accumulation_steps)
    if steps is not None:
        return 1.0, max(1, int(steps))
    steps_per_epoch = max(1, math.ceil(n_train / (config.batch_size * config.gradient_accumulation_steps)))
    return float(max(3, math.ceil(config.min_steps / steps_per_epoch))), -1


def selection_metric(config: Any, task: str) -> str:
    return config.metric_for_best or ("accuracy" if task == "classification" else "mse")


def _compute_metrics(label_names: list[str] | None, metric: str):
    """Validation metrics for the Trainer's evaluation, plus :data:`SELECTION_KEY`: the chosen metric
    (negated where lower is better) plus ``1e-6 (1 - tanh(loss))``, so that of two evaluations with
    the same accuracy (common on a small validation set) the one with the lower validation loss
    wins, and never the untrained step that merely came first."""
    import numpy as np

    def compute(eval_pred) -> dict[str, float]:
        logits, labels = eval_pred.predictions, eval_pred.label_ids
        logits = np.asarray(logits[0] if isinstance(logits, tuple) else logits, dtype=np.float64)
        if label_names is None:
            m = regression_metrics(labels, logits[:, 0])
            loss = float(np.mean((logits[:, 0] - labels) ** 2))
        else:
            m = classification_metrics(labels, logits.argmax(axis=-1), label_names)
            shifted = logits - logits.max(axis=1, keepdims=True)
            log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
            loss = float(-log_p[np.arange(len(labels)), labels.astype(int)].mean())
        out = {k: float(v) for k, v in m.items() if isinstance(v, (int, float))}
        out["loss"] = loss
        value = out[metric] if metric in out else loss
        score = -value if metric in LOWER_IS_BETTER else value
        out[SELECTION_KEY] = score if metric == "loss" else tie_broken(score, loss)
        return out

    return compute


def build_trainer(config: Any, model: ContrastiveClassifier, train_ds: datasets.Dataset,
                  epochs: float, *, max_steps: int = -1, eval_ds: datasets.Dataset | None = None,
                  callbacks: list[TrainerCallback] | None = None, compute_metrics: Any = None,
                  batch_sampler: BatchSamplerFactory | None = None) -> ContrastfitTrainer:
    """The :class:`ContrastfitTrainer` of one run (:func:`contrastfit.pipeline.trainer_arguments` and
    :func:`contrastfit.pipeline.make_trainer`: ``callbacks`` added, early stopping with ``eval_ds``,
    silent with ``config.progress`` off). With ``eval_ds``, the validation metrics are
    ``compute_metrics`` (default: the single-label ones, :func:`_compute_metrics`)."""
    config = with_method_defaults(config)
    n_train = len(train_ds) if train_ds is not None else 0
    steps_per_epoch = max(1, math.ceil(n_train / (config.batch_size * config.gradient_accumulation_steps)))
    total_steps = max_steps if max_steps > 0 else math.ceil(epochs * steps_per_epoch)
    evaluating = eval_ds is not None
    args = trainer_arguments(config, epochs=epochs, max_steps=max_steps, total_steps=total_steps, evaluating=evaluating)
    return make_trainer(
        ContrastfitTrainer, config, args, evaluating=evaluating, callbacks=callbacks,
        model=model,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        data_collator=DataCollatorWithPadding(model.tokenizer),
        compute_metrics=(compute_metrics or _compute_metrics(model.label_names, selection_metric(config, model.task)))
        if evaluating else None,
        batch_sampler=batch_sampler,
        param_groups=lambda m: m.method.param_groups(m),
        gradient_cache_chunk=config.gradient_cache_chunk,
        memory_size=config.memory_size,
    )
