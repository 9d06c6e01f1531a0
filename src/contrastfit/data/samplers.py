"""Batch samplers for contrastive training.

A supervised contrastive term needs, in every batch, at least two examples of a class (positives)
and at least two classes (negatives). Random batches of a small few-shot set often lack both, and a
"group by label" sampler makes single-class batches with no negatives at all (pitfall 2). A sampler
that guarantees both by giving every class two slots, on the other hand, oversamples minority
classes: on 32 minority vs 640 majority rows it feeds the minority 12.5% of the rows instead of its
4.8%, a re-balancing remedy that the compared method gets and a plain CE baseline does not.

:class:`ClassBalancedBatchSampler` keeps the class mix of the data **exactly in expectation** and
still gives every class that is in a batch at least two rows. Per batch of ``B`` slots, class ``c``
with frequency ``p_c`` is owed ``e_c = B p_c`` slots:

* a class with ``e_c >= 2`` is in every batch, with ``floor`` or ``ceil`` of its share of the slots
  the smaller classes leave (randomised rounding, so the expectation is exact);
* a class with ``e_c < 2`` comes in a unit of two rows (one row for a class with a single example)
  and is drawn with probability ``e_c / unit`` by systematic sampling over the small classes in
  random order: the number of small classes in a batch is then the floor or the ceiling of their
  expected number, never fewer, so with ``B (1 - p_max) >= 2`` every batch has two classes.

Batches of two or three slots cannot hold both a positive and a negative pair; there every batch has
one row from each of two (or three) classes drawn in proportion to frequency, as before. With heavy
imbalance (``B (1 - p_max) < 2``, e.g. 32:640 at batch 16) some batches hold the majority class only:
that is the price of not re-weighting the data. Within a class, rows come from a reshuffled cycle,
so every example is seen about once per epoch. Every batch has exactly ``min(batch_size, len(labels))``
distinct rows; an epoch has ``ceil(n / batch_size)`` batches. Deterministic given ``seed`` and the
epoch (``set_epoch``, called by the Trainer).
"""

from __future__ import annotations

import math
from typing import Iterator, Sequence

import numpy as np
from torch.utils.data import Sampler


class ClassBalancedBatchSampler(Sampler[list[int]]):
    def __init__(self, labels: Sequence[int], batch_size: int, seed: int = 0):
        if batch_size < 2:
            raise ValueError(f"a contrastive batch needs batch_size >= 2, got {batch_size}")
        self.labels = np.asarray(labels)
        if self.labels.ndim != 1 or len(self.labels) == 0:
            raise ValueError("labels must be a non-empty 1-d sequence")
        self.batch_size = min(batch_size, len(self.labels))
        self.seed = seed
        self.epoch = 0
        self.classes, self.counts = np.unique(self.labels, return_counts=True)
        self.pools = {int(c): np.flatnonzero(self.labels == c) for c in self.classes}

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return math.ceil(len(self.labels) / self.batch_size)

    def _quotas(self, rng: np.random.Generator) -> dict[int, int]:
        b = self.batch_size
        freq = self.counts / self.counts.sum()
        caps = self.counts.astype(int)
        if b < 4 or len(self.classes) == 1:
            return self._one_each(rng, freq)
        owed = b * freq
        quota = np.zeros(len(self.classes), dtype=int)
        small = np.flatnonzero(owed < 2)
        large = np.flatnonzero(owed >= 2)
        if len(small):
            unit = np.where(caps[small] >= 2, 2, 1)
            prob = np.minimum(owed[small] / unit, 1.0)
            order = rng.permutation(len(small))
            # systematic sampling: points u, u+1, u+2, ... over the cumulated probabilities
            edges = np.concatenate([[0.0], np.cumsum(prob[order])])
            u = rng.random()
            hits = np.floor(edges[1:] - u) - np.floor(edges[:-1] - u) > 0
            quota[small[order[hits]]] = unit[order[hits]]
        rest = b - int(quota.sum())
        if len(large):
            share = rest * freq[large] / freq[large].sum()
            base = np.floor(share).astype(int)
            frac = share - base
            extra = rest - int(base.sum())
            if extra > 0:  # randomised rounding that keeps the expectation: systematic again
                edges = np.concatenate([[0.0], np.cumsum(frac)])
                u = rng.random() * (edges[-1] / extra)
                step = edges[-1] / extra
                points = u + step * np.arange(extra)
                base += np.histogram(points, bins=edges)[0].astype(int)
            quota[large] = np.maximum(base, 2)
        quota = np.minimum(quota, caps)
        self._repair(quota, caps, freq, rng)
        return {int(self.classes[i]): int(q) for i, q in enumerate(quota) if q > 0}

    def _repair(self, quota: np.ndarray, caps: np.ndarray, freq: np.ndarray, rng: np.random.Generator) -> None:
        """Make the quotas sum to the batch size (rounding, caps and the minimum of two can leave
        them a slot or two off): take from classes above two, largest surplus first; give to classes
        already in the batch with rows to spare, in proportion to frequency, else to new classes."""
        b = self.batch_size
        while quota.sum() > b:
            over = np.flatnonzero(quota > 2)
            if len(over) == 0:
                over = np.flatnonzero(quota > 0)
            i = over[np.argmax(quota[over] - b * freq[over])]
            quota[i] -= 1
        while quota.sum() < b:
            room = np.flatnonzero((quota > 0) & (quota < caps))
            if len(room) == 0:
                room = np.flatnonzero(quota < caps)
            i = rng.choice(room, p=freq[room] / freq[room].sum())
            quota[i] += 1 if quota[i] > 0 or caps[i] < 2 or quota.sum() + 2 > b else 2

    def _one_each(self, rng: np.random.Generator, freq: np.ndarray) -> dict[int, int]:
        """Batches of 2-3 slots (or one class): one row from each of that many classes, drawn in
        proportion to frequency (a class with more rows may take a second slot if classes run out)."""
        b = self.batch_size
        m = min(len(self.classes), b)
        chosen = rng.choice(len(self.classes), size=m, replace=False, p=freq)
        quota = np.zeros(len(self.classes), dtype=int)
        quota[chosen] = 1
        self._repair(quota, self.counts.astype(int), freq, rng)
        return {int(self.classes[i]): int(q) for i, q in enumerate(quota) if q > 0}

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        cursors = {c: 0 for c in self.pools}
        orders = {c: rng.permutation(pool) for c, pool in self.pools.items()}
        for _ in range(len(self)):
            batch: list[int] = []
            for cls, q in sorted(self._quotas(rng).items()):
                take: list[int] = []
                while len(take) < q:
                    if cursors[cls] >= len(orders[cls]):
                        orders[cls] = rng.permutation(self.pools[cls])
                        cursors[cls] = 0
                    idx = int(orders[cls][cursors[cls]])
                    cursors[cls] += 1
                    if idx not in take:
                        take.append(idx)
                batch.extend(take)
            yield [batch[i] for i in rng.permutation(len(batch))]
