"""The prologue every loss shares: compute in full precision, outside autocast; the L2 normalisation;
the check of the hyper-parameters.

Precision. A loss is computed in float32 whatever the input dtype, and in float64 when any of its
inputs is float64, i.e. in ``torch.promote_types`` of the inputs' dtypes and float32. It runs with
autocast disabled, so that under fp16/bf16 mixed precision (``--fp16``/``--bf16``, ``torch.autocast``)
its matmuls, softmaxes and logarithms neither run nor return in half precision: a cosine rounded to
bf16 is off by up to 4e-3, which a temperature of 0.05 turns into a logit error of 0.08
(docs/pitfalls.md, pitfall 8). Gradients flow back to the inputs in their own dtype (the cast is
differentiable).

Normalisation (:func:`l2_normalize`). A row ``x`` becomes ``x / max(||x||, eps)``, with ``eps``
chosen by the dtype of the **input** the row comes from (:func:`norm_eps`): ``2^-8`` for float16,
``1e-12`` (``F.normalize``'s) for bfloat16, float32 and float64. A row of norm >= eps is divided by
its norm exactly as ``F.normalize`` does; a zero row stays zero, with the gradient ``g / eps``. The
normalisation multiplies the gradient ``g`` of the normalised row by at most ``1 / max(||x||, eps)``
(the Jacobian is ``(I - z z^T) / ||x||`` above eps and ``I / eps`` below), so the gradient handed
back to an input of dtype ``D`` is finite whenever ``||g|| / eps(D) < finfo(D).max``. float16's
``eps = 2^-8`` splits fp16's range (max 65504 < 2^16) evenly: a zero or tiny row amplifies ``g`` at
most 256-fold, so its gradient is finite while ``||g|| < 256`` (``g`` is of the order of ``2 / tau``
in SupCon or SimCSE: ``tau >= 0.01``) instead of ``1e12 ||g||``, which overflows fp16 for any ``g``. The price: a float16 row of norm below
2^-8 (about 3.9e-3) is normalised to norm ``||x|| / 2^-8 < 1``, so its cosines shrink toward 0. With
1e-12 the amplification is at most 1e12, which bfloat16 and float32 (max 3.4e38) and float64 hold for
any ``||g|| < 1e26``. Where the exact gradient itself exceeds fp16's range (e.g. ``tau = 1e-3``, or a
row of norm 1e-4 and ``tau = 0.05``) no finite fp16 value is right; the gradient then overflows to
inf, which is what dynamic loss scaling (``torch.amp.GradScaler``) needs to see in order to lower its
scale. The gradient is deliberately not clipped: a saturated gradient would hide the overflow from
the scaler and be silently wrong.

Hyper-parameters (:func:`check_finite`). Every float hyper-parameter of a loss (temperature, scale,
margin, weights, ``lam``) must be a finite number: NaN or +-inf raises ``ValueError`` naming the
parameter and its value, before any range check (NaN fails no ``<=`` comparison, so it would
otherwise pass them and make the loss NaN). The one exception is documented where it applies:
SimCSE's ``hard_negative_weight = -inf`` (``alpha = 0``).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator

import torch

__all__ = ["NORM_EPS", "check_finite", "compute_dtype", "full_precision", "l2_normalize", "norm_eps"]

#: The normalisation's eps for every dtype whose range holds ``1 / eps`` times any sensible gradient
#: (``F.normalize``'s default); float16 uses a larger one (:func:`norm_eps`).
NORM_EPS = 1e-12


def compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The dtype a loss computes in: float32, or float64 if any of ``tensors`` is float64."""
    dtype = torch.float32
    for t in tensors:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def norm_eps(dtype: torch.dtype) -> float:
    """The eps of the L2 normalisation of a row that comes from an input of ``dtype``:
    ``max(1e-12, 2^-ceil(log2(finfo.max) / 2))``, i.e. ``2^-8`` for float16 (so ``1/eps = 256`` and
    256 * 256 = 65536: half of fp16's range for the normalisation, half for the gradient it scales)
    and ``1e-12`` for bfloat16, float32 and float64."""
    if not dtype.is_floating_point:
        return NORM_EPS
    half_range = 2.0 ** -math.ceil(math.log2(torch.finfo(dtype).max) / 2)
    return max(NORM_EPS, half_range)


def l2_normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / max(||x||, eps)`` along the last dimension (``F.normalize`` with a chosen eps). Pass
    ``eps = norm_eps(input.dtype)`` of the tensor ``x`` was cast from."""
    return x / x.norm(p=2, dim=-1, keepdim=True).clamp_min(eps)


def check_finite(name: str, value: float, *, minus_inf_ok: bool = False) -> None:
    """Raise ``ValueError`` (one line, naming ``name`` and ``value``) unless ``value`` is a finite
    number (or ``-inf`` when ``minus_inf_ok``)."""
    try:
        v = float(value)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{name} must be a finite number, got {value!r}") from None
    if math.isfinite(v) or (minus_inf_ok and v == -math.inf):
        return
    allowed = "finite or -inf" if minus_inf_ok else "finite"
    raise ValueError(f"{name} must be {allowed}, got {v}")


@contextmanager
def full_precision(*tensors: torch.Tensor, normalize: bool = False) -> Iterator[tuple[torch.Tensor, ...]]:
    """Disable autocast (on the first tensor's device type) and yield ``tensors`` cast to
    :func:`compute_dtype`, L2-normalised along the last dimension when ``normalize``
    (:func:`l2_normalize` with :func:`norm_eps` of each tensor's own dtype: a zero row stays zero
    instead of becoming NaN, and its gradient stays finite in that dtype; see the module docstring).

    Use as ``with full_precision(embeddings, normalize=True) as (z,): ...``; everything the loss
    computes belongs inside the block.
    """
    if not tensors:
        raise ValueError("full_precision needs at least one tensor")
    dtype = compute_dtype(*tensors)
    with torch.autocast(device_type=tensors[0].device.type, enabled=False):
        cast = tuple(t.to(dtype) for t in tensors)
        if normalize:
            cast = tuple(l2_normalize(c, norm_eps(t.dtype)) for c, t in zip(cast, tensors))
        yield cast
