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

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
from transformers import AutoModel, set_seed

from .data.loading import (LABEL, SUFFIX_BUILDERS, TEXT, TEXT_PAIR, check_utf8, data_hash, file_problem, load_data,
                           normalise_columns, read_table)
from .encoders import DEFAULT_MODEL, default_pooling, resolve_model
from .atomic import atomic_folder, check_output, write_json_atomic
from .errors import ConfigError, DataError
from .identity import run_identity
from .modeling import ContrastiveClassifier
from .checkpoints import CHECKPOINT_DIR
from .pipeline import Clock, TrainResult, fit
from .record import Record, read_record
from .settings import check_fields, same_as, setting
from .training import SEED_MAX, TrainConfig, build_trainer, tokenize_dataset
from .versions import library_versions

PRETRAIN_METHODS = ("simcse-unsup", "simcse-sup", "diffcse")
RECORD_NAME = "contrastfit_pretrain.json"
POOLING_CONFIG = "1_Pooling/config.json"
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


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def read_text_lines(path: str | os.PathLike) -> list[str]:
    """The non-blank lines of a UTF-8 text file, stripped (one text per line)."""
    path = Path(path).expanduser()
    problem = file_problem(path)
    if problem is not None:
        raise DataError(f"corpus {path}: {problem}")
    check_utf8(path)
    with open(path, encoding="utf-8") as fh:
        return [line.strip() for line in fh if line.strip()]


def load_corpus(data: str, *, labelled: bool, text_column: str | None = None, text_pair_column: str | None = None,
                label_column: str | None = None) -> tuple[datasets.Dataset, list[str] | None, dict[str, Any]]:
    """The stage-1 rows (``text``, optional ``text_pair``, ``label`` when there are labels), their label
    names (None: no labels or a regression target) and a description of the corpus for the record."""
    path = Path(data).expanduser()
    is_file = path.is_file()
    if not is_file and (path.suffix.lower() in (".txt", *SUFFIX_BUILDERS) or data.startswith((".", "/", "~"))):
        raise DataError(f"corpus {path}: {file_problem(path) or 'no such file'}")
    if is_file and path.suffix.lower() not in SUFFIX_BUILDERS:
        texts = read_text_lines(path)
        if not texts:
            raise DataError(f"corpus {path} holds no text (it is empty or has only blank lines)")
        if labelled:
            raise ConfigError(f"simcse-sup needs class labels, but {path} is unlabelled text (one text per line); "
                              "give a labelled data set (a built-in name or a table with a label column), "
                              "or use simcse-unsup or diffcse")
        source = {"kind": "text-lines", "path": str(path.resolve()), "sha256": _file_sha256(path)}
        return datasets.Dataset.from_dict({TEXT: texts}), None, source
    if is_file:
        raw = read_table(path)
        has_labels = (label_column or LABEL) in raw.column_names
        if not has_labels:
            if labelled:
                raise ConfigError(f"simcse-sup needs class labels, but {path} has no label column "
                                  f"'{label_column or LABEL}' (columns: {', '.join(raw.column_names)})")
            ds, _ = normalise_columns(raw, str(path), text_column, text_pair_column, label_column, require_labels=False)
            return ds, None, {"kind": "table", "path": str(path.resolve()), "sha256": _file_sha256(path), "labels": False}
    text_data = load_data(data, text_column=text_column, text_pair_column=text_pair_column, label_column=label_column)
    source = {"kind": text_data.source.get("kind", "builtin"), "name": text_data.name, "split": "train",
              "labels": True, **({"sha256": _file_sha256(path)} if is_file else {})}
    if labelled and text_data.label_names is None:
        raise ConfigError(f"simcse-sup needs class labels, but '{data}' has a numeric (regression) target; "
                          "use simcse-unsup or diffcse")
    return text_data.train, text_data.label_names, source


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

    clock = Clock()
    set_seed(o.seed)
    rows, label_names, source = _corpus_rows(o.data, labelled, o.max_texts, text_column=o.text_column,
                                             text_pair_column=o.text_pair_column, label_column=o.label_column)
    pooling = o.pooling or default_pooling(o.model)
    classifier = ContrastiveClassifier.from_encoder(o.model, o.method, label_names, hparams=o.hparams or {},
                                                    pooling=pooling, max_length=settings["max_length"],
                                                    trust_remote_code=o.trust_remote_code)
    train_ds = tokenize_dataset(rows, classifier.tokenizer, classifier.max_length)
    classifier.method.prepare(classifier, train_ds)
    with atomic_folder(out) as staging:
        config = TrainConfig(method=o.method, data=str(o.data), output=str(staging), model=o.model,
                             batch_size=settings["batch_size"], learning_rate=settings["learning_rate"],
                             weight_decay=o.weight_decay, warmup_ratio=o.warmup_ratio, seed=o.seed,
                             sampler=settings["sampler"], save_checkpoints=False,
                             logging_steps=o.logging_steps, progress=o.progress, fp16=o.fp16, bf16=o.bf16,
                             use_cpu=o.use_cpu, max_length=settings["max_length"], min_steps=1)
        config.validate()
        trainer = build_trainer(config, classifier, train_ds, float(o.epochs), max_steps=o.max_steps or -1)
        clock.mark("setup")
        fitted = fit(trainer, staging)
        clock.mark("train")
        shutil.rmtree(staging / CHECKPOINT_DIR, ignore_errors=True)
        _save_encoder(classifier, pooling, staging)
        record = _record(o, classifier, settings, trainer, fitted, source, pooling, clock)
        record.write(staging / RECORD_NAME)
    if o.progress:
        print(f"pretrain {o.method}: {record.training.steps} steps on {source['n_texts']} texts, "
              f"loss {record.training.train_loss:.4f} ({clock.timings['train_s']:.0f}s) -> {out}")
    return PretrainResult.of(record, output=str(out))


def _record(o: PretrainOptions, classifier: ContrastiveClassifier, settings: dict[str, Any], trainer, fitted,
            source: dict[str, Any], pooling: str, clock: Clock) -> Record:
    """The run's record (kind ``pretrain``): the settings it trained with, its steps and loss, the corpus."""
    hparams = {k: v for k, v in classifier.method.hparams.items() if not k.startswith("head_")}
    training = {"batch_size": settings["batch_size"], "learning_rate": settings["learning_rate"],
                "weight_decay": o.weight_decay, "warmup_ratio": o.warmup_ratio, "epochs": o.epochs,
                "max_steps": o.max_steps, "steps": trainer.state.global_step, "sampler": settings["sampler"],
                "train_loss": fitted.train_loss, "pooling": pooling, "max_length": classifier.max_length,
                "base_model_path": resolve_model(o.model)[0]}
    return Record(
        kind="pretrain", method=o.method, hparams=hparams, model=o.model, seed=o.seed, data=source,
        training=training, timings=clock.timings, versions=library_versions(), log_history=trainer.state.log_history,
        identity=run_identity("pretrain", method=o.method, hparams=hparams, seed=o.seed, model=o.model,
                              settings={k: v for k, v in training.items() if k not in ("steps", "train_loss")},
                              data=source))


def _corpus_rows(data: str, labelled: bool, max_texts: int | None,
                 **columns: str | None) -> tuple[datasets.Dataset, list[str], dict[str, Any]]:
    """The corpus's first ``max_texts`` rows (a placeholder class where the objective ignores labels),
    their label names and the record's description of the corpus."""
    rows, label_names, source = load_corpus(data, labelled=labelled, **columns)
    if max_texts is not None and len(rows) > max_texts:
        rows = rows.select(range(max_texts))
    if len(rows) < 2:
        raise DataError(f"corpus {data} holds {len(rows)} text; contrastive pre-training needs at least 2")
    if not labelled:  # the objectives ignore labels: one placeholder class, random batches
        rows = rows.remove_columns([c for c in rows.column_names if c == LABEL])
        rows = rows.add_column(LABEL, [0] * len(rows))
        label_names = ["text"]
    source.update(n_texts=len(rows), pairs=TEXT_PAIR in rows.column_names, rows_hash=data_hash(rows),
                  max_texts=max_texts)
    return rows, label_names, source


def _save_encoder(classifier: ContrastiveClassifier, pooling: str, folder: Path) -> None:
    """The trained encoder as a Hugging Face folder, with its pooling in sentence-transformers' format."""
    encoder = classifier.encoder
    encoder.backbone.save_pretrained(folder, safe_serialization=True)
    classifier.tokenizer.save_pretrained(folder)
    if pooling in ("mean", "cls"):
        write_json_atomic(folder / POOLING_CONFIG, {
            "word_embedding_dimension": encoder.hidden_size, "pooling_mode_cls_token": pooling == "cls",
            "pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False})


class PretrainResult(TrainResult):
    """The record written to ``contrastfit_pretrain.json`` (a :class:`~contrastfit.record.Record` of kind
    ``pretrain``), with the encoder folder as ``.output`` and the encoder (``transformers.AutoModel``) as
    ``.model``."""

    @property
    def model_class(self) -> Any:
        return AutoModel


def read_pretrain_record(folder: str | os.PathLike) -> Record | None:
    """The stage-1 record of an encoder folder written by :func:`pretrain` (:func:`contrastfit.record.read_record`;
    a record written before version 1 reads as version 1), or None."""
    path = Path(folder) / RECORD_NAME
    return read_record(path) if path.is_file() else None
