"""Batch samplers for contrastive training.

A supervised contrastive term needs, in every batch, at least two classes (negatives) and at least
two examples of a class (positives). Random batches of a small few-shot set often lack both, and a
"group by label" sampler makes single-class batches with no negatives at all (pitfall 2).

:class:`ClassBalancedBatchSampler` builds each batch from ``m = min(#classes, max(2, batch_size // 2))``
classes drawn without replacement with probability proportional to their frequency (more classes,
drawn the same way, when the chosen ones have too few examples to fill the batch), and gives the
chosen classes ``batch_size`` slots in proportion to their frequency with at least two each (one
each when the batch has fewer than two slots per class, e.g. 1-shot or a batch of 2 or 3). Within
a class, examples are drawn from a reshuffled cycle, so every example is seen about once per epoch
and the class mix of the training data is kept on average. A class with a single example gets a
single slot (it can have no positive; the loss leaves such anchors out). Every batch has exactly
``min(batch_size, len(labels))`` distinct examples; an epoch has ``ceil(n / batch_size)`` batches.
Deterministic given ``seed`` and the epoch (``set_epoch``, called by the Trainer).
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
        freq = self.counts / self.counts.sum()
        m = min(len(self.classes), max(2, self.batch_size // 2))
        chosen = [int(i) for i in rng.choice(len(self.classes), size=m, replace=False, p=freq)]
        if sum(int(self.counts[i]) for i in chosen) < self.batch_size:
            # Too few examples (e.g. singleton classes) to fill the batch: add classes until they do.
            rest = np.array([i for i in range(len(self.classes)) if i not in chosen])
            for i in rng.choice(rest, size=len(rest), replace=False, p=freq[rest] / freq[rest].sum()):
                chosen.append(int(i))
                if sum(int(self.counts[j]) for j in chosen) >= self.batch_size:
                    break
        caps = {i: int(self.counts[i]) for i in chosen}
        quota = {i: min(2, caps[i]) for i in chosen}
        while sum(quota.values()) > self.batch_size:  # fewer than two slots per class: one each
            i = max(chosen, key=lambda j: (quota[j], -freq[j], j))
            quota[i] -= 1
        # Hand out the remaining slots one by one to the class furthest below its share.
        weights = {i: freq[i] for i in chosen}
        total_w = sum(weights.values())
        while sum(quota.values()) < self.batch_size:
            room = [i for i in chosen if quota[i] < caps[i]]
            if not room:
                break
            filled = sum(quota.values()) + 1
            i = max(room, key=lambda j: (weights[j] / total_w * filled - quota[j], -j))
            quota[i] += 1
        return {int(self.classes[i]): q for i, q in quota.items()}

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
