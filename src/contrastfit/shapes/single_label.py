"""The single-label task shape, :class:`TaskShape`, which every other shape overrides: one label per
text or text pair, a class or a number (a regression target). Classification, regression and
sentence pairs are this shape."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import datasets
from transformers import TrainerCallback

from ..card import label_examples
from ..data import ClassBalancedBatchSampler, TextData, data_hash, load_data, sample_per_class, sample_stratified
from ..data.descriptions import attach_label_descriptions
from ..data.loading import VALIDATION_SPLIT
from ..data.overlap import row_sketch
from ..data.sampling import derive_seed
from ..distributed import launched_processes
from ..encoders import default_pooling
from ..errors import ConfigError
from ..evaluation import evaluate_model, headline
from ..head_stage import train_head
from ..identity import run_identity
from ..methods import get_method
from ..modeling import ContrastiveClassifier
from ..pipeline import Clock, Fitted, TrainResult, WeightInterpolation, fit, selection_record, write_outputs
from ..record import Record
from ..trainer import (BatchSamplerFactory, build_trainer, label_batches, resolve_schedule, selection_metric,
                       tokenize_dataset, with_method_defaults)
from ..versions import library_versions

#: The default recipe: what `contrastfit train --data FILE` trains with no --method (docs/concepts/default-recipe.md).
DEFAULT_METHOD = "ce-scl-lr"
DEFAULT_REGRESSION_METHOD = "ce"
#: The settings a run's record repeats under ``training`` (with what the run resolved: steps, selection, ...).
TRAINING_SETTINGS = ("batch_size", "learning_rate", "weight_decay", "warmup_ratio", "gradient_accumulation_steps",
                     "max_length", "fp16", "bf16", "min_steps", "refit_head", "head_init", "sampler",
                     "gradient_cache_chunk", "memory_size")


@dataclass
class PreparedData:
    """A run's data and the splits it trains, validates and tests on (the seed's samples drawn)."""

    data: TextData
    train: datasets.Dataset
    validation: datasets.Dataset | None
    test: datasets.Dataset | None

    def hashes(self) -> dict[str, Any]:
        """``{split}_size`` and ``{split}_hash`` of each split there is."""
        out: dict[str, Any] = {}
        for split in ("train", "validation", "test"):
            ds = getattr(self, split)
            if ds is not None:
                out[f"{split}_size"] = len(ds)
                out[f"{split}_hash"] = data_hash(ds)
        return out


@dataclass
class Run:
    """One run of the job (:func:`contrastfit.training.train`), filled in by its steps as they go: the
    settings and clock it starts with, the data (:meth:`TaskShape.sample`), the model, Trainer and
    schedule (:meth:`TaskShape.setup`), what fitting resolved (:meth:`TaskShape.fit`) and the metrics
    (:meth:`TaskShape.evaluate`); :meth:`TaskShape.conclude` makes the record of it."""

    config: Any
    clock: Clock
    prepared: Any = None
    model: Any = None
    trainer: Any = None
    train_ds: datasets.Dataset | None = None
    epochs: float = 0.0
    #: the batches' sampler where the shape builds it itself (a multi-task run's task schedule)
    batches: Any = None
    pooling: str = ""
    #: validation selection: of the kept step (by ``metric``), of the head stage's epoch
    selecting: bool = False
    choosing_head_epoch: bool = False
    metric: str | None = None
    label_descriptions: dict[str, str] | None = None
    resumed_from: str | None = None
    fitted: Fitted | None = None
    head_init: dict[str, Any] | None = None
    wise_ft: dict[str, Any] | None = None
    head_stage: dict[str, Any] | None = None
    settled: dict[str, Any] | None = None
    metrics: dict[str, Any] = field(default_factory=dict)


def sampling(config: Any, **extra: Any) -> dict[str, Any]:
    """The record's ``data.sampling``: how the run drew its training sample and validation subset."""
    return {"shots": config.shots, **extra, "train_size": config.train_size, "validation_size": config.validation_size,
            "sample_seed": config.seed if config.sample_seed is None else config.sample_seed,
            "sample_index": config.sample_index}


def validation_choices(config: Any) -> tuple[bool, bool]:
    """What ``config``'s run chooses on its validation split, where it has one: ``(step, head_epoch)``.
    With ``--select-best`` (the default), the kept step of a method whose head trains with the encoder
    (two-stage methods' stage-1 checkpoints have no head to score), and the head epoch of a head stage
    trained by AdamW (a logistic-regression head has no epoch to choose)."""
    method = get_method(config.method or DEFAULT_METHOD).cls
    refit = config.refit_head and not method.frozen_head_stage
    step = method.trains_encoder and not method.frozen_head_stage
    head_epoch = (method.frozen_head_stage or refit) and ("logistic" if refit else method.head_solver) == "adamw"
    return config.select_best and step, config.select_best and head_epoch


def check_batch_size(batch_size: int, sampler: str, method: str | None = None, memory_size: int | None = None) -> None:
    """The one rule for batches of one row (a one-line :class:`ConfigError`): a method whose loss compares
    the rows of a batch with each other (``Method.contrastive`` or ``Method.in_batch_negatives``) gets a
    term of 0 at every step from a batch of one, whatever the sampler (unless a cross-batch memory,
    ``memory_size``, supplies the other rows, or several processes gather their batches); the balanced
    sampler needs two rows a batch for any method. ``method`` None (not yet known): only the sampler's rule."""
    if batch_size >= 2:
        return
    # under DDP the contrastive methods gather the batches of every process
    if method is not None and memory_size is None and batch_size * launched_processes() < 2:
        cls = get_method(method).cls
        if cls.contrastive or cls.in_batch_negatives:
            raise ConfigError(f"{method} compares the rows of a batch with each other: --batch-size {batch_size} "
                              "makes its contrastive term 0 at every step; use --batch-size >= 2")
    if sampler == "balanced":
        raise ConfigError("the balanced sampler needs --batch-size >= 2 (or use --sampler random)")


class TaskShape:
    """One label per text (or text pair): a class, or a number for a regression target. Each method is
    a step of the one job (:func:`contrastfit.training.train`), in the order the job takes them; a new
    shape overrides those that differ."""

    #: The job's result: the record with the model as ``.model``.
    result_class: type[TrainResult] = TrainResult

    #: What the record says validation selection did.
    selection_rule = ("the checkpoint with the best validation metric, ties broken by the lower validation loss, "
                      "is kept (Trainer load_best_model_at_end)")

    def check(self, config: Any) -> None:
        """What the shape refuses before anything is loaded (a one-line :class:`ConfigError`)."""

    def chooses_on_validation(self, config: Any) -> bool:
        """Whether the run chooses anything on a validation split (then a file's rows are held out for one)."""
        return any(validation_choices(config))

    def validation_split(self, config: Any) -> float:
        """``config.validation_split``, or where it is unset: :data:`VALIDATION_SPLIT` when the run chooses
        something on the validation split (:meth:`chooses_on_validation`), else 0. A two-stage method with
        a logistic-regression head (the default recipe, SetFit, the linear probe) chooses nothing there,
        so every row of a few-shot file trains (32 rows would otherwise lose 4 to a validation split
        that only reports)."""
        if config.validation_split is not None:
            return config.validation_split
        return VALIDATION_SPLIT if self.chooses_on_validation(config) else 0.0

    def load(self, config: Any, memory: dict[str, Any]) -> TextData:
        """The run's data: ``config``'s data options, in-memory values from ``memory``, the validation
        hold-out of :meth:`validation_split`."""
        return load_data(memory.get("data", config.data), text_column=config.text_column,
                         text_pair_column=config.text_pair_column, label_column=config.label_column,
                         validation_data=memory.get("validation_data", config.validation_data),
                         test_data=memory.get("test_data", config.test_data),
                         validation_split=self.validation_split(config), task=config.task)

    def sample(self, config: Any, data: TextData) -> PreparedData:
        """The seed's training sample (``--shots`` K per class, ``--train-size`` stratified) and validation subset."""
        seed = config.seed if config.sample_seed is None else config.sample_seed
        train_seed = derive_seed(seed, "train", config.sample_index)
        train = data.train
        if config.shots is not None:
            if data.label_names is None:
                raise ConfigError("--shots needs class labels; use --train-size for a regression target")
            train = sample_per_class(train, config.shots, train_seed, data.label_names)
        elif config.train_size is not None:
            train = sample_stratified(train, config.train_size, train_seed, data.label_names)
        validation = data.validation
        if validation is not None and config.validation_size is not None:
            validation = sample_stratified(validation, config.validation_size, derive_seed(seed, "validation"))
        return PreparedData(data, train, validation, data.test)

    def configure(self, config: Any, prepared: PreparedData) -> Any:
        """``config`` with its method and the method's schedule (:meth:`choose_method`), its batches checked
        now that the method is known."""
        config = self.choose_method(config, prepared)
        check_batch_size(config.batch_size, config.sampler, config.method, config.memory_size)
        return config

    def choose_method(self, config: Any, prepared: PreparedData) -> Any:
        """``config`` with its method (the default recipe, or ``ce`` for a regression target) and the
        method's schedule filled in where unset."""
        if config.method is None:
            task = prepared.data.task
            config = replace(config, method=DEFAULT_METHOD if task == "classification" else DEFAULT_REGRESSION_METHOD)
        return with_method_defaults(config)

    def hparams(self, config: Any, n_train: int) -> dict[str, Any]:
        """The method's hyper-parameters: its training-set-size-dependent defaults (e.g. Sosnowski
        Tables 1-2) under the user's values."""
        return {**get_method(config.method).defaults_for(n_train), **config.hparams}

    def build_model(self, config: Any, prepared: PreparedData, hparams: dict[str, Any],
                    pooling: str) -> ContrastiveClassifier:
        return ContrastiveClassifier.from_encoder(
            config.model, config.method, prepared.data.label_names, hparams=hparams, pooling=pooling,
            max_length=config.max_length, trust_remote_code=config.trust_remote_code)

    def setup(self, run: Run, callbacks: list[TrainerCallback] | None) -> None:
        """Build the model and its Trainer: the method's hyper-parameters, the model, the tokenised
        training rows, the schedule, what validation selects (the kept step, the head stage's epoch)."""
        config, prepared = run.config, run.prepared
        run.pooling = config.pooling or default_pooling(config.model)
        hparams = self.hparams(config, len(prepared.train))
        model = run.model = self.build_model(config, prepared, hparams, run.pooling)
        if model.method.contrastive and config.sampler == "random":
            warnings.warn(f"{config.method} contrasts in-batch positives; random batches of a small training set "
                          "often have none (the default --sampler balanced guarantees them)", stacklevel=4)
        run.train_ds = tokenize_dataset(prepared.train, model.tokenizer, model.max_length)
        run.label_descriptions = attach_label_descriptions(model, config)
        model.method.prepare(model, run.train_ds)
        run.epochs, max_steps = self.schedule(config, run.train_ds["labels"])
        has_validation = prepared.validation is not None and len(prepared.validation) > 0
        step, head_epoch = self.validation_choices(config)
        run.selecting, run.choosing_head_epoch = has_validation and step, has_validation and head_epoch
        run.metric = self.selection_metric(config, model.task)
        eval_ds = tokenize_dataset(prepared.validation, model.tokenizer, model.max_length) if run.selecting else None
        run.trainer = build_trainer(config, model, run.train_ds, run.epochs, max_steps=max_steps, eval_ds=eval_ds,
                                    callbacks=callbacks, batch_sampler=self.batch_sampler(config, model),
                                    compute_metrics=self.compute_metrics(model.label_names, run.metric))

    def fit(self, run: Run, output: Path) -> bool:
        """Fine-tune (from ``run.resumed_from``), then what follows it: LP-FT's probe head first, WiSE-FT's
        interpolation, the head stage, what :meth:`finish` settles. False: a callback interrupted it."""
        config, model = run.config, run.model
        collator = run.trainer.data_collator
        if config.head_init == "probe" and run.resumed_from is None:
            # LP-FT (Kumar et al., 2022): start fine-tuning from the linear probe's head
            run.head_init = self.fit_head(model, run.train_ds, collator, config, probe=True)
        interpolation = WeightInterpolation.for_run(config.wise_ft, model.method, config.refit_head, model.encoder)
        if model.method.trains_encoder:
            run.fitted = fit(run.trainer, output, run.resumed_from)
            if run.fitted.interrupted:
                return False
        run.wise_ft = interpolation and interpolation.apply(model.encoder)
        if self.fits_head(model, config):
            # the head epoch is chosen on validation, like the encoder step of one-stage runs
            validation = run.prepared.validation
            head_validation = (tokenize_dataset(validation, model.tokenizer, model.max_length)
                               if run.choosing_head_epoch else None)
            run.head_stage = self.fit_head(model, run.train_ds, collator, config, validation_ds=head_validation)
        run.settled = self.finish(model, run.prepared.validation)
        return True

    def evaluate(self, run: Run) -> dict[str, Any]:
        """The record's ``metrics``: the trained model on the validation and (``evaluate_test``) test splits."""
        metrics: dict[str, Any] = {}
        if run.prepared.validation is not None:
            metrics["validation"] = evaluate_model(run.model, run.prepared.validation)
        if run.config.evaluate_test and run.prepared.test is not None:
            metrics["test"] = evaluate_model(run.model, run.prepared.test)
        return metrics

    def schedule(self, config: Any, train_labels: Any) -> tuple[float, int]:
        """``(epochs, max_steps)`` for the Trainer (:func:`contrastfit.trainer.resolve_schedule`)."""
        return resolve_schedule(config, train_labels)

    def fits_head(self, model: ContrastiveClassifier, config: Any) -> bool:
        """Whether a head stage follows fine-tuning: the method's, or ``--refit-head``."""
        return model.method.frozen_head_stage or config.refit_head

    def validation_choices(self, config: Any) -> tuple[bool, bool]:
        """What the run chooses on validation: ``(step, head_epoch)`` (:func:`validation_choices`)."""
        return validation_choices(config)

    def selection_metric(self, config: Any, task: str) -> str:
        return selection_metric(config, task)

    def compute_metrics(self, label_names: list[str] | None, metric: str) -> Any:
        """The Trainer's validation metrics (None: the single-label ones)."""
        return None

    #: The sampler of ``--sampler balanced``'s batches: at least two examples of every class in a batch.
    balanced_sampler = ClassBalancedBatchSampler

    def batch_sampler(self, config: Any, model: ContrastiveClassifier) -> BatchSamplerFactory | None:
        """The Trainer's training batches: :attr:`balanced_sampler`'s with ``--sampler balanced`` on
        labels, else (None) the library's shuffled ones."""
        balanced = config.sampler == "balanced" and model.task == "classification"
        return label_batches(self.balanced_sampler) if balanced else None

    def fit_head(self, model: ContrastiveClassifier, train_ds: datasets.Dataset, collator, config: Any, *,
                 probe: bool = False, validation_ds: datasets.Dataset | None = None) -> dict[str, Any]:
        """Fit the head on the frozen encoder: as LP-FT's starting probe (``probe``), or as the head stage
        (the method's solver; a logistic regression for ``--refit-head``), its epoch chosen on
        ``validation_ds`` where given."""
        if probe:
            return train_head(model, train_ds, collator, seed=config.seed, solver="logistic")
        solver = "logistic" if config.refit_head and not model.method.frozen_head_stage else None
        return train_head(model, train_ds, collator, seed=config.seed, progress=config.progress, solver=solver,
                          validation_ds=validation_ds, metric=self.selection_metric(config, model.task))

    def finish(self, model: ContrastiveClassifier, validation: datasets.Dataset | None) -> dict[str, Any]:
        """What the run settles once the model is trained, before it is evaluated (entries of the
        record's ``training``)."""
        return {}

    def describe(self, config: Any, prepared: PreparedData) -> dict[str, Any]:
        """The record's ``data``: where the data came from, its labels, how it was sampled, each split's
        size and hash."""
        data = prepared.data
        return {"name": data.name, "source": data.source, "task": data.task, "label_names": data.label_names,
                "text_pair": data.has_pairs, "sampling": sampling(config), **prepared.hashes()}

    def examples(self, prepared: PreparedData) -> list[dict[str, str]]:
        """A training text per label for the model card's widget."""
        return label_examples(prepared.train, prepared.data.label_names)

    def label(self, method: str) -> str:
        """The run's name in the closing summary line."""
        return method

    def selection(self, run: Run) -> dict[str, Any] | None:
        """The record's ``training.selection``: the metric, the kept step and its value, the evaluations."""
        if not run.selecting:
            return None
        history = selection_record(run.trainer, run.config.early_stopping_patience)
        best_value = next((e.get(run.metric) for e in history["evaluations"] if e["step"] == history["best_step"]),
                          None)
        return {"metric": run.metric, "best_step": history["best_step"], "best_value": best_value, **history,
                "rule": self.selection_rule}

    def conclude(self, run: Run, output: Path | None) -> TrainResult:
        """The last step: the run's record, the model's info, and both written into ``output`` (None:
        nothing is kept; :func:`contrastfit.pipeline.write_outputs`)."""
        config, model, prepared = run.config, run.model, run.prepared
        training = {k: getattr(config, k) for k in TRAINING_SETTINGS}
        training.update(epochs=run.epochs if model.method.trains_encoder else 0, steps=run.trainer.state.global_step,
                        selection=self.selection(run), pooling=run.pooling,
                        train_loss=run.fitted and run.fitted.train_loss,
                        resumed_from=run.resumed_from, head_init=run.head_init, wise_ft=run.wise_ft,
                        head_stage=run.head_stage, world_size=run.trainer.args.world_size,
                        warmup_steps=getattr(run.trainer, "scheduled_warmup_steps", None), **(run.settled or {}))
        data = self.describe(config, prepared)
        if run.label_descriptions:
            data["label_descriptions"] = run.label_descriptions
        # a training text per label for the model card's widget (a model is saved; not part of the identity)
        examples = self.examples(prepared) if config.save_model else []
        record = train_record(config, model, {**data, "examples": examples} if examples else data, training,
                              run.metrics, run.clock, run.trainer.state.log_history, identity_data=data)
        # the folder (not results.json) keeps digests of the training rows: calibrate and evaluate check for them
        model.info.update(model=config.model, seed=config.seed,
                          data={**record.data.to_dict(), "train_rows": row_sketch(prepared.train)},
                          training=training, versions=record.versions, base_model=config.model)
        if prepared.data.label_type is not None:  # integer labels: predict gives ints back
            model.info.label_type = prepared.data.label_type
        return write_outputs(TrainResult, config, model, record, output, label=self.label(config.method),
                             shown={split: headline(m) for split, m in run.metrics.items()})


def train_record(config: Any, model: ContrastiveClassifier, data: dict[str, Any], training: dict[str, Any],
                 metrics: dict[str, Any], clock: Clock, log_history: list[dict[str, Any]], *,
                 identity_data: dict[str, Any]) -> Record:
    """A run's record, with its identity: the settings (``label_descriptions`` are in ``identity_data``),
    the method, its hyper-parameters, the seed, the model and the data."""
    settings = {f.name: getattr(config, f.name) for f in fields(config) if f.name != "label_descriptions"}
    return Record(
        kind="train", method=config.method, hparams=model.method.hparams, base_model=config.model, seed=config.seed,
        data=data, training=training, metrics=metrics, timings=clock.timings, versions=library_versions(),
        tags=config.tags, log_history=log_history,
        identity=run_identity("train", method=config.method, hparams=model.method.hparams, seed=config.seed,
                              model=config.model, settings=settings, data=identity_data, tags=config.tags))


SINGLE_LABEL = TaskShape()
