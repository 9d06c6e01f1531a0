"""The settings of a multi-task run: :class:`MultiTaskConfig`, each shared setting declared ``same_as``
``train``'s (:class:`contrastfit.config.TrainConfig`), and the checks that span its tasks.
:func:`contrastfit.train_multitask` hands the one job a run of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import TrainConfig, check_precision
from ..encoders import DEFAULT_MODEL
from ..errors import ConfigError
from ..settings import check_fields, same_as, setting
from ..trainer import DEFAULT_LEARNING_RATE, DEFAULT_MIN_STEPS
from .schedule import DEFAULT_TEMPERATURE, SCHEDULES
from .tasks import Task

#: The CS224N report's learning rate for the task heads (Sec. 5.3.3: heads 1e-3, BERT 1e-6).
DEFAULT_HEAD_LEARNING_RATE = 1e-3


@dataclass
class MultiTaskConfig:
    """Everything a multi-task run needs. ``tasks``: :class:`~contrastfit.multitask.tasks.Task` objects or
    mappings with the same keys.

    Steps: ``max_steps`` if given; else ``epochs`` sampler epochs (an epoch is ``sum_t ceil(n_t / b_t)``
    steps, see :mod:`~contrastfit.multitask.schedule`); else 3 epochs or ``min_steps``, whichever is more
    (the rule of ``train``).
    """

    tasks: list[Any] = setting(factory=list, help="Task objects or mappings with the same keys")
    output: str = setting("runs/multitask", "output folder")
    model: str = setting(DEFAULT_MODEL, "the shared encoder: built-in name, local folder or Hub name")
    pooling: str | None = same_as(TrainConfig, "pooling")
    max_length: int = same_as(TrainConfig, "max_length")
    schedule: str = setting("round-robin", "which task each batch comes from", choices=SCHEDULES)
    temperature: float = setting(DEFAULT_TEMPERATURE, "for schedule='temperature'", gt=0)
    epochs: float | None = setting(None, "sampler epochs", gt=0)
    max_steps: int | None = setting(None, "optimisation steps (overrides epochs)", gt=0)
    min_steps: int = setting(DEFAULT_MIN_STEPS, "fewest steps without epochs or max_steps", ge=1)
    batch_size: int = setting(16, "a task's batch_size overrides it", ge=1)
    learning_rate: float = setting(DEFAULT_LEARNING_RATE, "the encoder's peak learning rate", gt=0)
    head_learning_rate: float | None = setting(DEFAULT_HEAD_LEARNING_RATE, "the heads'; None: learning_rate", gt=0)
    weight_decay: float = same_as(TrainConfig, "weight_decay")
    warmup_ratio: float = same_as(TrainConfig, "warmup_ratio")
    gradient_accumulation_steps: int = same_as(TrainConfig, "gradient_accumulation_steps")
    seed: int = same_as(TrainConfig, "seed")
    sample_seed: int | None = same_as(TrainConfig, "sample_seed")
    sample_index: int = same_as(TrainConfig, "sample_index")
    select_best: bool = same_as(TrainConfig, "select_best")
    select_on: str = setting("average", "'average' of the tasks' metrics, or a task name")
    eval_steps: int | None = same_as(TrainConfig, "eval_steps")
    early_stopping_patience: int | None = same_as(TrainConfig, "early_stopping_patience")
    resume: bool = same_as(TrainConfig, "resume")
    save_checkpoints: bool = same_as(TrainConfig, "save_checkpoints")
    save_steps: int = same_as(TrainConfig, "save_steps")
    keep_checkpoints: bool = same_as(TrainConfig, "keep_checkpoints")
    save_model: bool = same_as(TrainConfig, "save_model")
    evaluate_test: bool = setting(True, "evaluate every task on its test split")
    logging_steps: int = same_as(TrainConfig, "logging_steps")
    report_to: str = same_as(TrainConfig, "report_to")
    progress: bool = same_as(TrainConfig, "progress")
    fp16: bool = same_as(TrainConfig, "fp16")
    bf16: bool = same_as(TrainConfig, "bf16")
    use_cpu: bool = same_as(TrainConfig, "use_cpu")
    trust_remote_code: bool = same_as(TrainConfig, "trust_remote_code")
    tags: dict[str, Any] = same_as(TrainConfig, "tags")

    def task_list(self) -> list[Task]:
        if not isinstance(self.tasks, (list, tuple)) or not self.tasks:
            raise ConfigError("a multi-task run needs a non-empty list of tasks")
        tasks = [Task.from_value(t, f"tasks[{i}]") for i, t in enumerate(self.tasks)]
        for t in tasks:
            t.check()
        names = [t.name for t in tasks]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"task names must be distinct; repeated: {', '.join(dupes)}")
        return tasks

    def validate(self) -> list[Task]:
        """Check every field against its :func:`~contrastfit.settings.setting` (as ``train``'s config), then
        the tasks and the settings that depend on each other; return the tasks (one-line
        :class:`ConfigError` otherwise)."""
        check_fields(self)
        tasks = self.task_list()
        if self.fp16 and self.bf16:
            raise ConfigError("choose one of fp16 and bf16")
        check_precision(self, ("fp16", "bf16", "use_cpu"))
        for t in tasks:  # a contrastive task's batches come from the class-balanced sampler
            if t.objective == "ce-scl" and (t.batch_size or self.batch_size) < 2:
                raise ConfigError(f"task '{t.name}': objective ce-scl compares the rows of a batch with each other and "
                                  f"needs batch_size >= 2, got {t.batch_size or self.batch_size}")
        if self.select_on != "average" and self.select_on not in {t.name for t in tasks}:
            raise ConfigError(f"select_on must be 'average' or a task name ({', '.join(t.name for t in tasks)}), "
                              f"got {self.select_on!r}")
        return tasks
