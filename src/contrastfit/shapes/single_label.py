"""The single-label task shape, :class:`TaskShape`, which every other shape overrides: one label per
text or text pair, a class or a number (a regression target). Classification, regression and
sentence pairs are this shape."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import datasets

from ..card import label_examples
from ..data import TextData, data_hash, load_data, sample_per_class, sample_stratified
from ..data.overlap import row_sketch
from ..data.sampling import derive_seed
from ..errors import ConfigError
from ..evaluation import headline
from ..head_stage import train_head
from ..identity import run_identity
from ..methods import get_method
from ..modeling import ContrastiveClassifier
from ..pipeline import Clock, Fitted, TrainResult, write_outputs
from ..record import Record
from ..trainer import ContrastfitTrainer, resolve_schedule, selection_metric, with_method_defaults
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
class Trained:
    """What the job's steps up to evaluation left for the last one, :meth:`TaskShape.conclude`: the
    run's settings, model, data, Trainer and fit, and what each step resolved on the way."""

    config: Any
    model: ContrastiveClassifier
    prepared: PreparedData
    trainer: ContrastfitTrainer
    fitted: Fitted | None
    clock: Clock
    epochs: float
    pooling: str
    metrics: dict[str, Any]
    selection: dict[str, Any] | None = None
    resumed_from: str | None = None
    head_init: dict[str, Any] | None = None
    wise_ft: dict[str, Any] | None = None
    head_stage: dict[str, Any] | None = None
    settled: dict[str, Any] | None = None
    label_descriptions: dict[str, str] | None = None


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


class TaskShape:
    """One label per text (or text pair): a class, or a number for a regression target. Each method is
    a step of the one job (:func:`contrastfit.training.train`); a new shape overrides those that differ."""

    #: What the record says validation selection did.
    selection_rule = ("the checkpoint with the best validation metric, ties broken by the lower validation loss, "
                      "is kept (Trainer load_best_model_at_end)")

    def check(self, config: Any) -> None:
        """What the shape refuses before anything is loaded (a one-line :class:`ConfigError`)."""

    def chooses_on_validation(self, config: Any) -> bool:
        """Whether the run chooses anything on a validation split (then a file's rows are held out for one)."""
        return any(validation_choices(config))

    def load(self, config: Any, memory: dict[str, Any], validation_split: float) -> TextData:
        """The run's data: ``config``'s data options, in-memory values from ``memory``."""
        return load_data(memory.get("data", config.data), text_column=config.text_column,
                         text_pair_column=config.text_pair_column, label_column=config.label_column,
                         validation_data=memory.get("validation_data", config.validation_data),
                         test_data=memory.get("test_data", config.test_data), validation_split=validation_split,
                         task=config.task)

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

    def conclude(self, run: Trained, output: Path | None) -> TrainResult:
        """The last step: the run's record, the model's info, and both written into ``output`` (None:
        nothing is kept; :func:`contrastfit.pipeline.write_outputs`)."""
        config, model, prepared = run.config, run.model, run.prepared
        training = {k: getattr(config, k) for k in TRAINING_SETTINGS}
        training.update(epochs=run.epochs if model.method.trains_encoder else 0, steps=run.trainer.state.global_step,
                        selection=run.selection, pooling=run.pooling, train_loss=run.fitted and run.fitted.train_loss,
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
        kind="train", method=config.method, hparams=model.method.hparams, model=config.model, seed=config.seed,
        data=data, training=training, metrics=metrics, timings=clock.timings, versions=library_versions(),
        tags=config.tags, log_history=log_history,
        identity=run_identity("train", method=config.method, hparams=model.method.hparams, seed=config.seed,
                              model=config.model, settings=settings, data=identity_data, tags=config.tags))


SINGLE_LABEL = TaskShape()
