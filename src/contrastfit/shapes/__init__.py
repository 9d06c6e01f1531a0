"""Task shapes: what differs between the kinds of labels the one training job learns.

The job (:func:`contrastfit.training.train`) is one sequence: load and sample the data, build the
model and its Trainer, fit, fit the head, settle what depends on the trained model, evaluate, record,
write. A **task shape** is what that sequence asks of the labels at each step: how data is read and
sampled, which method a run gets and with which defaults, how the model and its head are built and
fitted, what validation selects on, what the run settles after training (label-set thresholds), and
what the record says of the data. One file a shape:

* :mod:`.single_label`: :class:`TaskShape`, one label per text or text pair (classes, a regression
  target, sentence pairs), the shape every other one overrides;
* :mod:`.label_sets`: :class:`LabelSets`, a set of labels per text (``--multi-label``);
* :mod:`.pretraining`: :class:`Pretraining`, stage-1 pre-training of the encoder alone on a corpus
  (:func:`contrastfit.pretrain.pretrain` gives it to the job);
* :mod:`contrastfit.multitask.shape`: :class:`~contrastfit.multitask.shape.MultiTask`, several tasks on one
  encoder, a head each (beside its model, in the ``multitask`` package; :func:`contrastfit.training.train_multitask`
  gives it to the job).

The job takes the steps in this order: ``check``, ``load``, ``sample``, ``configure``, ``setup`` (model,
tokenised rows, schedule, Trainer), ``fit`` (fine-tuning and what follows it: the head stage, what is
settled), ``evaluate``, ``conclude`` (record, model info, writing); a :class:`Run` carries what each step
made to the next.

A new shape is a subclass in a file of its own and, where a setting selects it, a line in :func:`shape_for`.
"""

from typing import Any

from .label_sets import LABEL_SETS, LabelSets, check_multilabel_config
from .pretraining import Pretraining
from .single_label import (DEFAULT_METHOD, DEFAULT_REGRESSION_METHOD, SINGLE_LABEL, TRAINING_SETTINGS, PreparedData,
                           Run, TaskShape, check_batch_size, validation_choices)

__all__ = ["DEFAULT_METHOD", "DEFAULT_REGRESSION_METHOD", "LABEL_SETS", "SINGLE_LABEL", "TRAINING_SETTINGS", "LabelSets",
           "PreparedData", "Pretraining", "Run", "TaskShape", "check_batch_size", "check_multilabel_config",
           "shape_for", "validation_choices"]


def shape_for(config: Any) -> TaskShape:
    """The task shape of a run's settings: label sets with ``multi_label``, else one label per text."""
    return LABEL_SETS if config.multi_label else SINGLE_LABEL
