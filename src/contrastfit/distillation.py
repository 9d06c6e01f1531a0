"""Distillation: a small, fast student trained on unlabelled texts against a big, accurate teacher.

A few labels train a teacher (``contrastfit train``, e.g. the default recipe on a base-size encoder);
:func:`distill` then trains a student encoder (MiniLM by default) on texts without labels, against what
the teacher predicts for them. It is not a job of its own: it prepares the teacher's targets and runs
the ordinary training job (:func:`contrastfit.training.train`) with a distillation method, so the
student is a model folder like any other (``results.json``, the model card, ``predict``, ``evaluate``,
``export``), whose labels are the teacher's.

1. The teacher (a trained single-label contrastfit model folder) predicts **once** for every distinct
   text: its logits (divided by its calibration temperature, so their softmax is its
   ``predict_proba``) and, for ``distill-cosine``, its L2-normalised sentence embeddings, in one
   encoder pass per batch. Its arg-max is each text's label.
2. The texts, labelled with the teacher's labels in the teacher's label order, are the training data;
   a stratified ``validation_split`` of them is held out where the run chooses something on it (the
   step of ``distill-kl``; :func:`contrastfit.config.validation_split_for`): its accuracy is the
   student's **agreement with the teacher** on texts it did not train on. ``test_data`` (labelled
   with the teacher's label names) gives the accuracy on real labels.
3. :func:`contrastfit.training.train` trains the student with ``method``, the teacher's targets made
   current (:func:`contrastfit.methods.distill_base.teacher_targets`), so the method's loss reads the
   targets of each batch's rows:

   * ``distill-cosine`` (the default): SetFit's distillation, the student's cosine similarities of
     pairs of texts fitted to the teacher's (:func:`contrastfit.losses.similarity_distillation`), then a
     logistic regression on the teacher's labels;
   * ``distill-kl``: the student's softened probabilities fitted to the teacher's, ``T^2 KL`` (Hinton
     et al. 2015; :func:`contrastfit.losses.soft_target_kl`), one stage, the head started as a logistic
     regression on the teacher's labels (``head_init="probe"``).

   The default is the one that agreed more with the teacher in ``bench/distill.py`` (docs:
   Distillation, Benchmarks).

   Neither needs a projection between the two encoders' widths (only logits or similarities pass).

The unlabelled texts (:func:`read_unlabelled`): a ``.txt`` file (one text per line, blank lines
skipped) or a data set name (its training split, the labels ignored), read as
:func:`contrastfit.shapes.pretraining.load_corpus` reads a corpus; a table, every row (a label column is
ignored); in Python also a list of strings. Duplicate texts are
predicted and trained once. The record's ``data.source`` says what the teacher was (folder, method,
base model, labels, accuracy in its own record), how many texts it labelled with which labels, and
how fast it predicted.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from .config import SEED_MAX, TrainConfig, validation_split_for
from .data import TextData
from .data.loading import (
    LABEL,
    SUFFIX_BUILDERS,
    TEXT,
    TEXT_PAIR,
    _given_splits,
    data_hash,
    in_memory,
    normalise_columns,
    read_table,
    stratified_split,
)
from .encoders import BUILTIN_MODELS, DEFAULT_MODEL, check_weights_format, resolve_model
from .errors import ConfigError, DataError, ModelError
from .inference import takes_pairs
from .inputs import model_inputs
from .methods import get_method
from .methods.distill_base import TeacherTargets, teacher_targets
from .modeling import ContrastiveClassifier
from .outputs import CLASSES, LABEL_SETS
from .pipeline import TrainResult, open_output
from .progress import progress_bars
from .shapes.pretraining import file_sha256, load_corpus
from .record import read_record
from .settings import check_fields, same_as, setting
from .training import train

DISTILL_METHODS = ("distill-cosine", "distill-kl")
DEFAULT_DISTILL_METHOD = "distill-cosine"
_OPT = "model and optimisation"


@dataclass(frozen=True)
class DistillOptions:
    """The arguments of :func:`distill`, declared once (:func:`contrastfit.settings.setting`): its defaults
    are these, ``contrastfit distill``'s options are generated from them
    (:func:`contrastfit.cli.add_config_options`; ``teacher`` is its positional argument), and
    :func:`distill` checks its arguments against them first (:func:`contrastfit.settings.check_fields`),
    so a Python caller gets the command line's one-line errors."""

    teacher: str | None = setting(None, "a trained contrastfit model folder (single-label classification): the "
                                  "student learns its predictions")
    data: str | None = setting(None, "unlabelled texts: a .txt file (one text per line), a table (.csv/.tsv/.jsonl/"
                               ".parquet; a label column is ignored) or a data set name (its training split)",
                               group="options", metavar="FILE|NAME")
    output: str | None = same_as(TrainConfig, "output", group="options")
    model: str = setting(DEFAULT_MODEL, "the student's encoder: built-in name, local Hugging Face folder or Hub name",
                         group="options", metavar="NAME|FOLDER")
    method: str = setting(DEFAULT_DISTILL_METHOD, "distill-cosine: SetFit's, the student's pair similarities fitted "
                          "to the teacher's, then a logistic regression on the teacher's labels; distill-kl: its "
                          "probabilities fitted to the teacher's (KL) (docs: Distillation)", group="options",
                          choices=DISTILL_METHODS)
    text_column: str | None = same_as(TrainConfig, "text_column", group="data")
    text_pair_column: str | None = same_as(TrainConfig, "text_pair_column", group="data")
    label_column: str | None = setting(None, "label column of --test-data (default: label)", group="data",
                                       metavar="COLUMN")
    max_texts: int | None = setting(None, "use at most the first N distinct texts of --data", group="data",
                                    metavar="N", ge=2)
    test_data: str | None = setting(None, "a labelled file (the teacher's label names) to report the student's "
                                    "accuracy on", group="data", metavar="FILE")
    validation_split: float | None = setting(None, "fraction of the texts held out (stratified by the teacher's "
                                             "label) to measure the student's agreement with the teacher; 0 trains "
                                             "on every text (default: 0.1 for distill-kl, which keeps its best step "
                                             "there; 0 for distill-cosine)", group="data", metavar="FRACTION",
                                             ge=0, lt=1)
    teacher_batch_size: int = setting(64, "texts per forward pass of the teacher", group="data", metavar="N", ge=1)
    pooling: str | None = same_as(TrainConfig, "pooling", group=_OPT)
    max_length: int = same_as(TrainConfig, "max_length", group=_OPT)
    epochs: float | None = same_as(TrainConfig, "epochs", group=_OPT)
    min_steps: int | None = same_as(TrainConfig, "min_steps", group=_OPT)
    batch_size: int = same_as(TrainConfig, "batch_size", group=_OPT)
    learning_rate: float | None = same_as(TrainConfig, "learning_rate", group=_OPT)
    weight_decay: float = same_as(TrainConfig, "weight_decay", group=_OPT)
    warmup_ratio: float = same_as(TrainConfig, "warmup_ratio", group=_OPT)
    head_init: str | None = setting(None, "random, or probe: the head starts as a logistic regression on the "
                                    "teacher's labels (default: probe for distill-kl; distill-cosine fits its "
                                    "head after the encoder)", group=_OPT, choices=("random", "probe"))
    seed: int = setting(0, "seed of the student's initialisation, dropout and batch order", group=_OPT,
                        metavar="SEED", ge=0, le=SEED_MAX)
    hparams: dict[str, Any] | None = setting(None, "the method's hyper-parameters (distill-kl's temperature, "
                                             "distill-cosine's head_C)")
    resume: bool = same_as(TrainConfig, "resume", group=_OPT)
    fp16: bool = same_as(TrainConfig, "fp16", group=_OPT)
    bf16: bool = same_as(TrainConfig, "bf16", group=_OPT)
    use_cpu: bool = same_as(TrainConfig, "use_cpu", group=_OPT)
    trust_remote_code: bool = same_as(TrainConfig, "trust_remote_code", group=_OPT)
    progress: bool = same_as(TrainConfig, "progress", group=_OPT)


_O = DistillOptions


def distill(teacher: str | None = _O.teacher, data: Any = _O.data, output: str | None = _O.output, *,
            model: str = _O.model, method: str = _O.method, text_column: str | None = _O.text_column,
            text_pair_column: str | None = _O.text_pair_column, label_column: str | None = _O.label_column,
            max_texts: int | None = _O.max_texts, test_data: Any = _O.test_data,
            validation_split: float | None = _O.validation_split, teacher_batch_size: int = _O.teacher_batch_size,
            pooling: str | None = _O.pooling, max_length: int = _O.max_length, epochs: float | None = _O.epochs,
            min_steps: int | None = _O.min_steps, batch_size: int = _O.batch_size,
            learning_rate: float | None = _O.learning_rate, weight_decay: float = _O.weight_decay,
            warmup_ratio: float = _O.warmup_ratio, head_init: str | None = _O.head_init, seed: int = _O.seed,
            hparams: dict[str, Any] | None = _O.hparams, resume: bool = _O.resume, fp16: bool = _O.fp16,
            bf16: bool = _O.bf16, use_cpu: bool = _O.use_cpu, trust_remote_code: bool = _O.trust_remote_code,
            progress: bool = _O.progress):
    """Train the student ``model`` on the texts ``data`` against the trained model folder ``teacher`` (see
    the module docstring) and return the run's :class:`~contrastfit.pipeline.TrainResult` (the record, the
    student as ``.model``). ``data`` (and ``test_data``) may also be in memory: a list of strings (a
    ``(texts, labels)`` pair or a table for ``test_data``, as :func:`contrastfit.train` takes). Without
    ``output`` the student stays in memory only, as with :func:`contrastfit.train`."""
    memory_texts = None
    if data is not None and not isinstance(data, (str, Path)):
        memory_texts = _memory_texts(data)
    memory_test = test_data if test_data is not None and in_memory(test_data) else None
    # every argument against its declaration in DistillOptions (type, choices, bounds): the CLI's one-line errors
    options = DistillOptions(
        teacher=None if teacher is None else str(teacher), data="memory" if memory_texts is not None else
        (None if data is None else str(data)), output=None if output is None else str(output), model=model,
        method=method, text_column=text_column, text_pair_column=text_pair_column, label_column=label_column,
        max_texts=max_texts, test_data=None if test_data is None or memory_test is not None else str(test_data),
        validation_split=validation_split, teacher_batch_size=teacher_batch_size, pooling=pooling,
        max_length=max_length, epochs=epochs, min_steps=min_steps, batch_size=batch_size, learning_rate=learning_rate,
        weight_decay=weight_decay, warmup_ratio=warmup_ratio, head_init=head_init, seed=seed, hparams=hparams,
        resume=resume, fp16=fp16, bf16=bf16, use_cpu=use_cpu, trust_remote_code=trust_remote_code, progress=progress)
    check_fields(options)
    if not options.teacher:
        raise ConfigError("distill needs a teacher: the folder of a trained contrastfit model")
    if options.data is None:
        raise ConfigError("distill needs unlabelled texts: data=FILE (.txt, one text per line), a table or a data "
                          "set name")
    config = TrainConfig(
        method=method, data=options.data, output=options.output, model=model, pooling=pooling, max_length=max_length,
        epochs=epochs, min_steps=min_steps, batch_size=batch_size, learning_rate=learning_rate,
        weight_decay=weight_decay, warmup_ratio=warmup_ratio, seed=seed, hparams=dict(hparams or {}),
        head_init=head_init or ("probe" if method == "distill-kl" else "random"), resume=resume, fp16=fp16, bf16=bf16,
        use_cpu=use_cpu, trust_remote_code=trust_remote_code, progress=progress, validation_split=validation_split,
        test_data=options.test_data, text_column=text_column, text_pair_column=text_pair_column,
        label_column=label_column)
    config.validate()  # the student's settings and the method's hyper-parameters, before any model loads
    inputs = [p for p in (options.teacher, options.data, model, options.test_data) if p]
    if config.output is not None:  # before the teacher runs: an output that holds a run or the user's files
        finished = open_output(Path(config.output), resume, TrainResult, inputs=inputs)
        if finished is not None:
            return finished

    with progress_bars(progress):
        _check_student(model, trust_remote_code)
        teacher_model, teacher_info = load_teacher(options.teacher)
        texts, pairs, unlabelled = read_unlabelled(memory_texts if memory_texts is not None else options.data,
                                                   teacher_model, teacher_name=options.teacher, text_column=text_column,
                                                   text_pair_column=text_pair_column, max_texts=max_texts)
        targets, speed = teacher_predictions(teacher_model, texts, pairs,
                                             embeddings="embeddings" in get_method(method).cls.teacher_outputs,
                                             batch_size=teacher_batch_size, progress=progress,
                                             device="cpu" if use_cpu else None)
    names = teacher_model.label_names
    labels = _teacher_labels(targets, names, texts, method)
    del teacher_model  # the teacher's work is done: only its targets go on

    text_data = _text_data(texts, pairs, labels, names, validation_split_for(config), unlabelled, teacher_info,
                           targets, speed, test=memory_test if memory_test is not None else options.test_data,
                           text_column=text_column, text_pair_column=text_pair_column, label_column=label_column)
    with teacher_targets(targets):
        return train(config, text_data=text_data)


def _teacher_labels(targets: TeacherTargets, names: list[str], texts: list[str], method: str) -> list[int]:
    """The teacher's label of each text (its argmax); one class only is a DataError, a class never given a warning."""
    labels = targets.logits.argmax(dim=1).tolist()
    counts = Counter(labels)
    if len(counts) < 2:
        raise DataError(f"the teacher gives every one of the {len(texts)} texts the label '{names[labels[0]]}': a "
                        "student cannot learn a classifier from one class; give texts of other classes too")
    never = [names[i] for i in range(len(names)) if i not in counts]
    if never:  # (stacklevel 3: the warning names distill's caller, as before)
        warnings.warn(f"the teacher labels none of the {len(texts)} texts {', '.join(map(repr, never[:3]))}"
                      f"{' and others' if len(never) > 3 else ''}; "
                      + ("the student learns those classes from the teacher's probabilities only"
                         if method == "distill-kl" else "the student's logistic head cannot predict them"),
                      stacklevel=3)
    return labels


def _memory_texts(data: Any) -> list[str]:
    if isinstance(data, (bytes, dict)) or not isinstance(data, Sequence):
        raise ConfigError(f"data: give a file, a data set name or a list of texts, not {type(data).__name__}")
    bad = next((i for i, t in enumerate(data) if not isinstance(t, str)), None)
    if bad is not None:
        raise DataError(f"data: text {bad + 1} is {type(data[bad]).__name__}, not a string")
    return list(data)


def load_teacher(folder: str):
    """The teacher model (:meth:`ContrastiveClassifier.from_pretrained`) and what the record says of it; a
    one-line error for a folder that is no model or a teacher that is not single-label classification."""
    path = Path(folder).expanduser()
    if not path.exists():
        raise ModelError(f"teacher {folder}: no such folder (give the output folder of `contrastfit train`)")
    if not path.is_dir():
        raise ModelError(f"teacher {folder} is a file; give the output folder of `contrastfit train`")
    try:
        teacher = ContrastiveClassifier.from_pretrained(path)
    except ModelError as exc:
        raise ModelError(f"teacher: {exc}") from None
    if teacher.outputs is not CLASSES:
        kind = "multi-label" if teacher.outputs is LABEL_SETS else "regression"
        raise ModelError(f"teacher {folder} is a {kind} model; distill learns a single-label classifier's "
                         "predictions")
    accuracy = None
    results = path / "results.json"
    if results.is_file():
        with contextlib.suppress(Exception):  # an unreadable record only leaves the description shorter
            accuracy = read_record(results).metric("test", "accuracy")
    info = {"folder": str(path.resolve()), "method": getattr(teacher.method, "registered_name", teacher.method.name),
            "model": teacher.info.base_model or teacher.info.model, "label_names": teacher.label_names,
            "temperature": teacher.temperature, "test_accuracy": accuracy}
    return teacher, info


def _check_student(model: str, trust_remote_code: bool) -> None:
    """Refuse, before the teacher runs, a student encoder that cannot be loaded (its config and tokenizer)."""
    from transformers import AutoConfig, AutoTokenizer

    target, local = resolve_model(model)
    if local:
        check_weights_format(target)
    try:
        AutoConfig.from_pretrained(target, local_files_only=local, trust_remote_code=trust_remote_code)
        AutoTokenizer.from_pretrained(target, local_files_only=local, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"could not load the student '{model}' ({'local folder' if local else 'Hugging Face Hub name'}; "
                         f"built-in names: {', '.join(BUILTIN_MODELS)}): {reason}") from None


def read_unlabelled(data: Any, teacher, *, teacher_name: str = "teacher", text_column: str | None = None,
                    text_pair_column: str | None = None,
                    max_texts: int | None = None) -> tuple[list[str], list[str] | None, dict[str, Any]]:
    """The distinct texts (and second texts, for a teacher that classifies pairs) of ``data``, in their
    order, at most ``max_texts`` of them, and a description for the record: a list of strings, a ``.txt``
    file (one text per line), a table (every row; a label column is ignored) or a data set name (its
    training split, read by :func:`contrastfit.shapes.pretraining.load_corpus`)."""
    import datasets

    if isinstance(data, list):
        rows = datasets.Dataset.from_dict({TEXT: data})
        source: dict[str, Any] = {"kind": "memory", "rows": len(data)}
    else:
        path = Path(data).expanduser()
        try:
            if path.is_file() and path.suffix.lower() in SUFFIX_BUILDERS:  # every row; its labels are not used
                raw = read_table(path)
                raw = raw.remove_columns([c for c in raw.column_names if c == LABEL and c != text_column])
                rows, _ = normalise_columns(raw, str(path), text_column, text_pair_column, None, require_labels=False)
                source = {"kind": "table", "path": str(path.resolve()), "sha256": file_sha256(path)}
            else:
                rows, _, source = load_corpus(str(data), labelled=False, text_column=text_column,
                                              text_pair_column=text_pair_column)
        except DataError as exc:  # the corpus reader's words, for this command
            raise DataError(str(exc).replace("corpus ", "unlabelled data ", 1)) from None
    texts = list(rows[TEXT])
    pairs = list(rows[TEXT_PAIR]) if TEXT_PAIR in rows.column_names else None
    texts, pairs = model_inputs(texts, pairs, takes_pairs(teacher), f"the teacher {teacher_name}",
                                "a second-text column (--text-pair-column)")
    seen: set[tuple[str, str | None]] = set()
    keep = []
    for i, text in enumerate(texts):
        key = (text, pairs[i] if pairs is not None else None)
        if key not in seen and text.strip():
            seen.add(key)
            keep.append(i)
    dropped = len(texts) - len(keep)
    if max_texts is not None:
        keep = keep[:max_texts]
    if len(keep) < 2:
        raise DataError(f"unlabelled data {data if isinstance(data, (str, Path)) else '(in memory)'} holds "
                        f"{len(keep)} distinct text{'' if len(keep) == 1 else 's'}; a student needs at least 2")
    texts = [texts[i] for i in keep]
    pairs = [pairs[i] for i in keep] if pairs is not None else None
    kept = datasets.Dataset.from_dict({TEXT: texts, **({TEXT_PAIR: pairs} if pairs is not None else {})})
    source.update(texts=len(texts), duplicates_dropped=dropped, max_texts=max_texts, pairs=pairs is not None,
                  hash=data_hash(kept))
    return texts, pairs, source


@contextlib.contextmanager
def _one_encoder_pass(encoder) -> Iterator[None]:
    """Inside the block, a call of ``encoder`` with the very same input tensors as the call before it
    returns that call's output: the teacher's logits and its embedding of a batch take one pass."""
    real = encoder.forward
    last: dict[str, Any] = {}

    def forward(*args, **kwargs):
        given = list(args) + [kwargs[k] for k in sorted(kwargs)]
        held = last.get("inputs")
        if held is None or len(held) != len(given) or any(a is not b for a, b in zip(held, given)) \
                or last.get("names") != sorted(kwargs):
            last.update(inputs=given, names=sorted(kwargs), output=real(*args, **kwargs))  # holds the inputs alive
        return last["output"]

    encoder.forward = forward
    try:
        yield
    finally:
        del encoder.forward


def teacher_predictions(teacher, texts: Sequence[str], pairs: Sequence[str] | None = None, *, embeddings: bool = True,
                        batch_size: int = 64, progress: bool = False, device: str | None = None):
    """The teacher's :class:`~contrastfit.methods.distill_base.TeacherTargets` of ``texts``: its logits
    divided by its calibration temperature, and (``embeddings``) its L2-normalised sentence embeddings
    (``model.embed``'s), from one encoder pass per batch of ``batch_size`` texts of similar length, on a
    GPU where torch sees one (unless ``device``); and the speed, ``{"texts", "seconds", "texts_per_s",
    "device"}``."""
    import torch
    from tqdm.auto import tqdm

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    teacher.to(device).eval()
    n = len(texts)
    order = np.argsort([-len(t) for t in texts], kind="stable")
    logits = torch.empty(n, teacher.method.num_outputs)
    vectors = None
    start_time = time.perf_counter()
    with torch.no_grad(), _one_encoder_pass(teacher.encoder):
        for start in tqdm(range(0, n, batch_size), desc="teacher", disable=not progress, leave=False):
            idx = order[start:start + batch_size]
            enc = teacher.tokenize([texts[i] for i in idx], [pairs[i] for i in idx] if pairs is not None else None,
                                   padding=True)
            batch = {k: torch.as_tensor(v, device=teacher.device) for k, v in enc.items()}
            rows = torch.as_tensor(idx, dtype=torch.long)
            logits[rows] = teacher.method.predict_logits(teacher, batch).float().cpu()
            if embeddings:
                emb = torch.nn.functional.normalize(teacher.method.embedding(teacher, batch).float(), dim=-1).cpu()
                if vectors is None:
                    vectors = torch.empty(n, emb.shape[1])
                vectors[rows] = emb
    seconds = time.perf_counter() - start_time
    targets = TeacherTargets(list(texts), list(pairs) if pairs is not None else None,
                             logits=logits / teacher.temperature, embeddings=vectors)
    return targets, {"texts": n, "seconds": round(seconds, 3), "texts_per_s": round(n / max(seconds, 1e-9), 2),
                     "device": str(device), "batch_size": batch_size}


def _text_data(texts: list[str], pairs: list[str] | None, labels: list[int], names: list[str], split: float,
               unlabelled: dict[str, Any], teacher_info: dict[str, Any], targets, speed: dict[str, Any], *,
               test: Any, text_column: str | None, text_pair_column: str | None, label_column: str | None):
    """The training data of the student: the texts with the teacher's labels (its label order), a
    stratified ``split`` of them held out for validation (from 20 texts up, as for in-memory data), and
    the labelled ``test`` rows if given."""
    import datasets

    columns: dict[str, list] = {TEXT: texts}
    features = {TEXT: datasets.Value("string")}
    if pairs is not None:
        columns[TEXT_PAIR] = pairs
        features[TEXT_PAIR] = datasets.Value("string")
    columns[LABEL] = labels
    features[LABEL] = datasets.Value("int64")
    rows = datasets.Dataset.from_dict(columns, features=datasets.Features(features))
    train, validation = rows, None
    if split > 0 and len(rows) >= 20:
        train, validation = stratified_split(rows, split, SPLIT_SEED)
    splits, sources = _given_splits(None, test, names, text_column, text_pair_column, label_column)
    counts = Counter(labels)
    source = {"kind": "distillation", "teacher": teacher_info, "unlabelled": unlabelled,
              "teacher_labels": {names[i]: counts.get(i, 0) for i in range(len(names))},
              "teacher_predictions": {**speed, "embeddings": targets.embeddings is not None},
              "validation_split": split, "split_seed": SPLIT_SEED, "test_data": sources["test"]}
    return TextData(name=f"{len(texts)} texts labelled by the teacher", train=train, validation=validation,
                    test=splits["test"], label_names=list(names), source=source)


#: The seed of the validation hold-out (that of in-memory data and local files, :func:`contrastfit.data.loading.load_memory`).
SPLIT_SEED = 13
