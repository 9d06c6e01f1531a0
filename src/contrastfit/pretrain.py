"""Stage 1 on its own corpus: train a sentence encoder with SimCSE or DiffCSE and save it as a plain
Hugging Face encoder folder.

The CS224N report (Behrman & Christoglou, Sec. 3.3-3.5, 5.1) trains the sentence embeddings once, on a
corpus of their own (a million Wikipedia sentences for unsupervised SimCSE and DiffCSE, NLI triples for
supervised SimCSE), and only then fits task heads. :func:`pretrain` is that stage alone: the encoder
stage of ``simcse-unsup``, ``simcse-sup`` or ``diffcse`` (:mod:`contrastfit.methods.simcse`: the same
losses, the same Trainer) on

* an **unlabelled text file**: one text per line (``.txt``, or any file that is not a table); blank lines
  are skipped; UTF-8;
* a **table without labels** (CSV / TSV / JSONL / Parquet with a text column, ``text_column`` to name it;
  a pair column is read as sentence pairs);
* a **labelled data set** (a built-in name, a local table with a label column, a Hub name): its
  **training split** only (the split ``train`` would use), so that no validation or test row is seen.

``simcse-sup`` needs class labels (its triples are built from classes); the two others ignore labels.
The output folder is a Hugging Face encoder folder (``config.json``, ``model.safetensors``, the tokenizer)
that ``train(TrainConfig(model=ENC_DIR))``, ``train_multitask(model=ENC_DIR)`` and an experiment's
``model:`` load like any local model, plus

* ``1_Pooling/config.json``: the pooling the encoder was trained with, in sentence-transformers' format
  (``mean`` or ``cls``), which :func:`contrastfit.encoders.default_pooling` reads, so later runs pool the
  same way (``pooler`` pooling has no such entry: give ``--pooling pooler`` again downstream);
* ``contrastfit_pretrain.json``: what made it, a :class:`~contrastfit.record.Record` of kind ``pretrain``:
  method and hyper-parameters, base model (``model``), the Trainer settings with the pooling, steps and
  final loss (``training``), the corpus (``data``: source, kind, number of texts, sha256 of the file,
  hash of the rows), the run identity and library versions.

Defaults per method are the report's stage-1 settings (Sec. 5.3.2-5.3.4): batch 64 / 32 / 64, learning
rate 1e-5 / 1e-5 / 1e-6, maximum length 64 / 100 / 64 for ``simcse-unsup`` / ``simcse-sup`` / ``diffcse``,
weight decay 0.1, one epoch; warm-up is the project's 10%. The report drops supervised pairs longer than
100 tokens; here they are truncated. ``max_texts`` keeps the first N texts, as the report's "datascale"
keeps the first fraction of a corpus (Sec. 5.3.1).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .atomic import atomic_folder, check_output
from .config import SEED_MAX, TrainConfig
from .encoders import DEFAULT_MODEL
from .errors import ConfigError
from .record import Record, read_record
from .settings import check_fields, same_as, setting
from .shapes.pretraining import (POOLING_CONFIG, RECORD_NAME, PretrainResult, Pretraining,  # noqa: F401
                                 load_corpus, read_text_lines)
from .training import _train

PRETRAIN_METHODS = ("simcse-unsup", "simcse-sup", "diffcse")
#: The report's stage-1 settings (Sec. 5.3.2 batch size, 5.3.3 learning rate and weight decay, 5.3.4 length).
PRETRAIN_DEFAULTS: dict[str, dict[str, Any]] = {
    "simcse-unsup": {"batch_size": 64, "learning_rate": 1e-5, "max_length": 64},
    "simcse-sup": {"batch_size": 32, "learning_rate": 1e-5, "max_length": 100},
    "diffcse": {"batch_size": 64, "learning_rate": 1e-6, "max_length": 64},
}
DEFAULT_WEIGHT_DECAY = 0.1
_METHOD_DEFAULT = "default: the method's stage-1 setting in the report"


@dataclass(frozen=True)
class PretrainOptions:
    """The arguments of :func:`pretrain`, declared once (:func:`contrastfit.settings.setting`): its
    defaults are these, ``contrastfit pretrain``'s options are generated from them
    (:func:`contrastfit.cli.add_config_options`) and so is an experiment's ``pretrain:`` entry
    (:class:`contrastfit.experiments.schema.PretrainEntry`), with the same bounds; :func:`pretrain` checks
    its arguments against them first (:func:`contrastfit.settings.check_fields`), so a Python caller gets the
    command line's one-line errors (``batch_size must be >= 1, got 0``)."""

    method: str = setting("simcse-unsup", "the encoder stage of this method", group="options",
                          choices=PRETRAIN_METHODS)
    data: str | None = setting(None, "corpus: .txt (one text per line), a data file, or a data set name",
                               group="options")
    output: str | None = setting(None, "encoder folder to write (must not exist or be empty)", group="options")
    model: str = setting(DEFAULT_MODEL, "the encoder to start from", group="options")
    pooling: str | None = same_as(TrainConfig, "pooling", group="options")
    text_column: str | None = same_as(TrainConfig, "text_column", group="options")
    text_pair_column: str | None = same_as(TrainConfig, "text_pair_column", group="options")
    label_column: str | None = same_as(TrainConfig, "label_column", group="options")
    max_texts: int | None = setting(None, "use at most this many texts of the corpus (the first N)", group="options",
                                    metavar="N", ge=2)
    max_length: int | None = setting(None, f"longest input in tokens ({_METHOD_DEFAULT})", group="options",
                                     metavar="TOKENS", ge=1)
    batch_size: int | None = setting(None, f"batch size ({_METHOD_DEFAULT})", group="options", metavar="N", ge=1)
    learning_rate: float | None = setting(None, f"peak learning rate ({_METHOD_DEFAULT})", group="options",
                                          metavar="LR", gt=0)
    weight_decay: float = setting(DEFAULT_WEIGHT_DECAY, "AdamW weight decay", group="options", metavar="WD", ge=0)
    warmup_ratio: float = same_as(TrainConfig, "warmup_ratio", group="options")
    epochs: float = setting(1.0, "training epochs", group="options", metavar="E", gt=0)
    max_steps: int | None = setting(None, "cap the number of optimisation steps", group="options", metavar="N", ge=1)
    seed: int = setting(0, "seed of the initialisation, dropout and batch order", group="options", metavar="SEED",
                        ge=0, le=SEED_MAX)
    hparams: dict[str, Any] | None = setting(None, "the method's hyper-parameters (temperature, DiffCSE's lambda, "
                                             "mask_ratio, ...)")
    logging_steps: int = same_as(TrainConfig, "logging_steps", group="options")
    progress: bool = same_as(TrainConfig, "progress", group="options")
    fp16: bool = same_as(TrainConfig, "fp16", group="options")
    bf16: bool = same_as(TrainConfig, "bf16", group="options")
    use_cpu: bool = same_as(TrainConfig, "use_cpu", group="options")
    trust_remote_code: bool = same_as(TrainConfig, "trust_remote_code", group="options")


_O = PretrainOptions


def pretrain(method: str = _O.method, data: str | None = _O.data, output: str | None = _O.output,
             **options: Any) -> "PretrainResult":
    """Train the encoder ``model`` with the encoder stage of ``method`` on ``data`` and save it to ``output``
    (see the module docstring). ``options`` are the other fields of :class:`PretrainOptions`, where each is
    declared with its default and bounds: ``model``, ``max_texts``, ``batch_size``, ``learning_rate``,
    ``epochs``, ``max_steps`` (caps the run), ``seed``, ``hparams`` (the method's: ``temperature``, DiffCSE's
    ``lambda``, ``mask_ratio``, ...), ... Returns the record, with ``.output``."""
    o = PretrainOptions(method=method, data=data, output=output, **options)
    check_fields(o)  # every argument against its declaration (type, choices, bounds): the CLI's one-line errors
    if not o.data:
        raise ConfigError("pretrain needs a corpus: data=PATH (one text per line), a table or a data set name")
    if not o.output:
        raise ConfigError("pretrain needs an output folder: output=ENC_DIR")
    out = Path(o.output)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out} already exists and is not an empty folder; choose another output")
    check_output(o.output, inputs=(o.data, o.model), option="output")
    defaults = PRETRAIN_DEFAULTS[o.method]
    settings = {name: defaults[name] if getattr(o, name) is None else getattr(o, name)
                for name in ("batch_size", "learning_rate", "max_length")}
    labelled = o.method == "simcse-sup"
    settings["sampler"] = "balanced" if labelled else "random"  # the objectives but simcse-sup's ignore labels

    with atomic_folder(out) as staging:
        config = TrainConfig(method=o.method, data=str(o.data), output=str(staging), model=o.model,
                             pooling=o.pooling, text_column=o.text_column, text_pair_column=o.text_pair_column,
                             label_column=o.label_column, hparams=o.hparams or {}, epochs=float(o.epochs),
                             batch_size=settings["batch_size"], learning_rate=settings["learning_rate"],
                             weight_decay=o.weight_decay, warmup_ratio=o.warmup_ratio, seed=o.seed,
                             sampler=settings["sampler"], save_checkpoints=False, save_model=False,
                             evaluate_test=False, logging_steps=o.logging_steps, progress=o.progress, fp16=o.fp16,
                             bf16=o.bf16, use_cpu=o.use_cpu, max_length=settings["max_length"], min_steps=1,
                             trust_remote_code=o.trust_remote_code)
        config.validate()
        result = _train(config, None, None, keep=True, shape=Pretraining(o.max_texts, o.max_steps))
    record = result.record
    if o.progress:
        print(f"pretrain {o.method}: {record.training.steps} steps on {record.data.n_texts} texts, "
              f"loss {record.training.train_loss:.4f} ({record.timings['train_s']:.0f}s) -> {out}")
    return PretrainResult.of(record, output=str(out))  # .model: the encoder, read from the folder


def read_pretrain_record(folder: str | os.PathLike) -> Record | None:
    """The stage-1 record of an encoder folder written by :func:`pretrain` (:func:`contrastfit.record.read_record`;
    a record written before version 1 reads as version 1), or None."""
    path = Path(folder) / RECORD_NAME
    return read_record(path) if path.is_file() else None
