"""What the distillation methods (``distill-kl``, ``distill-cosine``) share: the teacher's targets of
the training texts, computed once before training, and their look-up by the rows of a batch.

:func:`contrastfit.distillation.distill` runs the teacher (a trained contrastfit model) once over the
unlabelled texts, keeps what it predicted in a :class:`TeacherTargets` (its logits, and its
sentence embeddings where the method asks for them: :attr:`TeacherTargetsMixin.teacher_outputs`), and
trains the student with the ordinary training job (:func:`contrastfit.training.train`) inside
``with teacher_targets(targets):``. The method picks the targets up in :meth:`Method.prepare
<contrastfit.methods.base.Method.prepare>` and indexes them by the **student's** token ids of each
text (:class:`TargetIndex`): a training batch carries token ids, not texts, and whatever the sampler
or the gradient cache does to a batch, each row still finds its target. Texts the student cannot tell
apart (the same ids after its tokenizer's truncation or lower-casing) share the mean of their targets.

Nothing of this is saved with the model: the index is a plain attribute, not a parameter or buffer,
so the saved student is a model folder like any other, whose method predicts without a teacher.
A distillation method trained without targets (``contrastfit train --method distill-kl``) stops in
``prepare`` with a one-line :class:`~contrastfit.errors.ConfigError` that names ``contrastfit distill``.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ClassVar, Iterator, Sequence

import numpy as np
import torch

from ..errors import ConfigError, DataError


@dataclass
class TeacherTargets:
    """The teacher's predictions for ``texts`` (and ``pairs``), row by row: ``logits`` (n, C), divided by
    the teacher's calibration temperature (so their softmax is the teacher's ``predict_proba``), and
    ``embeddings`` (n, D), its L2-normalised sentence embeddings, or None where not computed."""

    texts: Sequence[str]
    pairs: Sequence[str] | None = None
    logits: torch.Tensor | None = None
    embeddings: torch.Tensor | None = None

    def __post_init__(self) -> None:
        n = len(self.texts)
        if self.pairs is not None and len(self.pairs) != n:
            raise ValueError(f"{len(self.pairs)} pairs for {n} texts")
        for name in ("logits", "embeddings"):
            value = getattr(self, name)
            if value is not None and (value.dim() != 2 or value.shape[0] != n):
                raise ValueError(f"{name} must be ({n}, width), got shape {tuple(value.shape)}")


_CURRENT: ContextVar[TeacherTargets | None] = ContextVar("contrastfit_teacher_targets", default=None)


@contextlib.contextmanager
def teacher_targets(targets: TeacherTargets) -> Iterator[TeacherTargets]:
    """Make ``targets`` the teacher's targets of the runs started inside the block (the distillation
    methods read them in ``prepare``)."""
    token = _CURRENT.set(targets)
    try:
        yield targets
    finally:
        _CURRENT.reset(token)


def current_teacher_targets() -> TeacherTargets | None:
    return _CURRENT.get()


def row_key(ids: Any) -> bytes:
    """The key of one text: its token ids (without padding) as int64 bytes."""
    return np.asarray(ids, dtype=np.int64).tobytes()


class TargetIndex:
    """The teacher's targets indexed by the student's tokenisation of each text (``model.tokenize``,
    the truncation the training set is tokenised with): ``rows(input_ids, attention_mask)`` gives the
    row of :attr:`logits` / :attr:`embeddings` of each row of a padded batch."""

    def __init__(self, targets: TeacherTargets, model: Any):
        ids = model.tokenize(list(targets.texts), list(targets.pairs) if targets.pairs is not None else None)["input_ids"]
        groups: dict[bytes, list[int]] = {}
        for i, row in enumerate(ids):
            groups.setdefault(row_key(row), []).append(i)
        self.keys = {key: j for j, key in enumerate(groups)}
        owner = torch.empty(len(ids), dtype=torch.long)
        for j, members in enumerate(groups.values()):
            owner[members] = j
        self.logits = _group_mean(targets.logits, owner, len(groups))
        self.embeddings = _group_mean(targets.embeddings, owner, len(groups))

    def __len__(self) -> int:
        return len(self.keys)

    def missing(self, rows: Sequence[Sequence[int]]) -> int:
        """How many of the token-id ``rows`` (unpadded) have no target."""
        return sum(row_key(r) not in self.keys for r in rows)

    def rows(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        ids = input_ids.detach().cpu().numpy()
        mask = attention_mask.detach().cpu().numpy().astype(bool)
        out = []
        for r in range(ids.shape[0]):
            j = self.keys.get(row_key(ids[r][mask[r]]))
            if j is None:
                raise DataError("a training row has no teacher target: its text is not one the teacher predicted "
                                "before training")
            out.append(j)
        return torch.as_tensor(out, dtype=torch.long)


def _group_mean(values: torch.Tensor | None, owner: torch.Tensor, groups: int) -> torch.Tensor | None:
    if values is None:
        return None
    values = values.detach().float().cpu()
    total = torch.zeros(groups, values.shape[1]).index_add_(0, owner, values)
    count = torch.zeros(groups).index_add_(0, owner, torch.ones(len(owner)))
    return total / count.unsqueeze(1)


class TeacherTargetsMixin:
    """Mixed into a :class:`~contrastfit.methods.base.Method` (before it) whose loss reads the teacher's
    targets of the batch's rows with :meth:`teacher`. ``teacher_outputs`` names what it reads
    (``"logits"``, ``"embeddings"``); :func:`contrastfit.distillation.distill` computes those."""

    teacher_outputs: ClassVar[tuple[str, ...]] = ("logits",)
    #: the targets of the run, indexed (set by :meth:`prepare`; not saved with the model)
    index: TargetIndex | None = None

    def _no_teacher(self) -> ConfigError:
        return ConfigError(f"{self.name} learns from a teacher's predictions, which `contrastfit distill TEACHER "
                           "--data TEXTS` (contrastfit.distill) makes before training; it does not train on labels "
                           "alone (see `contrastfit methods`)")

    def prepare(self, model, train_dataset) -> None:
        super().prepare(model, train_dataset)
        targets = current_teacher_targets()
        if targets is None:
            raise self._no_teacher()
        absent = [name for name in self.teacher_outputs if getattr(targets, name) is None]
        if absent:
            raise ConfigError(f"{self.name} needs the teacher's {' and '.join(absent)}, which were not computed")
        if targets.logits is not None and targets.logits.shape[1] != self.num_outputs:
            raise ConfigError(f"{self.name}: the teacher has {targets.logits.shape[1]} classes, the student "
                              f"{self.num_outputs}")
        self.index = TargetIndex(targets, model)
        missing = self.index.missing(train_dataset["input_ids"])
        if missing:
            raise DataError(f"{self.name}: {missing} of the {len(train_dataset)} training rows have no teacher target "
                            "(their texts are not among those the teacher predicted)")

    def teacher(self, what: str, inputs: dict[str, torch.Tensor], like: torch.Tensor) -> torch.Tensor:
        """The teacher's ``what`` (``"logits"`` or ``"embeddings"``) of the rows of ``inputs``, on
        ``like``'s device."""
        if self.index is None:
            raise self._no_teacher()
        values = getattr(self.index, what)
        return values[self.index.rows(inputs["input_ids"], inputs["attention_mask"])].to(like.device)
