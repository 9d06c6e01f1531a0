r"""Cross-batch memory: the embeddings of earlier batches as extra candidates of a SupCon-style term.

Wang, Zhang, Huang & Scott, *Cross-Batch Memory for Embedding Learning* (XBM), CVPR 2020: once the
encoder's embeddings drift slowly, the embeddings of the last few batches are still good
stand-ins for what the encoder would compute now, so a queue of them gives each anchor many more
negatives (and, for a supervised loss, positives) than its batch holds, at the cost of a few
matrix rows and no extra encoder pass.

``--memory-size M`` (:class:`~contrastfit.config.TrainConfig` ``memory_size``) keeps a
:class:`CrossBatchMemory` of the last ``M`` **detached** embeddings and their labels
(label-aware: a memory row of the anchor's class is a positive, any other row a negative).

Conventions
    * **Candidates, not anchors.** The memory's rows join every anchor's denominator and are
      positives of the anchors of their class (:func:`contrastfit.losses.supcon`'s ``candidates``);
      the mean runs over the current batch's anchors only, and the memory gets no gradient (its rows
      are detached, as in XBM).
    * **Compare, then enqueue.** Each training batch is first contrasted with the memory as it was,
      then enqueued (its oldest rows evicted), so a row never meets itself.
    * **Used once full** (XBM's warm-up): while the memory holds fewer than ``M`` rows, the loss is
      the plain in-batch loss and the batches are only enqueued; from the step at which it first
      holds ``M`` rows on, every batch is contrasted with all ``M``. XBM starts its memory after a
      warm-up of 1,000 iterations so that the embeddings have stopped moving fast; filling the queue
      is this module's (shorter) warm-up: ``ceil(M / global batch)`` steps. Rows only ever get
      added, so once full it stays full.
    * **What is stored.** The rows the SupCon term contrasts: ``ce-scl`` (and ``ce-scl-lr``,
      ``ce-supcon``) the pooled embeddings, ``supcl-seq`` every dropout view of every sentence
      (``views x batch`` rows a step) with its (binned) label; embeddings are stored as the loss
      receives them (the loss normalises), in the model's floating dtype. Order: oldest first.
      A batch larger than ``M`` leaves its last ``M`` rows.
    * **Multi-process (DDP).** Every process contrasts and enqueues the **gathered global batch**
      (:func:`contrastfit.distributed.gather`), so every process holds the same memory, row for row.
    * **Checkpoints.** The memory is a set of persistent buffers of the method (``method.memory``)
      while the Trainer trains, so every Trainer checkpoint holds it and ``--resume`` continues with
      the memory the interrupted run had (exact resume). :class:`~contrastfit.trainer.ContrastfitTrainer`
      attaches it when training starts and detaches it when training ends: the saved model
      (``head.safetensors``) is the same as without a memory (no ``M x hidden`` floats in it) and
      reloads with :meth:`~contrastfit.modeling.ContrastiveClassifier.from_pretrained`.

Only methods whose loss has such a term take a memory (``Method.cross_batch_memory``): ``ce-scl``,
``ce-scl-lr``, ``ce-supcon`` and ``supcl-seq``. Any other method is refused with a one-line
:class:`~contrastfit.errors.ConfigError` naming it (:func:`check_memory`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .errors import ConfigError
from .methods import available_methods, get_method

__all__ = ["CrossBatchMemory", "attach_memory", "check_checkpoint_memory", "check_memory", "detach_memory",
           "memory_methods"]


class CrossBatchMemory(nn.Module):
    """A first-in-first-out queue of ``size`` embeddings (``dim`` wide) and their integer labels.

    Buffers (persistent: they are in the model's ``state_dict`` and so in Trainer checkpoints):
    ``embeddings`` (size, dim), ``labels`` (size,), ``count`` (the rows held, at most ``size``).
    The rows held are the last ``count`` rows of the buffers, oldest first."""

    def __init__(self, size: int, dim: int, *, dtype: torch.dtype = torch.float32, device: Any = None):
        super().__init__()
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"memory_size (--memory-size) must be an integer >= 1, got {size!r}")
        self.size = size
        self.register_buffer("embeddings", torch.zeros(size, dim, dtype=dtype, device=device))
        self.register_buffer("labels", torch.full((size,), -1, dtype=torch.long, device=device))
        self.register_buffer("count", torch.zeros((), dtype=torch.long, device=device))

    @property
    def full(self) -> bool:
        """Whether the memory holds ``size`` rows (from then on it is used)."""
        return int(self.count) >= self.size

    def held(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The rows held and their labels, oldest first (copies)."""
        n = int(self.count)
        return self.embeddings[self.size - n:].clone(), self.labels[self.size - n:].clone()

    def candidates(self) -> dict[str, torch.Tensor]:
        """Keyword arguments for :func:`contrastfit.losses.supcon`: ``candidates`` and
        ``candidate_labels`` once the memory is full, nothing before (the warm-up rule)."""
        if not self.full:
            return {}
        embeddings, labels = self.held()
        return {"candidates": embeddings, "candidate_labels": labels}

    @torch.no_grad()
    def enqueue(self, embeddings: torch.Tensor, labels: torch.Tensor) -> None:
        """Append ``embeddings`` (n, dim; detached here) and ``labels`` (n,) in row order, evicting the
        oldest rows; of a batch larger than the memory its last ``size`` rows stay."""
        if embeddings.dim() != 2 or embeddings.shape[1] != self.embeddings.shape[1]:
            raise ValueError(f"memory rows must be (n, {self.embeddings.shape[1]}), got shape {tuple(embeddings.shape)}")
        if labels.shape != embeddings.shape[:1]:
            raise ValueError(f"labels must be ({embeddings.shape[0]},), got shape {tuple(labels.shape)}")
        new = embeddings.detach()[-self.size:].to(self.embeddings.dtype)
        k = new.shape[0]
        if k == 0:
            return
        self.embeddings.copy_(torch.cat([self.embeddings[k:], new.to(self.embeddings.device)]))
        self.labels.copy_(torch.cat([self.labels[k:], labels.detach()[-self.size:].long().to(self.labels.device)]))
        self.count.fill_(min(self.size, int(self.count) + k))

    def extra_repr(self) -> str:
        return f"size={self.size}, dim={self.embeddings.shape[1]}, held={int(self.count)}"


def memory_methods() -> list[str]:
    """The registered methods that take a cross-batch memory."""
    return [name for name, spec in available_methods().items() if spec.cls.cross_batch_memory]


def check_memory(method: str | nn.Module | None, size: Any) -> int | None:
    """``size`` as an int (None: no memory), after checking it (>= 1) and that ``method`` (a
    registered name or a method object) takes a memory; one-line :class:`ConfigError` otherwise."""
    if size is None:
        return None
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(f"memory_size (--memory-size) must be an integer >= 1, got {size!r}")
    if method is None:
        return size
    if isinstance(method, str):
        name, cls = method, get_method(method).cls
    else:
        name, cls = getattr(method, "registered_name", None) or method.name, type(method)
    if not cls.cross_batch_memory:
        raise ConfigError(f"{name} cannot use a cross-batch memory (--memory-size): it has no SupCon-style term to "
                          f"take earlier batches' embeddings as candidates (methods that can: {', '.join(memory_methods())})")
    return size


def check_checkpoint_memory(checkpoint: str | os.PathLike, size: int | None) -> None:
    """Before resuming from a Trainer ``checkpoint`` folder: its weights file must hold a memory of
    ``size`` rows (none when ``size`` is None), or the resumed run would not continue the interrupted
    one (a memory of another size cannot even be loaded); one-line :class:`ConfigError` otherwise."""
    from safetensors import safe_open

    path = Path(checkpoint) / "model.safetensors"
    if not path.is_file():
        return
    with safe_open(str(path), framework="pt") as weights:
        key = _PREFIX + "embeddings"
        held = weights.get_slice(key).get_shape()[0] if key in set(weights.keys()) else None
    if held != size:
        saved = f"a cross-batch memory of {held} rows" if held is not None else "no cross-batch memory"
        wanted = f"--memory-size {held}" if held is not None else "no --memory-size"
        raise ConfigError(f"{checkpoint} was saved with {saved}; resume it with {wanted} "
                          f"(got {'--memory-size ' + str(size) if size is not None else 'none'})")


def attach_memory(model: nn.Module, size: int) -> CrossBatchMemory:
    """Give ``model.method`` (of a :class:`~contrastfit.modeling.ContrastiveClassifier`) an empty
    memory of ``size`` rows, on the device and in the floating dtype of the model's encoder."""
    check_memory(model.method, size)
    reference = next((p for p in model.encoder.parameters() if p.is_floating_point()), None)
    dtype = reference.dtype if reference is not None else torch.float32
    device = reference.device if reference is not None else None
    memory = CrossBatchMemory(size, model.method.hidden_size, dtype=dtype, device=device)
    model.method.memory = memory
    # DDP need not broadcast the memory at every step: the processes fill it identically
    _ddp_ignore(model, [name for name, _ in model.named_buffers() if name.startswith(_PREFIX)], add=True)
    return memory


def detach_memory(model: nn.Module) -> None:
    """Remove the memory from ``model.method`` (so the saved model does not carry it)."""
    if getattr(model.method, "memory", None) is not None:
        model.method.memory = None
    _ddp_ignore(model, [], add=False)


_PREFIX = "method.memory."
_IGNORE = "_ddp_params_and_buffers_to_ignore"  # what DistributedDataParallel reads when it wraps a module


def _ddp_ignore(model: nn.Module, names: list[str], add: bool) -> None:
    """Add ``names`` to (or drop the memory's names from) the buffers ``DistributedDataParallel``
    leaves alone (neither broadcast at construction nor before each forward: the memories are
    equal on every process by construction, and a broadcast of ``M x hidden`` floats per step would
    cost for nothing). Torch's ``DistributedDataParallel._set_params_and_buffers_to_ignore_for_model``
    sets the same attribute."""
    kept = [n for n in getattr(model, _IGNORE, []) if not n.startswith(_PREFIX)]
    if kept or (add and names):
        setattr(model, _IGNORE, kept + (names if add else []))
    elif hasattr(model, _IGNORE):
        delattr(model, _IGNORE)
