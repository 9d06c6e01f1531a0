r"""Which task each training batch comes from, and which rows it holds.

Every batch holds the examples of **one** task. :class:`TaskBatchSampler` is a batch sampler over the
concatenation of the tasks' training sets (task ``t`` owns the global indices ``offset_t ..
offset_t + n_t - 1``); the Trainer's data loader reads it, so the schedule is what really trains
(pitfall 5).

An *epoch* of the sampler has ``S = sum_t ceil(n_t / b_t)`` steps by default (``b_t`` the task's batch
size): one pass over every task's data when the tasks are visited in proportion to their size. The
task of each step:

* ``round-robin``: the tasks in turn, one batch each, ``t = s mod T`` for the ``s``-th step of the
  run (counted across epochs, so the rotation never restarts). Small tasks are repeated more often
  than large ones. This is the rotation of the CS224N report (Behrman & Christoglou, Sec. 5.3.5) at
  the grain of a batch;
* ``round-robin-epochs``: the report's rotation as it describes it: one epoch of task 1 (all its
  ``ceil(n_1 / b_1)`` batches), then one epoch of task 2, and so on;
* ``proportional``: ``p_t = n_t / sum_u n_u``;
* ``temperature``: ``p_t \propto n_t^{1/T}`` (temperature-based sampling, Arivazhagan et al. 2019,
  *Massively Multilingual Neural Machine Translation in the Wild*; ``T = 1`` is proportional, ``T -> inf`` uniform; default ``T = 2``).

For the last two, each epoch's task counts are the largest-remainder rounding of ``S p_t`` (so over
an epoch every task gets its share to within one batch) and their order is a random permutation,
seeded by ``(seed, epoch)``: a stratified draw rather than ``S`` independent ones, with the same
expectation and less variance.

Rows within a task: a task whose objective needs in-batch positives (``ce-scl``) draws its batches
from :class:`~contrastfit.data.ClassBalancedBatchSampler` (pitfall 2); the others from a fresh random
permutation of their rows per pass, cut into batches of ``b_t`` (the last one of a pass may be
smaller). A task's passes follow one another within an epoch; every epoch restarts every task's
stream from a state given by ``(seed, epoch, task)``, so the batches of an epoch depend only on the
seed and the epoch (what resuming from a checkpoint needs).
"""

from __future__ import annotations

import math
from typing import Iterator, Sequence

import numpy as np
from torch.utils.data import Sampler

from ..data import ClassBalancedBatchSampler
from ..errors import ConfigError

SCHEDULES = ("round-robin", "round-robin-epochs", "proportional", "temperature")
DEFAULT_TEMPERATURE = 2.0


def task_probabilities(sizes: Sequence[int], schedule: str, temperature: float = DEFAULT_TEMPERATURE) -> np.ndarray:
    """The share of steps each task gets in expectation under ``schedule``."""
    n = np.asarray(sizes, dtype=float)
    if schedule in ("round-robin",):
        return np.full(len(n), 1.0 / len(n))
    if schedule in ("proportional", "round-robin-epochs"):
        return n / n.sum()
    if schedule == "temperature":
        w = n ** (1.0 / temperature)
        return w / w.sum()
    raise ConfigError(f"unknown schedule {schedule!r} (choose from {', '.join(SCHEDULES)})")


def largest_remainder(total: int, p: np.ndarray) -> np.ndarray:
    """Integer counts summing to ``total`` closest to ``total * p`` (largest-remainder rounding)."""
    exact = total * np.asarray(p, dtype=float)
    counts = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - counts), kind="stable")[: total - int(counts.sum())]:
        counts[i] += 1
    return counts


class TaskBatchSampler(Sampler[list[int]]):
    """Batches of global row indices, each from one task, in the order ``schedule`` gives.

    ``sizes[t]`` rows per task, ``batch_sizes`` one for all or one per task; ``labels[t]`` the class
    ids of a task whose batches must be class-balanced (``balanced[t]``), else ignored.
    """

    def __init__(self, sizes: Sequence[int], batch_sizes: int | Sequence[int], schedule: str = "round-robin", *,
                 temperature: float = DEFAULT_TEMPERATURE, seed: int = 0,
                 labels: Sequence[Sequence[int] | None] | None = None, balanced: Sequence[bool] | None = None,
                 steps_per_epoch: int | None = None):
        if schedule not in SCHEDULES:
            raise ConfigError(f"unknown schedule {schedule!r} (choose from {', '.join(SCHEDULES)})")
        if not sizes or any(int(n) < 1 for n in sizes):
            raise ConfigError(f"every task needs at least one training row, got sizes {list(sizes)}")
        if not temperature > 0:
            raise ConfigError(f"temperature must be > 0, got {temperature}")
        self.sizes = [int(n) for n in sizes]
        k = len(self.sizes)
        bs = [int(batch_sizes)] * k if isinstance(batch_sizes, (int, np.integer)) else [int(b) for b in batch_sizes]
        if len(bs) != k or any(b < 1 for b in bs):
            raise ConfigError(f"batch sizes must be >= 1, one per task, got {batch_sizes}")
        self.batch_sizes = [min(b, n) for b, n in zip(bs, self.sizes)]
        self.schedule = schedule
        self.temperature = float(temperature)
        self.seed = int(seed)
        self.epoch = 0
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(int).tolist()
        self.balanced = list(balanced) if balanced is not None else [False] * k
        self.labels = list(labels) if labels is not None else [None] * k
        for t in range(k):
            if self.balanced[t] and (self.labels[t] is None or len(self.labels[t]) != self.sizes[t]):
                raise ConfigError(f"task {t}: class-balanced batches need one label per row")
        self.batches_per_pass = [math.ceil(n / b) for n, b in zip(self.sizes, self.batch_sizes)]
        natural = sum(self.batches_per_pass)
        if steps_per_epoch is not None and schedule == "round-robin-epochs" and steps_per_epoch != natural:
            raise ConfigError("round-robin-epochs visits one epoch of every task in turn; its epoch length is fixed")
        self.steps_per_epoch = int(steps_per_epoch) if steps_per_epoch is not None else natural
        if self.steps_per_epoch < 1:
            raise ConfigError(f"steps_per_epoch must be >= 1, got {steps_per_epoch}")
        self.probabilities = task_probabilities(self.sizes, schedule, self.temperature)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.steps_per_epoch

    # -- the schedule ----------------------------------------------------------------------------
    def task_order(self, epoch: int | None = None) -> list[int]:
        """The task of every step of ``epoch`` (default: the current one)."""
        epoch = self.epoch if epoch is None else int(epoch)
        k, steps = len(self.sizes), self.steps_per_epoch
        if self.schedule == "round-robin":
            start = epoch * steps
            return [(start + s) % k for s in range(steps)]
        if self.schedule == "round-robin-epochs":
            return [t for t in range(k) for _ in range(self.batches_per_pass[t])]
        counts = largest_remainder(steps, self.probabilities)
        order = np.repeat(np.arange(k), counts)
        rng = np.random.default_rng([self.seed, epoch, 0])
        return rng.permutation(order).tolist()

    def task_counts(self, batches: int) -> list[int]:
        """How many of a run's first ``batches`` batches (from epoch 0 on, epoch after epoch) each task
        gets: what the Trainer feeds in ``batches`` steps without gradient accumulation, also across an
        interruption and resume (the order depends only on the seed and the epoch)."""
        counts = [0] * len(self.sizes)
        epoch = 0
        while batches > 0:
            order = self.task_order(epoch)[:batches]
            for t in order:
                counts[t] += 1
            batches -= len(order)
            epoch += 1
        return counts

    # -- rows within a task ------------------------------------------------------------------------
    def _task_batches(self, t: int, epoch: int) -> Iterator[list[int]]:
        """Endless batches of task ``t``'s local row indices for ``epoch``: pass after pass."""
        n, b = self.sizes[t], self.batch_sizes[t]
        pass_index = 0
        while True:
            if self.balanced[t]:
                sampler = ClassBalancedBatchSampler(self.labels[t], b, seed=int(np.random.SeedSequence(
                    [self.seed, epoch, t + 1]).generate_state(1)[0]))
                sampler.set_epoch(pass_index)
                yield from (list(map(int, batch)) for batch in sampler)
            else:
                perm = np.random.default_rng([self.seed, epoch, t + 1, pass_index]).permutation(n)
                for start in range(0, n, b):
                    yield perm[start:start + b].tolist()
            pass_index += 1

    def __iter__(self) -> Iterator[list[int]]:
        epoch = self.epoch
        streams = [self._task_batches(t, epoch) for t in range(len(self.sizes))]
        for t in self.task_order(epoch):
            off = self.offsets[t]
            yield [off + i for i in next(streams[t])]

    def task_of(self, index: int) -> int:
        """The task that owns global row ``index``."""
        return int(np.searchsorted(self.offsets, index, side="right") - 1)
