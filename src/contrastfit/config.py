"""The settings of one training run: :class:`TrainConfig`, each field declared once with
:func:`~contrastfit.settings.setting` (its type, default, help text, command-line option and bounds), which
``contrastfit train``, :func:`contrastfit.train`, experiment configs and the docs all read; the checks
that span fields (:meth:`TrainConfig.validate`, :func:`check_precision`); and the data a config names
(:func:`load_config_data`, :func:`prepare_data`: loaded and sampled by its task shape).

It sits below the one job (:mod:`contrastfit.training`) and below the task shapes that hold a config of
their own (multi-task's reads a :class:`TrainConfig` per task), so each imports it from beneath.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .atomic import OutputError, check_output_path
from .data import TextData
from .data.descriptions import check_label_descriptions
from .encoders import DEFAULT_MODEL
from .errors import ConfigError
from .memory import check_memory
from .methods import get_method
from .methods.base import resolve_hparams
from .record import RESULTS_NAME
from .settings import check_fields, setting
from .shapes import DEFAULT_METHOD, DEFAULT_REGRESSION_METHOD, PreparedData, check_batch_size, shape_for
from .trainer import DEFAULT_LEARNING_RATE, DEFAULT_MIN_STEPS

#: Seeds go to NumPy's legacy seeding (``transformers.set_seed``), which takes 0 .. 2**32 - 1.
SEED_MAX = 2**32 - 1
#: Groups of ``contrastfit train``'s options, in the order ``--help`` shows them ("options" is
#: argparse's own section, next to ``--help``). A field without a group has no command-line option.
OPTION_GROUPS = ("options", "data", "sampling", "method", "model and optimisation", "model selection")
#: Validation metrics that can pick the kept checkpoint (``metric_for_best``).
SELECTION_METRICS = ("accuracy", "f1", "macro_f1", "mcc", "loss", "mse", "pearson", "spearman")


def _check_output(value: str) -> None:
    """``--output`` is a folder (or will be) that can be written: not a file, not under one (a setting's
    error, :class:`ConfigError`, as every check of a setting is)."""
    try:
        check_output_path(value, what=f" (for the model and {RESULTS_NAME})")
    except OutputError as err:
        raise ConfigError(str(err)) from None


def _check_label_separator(value: str) -> None:
    """``--label-separator``: one or more characters, not only white space (that would split every label)."""
    if not value.strip():
        raise ConfigError(f"label_separator must hold a character other than white space, got {value!r}")


_OPT, _SELECT = "model and optimisation", "model selection"


@dataclass
class TrainConfig:
    """Everything one training job needs. Field names match the CLI flags (``--name-with-dashes``;
    ``--cpu`` is ``use_cpu``, ``--quiet`` turns ``progress`` off, ``--gradient-cache`` is
    ``gradient_cache_chunk``).

    :func:`~contrastfit.training.train` also takes in-memory data for ``data``, ``validation_data`` and
    ``test_data`` (:func:`contrastfit.data.loading.memory_table`: ``(texts, labels)``, a pandas DataFrame,
    a ``datasets.Dataset``, a dict of columns, a list of row dicts); :meth:`validate` checks the text
    settings the command line gives. ``output`` None (the default in Python): ``train`` trains in a
    temporary folder and keeps the model in memory only.

    Each field is declared once, with :func:`~contrastfit.settings.setting`: its type (the annotation), default, help
    text, command-line option and allowed values. ``contrastfit train``'s options are generated from
    these declarations (:func:`contrastfit.cli.add_config_options`) and :meth:`validate` checks every
    field against them, so a new setting is one line here.
    """

    # -- where, and what (the method's hyper-parameters: --param NAME=VALUE and the method flags)
    # None (Python only; the command line requires --output): see train()
    output: str | None = setting(None, f"output folder (the model, {RESULTS_NAME}, checkpoints while training)",
                                 group="options", metavar="FOLDER", check=_check_output)
    method: str | None = setting(None, f"training method (see `contrastfit methods`); default: {DEFAULT_METHOD}, the "
                                 f"default recipe ({DEFAULT_REGRESSION_METHOD} for a regression target)",
                                 group="method", check=get_method)
    hparams: dict[str, Any] = setting(factory=dict, help="method hyper-parameters by name, checked by the method")
    # -- data
    # no default: train() without data is an error, never a built-in set
    data: str | None = setting(None, "built-in name (see `contrastfit datasets`), a local .csv/.tsv/.jsonl/.json/"
                               ".parquet file, or a Hugging Face data set name (e.g. glue/sst2, owner/name:config)",
                               group="data", metavar="NAME|FILE")
    text_column: str | None = setting(None, "column with the text (default: text, sentence, ...)", group="data",
                                      metavar="COLUMN")
    text_pair_column: str | None = setting(None, "column with the second text of a sentence pair (default: "
                                           "sentence2 next to sentence1, hypothesis next to premise)", group="data",
                                           metavar="COLUMN")
    label_column: str | None = setting(None, "column with the label (default: label)", group="data", metavar="COLUMN")
    validation_data: str | None = setting(None, "local file with validation rows (default: hold out "
                                          "--validation-split of a local --data file)", group="data", metavar="FILE")
    test_data: str | None = setting(None, "local file with test rows", group="data", metavar="FILE")
    validation_split: float | None = setting(None, "fraction of a local --data file held out (stratified) for "
                                             "validation when no --validation-data is given; 0 keeps every row "
                                             "(default: 0.1 where the run chooses something on validation, a "
                                             "step, a head epoch or label thresholds; else 0, so a two-stage "
                                             "method with a logistic head, the default recipe among them, "
                                             "trains on every row)", group="data", metavar="FRACTION", ge=0, lt=1)
    task: str | None = setting(None, "force the task (default: from the labels; numbers that are not all whole "
                               "make a regression target)", group="data", choices=("classification", "regression"))
    multi_label: bool = setting(False, "each text has a set of labels (a list, labels joined by --label-separator, "
                                "or one 0/1 column per label: --label-column a,b,c); docs: Multi-label",
                                group="data")
    label_separator: str | None = setting(None, "with --multi-label: the separator of several labels in one text "
                                          "cell (default: |)", group="data", metavar="SEP",
                                          check=_check_label_separator)
    label_descriptions: str | dict[str, str] | None = setting(
        None, "a text per class that the methods using label names (the default recipe's anchors and prior, "
        "zero-shot) encode instead of the name, e.g. ABBR -> 'an abbreviation': a .json or .yaml mapping, or a "
        ".csv/.tsv with the header label,description; docs: Label names and descriptions", group="data", metavar="FILE",
        check=check_label_descriptions)
    # -- sampling (every draw has its own seed: derive_seed(sample_seed, "train", sample_index))
    shots: int | None = setting(None, "sample K training examples per class", group="sampling", metavar="K", ge=1)
    train_size: int | None = setting(None, "sample N training examples in total, stratified by class",
                                     group="sampling", metavar="N", ge=1)
    validation_size: int | None = setting(None, "use a stratified subset of N rows of the validation split",
                                          group="sampling", metavar="N", ge=1)
    seed: int = setting(0, "training seed (initialisation, dropout, batch order); also the sampling seed unless "
                        "--sample-seed", group="sampling", metavar="SEED", ge=0, le=SEED_MAX)
    sample_seed: int | None = setting(None, "seed of the --shots/--train-size/--validation-size draws (default: "
                                      "--seed)", group="sampling", metavar="S", ge=0, le=SEED_MAX)
    sample_index: int = setting(0, "which sample of that seed: an experiment's sample s of protocol seed S is "
                                "--sample-seed S --sample-index s", group="sampling", metavar="s", ge=0)
    # -- model and optimisation
    model: str = setting(DEFAULT_MODEL, "encoder: built-in name, local Hugging Face folder or Hub name", group=_OPT,
                         metavar="NAME|FOLDER")
    pooling: str | None = setting(None, "sentence embedding (default: the encoder's own, mean for minilm-l6; else "
                                  "cls)", group=_OPT, choices=("cls", "pooler", "mean"))
    max_length: int = setting(128, "longest input in tokens, clipped to what the encoder allows", group=_OPT,
                              metavar="TOKENS", ge=1)
    epochs: float | None = setting(None, "training epochs (default: the method's step rule, else 3, or more to reach "
                                   "--min-steps steps)", group=_OPT, metavar="E", gt=0)
    min_steps: int | None = setting(None, "fewest optimisation steps without --epochs (default: the method's, else "
                                    f"{DEFAULT_MIN_STEPS})", group=_OPT, metavar="N", ge=0)
    batch_size: int = setting(16, "training batch size", group=_OPT, metavar="B", ge=1)
    learning_rate: float | None = setting(None, f"peak learning rate (default: the method's, else "
                                          f"{DEFAULT_LEARNING_RATE:g})".replace("e-0", "e-"), group=_OPT,
                                          metavar="LR", gt=0)
    weight_decay: float = setting(0.01, "AdamW weight decay", group=_OPT, metavar="WD", ge=0)
    warmup_ratio: float = setting(0.1, "linear warm-up, as a fraction of the training steps", group=_OPT,
                                  metavar="FRACTION", ge=0, lt=1)
    gradient_accumulation_steps: int = setting(1, "batches whose gradients add up to one optimisation step",
                                               group=_OPT, metavar="N", ge=1)
    gradient_cache_chunk: int | None = setting(None, (
        "gradient caching: embed each batch in chunks of N sentences without a graph, compute the loss on the "
        "whole batch, then re-encode chunk by chunk with the cached gradients (exact gradients, the encoder "
        "memory of N sentences; docs: GPUs)"), group=_OPT, flag="--gradient-cache", metavar="N", ge=1)
    memory_size: int | None = setting(None, (
        "cross-batch memory: the last M embeddings of earlier batches, with their labels, join the SupCon term "
        "as extra candidates once M are stored (Wang et al. 2020; ce-scl, ce-scl-lr, ce-supcon, supcl-seq; "
        "docs: GPUs)"), group=_OPT, metavar="M", ge=1)
    sampler: str = setting("balanced", "training batches: balanced (the data's class mix, >= 2 rows of every class "
                           "present) or random, the library's shuffle", group=_OPT, choices=("balanced", "random"))
    head_init: str = setting("random", "probe: fit the head as a logistic-regression probe before fine-tuning, "
                             "LP-FT (Kumar et al. 2022)", group=_OPT, choices=("random", "probe"))
    refit_head: bool = setting(False, "after training, refit the head as a logistic regression on the frozen "
                               "encoder", group=_OPT)
    wise_ft: float | None = setting(None, (
        "WiSE-FT (Wortsman et al. 2022): after fine-tuning, set the encoder's weights to A x fine-tuned + (1 - A) x "
        "pretrained, then fit the head on it (two-stage methods, or with --refit-head); default: the method's (0.5 "
        "for ce-scl-lr, the default recipe), else none; 1 keeps the fine-tuned weights"),
        group=_OPT, metavar="A", ge=0, le=1)
    fp16: bool = setting(False, "float16 mixed precision (CUDA)", group=_OPT)
    bf16: bool = setting(False, "bfloat16 mixed precision", group=_OPT)
    use_cpu: bool = setting(False, "train on the CPU even if a GPU is present", group=_OPT, flag="--cpu")
    resume: bool = setting(False, "continue an interrupted run from its last checkpoint", group=_OPT)
    report_to: str = setting("none", "Trainer logging integrations, e.g. tensorboard or wandb", group=_OPT,
                             metavar="NAMES")
    trust_remote_code: bool = setting(False, "allow a Hub model's own code (off by default)", group=_OPT)
    progress: bool = setting(True, "progress bars and the closing summary line", group=_OPT, flag="--quiet",
                             flag_help="no progress bars")
    # -- model selection on the validation split (Trainer evaluation, best checkpoint, early stopping)
    select_best: bool = setting(True, "evaluate on the validation split during training and keep the best step",
                                group=_SELECT, flag="--no-select-best",
                                flag_help="keep the last step instead of the best on validation (default: "
                                          "evaluate during training, keep the best)")
    metric_for_best: str | None = setting(None, "validation metric that picks the kept step (default: accuracy; "
                                          "mse for regression)", group=_SELECT, choices=SELECTION_METRICS)
    eval_steps: int | None = setting(None, "evaluate every N steps (default: about five evaluations per run)",
                                     group=_SELECT, metavar="N", ge=1)
    early_stopping_patience: int | None = setting(None, "stop after N evaluations without improvement (default: "
                                                  "never)", group=_SELECT, metavar="N", ge=1)
    # -- bookkeeping (Python and experiment configs only)
    save_model: bool = setting(True, "save the trained model to the output folder")
    save_checkpoints: bool = setting(True, "write resumable Trainer checkpoints while training")
    save_steps: int = setting(50, "steps between checkpoints without validation selection (with it, checkpoints "
                              "are written at each evaluation)", ge=1)
    keep_checkpoints: bool = setting(False, "keep the checkpoints folder once the run has finished")
    evaluate_test: bool = setting(True, "evaluate the trained model on the test split")
    logging_steps: int = setting(10, "steps between logged losses", ge=1)
    tags: dict[str, Any] = setting(factory=dict, help="stored as-is in results.json (e.g. experiment labels)")

    def validate(self) -> None:
        """Check every field against its :func:`setting` (:meth:`_check_fields`), then the settings
        that exclude each other; the first problem is a one-line :class:`ConfigError`."""
        self._check_fields()
        if self.shots is not None and self.train_size is not None:
            raise ConfigError("give either --shots (per class) or --train-size (total), not both")
        if self.label_separator is not None and not self.multi_label:
            raise ConfigError("--label-separator splits the label sets of multi-label data: give --multi-label with it, "
                              "or leave it out")
        if self.multi_label and self.task == "regression":
            raise ConfigError("--multi-label is classification into label sets: it does not go with --task regression")
        if self.fp16 and self.bf16:
            raise ConfigError("choose one of fp16 and bf16")
        check_precision(self)
        check_batch_size(self.batch_size, self.sampler, self.method, self.memory_size)
        if self.method is not None:
            # the method's declared names, types and bounds now; what depends on the data when it is built
            resolve_hparams(self.method, self.hparams)
        if self.memory_size is not None and self.method is not None:
            check_memory(self.method, self.memory_size)  # the method must have a SupCon-style term

    def _check_fields(self) -> None:
        check_fields(self)


def gpu_available() -> bool:
    """Whether torch sees a device that mixed precision runs on (CUDA, Apple MPS or Intel XPU)."""
    mps = getattr(torch.backends, "mps", None)
    xpu = getattr(torch, "xpu", None)
    return bool(torch.cuda.is_available() or (mps is not None and mps.is_available())
                or (xpu is not None and xpu.is_available()))


def check_precision(config: Any, flags: tuple[str, str, str] = ("--fp16", "--bf16", "--cpu")) -> None:
    """Mixed precision where it runs (``flags`` name fp16, bf16 and use_cpu in the message):

    * ``fp16`` needs a GPU: with ``use_cpu`` or on a machine without one it is a one-line
      :class:`ConfigError` (the CPU emulates float16, about 10x slower than float32);
    * ``bf16`` needs a GPU, or ``use_cpu`` given with it: bfloat16 autocast on the CPU is what the
      library does then (fast on CPUs with bf16 units), asked for explicitly. ``bf16`` alone on a
      machine without a GPU is refused (the library would fail with a traceback)."""
    fp16, bf16, cpu = flags
    if config.fp16:
        if config.use_cpu:
            raise ConfigError(f"{fp16} is mixed precision on a GPU and {cpu} trains on the CPU, where float16 is emulated "
                              f"(about 10x slower than float32): leave out {fp16}, or give {bf16} with {cpu} for "
                              "bfloat16 on the CPU")
        if not gpu_available():
            raise ConfigError(f"{fp16} needs a GPU, and torch sees none on this machine: leave out {fp16} to train "
                              "in float32 on the CPU")
    if config.bf16 and not config.use_cpu and not gpu_available():
        raise ConfigError(f"{bf16} needs a GPU, and torch sees none on this machine: leave out {bf16} to train in "
                          f"float32, or add {cpu} for bfloat16 autocast on the CPU")


def prepare_data(config: TrainConfig, data: TextData | None = None) -> PreparedData:
    """Load the data (:func:`load_config_data`) and draw the seed's training sample and validation subset."""
    return shape_for(config).sample(config, data or load_config_data(config))


def validation_split_for(config: TrainConfig) -> float:
    """The validation hold-out of ``config``'s run (:meth:`contrastfit.shapes.TaskShape.validation_split`):
    ``config.validation_split``, else 0.1 where the run chooses something on validation, else 0."""
    return shape_for(config).validation_split(config)


def load_config_data(config: TrainConfig, memory: dict[str, Any] | None = None) -> TextData:
    """The run's data (:func:`contrastfit.data.load_data` with ``config``'s data options, the validation
    hold-out by :func:`validation_split_for`); ``memory`` holds the in-memory values of
    :data:`DATA_FIELDS` taken out of ``config``."""
    return shape_for(config).load(config, memory or {})
