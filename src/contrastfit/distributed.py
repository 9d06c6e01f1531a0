r"""Contrastive terms over the **global** batch of a multi-process (DDP) run.

Under DDP each process embeds its own share of the batch. A contrastive loss computed on that share
alone sees ``1/world_size`` of the negatives (and positives) the global batch holds. :func:`gather`
collects every process's embeddings **with their gradients** (``torch.distributed.nn.functional.all_gather``,
whose backward sums the gradients each process computes for a row and hands them to the process that
owns it) and the labels (no gradient), padding uneven shares and dropping the padding again, so that
the loss sees the global batch.

Scaling convention
------------------
Every process computes the contrastive term of the **whole** global batch (every anchor against
every candidate, self-pairs masked by their global index because the loss sees the global batch as
one batch). The backward of the gather sums, for each row, the gradients of the ``W`` processes'
(identical) terms and hands them to the row's owner, so each process's encoder gets ``W`` times
the global term's gradient for its rows; DDP then **averages** over processes, which gives exactly
the gradient of the global batch's loss:

.. math::

    \frac{1}{W} \sum_r W \frac{\partial L}{\partial e_r} \frac{\partial e_r}{\partial \theta}
    = \frac{\partial L}{\partial \theta}

No world-size factor is added to the loss (unlike wrappers that gather **without** gradients and
multiply the loss by ``W`` to make up for the gradients they dropped). Parameters of the loss itself
(heads, centres) get the same gradient on every process, which the average keeps. Terms computed on
the local rows only (the cross-entropy) are averaged over processes as usual in DDP. The price is
that each process computes the ``N x N`` similarities of the global batch instead of its ``N/W``
rows of them: a few milliseconds for thousands of rows, next to the encoder's cost.

With gradient caching (:mod:`contrastfit.gradcache`) the loss gathers the cached embeddings (leaves
of the first pass) exactly as it gathers live ones, so the cached gradients are the global loss's;
the cache then lets DDP all-reduce once, with the last re-encoded chunk. The cross-batch memory
(:mod:`contrastfit.memory`) enqueues the gathered batch on every process.

Outside a multi-process run every function here is the identity: one code path for both.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from .errors import ConfigError

__all__ = ["world", "is_distributed", "launched_processes", "local_processes", "cpu_processes", "GlobalBatch", "gather", "gather_views"]


def is_distributed() -> bool:
    """True inside an initialised process group with more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def launched_processes() -> int:
    """How many processes the launcher started (``WORLD_SIZE`` set by torchrun / accelerate launch),
    before any process group exists; 1 when not launched by one."""
    import os

    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def local_processes() -> int:
    """How many of the launched processes run on this machine (``LOCAL_WORLD_SIZE``, set by torchrun;
    :func:`launched_processes` where it is not set): a multi-node launch starts ``WORLD_SIZE`` processes
    in all, ``LOCAL_WORLD_SIZE`` on each machine."""
    import os

    try:
        return max(1, int(os.environ["LOCAL_WORLD_SIZE"]))
    except (KeyError, ValueError):
        return launched_processes()


def cpu_processes(use_cpu: bool = False) -> bool:
    """Whether the Trainer must be told ``use_cpu``: asked for, or several processes launched on a
    machine without CUDA. (Accelerate sets up a multi-process CPU run, gloo, only when told the run
    is on the CPU; otherwise every process would train alone on the whole data set.)

    Several processes on CUDA need a GPU each (NCCL refuses two processes on one device with an
    "invalid usage" error from deep inside the first collective): fewer visible GPUs than processes
    on this machine (:func:`local_processes`; a multi-node run has more processes in all than any one
    machine has GPUs) is a one-line :class:`~contrastfit.errors.ConfigError` naming both counts and ``--cpu``."""
    processes = launched_processes()
    if use_cpu or (processes > 1 and not torch.cuda.is_available()):
        return True
    here = local_processes()
    if processes > 1 and torch.cuda.device_count() < here:
        raise ConfigError(f"{here} processes were launched but only {torch.cuda.device_count()} GPU(s) are "
                          f"visible: launch at most one process per GPU, or add --cpu to train on the CPU (gloo)")
    return False


def world() -> tuple[int, int]:
    """``(rank, world_size)``; ``(0, 1)`` outside a multi-process run."""
    if not is_distributed():
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


@dataclass
class GlobalBatch:
    """The batch of every process, concatenated in rank order.

    ``embeddings`` (N, ...) keep their graph to every process's rows; ``labels`` (N,);
    ``local`` (N,) bool marks this process's own rows (its anchors); ``offset`` is the index of this
    process's first row in the global batch (so a row's global index is ``offset + local index``)."""

    embeddings: torch.Tensor
    labels: torch.Tensor
    local: torch.Tensor
    offset: int


def _sizes(n: int, device: torch.device) -> list[int]:
    counts = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, torch.tensor([n], dtype=torch.long, device=device))
    return [int(c.item()) for c in counts]


def gather(embeddings: torch.Tensor, labels: torch.Tensor) -> GlobalBatch:
    """Every process's ``embeddings`` (with gradients) and ``labels``, concatenated in rank order.

    Shares of different sizes (the last batch of an epoch) are padded to the largest for the
    collective and the padding rows are dropped afterwards, so they are neither anchors nor
    candidates. Outside a multi-process run: the inputs themselves, all rows local."""
    n = embeddings.shape[0]
    if labels.shape[:1] != (n,):
        raise ValueError(f"labels must have {n} rows like the embeddings, got shape {tuple(labels.shape)}")
    if not is_distributed():
        return GlobalBatch(embeddings, labels, torch.ones(n, dtype=torch.bool, device=embeddings.device), 0)

    import warnings

    from torch.distributed.nn.functional import all_gather as all_gather_with_grad

    rank = dist.get_rank()
    sizes = _sizes(n, embeddings.device)
    largest = max(sizes)
    pad = largest - n
    padded = torch.cat([embeddings, embeddings.new_zeros((pad, *embeddings.shape[1:]))]) if pad else embeddings
    padded_labels = torch.cat([labels, labels.new_zeros((pad, *labels.shape[1:]))]) if pad else labels

    with warnings.catch_warnings():  # deprecated in torch 2.13 for a private module's function: keep the public one
        warnings.simplefilter("ignore", FutureWarning)
        shares = all_gather_with_grad(padded.contiguous())
    label_shares = [torch.empty_like(padded_labels) for _ in sizes]
    dist.all_gather(label_shares, padded_labels.contiguous())

    all_embeddings = torch.cat([share[:size] for share, size in zip(shares, sizes)])
    all_labels = torch.cat([share[:size] for share, size in zip(label_shares, sizes)])
    offset = sum(sizes[:rank])
    local = torch.zeros(all_labels.shape[0], dtype=torch.bool, device=embeddings.device)
    local[offset:offset + n] = True
    return GlobalBatch(all_embeddings, all_labels, local, offset)


def gather_views(views, labels: torch.Tensor | None = None) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """Each view (n, d) of the local batch gathered into the global batch (rank order, so row ``i``
    of every gathered view is the same example), and the gathered labels (None when not given)."""
    rows = torch.zeros(views[0].shape[0], dtype=torch.long, device=views[0].device) if labels is None else labels
    gathered = [gather(view, rows) for view in views]
    return [g.embeddings for g in gathered], None if labels is None else gathered[0].labels
