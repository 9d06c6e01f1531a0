"""What every command that uses a trained model loads and writes: :func:`load_for_inference` (a
training, multi-task or ONNX export folder) and :func:`prediction_rows` (the rows ``predict`` writes
and the server answers). ``predict``, ``evaluate``, ``explain``, ``calibrate``, ``export`` and
``serve`` build on it; it imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ContrastfitError
from .settings import setting

__all__ = ["INFERENCE", "InferenceOptions", "SPLITS", "load_for_inference", "prediction_rows", "rows", "takes_pairs"]

#: the splits of a data set, which ``evaluate``'s and ``calibrate``'s ``--split`` choose from
SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class InferenceOptions:
    """The options of the commands that run a trained model, declared once
    (:func:`contrastfit.settings.setting`): ``predict``, ``evaluate``, ``calibrate`` and ``explain`` generate
    those they take from these fields (:func:`contrastfit.cli.add_config_options`), and
    :func:`prediction_rows` takes ``batch_size``'s default."""

    output: str | None = setting(None, "write the JSONL here instead of standard output", group="options")
    overwrite: bool = setting(False, "replace an existing output file", group="options")
    batch_size: int = setting(64, "texts per forward pass of the model", group="options", ge=1)


#: the defaults, as :func:`prediction_rows` reads them
INFERENCE = InferenceOptions()


def load_for_inference(folder: str, task: str | None = None):
    """The model in ``folder`` for prediction: an ONNX export (:class:`~contrastfit.onnx_model.OnnxClassifier`),
    the task ``task`` of a multi-task folder (:class:`~contrastfit.multitask.model.TaskModel`), or a
    single-task :class:`~contrastfit.modeling.ContrastiveClassifier`; one-line errors for a missing,
    unknown or superfluous ``task``."""
    # lazy: onnx_model imports numpy, modeling and multitask torch; this module imports without them
    from .onnx_model import EXPORT_NAME, OnnxClassifier
    from .modeling import ContrastiveClassifier
    from .multitask import MultiTaskModel, is_multitask_folder

    if (Path(folder) / EXPORT_NAME).is_file():
        if task is not None:
            raise ContrastfitError(f"--task {task}: {folder} is a single-task ONNX export; leave --task out")
        return OnnxClassifier(folder)
    if not is_multitask_folder(folder):
        if task is not None:
            raise ContrastfitError(f"--task {task}: {folder} holds a single-task model (it has no tasks); "
                                   "leave --task out")
        return ContrastiveClassifier.from_pretrained(folder)
    model = MultiTaskModel.from_pretrained(folder)
    tasks = ", ".join(model.task_names)
    if task is None:
        raise ContrastfitError(f"{folder} holds a multi-task model: give --task NAME (tasks: {tasks})")
    if task not in model.task_names:
        raise ContrastfitError(f"--task {task!r} is not a task of {folder} (tasks: {tasks})")
    return model.for_task(task)


def takes_pairs(model) -> bool:
    """Whether ``model`` (any :func:`load_for_inference` gives) classifies text pairs."""
    return bool(model.info.data.text_pair)


def rows(model, scores) -> list[dict[str, Any]]:
    """The rows of ``scores`` (``predict_proba``'s): ``label`` and ``probabilities``, or ``score``; for a
    multi-label model ``labels`` (a list, possibly empty) and ``probabilities`` (per-label sigmoids)
    (:mod:`contrastfit.outputs`)."""
    return model.outputs.rows(model, scores)


def prediction_rows(model, texts: list[str], pairs: list[str] | None,
                    batch_size: int = INFERENCE.batch_size) -> list[dict[str, Any]]:
    """One row per text, as ``predict`` writes them: ``label`` and ``probabilities`` (``score`` for
    a regression model)."""
    return rows(model, model.predict_proba(texts, pairs, batch_size=batch_size))
