"""Training on ``transformers.Trainer``.

:class:`ContrastfitTrainer` adds three things to the library's Trainer, which keeps the rest
(optimiser and schedule, checkpoints and ``--resume``, mixed precision, torchrun / accelerate DDP,
logging integrations, progress bars):

* for contrastive methods, the training batches come from
  :class:`~contrastfit.data.ClassBalancedBatchSampler` (pitfall 2); the sampler is built in
  :meth:`get_train_dataloader`, so it is what the trainer really feeds (pitfall 5);
* the parts of a composite loss (``ce``, ``scl``, ...) are logged next to the total;
* parameters a method owns can have their own learning rate (``Method.learning_rates``).

:func:`train` runs one whole job: load and sample the data, build the model, train, evaluate on
validation and test, save the model and write ``results.json`` (atomically) with everything that
made the result.
"""

from __future__ import annotations

import json
import math
import shutil
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import datasets
import torch
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding, Trainer, TrainerCallback, TrainingArguments

from .data import ClassBalancedBatchSampler, TextData, data_hash, load_data, sample_per_class, sample_stratified
from .data.sampling import derive_seed
from .data.loading import LABEL, TEXT, TEXT_PAIR
from .encoders import DEFAULT_MODEL, default_pooling
from .errors import ConfigError
from .evaluation import evaluate_model, headline
from .methods import get_method
from .modeling import ContrastiveClassifier, write_json_atomic
from .versions import library_versions

#: The default recipe: what `contrastfit train --data FILE` trains with no --method (README, Benchmarks).
DEFAULT_METHOD = "ce-scl-lr"
DEFAULT_REGRESSION_METHOD = "ce"
DEFAULT_LEARNING_RATE = 5e-5
DEFAULT_MIN_STEPS = 60
RESULTS_NAME = "results.json"
CHECKPOINT_DIR = "checkpoints"
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "labels")


@dataclass
class TrainConfig:
    """Everything one training job needs. Field names match the CLI flags."""

    method: str | None = None  # None: the default recipe, DEFAULT_METHOD (ce for a regression target)
    data: str = "mr"
    output: str = "runs/run"
    model: str = DEFAULT_MODEL
    hparams: dict[str, Any] = field(default_factory=dict)
    # data
    text_column: str | None = None
    text_pair_column: str | None = None
    label_column: str | None = None
    validation_data: str | None = None
    test_data: str | None = None
    validation_split: float = 0.1  # held out of a local file when no validation file is given
    task: str | None = None
    shots: int | None = None
    train_size: int | None = None
    validation_size: int | None = None
    seed: int = 0  # training seed (initialisation, dropout, batch order); also the sampling seed by default
    sample_seed: int | None = None  # None: seed. Training sample = derive_seed(sample_seed, "train", sample_index)
    sample_index: int = 0  # which sample of that seed (an experiment's sample s)
    sampler: str = "balanced"  # training batches: "balanced" (class-mix-keeping, positives) or "random"
    # model
    pooling: str | None = None  # None: the encoder's own (mean for sentence-transformers models), else cls
    max_length: int = 128
    # optimisation
    epochs: float | None = None  # None: the method's step rule, else 3 epochs or more to reach min_steps steps
    min_steps: int | None = None  # None: the method's, else DEFAULT_MIN_STEPS
    batch_size: int = 16
    learning_rate: float | None = None  # None: the method's, else DEFAULT_LEARNING_RATE
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    gradient_accumulation_steps: int = 1
    fp16: bool = False
    bf16: bool = False
    use_cpu: bool = False
    # model selection on the validation split (Trainer evaluation, best checkpoint, early stopping)
    select_best: bool = True  # evaluate during training and keep the best step (when there is a validation split)
    metric_for_best: str | None = None  # None: accuracy (classification) or mse (regression)
    eval_steps: int | None = None  # None: about five evaluations per run, at least one epoch apart
    early_stopping_patience: int | None = None  # stop after this many evaluations without improvement
    # head
    head_init: str = "random"  # "probe": fit the head as a logistic-regression probe first (LP-FT)
    refit_head: bool = False  # after training, refit the head as a logistic regression on the frozen encoder
    # bookkeeping
    save_model: bool = True
    save_checkpoints: bool = True
    save_steps: int = 50
    keep_checkpoints: bool = False
    resume: bool = False
    evaluate_test: bool = True
    logging_steps: int = 10
    report_to: str = "none"
    progress: bool = True
    trust_remote_code: bool = False
    tags: dict[str, Any] = field(default_factory=dict)  # stored as-is in results.json (e.g. experiment labels)

    def validate(self) -> None:
        self._check_types()
        if self.method is not None:
            get_method(self.method)
        if self.shots is not None and self.train_size is not None:
            raise ConfigError("give either --shots (per class) or --train-size (total), not both")
        for name in ("batch_size", "max_length", "gradient_accumulation_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_rate is not None and self.learning_rate <= 0:
            raise ConfigError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.epochs is not None and self.epochs <= 0:
            raise ConfigError(f"epochs must be > 0, got {self.epochs}")
        if self.fp16 and self.bf16:
            raise ConfigError("choose one of fp16 and bf16")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError(f"warmup_ratio is a fraction of the training steps in [0, 1), got {self.warmup_ratio}")
        if self.eval_steps is not None and self.eval_steps < 1:
            raise ConfigError(f"eval_steps must be >= 1, got {self.eval_steps}")
        if self.early_stopping_patience is not None and self.early_stopping_patience < 1:
            raise ConfigError(f"early_stopping_patience must be >= 1, got {self.early_stopping_patience}")
        if self.sampler not in ("balanced", "random"):
            raise ConfigError(f"sampler must be 'balanced' or 'random', got {self.sampler!r}")
        if self.sampler == "balanced" and self.batch_size < 2:
            raise ConfigError("the balanced sampler needs --batch-size >= 2 (or use --sampler random)")
        if self.head_init not in ("random", "probe"):
            raise ConfigError(f"head_init must be 'random' or 'probe', got {self.head_init!r}")


    def _check_types(self) -> None:
        """One line naming the field for a value of the wrong type (e.g. YAML reads ``2e-5`` as text)."""
        from dataclasses import fields

        for f in fields(self):
            value, kind = getattr(self, f.name), str(f.type)
            if value is None and "None" in kind:
                continue
            if kind.startswith(("float", "int", "bool")):
                ok = (isinstance(value, bool) if kind.startswith("bool") else
                      isinstance(value, (int, float)) and not isinstance(value, bool) and
                      (kind.startswith("float") or float(value).is_integer()))
                if not ok:
                    hint = " (YAML reads 2e-5 as text: write 2.0e-5)" if isinstance(value, str) and kind.startswith("float") else ""
                    raise ConfigError(f"{f.name} must be {kind.split(' |')[0].replace('bool', 'true or false')}, got {value!r}{hint}")


# ---------------------------------------------------------------------------------------------
# Trainer
# ---------------------------------------------------------------------------------------------

class ContrastfitTrainer(Trainer):
    """``transformers.Trainer`` with the class-balanced sampler, loss-part logging and per-part
    learning rates for a :class:`~contrastfit.modeling.ContrastiveClassifier`."""

    def __init__(self, *args, balanced_batches: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.balanced_batches = balanced_batches
        self._part_sums: dict[str, float] = {}
        self._part_count = 0

    def _classifier(self) -> ContrastiveClassifier:
        return self.accelerator.unwrap_model(self.model)

    def get_train_dataloader(self) -> DataLoader:
        if not self.balanced_batches:
            return super().get_train_dataloader()
        dataset = self._remove_unused_columns(self.train_dataset, description="training")
        sampler = ClassBalancedBatchSampler(dataset["labels"], self._train_batch_size, seed=self.args.seed)
        loader = DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory,
        )
        return self.accelerator.prepare(loader)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        result = super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)
        if model.training:
            for key, value in self._classifier().last_loss_parts.items():
                self._part_sums[key] = self._part_sums.get(key, 0.0) + value
            self._part_count += 1
        return result

    def log(self, logs: dict[str, float], *args, **kwargs) -> None:
        if self._part_count and "loss" in logs:
            for key, total in self._part_sums.items():
                logs[f"loss_{key}"] = round(total / self._part_count, 6)
            self._part_sums, self._part_count = {}, 0
        super().log(logs, *args, **kwargs)

    def create_optimizer(self, model=None):
        if self.optimizer is not None:
            return self.optimizer
        model = self._classifier()
        special = model.method.learning_rates()  # {parameter name prefix: learning rate}
        decay = set(self.get_decay_parameter_names(model))
        groups: dict[tuple[float, float], list[torch.nn.Parameter]] = {}
        for name, param in model.named_parameters():
            if not param.requires_grad:
                continue
            lr = next((rate for prefix, rate in special.items() if name.startswith(prefix)), self.args.learning_rate)
            wd = self.args.weight_decay if name in decay else 0.0
            groups.setdefault((lr, wd), []).append(param)
        param_groups = [{"params": ps, "lr": lr, "weight_decay": wd} for (lr, wd), ps in groups.items()]
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, model)
        optimizer_kwargs.pop("lr", None)
        self.optimizer = optimizer_cls(param_groups, lr=self.args.learning_rate, **optimizer_kwargs)
        return self.optimizer


class _StopFlag(TrainerCallback):
    """Lets tests and callers interrupt training after a number of steps (simulating a crash)."""

    def __init__(self, stop_after: int | None):
        self.stop_after = stop_after

    def on_step_end(self, args, state, control, **kwargs):
        if self.stop_after is not None and state.global_step >= self.stop_after:
            control.should_training_stop = True
            control.should_save = True
        return control


# ---------------------------------------------------------------------------------------------
# Data preparation
# ---------------------------------------------------------------------------------------------

@dataclass
class PreparedData:
    data: TextData
    train: datasets.Dataset
    validation: datasets.Dataset | None
    test: datasets.Dataset | None

    def description(self, config: TrainConfig) -> dict[str, Any]:
        out = {
            "name": self.data.name,
            "source": self.data.source,
            "task": self.data.task,
            "label_names": self.data.label_names,
            "text_pair": self.data.has_pairs,
            "sampling": {"shots": config.shots, "train_size": config.train_size,
                         "validation_size": config.validation_size,
                         "sample_seed": config.seed if config.sample_seed is None else config.sample_seed,
                         "sample_index": config.sample_index},
        }
        for split in ("train", "validation", "test"):
            ds = getattr(self, split)
            if ds is not None:
                out[f"{split}_size"] = len(ds)
                out[f"{split}_hash"] = data_hash(ds)
        return out


def prepare_data(config: TrainConfig, data: TextData | None = None) -> PreparedData:
    """Load the data and draw the seed's training sample and validation subset."""
    data = data or load_data(
        config.data,
        text_column=config.text_column,
        text_pair_column=config.text_pair_column,
        label_column=config.label_column,
        validation_data=config.validation_data,
        test_data=config.test_data,
        validation_split=config.validation_split,
        task=config.task,
    )
    train = data.train
    seed = config.seed if config.sample_seed is None else config.sample_seed
    train_seed = derive_seed(seed, "train", config.sample_index)
    if config.shots is not None:
        if data.label_names is None:
            raise ConfigError("--shots needs class labels; use --train-size for a regression target")
        train = sample_per_class(train, config.shots, train_seed, data.label_names)
    elif config.train_size is not None:
        train = sample_stratified(train, config.train_size, train_seed)
    validation = data.validation
    if validation is not None and config.validation_size is not None:
        validation = sample_stratified(validation, config.validation_size, derive_seed(seed, "validation"))
    return PreparedData(data, train, validation, data.test)


def tokenize_dataset(ds: datasets.Dataset, tokenizer, max_length: int) -> datasets.Dataset:
    """Tokenise without padding (the collator pads each batch to its own longest sequence)."""
    has_pair = TEXT_PAIR in ds.column_names

    def encode(batch):
        enc = tokenizer(batch[TEXT], batch[TEXT_PAIR] if has_pair else None, truncation=True, max_length=max_length)
        enc["labels"] = batch[LABEL]
        return enc

    out = ds.map(encode, batched=True, remove_columns=ds.column_names, desc="tokenize", load_from_cache_file=False)
    return out.select_columns([c for c in MODEL_INPUTS if c in out.column_names])


def with_method_defaults(config: TrainConfig) -> TrainConfig:
    """``config`` with the settings left at None filled in: the method's ``training_defaults``
    (e.g. SetFit's learning rate), else the global defaults."""
    from dataclasses import replace

    own = get_method(config.method).cls.training_defaults if config.method else {}
    fill = {"learning_rate": own.get("learning_rate", DEFAULT_LEARNING_RATE),
            "min_steps": own.get("min_steps", DEFAULT_MIN_STEPS)}
    return replace(config, **{k: v for k, v in fill.items() if getattr(config, k) is None})


def resolve_schedule(config: TrainConfig, train_labels) -> tuple[float, int]:
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


# ---------------------------------------------------------------------------------------------
# One job
# ---------------------------------------------------------------------------------------------

#: Validation metrics where lower is better (everything else: higher is better).
LOWER_IS_BETTER = {"mse", "loss"}


def selection_metric(config: TrainConfig, task: str) -> str:
    return config.metric_for_best or ("accuracy" if task == "classification" else "mse")


#: The key the Trainer selects on: the chosen metric, ties broken by the lower validation loss.
SELECTION_KEY = "selection_score"
TIE_BREAK = 1e-6


def _compute_metrics(label_names: list[str] | None, metric: str):
    """Validation metrics for the Trainer's evaluation, plus :data:`SELECTION_KEY`: the chosen metric
    (negated where lower is better) plus ``1e-6 (1 - tanh(loss))``, so that of two evaluations with
    the same accuracy (common on a small validation set) the one with the lower validation loss
    wins, and never the untrained step that merely came first."""
    import numpy as np

    from .evaluation.metrics import classification_metrics, regression_metrics

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
        sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
        out[SELECTION_KEY] = sign * value + (TIE_BREAK * (1.0 - math.tanh(loss)) if metric != "loss" else 0.0)
        return out

    return compute


def _selection_args(config: TrainConfig, task: str, eval_ds: datasets.Dataset | None, total_steps: int) -> dict[str, Any]:
    """TrainingArguments for evaluating on validation and loading the best checkpoint at the end."""
    if eval_ds is None:
        return {"eval_strategy": "no", "save_strategy": "steps" if config.save_checkpoints else "no",
                "save_steps": config.save_steps}
    every = config.eval_steps or max(1, math.ceil(total_steps / 5))
    return {"eval_strategy": "steps", "eval_steps": every, "save_strategy": "steps", "save_steps": every,
            "load_best_model_at_end": True, "metric_for_best_model": SELECTION_KEY, "greater_is_better": True,
            # only the weights when the run keeps no resumable checkpoints: a save costs a model write
            "save_only_model": not config.save_checkpoints}


def build_trainer(config: TrainConfig, model: ContrastiveClassifier, train_ds: datasets.Dataset,
                  epochs: float, stop_after: int | None = None, max_steps: int = -1,
                  eval_ds: datasets.Dataset | None = None) -> ContrastfitTrainer:
    config = with_method_defaults(config)
    output = Path(config.output)
    n_train = len(train_ds) if train_ds is not None else 0
    steps_per_epoch = max(1, math.ceil(n_train / (config.batch_size * config.gradient_accumulation_steps)))
    total_steps = max_steps if max_steps > 0 else math.ceil(epochs * steps_per_epoch)
    selection = _selection_args(config, model.task, eval_ds, total_steps)
    callbacks: list[TrainerCallback] = []
    if stop_after is not None:
        callbacks.append(_StopFlag(stop_after))
    if eval_ds is not None and config.early_stopping_patience:
        from transformers import EarlyStoppingCallback

        callbacks.append(EarlyStoppingCallback(early_stopping_patience=config.early_stopping_patience))
    args = TrainingArguments(
        output_dir=str(output / CHECKPOINT_DIR),
        num_train_epochs=epochs,
        max_steps=max_steps,
        per_device_train_batch_size=config.batch_size,
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
        use_cpu=config.use_cpu,
        report_to=config.report_to,
        disable_tqdm=not config.progress,
        remove_unused_columns=False,
        dataloader_pin_memory=torch.cuda.is_available(),
    )
    collator = DataCollatorWithPadding(model.tokenizer)
    return ContrastfitTrainer(
        model=model,
        args=args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        data_collator=collator,
        compute_metrics=_compute_metrics(model.label_names, selection_metric(config, model.task)) if eval_ds is not None else None,
        balanced_batches=config.sampler == "balanced" and model.task == "classification",
        callbacks=callbacks or None,
    )


def train_head(model: ContrastiveClassifier, train_ds: datasets.Dataset, collator, *, seed: int = 0,
               cache: bool = True, progress: bool = False, epochs: int | None = None,
               solver: str | None = None, validation_ds: datasets.Dataset | None = None,
               metric: str = "accuracy", eval_every: int | None = None) -> dict[str, Any]:
    """Stage 2 of two-stage methods (SupCL-Seq, SimCSE, DiffCSE, SetFit, the linear probe): freeze
    the encoder and fit ``model.head`` on the method's head features of the training set.

    ``solver`` (default: the method's ``head_solver``):

    * ``"adamw"``: ``head_epochs`` epochs of AdamW (``head_learning_rate``, mini-batches of
      ``head_batch_size`` shuffled with a generator seeded by ``seed``) on the method's task loss
      (CE, or MSE for a regression target);
    * ``"logistic"``: scikit-learn's L2-regularised logistic regression (``head_C``), copied into the
      linear head (:meth:`contrastfit.heads.LinearHead.fit_logistic`), as SetFit does.

    With ``cache=True`` (the default) the training set is encoded **once** and the head trains on
    the cached features; ``cache=False`` re-encodes every mini-batch of every epoch (AdamW only;
    useful to measure what the cache saves, see ``bench/``).

    With ``validation_ds`` (AdamW only), the head epoch is chosen on validation as the encoder step is
    in one-stage runs: the validation set is encoded once, scored every ``eval_every`` epochs
    (default: a tenth of them) by the same selection score (``metric``, ties broken by the lower
    validation loss), and the best head is kept; ``head_selection`` in the record says which.
    """
    from tqdm.auto import tqdm

    method = model.method
    hp = method.hparams
    solver = solver or method.head_solver
    if solver not in ("adamw", "logistic"):
        raise ConfigError(f"unknown head solver '{solver}' (choose adamw or logistic)")
    if solver == "logistic" and (model.task != "classification" or not hasattr(model.head, "fit_logistic")):
        raise ConfigError(f"{method.name}: a logistic-regression head needs class labels and a linear head")
    device = model.device
    loader = DataLoader(train_ds, batch_size=64, shuffle=False, collate_fn=collator)
    frozen = [p for p in model.encoder.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    model.eval()  # no dropout in the frozen encoder

    def encode(batch) -> tuple[torch.Tensor, torch.Tensor]:
        batch = {k: v.to(device) for k, v in batch.items()}
        labels = batch.pop("labels")
        with torch.no_grad():
            return method.head_features(model, batch).float(), labels

    t0 = time.perf_counter()
    try:
        if cache or solver == "logistic":
            parts = [encode(b) for b in loader]
            features, labels = torch.cat([f for f, _ in parts]), torch.cat([y for _, y in parts])
        t_encode = time.perf_counter() - t0
        if solver == "logistic":
            C = float(hp.get("head_C", 1.0))
            model.head.fit_logistic(features, labels, C=C, seed=seed)
            return {"solver": solver, "C": C, "encode_s": t_encode, "total_s": time.perf_counter() - t0}
        epochs = int(epochs if epochs is not None else hp["head_epochs"])
        batch_size = int(hp["head_batch_size"])
        optimizer = torch.optim.AdamW(model.head.parameters(), lr=float(hp["head_learning_rate"]), weight_decay=0.0)
        generator = torch.Generator().manual_seed(seed)
        n = len(train_ds)
        last = float("nan")
        scorer = None
        if validation_ds is not None and len(validation_ds) > 0:
            from types import SimpleNamespace

            vparts = [encode(b) for b in DataLoader(validation_ds, batch_size=64, shuffle=False, collate_fn=collator)]
            v_features, v_labels = torch.cat([f for f, _ in vparts]), torch.cat([y for _, y in vparts]).cpu().numpy()
            compute = _compute_metrics(model.label_names, metric)
            every = eval_every or max(1, epochs // 10)
            evaluations: list[dict[str, float]] = []
            best: tuple[float, int, dict[str, torch.Tensor]] | None = None

            def scorer(epoch: int) -> None:
                nonlocal best
                model.head.eval()
                with torch.no_grad():
                    logits = model.head(v_features).float().cpu().numpy()
                scores = compute(SimpleNamespace(predictions=logits, label_ids=v_labels))
                evaluations.append({"epoch": epoch, **scores})
                if best is None or scores[SELECTION_KEY] > best[0]:
                    best = (scores[SELECTION_KEY], epoch, {k: v.detach().clone() for k, v in model.head.state_dict().items()})
        model.head.train()
        for epoch in tqdm(range(1, epochs + 1), desc="head", disable=not progress, leave=False):
            order = torch.randperm(n, generator=generator)
            for start in range(0, n, batch_size):
                idx = order[start:start + batch_size]
                if cache:
                    x, y = features[idx.to(features.device)], labels[idx.to(labels.device)]
                else:
                    x, y = encode(collator([train_ds[int(i)] for i in idx]))
                loss = method.task_loss(model.head(x), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                last = float(loss.detach())
            if scorer is not None and (epoch % every == 0 or epoch == epochs):
                scorer(epoch)
                model.head.train()
        head_selection = None
        if scorer is not None and best is not None:
            model.head.load_state_dict(best[2])
            head_selection = {"metric": metric, "best_epoch": best[1], "evaluations": evaluations,
                              "best_value": next(e.get(metric) for e in evaluations if e["epoch"] == best[1])}
    finally:
        for p in frozen:
            p.requires_grad_(True)
        model.eval()
    return {"solver": solver, "epochs": epochs, "batch_size": batch_size, "learning_rate": float(hp["head_learning_rate"]),
            "cached": cache, "encode_s": t_encode, "total_s": time.perf_counter() - t0, "final_loss": last,
            "head_selection": head_selection}


def last_checkpoint(output: str | Path) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    folder = Path(output) / CHECKPOINT_DIR
    return get_last_checkpoint(str(folder)) if folder.is_dir() else None


def train(config: TrainConfig | None = None, *, text_data: TextData | None = None, stop_after: int | None = None,
          **overrides: Any) -> "TrainResult":
    """Train one model and return its result (also written to ``<output>/results.json``).

    ``stop_after`` stops training after that many optimisation steps, leaving a checkpoint but no
    result (for testing ``resume``).
    """
    from transformers import set_seed

    config = TrainConfig(**{**(asdict(config) if config else {}), **overrides})
    config.validate()
    output = Path(config.output)
    results_path = output / RESULTS_NAME
    if results_path.is_file():
        if config.resume:
            return TrainResult(json.loads(results_path.read_text(encoding="utf-8")), output=str(output))
        raise ConfigError(f"{output} already holds a finished run ({RESULTS_NAME}); choose another --output")
    if not config.resume and last_checkpoint(output) is not None:
        raise ConfigError(f"{output} holds an unfinished run; add --resume to continue it or choose another --output")

    t0 = time.perf_counter()
    set_seed(config.seed)
    prepared = prepare_data(config, text_data)
    if config.method is None:
        config = replace(config, method=DEFAULT_METHOD if prepared.data.task == "classification" else DEFAULT_REGRESSION_METHOD)
    config = with_method_defaults(config)
    pooling = config.pooling or default_pooling(config.model)
    # the paper's training-set-size-dependent defaults (e.g. Sosnowski Tables 1-2), under the user's values
    hparams = {**get_method(config.method).defaults_for(len(prepared.train)), **config.hparams}
    model = ContrastiveClassifier.from_encoder(
        config.model, config.method, prepared.data.label_names, hparams=hparams, pooling=pooling,
        max_length=config.max_length, trust_remote_code=config.trust_remote_code,
    )
    if model.method.contrastive and config.sampler == "random":
        warnings.warn(f"{config.method} contrasts in-batch positives; random batches of a small training set "
                      "often have none (the default --sampler balanced guarantees them)", stacklevel=2)
    train_ds = tokenize_dataset(prepared.train, model.tokenizer, model.max_length)
    model.method.prepare(model, train_ds)
    epochs, max_steps = resolve_schedule(config, train_ds["labels"])
    # model selection on validation, for methods whose head trains with the encoder (two-stage
    # methods' heads are fitted after the encoder stage, so their stage-1 checkpoints cannot be scored)
    selecting = (config.select_best and prepared.validation is not None and len(prepared.validation) > 0
                 and model.method.trains_encoder and not model.method.frozen_head_stage)
    eval_ds = tokenize_dataset(prepared.validation, model.tokenizer, model.max_length) if selecting else None
    trainer = build_trainer(config, model, train_ds, epochs, stop_after, max_steps, eval_ds)
    t_setup = time.perf_counter()
    resume_from = last_checkpoint(output) if config.resume else None
    head_init = None
    if config.head_init == "probe" and resume_from is None:
        # LP-FT (Kumar et al., 2022): start fine-tuning from the linear probe's head
        head_init = train_head(model, train_ds, trainer.data_collator, seed=config.seed, solver="logistic")
    train_loss = None
    if model.method.trains_encoder:
        train_output = trainer.train(resume_from_checkpoint=resume_from)
        train_loss = float(train_output.training_loss)
        if stop_after is not None and trainer.state.global_step < trainer.state.max_steps:
            return TrainResult({"interrupted_at_step": trainer.state.global_step}, model)
    head_stage = None
    if model.method.frozen_head_stage or config.refit_head:
        solver = "logistic" if config.refit_head and not model.method.frozen_head_stage else None
        # the head epoch is chosen on validation, like the encoder step of one-stage runs
        head_validation = (tokenize_dataset(prepared.validation, model.tokenizer, model.max_length)
                           if config.select_best and prepared.validation is not None and len(prepared.validation) else None)
        head_stage = train_head(model, train_ds, trainer.data_collator, seed=config.seed, progress=config.progress,
                                solver=solver, validation_ds=head_validation, metric=selection_metric(config, model.task))
    t_train = time.perf_counter()

    metrics: dict[str, Any] = {}
    if prepared.validation is not None:
        metrics["validation"] = evaluate_model(model, prepared.validation)
    if config.evaluate_test and prepared.test is not None:
        metrics["test"] = evaluate_model(model, prepared.test)
    t_eval = time.perf_counter()

    training = {k: getattr(config, k) for k in (
        "batch_size", "learning_rate", "weight_decay", "warmup_ratio", "gradient_accumulation_steps",
        "max_length", "fp16", "bf16", "min_steps", "refit_head", "head_init", "sampler")}
    selection = None
    if selecting:
        state = trainer.state
        evals = [{"step": h["step"], **{k.removeprefix("eval_"): v for k, v in h.items() if k.startswith("eval_")
                                         and not k.endswith(("_runtime", "_per_second"))}}
                 for h in state.log_history if any(k.startswith("eval_") for k in h)]
        metric = selection_metric(config, model.task)
        best_step = None
        if state.best_model_checkpoint:
            best_step = int(Path(state.best_model_checkpoint).name.rsplit("-", 1)[-1])
        best_value = next((e.get(metric) for e in evals if e["step"] == best_step), None)
        selection = {"metric": metric, "best_step": best_step, "best_value": best_value, "evaluations": evals,
                     "stopped_early": bool(config.early_stopping_patience) and state.global_step < state.max_steps,
                     "rule": "the checkpoint with the best validation metric, ties broken by the lower validation "
                             "loss, is kept (Trainer load_best_model_at_end)"}
    training.update(epochs=epochs if model.method.trains_encoder else 0, steps=trainer.state.global_step, selection=selection,
                    pooling=pooling, train_loss=train_loss, resumed_from=resume_from, head_init=head_init,
                    head_stage=head_stage)
    result = {
        "method": config.method,
        "hparams": model.method.hparams,
        "model": config.model,
        "seed": config.seed,
        "data": prepared.description(config),
        "training": training,
        "metrics": metrics,
        "timings": {"setup_s": t_setup - t0, "train_s": t_train - t_setup, "eval_s": t_eval - t_train},
        "versions": library_versions(),
        "tags": config.tags,
        "log_history": trainer.state.log_history,
    }
    model.info.update({k: result[k] for k in ("model", "seed", "data", "training", "versions")})
    model.info["base_model"] = config.model
    if config.save_model:
        model.save_pretrained(output)
    write_json_atomic(results_path, result)
    if not config.keep_checkpoints:
        shutil.rmtree(output / CHECKPOINT_DIR, ignore_errors=True)
    if config.progress:
        summary = {split: {k: round(v, 4) for k, v in headline(m).items()} for split, m in metrics.items()}
        print(f"{config.method}: {json.dumps(summary)}  ({t_train - t_setup:.0f}s training)")
    return TrainResult(result, model)


class TrainResult(dict):
    """The run's record (the contents of ``results.json``) with the trained model as ``.model``
    (loaded from the output folder on first use when the run had finished earlier)."""

    def __init__(self, record: dict[str, Any], model: ContrastiveClassifier | None = None, output: str | None = None):
        super().__init__(record)
        self._model = model
        self._output = output

    @property
    def metrics(self) -> dict[str, Any]:
        return self["metrics"]

    @property
    def model(self) -> ContrastiveClassifier:
        if self._model is None:
            self._model = ContrastiveClassifier.from_pretrained(self._output)
        return self._model
