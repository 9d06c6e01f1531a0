"""The stage-1 pre-training task shape, :class:`Pretraining`: the encoder alone, trained on a corpus with
the encoder stage of SimCSE or DiffCSE and saved as a plain Hugging Face encoder folder
(:func:`contrastfit.pretrain.pretrain`). The job is the one every run takes; what this shape changes:

* **data**: a corpus instead of labelled splits (:func:`load_corpus`): an unlabelled text file (one text
  a line), a table without labels, or the training split of a labelled data set; its first
  ``max_texts`` rows; one placeholder class where the objective ignores labels;
* **schedule**: ``epochs`` (and ``max_steps`` where given), no step minimum;
* **no head stage, nothing evaluated**: the two-stage methods' stage 2 is the downstream run's;
* **what is written**: the encoder (``config.json``, ``model.safetensors``, the tokenizer), its pooling
  in sentence-transformers' format (:data:`POOLING_CONFIG`) and the record of kind ``pretrain``
  (:data:`RECORD_NAME`), instead of a classifier folder, ``results.json`` and a card.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import datasets
from transformers import AutoModel

from ..atomic import write_json_atomic
from ..checkpoints import CHECKPOINT_DIR
from ..data import TextData
from ..data.loading import (LABEL, SUFFIX_BUILDERS, TEXT, TEXT_PAIR, check_utf8, data_hash, file_problem, load_data,
                            normalise_columns, read_table)
from ..encoders import resolve_model
from ..errors import ConfigError, DataError
from ..identity import run_identity
from ..modeling import ContrastiveClassifier
from ..pipeline import TrainResult
from ..record import Record
from ..versions import library_versions
from .single_label import PreparedData, Run, TaskShape

RECORD_NAME = "contrastfit_pretrain.json"
POOLING_CONFIG = "1_Pooling/config.json"


def file_sha256(path: Path) -> str:
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
        source = {"kind": "text-lines", "path": str(path.resolve()), "sha256": file_sha256(path)}
        return datasets.Dataset.from_dict({TEXT: texts}), None, source
    if is_file:
        raw = read_table(path)
        has_labels = (label_column or LABEL) in raw.column_names
        if not has_labels:
            if labelled:
                raise ConfigError(f"simcse-sup needs class labels, but {path} has no label column "
                                  f"'{label_column or LABEL}' (columns: {', '.join(raw.column_names)})")
            ds, _ = normalise_columns(raw, str(path), text_column, text_pair_column, label_column, require_labels=False)
            return ds, None, {"kind": "table", "path": str(path.resolve()), "sha256": file_sha256(path), "labels": False}
    text_data = load_data(data, text_column=text_column, text_pair_column=text_pair_column, label_column=label_column)
    source = {"kind": text_data.source.get("kind", "builtin"), "name": text_data.name, "split": "train",
              "labels": True, **({"sha256": file_sha256(path)} if is_file else {})}
    if labelled and text_data.label_names is None:
        raise ConfigError(f"simcse-sup needs class labels, but '{data}' has a numeric (regression) target; "
                          "use simcse-unsup or diffcse")
    return text_data.train, text_data.label_names, source


def corpus_rows(data: str, labelled: bool, max_texts: int | None,
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


def save_encoder(classifier: ContrastiveClassifier, pooling: str, folder: Path) -> None:
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


class Pretraining(TaskShape):
    """The encoder stage of ``config.method`` on a corpus (the module docstring): ``max_texts`` keeps the
    corpus's first N texts, ``max_steps`` caps the run; the other settings are ``config``'s."""

    result_class = PretrainResult

    def __init__(self, max_texts: int | None = None, max_steps: int | None = None):
        self.max_texts, self.max_steps = max_texts, max_steps

    def chooses_on_validation(self, config: Any) -> bool:
        return False

    def load(self, config: Any, memory: dict[str, Any]) -> TextData:
        rows, label_names, source = corpus_rows(
            config.data, config.method == "simcse-sup", self.max_texts, text_column=config.text_column,
            text_pair_column=config.text_pair_column, label_column=config.label_column)
        return TextData(str(config.data), rows, None, None, label_names, source=source)

    def sample(self, config: Any, data: TextData) -> PreparedData:
        return PreparedData(data, data.train, None, None)

    def configure(self, config: Any, prepared: PreparedData) -> Any:
        return config  # pretrain() resolved the method's stage-1 settings

    def hparams(self, config: Any, n_train: int) -> dict[str, Any]:
        return dict(config.hparams)

    def schedule(self, config: Any, train_labels: Any) -> tuple[float, int]:
        return float(config.epochs), self.max_steps or -1

    def fits_head(self, model: ContrastiveClassifier, config: Any) -> bool:
        return False  # stage 2 is the downstream run's

    def conclude(self, run: Run, output: Path | None) -> TrainResult:
        """The encoder folder, its pooling and the record of kind ``pretrain`` written into ``output``
        (the staging folder :func:`contrastfit.pretrain.pretrain` renames into place)."""
        record = self.record(run)
        if output is not None:
            shutil.rmtree(output / CHECKPOINT_DIR, ignore_errors=True)
            save_encoder(run.model, run.pooling, output)
            record.write(output / RECORD_NAME)
        return PretrainResult.of(record)

    def record(self, run: Run) -> Record:
        """The run's record (kind ``pretrain``): the settings it trained with, its steps and loss, the corpus."""
        config, model, trainer = run.config, run.model, run.trainer
        source = run.prepared.data.source
        hparams = {k: v for k, v in model.method.hparams.items() if not k.startswith("head_")}
        training = {"batch_size": config.batch_size, "learning_rate": config.learning_rate,
                    "weight_decay": config.weight_decay, "warmup_ratio": config.warmup_ratio, "epochs": config.epochs,
                    "max_steps": self.max_steps, "steps": trainer.state.global_step, "sampler": config.sampler,
                    "train_loss": run.fitted.train_loss, "pooling": run.pooling, "max_length": model.max_length,
                    "base_model_path": resolve_model(config.model)[0]}
        return Record(
            kind="pretrain", method=config.method, hparams=hparams, base_model=config.model, seed=config.seed, data=source,
            training=training, timings=run.clock.timings, versions=library_versions(),
            log_history=trainer.state.log_history,
            identity=run_identity("pretrain", method=config.method, hparams=hparams, seed=config.seed,
                                  model=config.model,
                                  settings={k: v for k, v in training.items() if k not in ("steps", "train_loss")},
                                  data=source))
