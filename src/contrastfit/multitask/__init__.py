"""Multi-task training: one encoder, one head per task, trained together (the CS224N report's setup,
Behrman & Christoglou, Sec. 4.2 and 5.3.5).

* :mod:`.tasks`: :class:`Task` (data, type, head, objective, weight) and its resolved :class:`TaskSpec`;
* :mod:`.schedule`: :class:`TaskBatchSampler`, one task per batch: round-robin, the report's epoch
  rotation, proportional to task size, or temperature-sampled;
* :mod:`.model`: :class:`MultiTaskModel` (shared encoder, ``heads[name]``, ``predict(texts, task=NAME)``,
  save / load);
* :mod:`.shape`: :class:`~.shape.MultiTask`, the task shape the one training job runs with (every task's
  data, the task schedule's batches on the one Trainer, per-task evaluation,
  the ``multitask`` record);
* :mod:`.config`: :class:`MultiTaskConfig`, a run's settings.

:func:`contrastfit.train_multitask` (in :mod:`contrastfit.training`, beside ``train``) runs the one job
with that shape; interrupted runs resume, as ``train``'s.

The report-shaped comparison (single-task, multi-task, multi-task after a SimCSE / DiffCSE stage 1) is a
multi-task experiment: :mod:`contrastfit.experiments.multitask`, ``contrastfit experiment CONFIG``.
"""

from .model import MultiTaskModel, is_multitask_folder
from .schedule import SCHEDULES, TaskBatchSampler
from .tasks import Task, TaskSpec
from .shape import MultiTask, MultiTaskResult, evaluate_task
from .config import MultiTaskConfig

__all__ = [
    "MultiTask", "MultiTaskConfig", "MultiTaskModel", "MultiTaskResult", "SCHEDULES", "Task",
    "TaskBatchSampler", "TaskSpec", "evaluate_task", "is_multitask_folder",
]
