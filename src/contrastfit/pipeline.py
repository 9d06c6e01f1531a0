"""The steps of the one training job (:func:`contrastfit.training.train`'s, whatever its task shape:
one label per text, label sets, stage 1 alone (:func:`contrastfit.pretrain.pretrain`), several tasks
(:func:`contrastfit.training.train_multitask`)): prepare -> fit -> evaluate -> write.

1. **prepare** (the shape's): :func:`open_output` refuses an output folder that holds another run (or
   returns the finished run's record to a resumed job); the job loads and samples its data, builds its
   model and its Trainer (:func:`trainer_arguments`, :func:`make_trainer`: the same optimisation,
   checkpoint, evaluation and early-stopping settings for every job);
2. **fit**: :func:`fit` trains, resuming from the newest complete checkpoint
   (:func:`contrastfit.checkpoints.resume_checkpoint`, every ``torch.load`` weights-only:
   :func:`contrastfit.checkpoints.weights_only_loading`), and
   says whether a callback interrupted the run; :func:`selection_record` is what validation
   selection did;
3. **evaluate** (the job's own metrics), timed by the job's :class:`Clock`;
4. **write**: :func:`write_outputs` saves the model, the run's :class:`~contrastfit.record.Record`
   (``results.json``, atomically) and the model card, removes the checkpoints, prints the closing line
   (:func:`print_summary`) and returns the run's result.

The job returns a :class:`TrainResult`: the record as a dict, with the model as ``.model``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments

from .atomic import check_output, claim_folder
from .card import write_model_card
from .checkpoints import CHECKPOINT_DIR, last_checkpoint, weights_only_loading
from .distributed import cpu_processes, world
from .errors import ConfigError
from .modeling import ContrastiveClassifier
from .progress import progress_bars
from .record import RESULTS_NAME, Interrupted, Record, read_record

#: Validation metrics where lower is better (everything else: higher is better).
LOWER_IS_BETTER = {"mse", "loss"}
#: The key the Trainer selects on: the chosen metric, ties broken by the lower validation loss.
SELECTION_KEY = "selection_score"
TIE_BREAK = 1e-6


def tie_broken(score: float, loss: float) -> float:
    """A selection score (higher is better) plus ``1e-6 (1 - tanh(loss))``: of two evaluations with the same
    score (common on a small validation set) the one with the lower validation loss wins."""
    return score + TIE_BREAK * (1.0 - math.tanh(loss))


class Clock:
    """The phases of a run: :meth:`mark` ends the phase ``name`` (``setup``, ``train``, ``eval``);
    ``timings`` holds ``{"<name>_s": seconds}``, the record's ``timings``."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self.timings: dict[str, float] = {}

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[f"{name}_s"] = now - self._last
        self._last = now


# ---------------------------------------------------------------------------------------------
# Prepare: the output folder and the Trainer
# ---------------------------------------------------------------------------------------------

def input_paths(config: Any) -> list[str]:
    """Every setting of ``config`` (a dataclass, its nested dataclasses, lists and dicts) other than its
    ``output`` that names an existing file or folder: the data and models a run reads, which its output
    folder must not be or hold (:func:`contrastfit.atomic.check_output`)."""
    found: list[str] = []

    def walk(value: Any, depth: int) -> None:
        if depth > 3:
            return
        if isinstance(value, (str, os.PathLike)):
            if os.fspath(value) and os.path.exists(value):
                found.append(os.fspath(value))
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                if f.name != "output":
                    walk(getattr(value, f.name), depth + 1)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item, depth + 1)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item, depth + 1)

    walk(config, 0)
    return found


def open_output(output: Path, resume: bool, result_class: type[TrainResult], *, option: str = "--output",
                resume_option: str = "--resume", inputs: Iterable[str] = ()) -> TrainResult | None:
    """The finished run's result when ``output`` holds one and ``resume`` is set (None when it holds none);
    a one-line :class:`ConfigError` when it holds a finished run and ``resume`` is not set, or an
    unfinished one (checkpoints) and ``resume`` is not set. ``option`` and ``resume_option`` name the
    settings in the message. First :func:`contrastfit.atomic.check_output` refuses an output that would put
    the user's own files at risk (one that holds ``inputs``, or files contrastfit did not write)."""
    check_output(output, inputs=inputs, option=option)
    if (output / RESULTS_NAME).is_file():
        if resume:
            return result_class.of(read_record(output / RESULTS_NAME), output=str(output))
        raise ConfigError(f"{output} already holds a finished run ({RESULTS_NAME}); choose another {option}")
    if not resume and last_checkpoint(output) is not None:
        raise ConfigError(f"{output} holds an unfinished run; resume it ({resume_option}) or choose another {option}")
    return None


def trainer_arguments(config: Any, *, max_steps: int, total_steps: int, evaluating: bool, epochs: float = 3.0,
                      train_batch_size: int | None = None) -> TrainingArguments:
    """The ``transformers.TrainingArguments`` of one run of ``config`` (a
    :class:`~contrastfit.config.TrainConfig`, or any object with the same optimisation fields, e.g.
    :class:`contrastfit.multitask.MultiTaskConfig`): AdamW, linear decay after ``warmup_ratio`` of the
    steps (a fraction below 1 is a ratio to the library), checkpoints in ``<output>/checkpoints`` (one
    kept, besides the best), ``max_steps`` (or ``epochs`` when it is -1) and the training batch size
    (``train_batch_size``, default ``config.batch_size``).

    With ``evaluating``: evaluation on validation about five times in ``total_steps`` (or every
    ``eval_steps``), a checkpoint at each, the best loaded at the end (by :data:`SELECTION_KEY`); the
    checkpoints are only the weights when the run keeps no resumable ones. Without: a checkpoint every
    ``save_steps`` when ``save_checkpoints``."""
    if not evaluating:
        selection = {"eval_strategy": "no", "save_strategy": "steps" if config.save_checkpoints else "no",
                     "save_steps": config.save_steps}
    else:
        every = config.eval_steps or max(1, math.ceil(total_steps / 5))
        selection = {"eval_strategy": "steps", "eval_steps": every, "save_strategy": "steps", "save_steps": every,
                     "load_best_model_at_end": True, "metric_for_best_model": SELECTION_KEY, "greater_is_better": True,
                     # only the weights when the run keeps no resumable checkpoints: a save costs a model write
                     "save_only_model": not config.save_checkpoints}
    return TrainingArguments(
        output_dir=str(Path(config.output) / CHECKPOINT_DIR),
        num_train_epochs=epochs,
        max_steps=max_steps,
        per_device_train_batch_size=train_batch_size or config.batch_size,
        per_device_eval_batch_size=max(64, config.batch_size),
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        learning_rate=config.learning_rate,
        weight_decay=config.weight_decay,
        warmup_steps=config.warmup_ratio,
        lr_scheduler_type="linear",
        logging_steps=config.logging_steps,
        save_total_limit=1,
        **selection,
        seed=config.seed,
        data_seed=config.seed,
        fp16=config.fp16,
        bf16=config.bf16,
        use_cpu=cpu_processes(config.use_cpu),
        report_to=config.report_to,
        disable_tqdm=not config.progress,
        remove_unused_columns=False,
        dataloader_pin_memory=torch.cuda.is_available(),
    )


def make_trainer(trainer_class: type[Trainer], config: Any, args: TrainingArguments, *, evaluating: bool,
                 callbacks: list[TrainerCallback] | None = None, **kwargs: Any) -> Trainer:
    """``trainer_class(args=args, callbacks=..., **kwargs)``. ``callbacks`` (``transformers.TrainerCallback``
    objects) are added to the library's own, then early stopping (``config.early_stopping_patience``)
    when ``evaluating``. With ``config.progress`` off, nothing is printed while training: no progress
    bars (``disable_tqdm``, :func:`trainer_arguments`) and no log dicts (the library then prints each log
    with its ``PrinterCallback``, which is removed; the logs still reach ``log_history`` and
    ``--report-to`` integrations). The run's output folder (``config.output``), where the trainer writes
    its checkpoints, is created and marked as contrastfit's first (:func:`contrastfit.atomic.claim_folder`)."""
    claim_folder(config.output)
    callbacks = list(callbacks or [])
    if evaluating and config.early_stopping_patience:
        from transformers import EarlyStoppingCallback

        callbacks.append(EarlyStoppingCallback(early_stopping_patience=config.early_stopping_patience))
    trainer = trainer_class(args=args, callbacks=callbacks or None, **kwargs)
    if not config.progress:
        trainer.remove_callback(PrinterCallback)
    return trainer


# ---------------------------------------------------------------------------------------------
# Fit
# ---------------------------------------------------------------------------------------------

def grouped_optimizer(trainer: Trainer, model: torch.nn.Module,
                      group_of: Callable[[str, torch.nn.Parameter], tuple[str, float, float | None] | None]) -> Any:
    """The Trainer's optimiser (its class and settings, AdamW by default) over one parameter group per
    (name, learning rate, weight decay): ``group_of(name, parameter)`` places a trainable parameter in a
    group of its own (its name, learning rate and weight decay, None: the Trainer's rule), or None: the
    ``main`` group at the main learning rate. The Trainer's weight-decay rule (weights decay, biases and
    LayerNorm do not) applies wherever a group sets none."""
    decay = set(trainer.get_decay_parameter_names(model))
    groups: dict[tuple[str, float, float], list[torch.nn.Parameter]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        wd = trainer.args.weight_decay if name in decay else 0.0
        own = group_of(name, param)
        key = ("main", trainer.args.learning_rate, wd) if own is None else (own[0], own[1], wd if own[2] is None else own[2])
        groups.setdefault(key, []).append(param)
    param_groups = [{"params": ps, "lr": lr, "weight_decay": wd, "name": name} for (name, lr, wd), ps in groups.items()]
    optimizer_cls, optimizer_kwargs = trainer.get_optimizer_cls_and_kwargs(trainer.args, model)
    optimizer_kwargs.pop("lr", None)
    return optimizer_cls(param_groups, lr=trainer.args.learning_rate, **optimizer_kwargs)


@dataclass
class Fitted:
    """What :func:`fit` did: the mean training loss, the checkpoint it resumed from, and, when a callback
    stopped training before the planned steps (early stopping aside), ``interrupted``: the step it
    reached and its last checkpoint (:class:`~contrastfit.record.Interrupted`)."""

    train_loss: float
    resumed_from: str | None
    interrupted: Interrupted | None


def fit(trainer: Trainer, output: str | Path, resume_from: str | None = None) -> Fitted:
    """Train with ``trainer``, from the checkpoint ``resume_from`` (:func:`contrastfit.checkpoints.resume_checkpoint`; loaded
    weights-only, :func:`weights_only_loading`) or from the start."""
    with weights_only_loading(resume_from):
        out = trainer.train(resume_from_checkpoint=resume_from)
    state = trainer.state
    interrupted = None
    if state.global_step < state.max_steps and not stopped_early(trainer):
        interrupted = Interrupted(at_step=state.global_step, checkpoint=last_checkpoint(output))
    return Fitted(float(out.training_loss), resume_from, interrupted)


class WeightInterpolation:
    """WiSE-FT (Wortsman et al., CVPR 2022, "Robust fine-tuning of zero-shot models", Eq. 1): after
    fine-tuning, the encoder's weights become ``alpha * theta_ft + (1 - alpha) * theta_0``, theta_0 the
    pretrained ones, before a head is fitted on the interpolated encoder (so the head matches it).

    ``WeightInterpolation(encoder, alpha)`` keeps a copy of the encoder's floating-point weights as
    they are when it is made (pretrained: make it before :func:`fit`); :meth:`apply` mixes them into the
    fine-tuned encoder in place and returns what the run's record keeps. ``alpha = 1`` is the fine-tuned
    encoder, ``alpha = 0`` the pretrained one (a linear probe, once the head is fitted)."""

    def __init__(self, encoder: torch.nn.Module, alpha: float):
        self.alpha = float(alpha)
        self.start = {} if self.alpha == 1 else {k: v.detach().to("cpu", copy=True) for k, v in
                                                 encoder.state_dict().items() if v.is_floating_point()}

    @torch.no_grad()
    def apply(self, encoder: torch.nn.Module) -> dict[str, Any]:
        if self.alpha == 1:  # --wise-ft 1: the fine-tuned weights as they are (the default recipe turned off)
            return {"alpha": 1.0, "tensors": 0, "rule": "alpha = 1: the fine-tuned encoder weights, unchanged"}
        state = encoder.state_dict()
        for name, start in self.start.items():
            weight = state[name]
            weight.mul_(self.alpha).add_(start.to(weight.device, weight.dtype), alpha=1.0 - self.alpha)
        return {"alpha": self.alpha, "tensors": len(self.start),
                "rule": "alpha x fine-tuned + (1 - alpha) x pretrained encoder weights (WiSE-FT), then the head"}

    @staticmethod
    def recorded_alpha(training: dict[str, Any] | None) -> float | None:
        """The weight a finished run's record (its ``training`` section) says was applied: what
        :meth:`apply` returned keeps it as ``alpha``; None for a run without the interpolation."""
        kept = (training or {}).get("wise_ft")
        return kept.get("alpha") if isinstance(kept, dict) else kept

    @classmethod
    def for_run(cls, alpha: float | None, method: Any, refit_head: bool, encoder: torch.nn.Module
                ) -> "WeightInterpolation | None":
        """The interpolation a run with ``--wise-ft alpha`` applies (None without it); refused, in one
        line, for a ``method`` that trains no encoder or fits no head after it (the interpolated encoder
        would keep a head trained on another)."""
        if alpha is None:
            return None
        if alpha != 1 and (not method.trains_encoder or not (method.frozen_head_stage or refit_head)):
            raise ConfigError(f"--wise-ft: {method.name} {'trains no encoder' if not method.trains_encoder else 'fits no head after its encoder'}; "
                              "give it to a two-stage method (e.g. ce-scl-lr) or with --refit-head")
        return cls(encoder, alpha)


def selection_record(trainer: Trainer, patience: int | None) -> dict[str, Any]:
    """What validation selection did in a fitted run: ``best_step`` (the kept checkpoint's step),
    ``evaluations`` (:func:`evaluation_history`) and ``stopped_early`` (``patience`` set and fewer steps
    than planned); the job adds its metric and rule."""
    state = trainer.state
    evals, best_step = evaluation_history(state)
    return {"best_step": best_step, "evaluations": evals,
            "stopped_early": bool(patience) and state.global_step < state.max_steps}


# ---------------------------------------------------------------------------------------------
# Write
# ---------------------------------------------------------------------------------------------

def write_outputs(result_class: type[TrainResult], config: Any, model: Any, record: Record, output: Path | None,
                  *, label: str, shown: dict[str, Any]) -> TrainResult:
    """The last step: the run's result (``result_class``: the record's dict with the model). On the first
    process only (every process of a multi-process run trained and evaluated), and with an ``output``
    folder to keep (None: a temporary one): the model (``config.save_model``), the record as
    ``results.json`` (atomically) and the model card (README.md, from the two records just written),
    the checkpoints removed unless ``config.keep_checkpoints``; with ``config.progress`` the closing line
    (:func:`print_summary` of ``label`` and the metrics ``shown``)."""
    if world()[0] != 0:
        return result_class.of(record, model)
    if output is not None:
        if config.save_model:
            model.save_pretrained(output)
        record.write(output / RESULTS_NAME)
        if config.save_model:
            write_model_card(output)
        if not config.keep_checkpoints:
            shutil.rmtree(output / CHECKPOINT_DIR, ignore_errors=True)
    if config.progress:
        print_summary(label, shown, record.timings["train_s"])
    return result_class.of(record, model, output=None if output is None else str(output))


def _rounded(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return round(value, 4) if isinstance(value, float) else value


def print_summary(label: str, metrics: dict[str, Any], train_s: float) -> None:
    """The closing line: ``LABEL: {split: metrics, 4 decimals}  (Ns training)``."""
    print(f"{label}: {json.dumps(_rounded(metrics))}  ({train_s:.0f}s training)")


class TrainResult(Record):
    """What a job returns: its :class:`~contrastfit.record.Record` (the contents of ``results.json``, typed;
    read as attributes, ``result.metrics["test"].accuracy``, or by key as the JSON has it), with the
    trained model as ``.model`` (loaded from the output folder on first use, with :attr:`model_class`'s
    ``from_pretrained``, when the run had finished earlier) and its folder as ``.output`` (None: a
    temporary one). ``record.base_model`` is the encoder the run started from. A run a callback stopped
    returns ``interrupted`` (:class:`~contrastfit.record.Interrupted`) and nothing else.
    :class:`contrastfit.multitask.MultiTaskResult` and :class:`contrastfit.pretrain.PretrainResult` are
    the same with another model class."""

    #: what ``.model`` loads a finished run's folder with (None: :class:`ContrastiveClassifier`)
    model_class: Any = None
    output: str | None = None
    #: False: loading ``.model`` from the folder shows no progress bar (the run's ``progress``)
    progress: bool = True
    _model: Any = None

    @classmethod
    def of(cls, record: Record, model: Any = None, output: str | None = None) -> TrainResult:
        """The result of ``record``, with ``model`` (None: loaded from ``output`` when asked for)."""
        result = cls(**{f.name: getattr(record, f.name) for f in dataclasses.fields(record)})
        result._model, result.output = model, output
        return result

    @classmethod
    def stopped(cls, interrupted: Interrupted, model: Any = None) -> TrainResult:
        """The result of a run a callback stopped: ``interrupted`` (:attr:`Fitted.interrupted`) and the model."""
        return cls.of(Record(interrupted=interrupted), model)

    @property
    def record(self) -> Record:
        """The record (this result itself, a :class:`~contrastfit.record.Record`)."""
        return self

    @property
    def model(self) -> Any:
        if self._model is None:
            cls = self.model_class
            if cls is None:
                cls = ContrastiveClassifier
            with progress_bars(self.progress):
                self._model = cls.from_pretrained(self.output)
        return self._model


def evaluation_history(state) -> tuple[list[dict[str, Any]], int | None]:
    """A Trainer run's validation evaluations and kept step, from its ``TrainerState``: one dict per
    evaluation (its ``step`` and every ``eval_*`` value of the log without the prefix; the timing
    entries, ``*_runtime`` and ``*_per_second``, left out), and the step of the checkpoint the Trainer
    kept as best (``best_model_checkpoint``; None when it kept none)."""
    evals = [{"step": h["step"], **{k.removeprefix("eval_"): v for k, v in h.items() if k.startswith("eval_")
                                     and not k.endswith(("_runtime", "_per_second"))}}
             for h in state.log_history if any(k.startswith("eval_") for k in h)]
    best_step = None
    if state.best_model_checkpoint:
        best_step = int(Path(state.best_model_checkpoint).name.rsplit("-", 1)[-1])
    return evals, best_step


def stopped_early(trainer: Trainer) -> bool:
    """True when early stopping on validation (``EarlyStoppingCallback``) ended the run."""
    from transformers import EarlyStoppingCallback

    return any(isinstance(cb, EarlyStoppingCallback) and cb.early_stopping_patience_counter >= cb.early_stopping_patience
               for cb in trainer.callback_handler.callbacks)

