"""The prologue every loss shares: compute in full precision, outside autocast.

Convention (stated in each loss's docstring): a loss is computed in float32 whatever the input dtype,
and in float64 when any of its inputs is float64, i.e. in ``torch.promote_types`` of the inputs'
dtypes and float32. It runs with autocast disabled, so that under fp16/bf16 mixed precision
(``--fp16``/``--bf16``, ``torch.autocast``) its matmuls, softmaxes and logarithms neither run nor
return in half precision: a cosine rounded to bf16 is off by up to 4e-3, which a temperature of 0.05
turns into a logit error of 0.08 (docs/pitfalls.md, pitfall 8). Gradients flow back to the inputs in their
own dtype (the cast is differentiable).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F

__all__ = ["compute_dtype", "full_precision"]


def compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The dtype a loss computes in: float32, or float64 if any of ``tensors`` is float64."""
    dtype = torch.float32
    for t in tensors:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


@contextmanager
def full_precision(*tensors: torch.Tensor, normalize: bool = False) -> Iterator[tuple[torch.Tensor, ...]]:
    """Disable autocast (on the first tensor's device type) and yield ``tensors`` cast to
    :func:`compute_dtype`, L2-normalised along the last dimension when ``normalize`` (``F.normalize``:
    ``x / max(||x||, 1e-12)``, so a zero row stays zero instead of becoming NaN).

    Use as ``with full_precision(embeddings, normalize=True) as (z,): ...``; everything the loss
    computes belongs inside the block.
    """
    if not tensors:
        raise ValueError("full_precision needs at least one tensor")
    dtype = compute_dtype(*tensors)
    with torch.autocast(device_type=tensors[0].device.type, enabled=False):
        cast = tuple(t.to(dtype) for t in tensors)
        if normalize:
            cast = tuple(F.normalize(t, p=2, dim=-1) for t in cast)
        yield cast
