"""Training on ``transformers.Trainer``.

The Trainer (:class:`~contrastfit.trainer.ContrastfitTrainer`: balanced batches, loss-part logging,
per-part learning rates, gradient caching, the cross-batch memory) and the run's schedule are in
:mod:`contrastfit.trainer`; the run's settings, :class:`~contrastfit.config.TrainConfig`, are in
:mod:`contrastfit.config`.

:func:`train` runs the one job (:func:`_train`, which :func:`contrastfit.pretrain.pretrain` and
:func:`train_multitask` run too, with their task shapes): prepare (load and sample
the data, build the model and the Trainer), fit, the head stage of two-stage methods, evaluate on
validation and test, and write the model and its :class:`~contrastfit.record.Record` (``results.json``,
atomically) with everything that made the result; the run's task shape (:mod:`contrastfit.shapes`,
:class:`~contrastfit.multitask.shape.MultiTask`) says what each step does. Every shape lies below this
module: the job runs them, none of them runs it.
"""

from __future__ import annotations

import copy
import os
import tempfile
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, set_seed

from .checkpoints import resume_checkpoint
from .config import TrainConfig, load_config_data
from .data import TextData
from .data.loading import in_memory
from .distributed import launched_processes
from .errors import ConfigError
from .multitask.config import MultiTaskConfig
from .multitask.shape import MultiTask, MultiTaskResult
from .pipeline import Clock, TrainResult, input_paths, open_output
from .progress import progress_bars
from .shapes import Run, TaskShape, shape_for

#: The TrainConfig fields that may hold in-memory data when given to :func:`train`.
DATA_FIELDS = ("data", "validation_data", "test_data")


def train(config: TrainConfig | Any = None, *, texts: Any = None, labels: Any = None,
          text_data: TextData | None = None, callbacks: list[TrainerCallback] | None = None,
          **overrides: Any) -> "TrainResult":
    """Train one model and return its result: the run's record with the model as ``result.model``.

    The first argument is a :class:`TrainConfig`, or the training data itself (``train(df,
    label_column="sentiment")``, as ``data=``). The data: ``texts=[...]`` and ``labels=[...]`` (one
    label per text), or ``data=``: a built-in
    name, a file, or in memory, ``(texts, labels)``, a pandas DataFrame, a ``datasets.Dataset``, a
    dict of columns or a list of row dicts (columns named with ``text_column`` / ``label_column`` /
    ``text_pair_column`` as in a file). There is no default: a call without data is a one-line
    :class:`ConfigError`. ``validation_data`` and ``test_data`` take a file or the same
    in-memory forms. In-memory data is checked and labelled as a file is
    (:func:`contrastfit.data.loading.load_memory`: class names sorted, 10% held out for validation
    from 20 rows up where the run chooses something on it,
    :func:`~contrastfit.config.validation_split_for`, unless
    ``validation_data`` or ``validation_split`` says otherwise); the record's
    ``data.source`` is ``{"kind": "memory", "rows": n, "hash": ...}``.

    ``output``: the folder for the model, ``results.json``, the model card and the checkpoints while
    training. Without one (the default in Python) the run trains in a temporary folder that is removed
    before ``train`` returns, nothing stays on disk, and ``result.model.save_pretrained(FOLDER)`` saves
    the model later (``resume`` and ``keep_checkpoints`` need an output folder).

    ``progress=False``: no progress bar from anything the run calls (the Trainer's, ``datasets``'
    map bars, transformers' weight-loading and writing bars, also when ``.model`` loads a finished run's
    folder) and no closing summary line.

    Labels given as integers (a DataFrame or file column of ints, ``labels=[0, 1, ...]``) come back as
    ints from ``result.model.predict`` (the model's ``info.label_type`` is ``"int"``, saved with it);
    other labels as strings.

    ``callbacks``: ``transformers.TrainerCallback`` objects added to the Trainer's. A callback that
    stops training (``control.should_training_stop``) before the planned number of steps, other than
    early stopping on validation, leaves the run **unfinished**, as a crash would: no model and no
    ``results.json`` are written, the checkpoints are kept (set ``control.should_save`` too for one at
    that step), and the returned record has only ``interrupted`` (``.at_step``, ``.checkpoint``: PATH or None);
    ``resume=True`` continues the run from that checkpoint. Resuming loads the checkpoint with
    weights-only unpickling (:func:`contrastfit.checkpoints.weights_only_loading`).
    """
    if config is not None and not isinstance(config, TrainConfig):  # train(df, ...): the data first
        if "data" in overrides or texts is not None or labels is not None:
            raise ConfigError("give the training data once: as train()'s first argument, or as data= or "
                              "texts= and labels=")
        config, overrides = None, {**overrides, "data": config}
    config, memory = _config_with_memory_data(config, texts, labels, overrides)
    if config.data is None and text_data is None:
        raise ConfigError("train() needs training data: data= (a built-in name such as 'mr', a file, a Hugging Face "
                          "data set name, or in-memory data) or texts= and labels=; there is no default data set")
    config.validate()
    if memory and text_data is not None:
        raise ConfigError(f"give the data once: text_data= or in-memory {', '.join(memory)}=, not both")
    if config.output is None:
        for name in ("resume", "keep_checkpoints"):
            if getattr(config, name):
                raise ConfigError(f"{name}=True needs an output folder (output=FOLDER); without one the run trains "
                                  "in a temporary folder that is removed when train() returns")
        if launched_processes() > 1:  # each process would train in a temporary folder of its own
            raise ConfigError(f"{launched_processes()} processes train one model in one output folder: give "
                              "output=FOLDER")
    else:
        finished = open_output(Path(config.output), config.resume, TrainResult, inputs=input_paths(config))
        if finished is not None:
            finished.progress = config.progress  # .model loads the folder as quietly as the run would have been
            return finished
    with progress_bars(config.progress):
        if memory:
            text_data = load_config_data(config, memory)
        if config.output is not None:
            return _train(config, text_data, callbacks, keep=True)
        with tempfile.TemporaryDirectory(prefix="contrastfit-run-") as folder:
            # no resumable checkpoints: only the weights of the evaluated steps, for the best one
            result = _train(replace(config, output=folder, save_checkpoints=False), text_data, callbacks, keep=False)
    if result.interrupted is not None:
        result.interrupted.checkpoint = None  # it was in the temporary folder
    return result


def train_multitask(config: MultiTaskConfig | None = None, *, callbacks: list[TrainerCallback] | None = None,
                    **overrides: Any) -> "MultiTaskResult":
    """Train one encoder with one head per task; save the model and ``results.json`` in ``output``.

    ``callbacks``: ``transformers.TrainerCallback`` objects added to the Trainer's. Returns the record
    (the contents of ``results.json``) with the trained model as ``.model``.

    Interruption and resuming work as for :func:`contrastfit.training.train`: a callback that stops
    training before the planned steps (early stopping aside) leaves the run unfinished (checkpoints
    kept, no model, no ``results.json``) and returns a record with only ``interrupted`` (``.at_step``,
    ``.checkpoint``); ``resume=True`` continues from the last checkpoint (every ``torch.load`` weights-only) and
    gives the model an uninterrupted run gives (the schedule's batches depend only on the seed and
    the epoch); on a finished run it returns the record in ``results.json``.
    """
    config = MultiTaskConfig(**{**({f.name: getattr(config, f.name) for f in fields(config)} if config else {}),
                                **overrides})
    tasks = config.validate()
    finished = open_output(Path(config.output), config.resume, MultiTaskResult, option="output",
                           resume_option="resume=True", inputs=input_paths(config))
    if finished is not None:
        return finished
    return _train(config, None, callbacks, keep=True, shape=MultiTask(tasks))


def _config_with_memory_data(config: TrainConfig | None, texts: Any, labels: Any,
                             overrides: dict[str, Any]) -> tuple[TrainConfig, dict[str, Any]]:
    """The run's :class:`TrainConfig` (``config`` with ``overrides``) and the in-memory data given for
    :data:`DATA_FIELDS` (``texts`` and ``labels`` are ``data=(texts, labels)``), taken out of it: in
    the config, in-memory ``data`` becomes ``"memory"`` and an in-memory split None. A path-like
    value becomes its string."""
    values = {}
    if config is not None:  # copied as dataclasses.asdict would, but not the data (a DataFrame stays itself)
        values = {f.name: getattr(config, f.name) if f.name in DATA_FIELDS else copy.deepcopy(getattr(config, f.name))
                  for f in fields(config)}
    values.update(overrides)
    if texts is not None or labels is not None:
        if texts is None or labels is None:
            raise ConfigError(f"texts= and labels= go together (one label per text); got only "
                              f"{'texts' if labels is None else 'labels'}=")
        if "data" in overrides:
            raise ConfigError("give the training data once: texts= and labels=, or data=")
        values["data"] = (texts, labels)
    if isinstance(values.get("output"), os.PathLike):
        values["output"] = os.fspath(values["output"])
    memory = {}
    for name in DATA_FIELDS:
        value = values.get(name)
        if isinstance(value, os.PathLike):
            values[name] = os.fspath(value)
        elif in_memory(value):
            memory[name] = value
            values[name] = "memory" if name == "data" else None
    return TrainConfig(**values), memory


def _train(config: Any, text_data: TextData | None, callbacks: list[TrainerCallback] | None, keep: bool,
           shape: TaskShape | None = None) -> TrainResult:
    """The one job: a run of the validated ``config`` into ``config.output``, its task shape
    (:func:`shape_for`, or ``shape``: stage-1 pre-training's, multi-task's) plugged into each step; with
    ``keep`` False (a temporary folder) nothing is saved there: the model stays in memory."""
    shape = shape or shape_for(config)
    shape.check(config)
    output = Path(config.output)
    run = Run(config, Clock())
    set_seed(config.seed)
    data = text_data or shape.load(config, {})
    run.prepared = shape.sample(config, data)
    run.config = shape.configure(config, run.prepared)
    shape.setup(run, callbacks)
    run.clock.mark("setup")
    run.resumed_from = resume_checkpoint(output) if config.resume else None
    if not shape.fit(run, output):
        return shape.result_class.stopped(run.fitted.interrupted, run.model)
    run.clock.mark("train")
    run.metrics = shape.evaluate(run)
    run.clock.mark("eval")
    return shape.conclude(run, output if keep else None)
