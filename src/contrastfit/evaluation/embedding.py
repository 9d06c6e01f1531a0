r"""Numbers that describe an embedding space (no plotting).

* Alignment and uniformity (Wang & Isola, 2020), as used by Behrman & Christoglou (CS224N report) to
  compare pretraining strategies, Eq. 7-8:

  .. math::

      \ell_{align} = \mathbb{E}_{(x, x^+) \sim p_{pos}} \lVert f(x) - f(x^+) \rVert^\alpha \quad (\alpha = 2),
      \qquad
      \ell_{uniform} = \log \mathbb{E}_{x, y \sim p_{data}} e^{-t \lVert f(x) - f(y) \rVert^2} \quad (t = 2)

  Lower is better for both: a more uniform spread gives a more negative uniformity (Wang & Isola
  minimise it; the report's "higher is better" for uniformity contradicts its own Eq. 8). Conventions: ``f(x)`` is
  L2-normalised first (``normalize=True``, as in Wang & Isola; the report's values, e.g. alignment 88.7,
  are only possible on un-normalised embeddings, which ``normalize=False`` reproduces); the expectation
  in uniformity runs over **distinct** pairs ``i < j`` (each unordered pair once, no ``i == i``).
  Computed in float64; returns Python floats.

* Accuracy against the distance to the mean embedding (Sosnowski et al., Fig. 2): the Euclidean distance
  of each test embedding to the mean test embedding; observations sorted by distance and cut into groups
  of equal size; accuracy per group. In the paper the mean embedding and the distances come from the
  **baseline (cross-entropy) model's** [CLS] embeddings, and every model's accuracy is measured in those
  same groups: pass the baseline's embeddings and one ``correct`` array per model (a mapping). The
  embeddings are the **un-normalised** ones (after L2 normalisation every embedding has norm 1 and the
  distances, and so the groups, change): :func:`distance_reference` picks ``embeddings_raw`` from a
  run's ``analysis.npz``.

Inputs may be NumPy arrays, torch tensors (detached here) or nested lists.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np
import torch

__all__ = ["alignment", "uniformity", "alignment_uniformity_by_label", "distance_to_mean_groups", "distance_reference"]

#: rows per block when summing over all pairs (keeps memory at O(block * n), not O(n^2)).
_BLOCK = 1024


def _as_float64(x, name: str, normalize: bool) -> torch.Tensor:
    t = x.detach() if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    t = t.to(torch.float64)
    if t.dim() != 2:
        raise ValueError(f"{name} must be (n, dim), got shape {tuple(t.shape)}")
    if normalize:
        t = torch.nn.functional.normalize(t, p=2, dim=1)
    return t


def _as_1d(x, name: str, n: int) -> np.ndarray:
    a = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    if a.shape != (n,):
        raise ValueError(f"{name} must be ({n},), got shape {a.shape}")
    return a


def alignment(z1, z2, alpha: float = 2, *, normalize: bool = True) -> float:
    """Eq. 7: mean of ``||f(x_i) - f(y_i)||^alpha`` over the positive pairs (rows of ``z1``, ``z2``)."""
    a = _as_float64(z1, "z1", normalize)
    b = _as_float64(z2, "z2", normalize)
    if a.shape != b.shape:
        raise ValueError(f"z2 must have the shape of z1 {tuple(a.shape)}, got {tuple(b.shape)}")
    if a.shape[0] == 0:
        raise ValueError("alignment needs at least one pair")
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    return float((a - b.to(a.device)).norm(dim=1).pow(alpha).mean())


def _pair_sq_dists_logsumexp(z: torch.Tensor, t: float) -> tuple[float, int]:
    """``logsumexp`` of ``-t ||z_i - z_j||^2`` over pairs ``i < j``, and the number of pairs."""
    n = z.shape[0]
    sq = (z * z).sum(dim=1)
    parts = []
    for start in range(0, n - 1, _BLOCK):
        stop = min(start + _BLOCK, n - 1)
        rows = z[start:stop]
        d2 = (sq[start:stop, None] + sq[None, :] - 2.0 * rows @ z.T).clamp_min(0.0)
        i = torch.arange(start, stop, device=z.device)[:, None]
        j = torch.arange(n, device=z.device)[None, :]
        vals = (-t * d2)[j > i]
        parts.append(torch.logsumexp(vals, dim=0))
    return float(torch.logsumexp(torch.stack(parts), dim=0)), n * (n - 1) // 2


def uniformity(z, t: float = 2, *, normalize: bool = True) -> float:
    """Eq. 8: ``log`` of the mean of ``exp(-t ||f(x) - f(y)||^2)`` over distinct pairs ``x != y`` of ``z``."""
    x = _as_float64(z, "z", normalize)
    if x.shape[0] < 2:
        raise ValueError("uniformity needs at least two embeddings")
    if not t > 0:
        raise ValueError(f"t must be > 0, got {t}")
    lse, n_pairs = _pair_sq_dists_logsumexp(x, t)
    return lse - math.log(n_pairs)


def alignment_uniformity_by_label(
    embeddings, labels, alpha: float = 2, t: float = 2, *, normalize: bool = True
) -> dict:
    """Alignment over **all same-label pairs** ``i < j`` (the positives of a labelled set) and uniformity
    over all distinct pairs.

    Returns ``{"alignment", "uniformity", "n", "n_positive_pairs", "n_pairs"}``; ``alignment`` is NaN when
    no two embeddings share a label.
    """
    x = _as_float64(embeddings, "embeddings", normalize)
    n = x.shape[0]
    y = _as_1d(labels, "labels", n)
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    total, n_pos = 0.0, 0
    for label in np.unique(y):
        idx = torch.as_tensor(np.flatnonzero(y == label), device=x.device)
        if idx.numel() < 2:
            continue
        d = torch.pdist(x[idx], p=2)  # ||x_i - x_j|| for i < j within the class
        total += float(d.pow(alpha).sum())
        n_pos += d.numel()
    return {
        "alignment": total / n_pos if n_pos else float("nan"),
        "uniformity": uniformity(x, t, normalize=False),
        "n": int(n),
        "n_positive_pairs": int(n_pos),
        "n_pairs": int(n * (n - 1) // 2),
    }


def distance_to_mean_groups(embeddings, correct, groups: int = 5) -> list[dict]:
    """Sosnowski et al. Fig. 2: accuracy by distance to the mean embedding.

    ``embeddings`` (n, d): the reference model's test embeddings (un-normalised; Euclidean distances to
    their mean). ``correct``: (n,) booleans (prediction == label) of one model, or a mapping
    ``{model_name: (n,) booleans}`` to score several models in the same groups. Observations are sorted
    by distance (stable: ties keep input order) and cut into ``groups`` groups of equal size; when ``n``
    is not a multiple of ``groups`` the sizes differ by one, the larger groups first (``numpy.array_split``).

    Returns one dict per group, nearest first: ``{"group": 1..groups, "min_distance", "max_distance",
    "n", "accuracy"}`` where ``accuracy`` is a float, or a ``{model_name: float}`` dict for a mapping.
    """
    x = _as_float64(embeddings, "embeddings", normalize=False)
    n = x.shape[0]
    if not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"groups must be a positive integer, got {groups}")
    if n < groups:
        raise ValueError(f"{n} embeddings cannot fill {groups} groups")
    if isinstance(correct, Mapping):
        named = {str(k): _as_1d(v, f"correct[{k!r}]", n).astype(bool) for k, v in correct.items()}
    else:
        named = None
        single = _as_1d(correct, "correct", n).astype(bool)
    dist = (x - x.mean(dim=0, keepdim=True)).norm(dim=1).cpu().numpy()
    order = np.argsort(dist, kind="stable")
    out = []
    for g, idx in enumerate(np.array_split(order, groups), start=1):
        if named is None:
            acc: float | dict = float(single[idx].mean())
        else:
            acc = {k: float(v[idx].mean()) for k, v in named.items()}
        out.append({
            "group": g,
            "min_distance": float(dist[idx].min()),
            "max_distance": float(dist[idx].max()),
            "n": int(idx.size),
            "accuracy": acc,
        })
    return out


def distance_reference(arrays: Mapping[str, np.ndarray]) -> tuple[np.ndarray, bool]:
    """The embeddings of one run's ``analysis.npz`` arrays to measure distances to the mean in
    (Sosnowski et al., Fig. 2): ``embeddings_raw`` (un-normalised) when present, else ``embeddings``
    (L2-normalised: files written before the raw ones were saved). Returns ``(embeddings, is_raw)``."""
    if "embeddings_raw" in arrays:
        return np.asarray(arrays["embeddings_raw"]), True
    return np.asarray(arrays["embeddings"]), False
