"""Analysis figures, written as PNG files.

Figures are drawn on :class:`matplotlib.figure.Figure` objects with the Agg canvas directly, never
through :mod:`matplotlib.pyplot`, so no global backend is switched, nothing needs a display and
figures are never left open. Each function returns its :class:`~matplotlib.figure.Figure` (what
was drawn can be read back from ``fig.axes``: scatter offsets, bar heights, line data, labels,
legend entries) and, given a ``path``, also writes it as a PNG atomically
(:func:`contrastfit.atomic.atomic_open`: a crash never leaves a half-written image).

* :func:`plot_tsne` -- t-SNE of test embeddings coloured by label, optional anchors (LaCon's
  label embeddings) as stars in the same projection.
* :func:`plot_confusion` -- a confusion matrix.
* :func:`plot_learning_curves` -- training / evaluation loss against step from HF Trainer
  ``log_history`` lists.
* :func:`plot_distance_groups` -- accuracy per distance-to-mean group, per method.
* :func:`plot_metric_vs_setting` -- a metric against a setting (K-shot, imbalance ratio), one line
  per method, mean with std error bars.
* :func:`plot_attributions` -- words of a text highlighted by their Shapley values, one row per method.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..atomic import atomic_open
from .statistics import summarize

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_attributions", "plot_confusion", "plot_distance_groups", "plot_learning_curves", "plot_metric_vs_setting", "plot_tsne"]


def _figure(width: float = 6.4, height: float = 4.8):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: str | os.PathLike | None) -> Figure:
    """Save ``fig`` as PNG to ``path`` atomically (nothing when ``path`` is None); return ``fig``."""
    if path is not None:
        with atomic_open(Path(path), "wb") as fh:
            fig.savefig(fh, format="png", bbox_inches="tight")
    return fig


def _colors(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _label_indices(labels: Sequence, label_names: Sequence[str]) -> np.ndarray:
    """Labels as indices into ``label_names`` (accepts indices or names)."""
    labels = list(labels)
    if labels and isinstance(labels[0], str):
        index = {name: i for i, name in enumerate(label_names)}
        unknown = sorted({lab for lab in labels if lab not in index})
        if unknown:
            raise ValueError(f"labels not in label_names: {unknown}")
        return np.asarray([index[lab] for lab in labels], dtype=int)
    out = np.asarray(labels, dtype=int)
    if out.size and (out.min() < 0 or out.max() >= len(label_names)):
        raise ValueError(f"label indices must lie in [0, {len(label_names)}), got {out.min()}..{out.max()}")
    return out


#: Up to this many points, t-SNE runs single-threaded (see :func:`plot_tsne`).
_TSNE_SERIAL_MAX = 5000


def plot_tsne(embeddings: Any, labels: Sequence, label_names: Sequence[str], path: str | os.PathLike | None = None,
              title: str = "", anchors: Any = None, seed: int = 0) -> Figure:
    """t-SNE (:class:`sklearn.manifold.TSNE`) of ``embeddings`` (n x d), one colour per label: one
    scatter per label present (labelled with its name, in ``label_names`` order).

    ``labels`` are indices into ``label_names`` (or the names themselves). ``anchors`` (m x d, e.g.
    LaCon's label embeddings, row ``i`` belonging to label ``i``) are projected together with the
    embeddings -- t-SNE is fitted on the concatenation -- and drawn as one more scatter of large
    stars in their labels' colours (legend entry "label embedding"). The perplexity is ``min(30, n_points - 1)`` so that it stays below the number of
    points; at least 3 points are needed. ``seed`` fixes t-SNE's random state; up to 5000 points
    t-SNE runs on one OpenMP thread, which is faster than contended threads at that size.
    """
    from sklearn.manifold import TSNE

    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"embeddings must be a 2-D array, got shape {x.shape}")
    y = _label_indices(labels, label_names)
    if len(y) != len(x):
        raise ValueError(f"{len(x)} embeddings but {len(y)} labels")
    a = None if anchors is None else np.asarray(anchors, dtype=np.float64).reshape(-1, x.shape[1])
    points = x if a is None else np.concatenate([x, a])
    n = len(points)
    if n < 3:
        raise ValueError(f"t-SNE needs at least 3 points, got {n}")
    perplexity = float(min(30.0, n - 1))
    tsne = TSNE(n_components=2, perplexity=perplexity, init="pca", learning_rate="auto", random_state=seed)
    if n <= _TSNE_SERIAL_MAX:
        # Barnes-Hut synchronises its OpenMP threads on every one of its ~1000 iterations; on a busy
        # machine (or next to torch's own OpenMP pool) that costs seconds to minutes for a few
        # hundred points, so small projections run on one thread.
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="openmp"):
            coords = tsne.fit_transform(points)
    else:
        coords = tsne.fit_transform(points)
    emb, anc = coords[: len(x)], coords[len(x):]

    colors = _colors(len(label_names))
    fig = _figure(7, 6)
    ax = fig.add_subplot()
    for i, name in enumerate(label_names):
        mask = y == i
        if mask.any():
            ax.scatter(emb[mask, 0], emb[mask, 1], s=12, alpha=0.7, color=colors[i], label=name)
    if a is not None:
        ax.scatter(anc[:, 0], anc[:, 1], marker="*", s=400, zorder=3, edgecolors="black", linewidths=1.2,
                   color=[colors[j] if j < len(colors) else "black" for j in range(len(anc))], label="label embedding")
    ax.set_title(title)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.legend(loc="best", fontsize="small", markerscale=1.0)
    return _save(fig, path)


def plot_confusion(matrix: Any, label_names: Sequence[str], path: str | os.PathLike | None = None,
                   title: str = "") -> Figure:
    """A confusion matrix (rows = true labels, columns = predictions) with counts in the cells,
    drawn by :class:`sklearn.metrics.ConfusionMatrixDisplay`."""
    from sklearn.metrics import ConfusionMatrixDisplay

    m = np.asarray(matrix)
    if m.shape != (len(label_names), len(label_names)):
        raise ValueError(f"confusion matrix of shape {m.shape} does not match {len(label_names)} labels")
    size = max(4.0, 1.0 + 0.6 * len(label_names))
    fig = _figure(size + 1, size)
    ax = fig.add_subplot()
    ConfusionMatrixDisplay(confusion_matrix=m, display_labels=list(label_names)).plot(
        ax=ax, cmap="Blues", colorbar=True, values_format="d" if np.issubdtype(m.dtype, np.integer) else ".2g",
        xticks_rotation=45 if len(label_names) > 4 else "horizontal")
    ax.set_title(title)
    return _save(fig, path)


def plot_learning_curves(log_history_by_run: Mapping[str, Sequence[Mapping[str, Any]]],
                         path: str | os.PathLike | None = None, title: str = "Learning curves") -> Figure:
    """Loss against step, one colour per run: training ``loss`` as a solid line, ``eval_loss`` as a
    dashed line with markers (legend entries ``"RUN (train)"`` / ``"RUN (eval)"``, points in step
    order). Input: ``{run name: trainer.state.log_history}`` (lists of dicts with
    ``"step"`` and ``"loss"`` or ``"eval_loss"``); other entries are ignored."""
    fig = _figure(8, 5)
    ax = fig.add_subplot()
    colors = _colors(max(1, len(log_history_by_run)))
    drawn = False
    for color, (run, history) in zip(colors, log_history_by_run.items()):
        for field, style, suffix in (("loss", "-", "train"), ("eval_loss", "--", "eval")):
            pts = sorted((float(e["step"]), float(e[field])) for e in history
                         if field in e and "step" in e and e[field] is not None)
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, style, color=color, marker="o" if field == "eval_loss" else None,
                        markersize=3, label=f"{run} ({suffix})")
                drawn = True
    if drawn:
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no logged losses", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_distance_groups(groups_by_method: Mapping[str, Sequence[Mapping[str, Any]]],
                         path: str | os.PathLike | None = None, title: str = "Accuracy by distance to the class mean",
                         kind: str = "bar") -> Figure:
    """Accuracy per distance-to-mean group, one series per method, as grouped bars
    (``kind="bar"``) or lines (``kind="line"``). Input: ``{method: [{"group", "accuracy"}, ...]}``;
    groups are shown in the order they first appear."""
    if kind not in ("bar", "line"):
        raise ValueError(f"kind must be 'bar' or 'line', got {kind!r}")
    groups: list[str] = []
    for rows in groups_by_method.values():
        for row in rows:
            if str(row["group"]) not in groups:
                groups.append(str(row["group"]))
    fig = _figure(max(6.0, 1.2 * len(groups) + 2), 4.8)
    ax = fig.add_subplot()
    pos = np.arange(len(groups))
    n_methods = max(1, len(groups_by_method))
    width = 0.8 / n_methods
    for i, (color, (method, rows)) in enumerate(zip(_colors(n_methods), groups_by_method.items())):
        acc = {str(r["group"]): float(r["accuracy"]) for r in rows}
        ys = np.asarray([acc.get(g, np.nan) for g in groups])
        if kind == "bar":
            ax.bar(pos - 0.4 + width * (i + 0.5), ys, width=width, color=color, label=method)
        else:
            ax.plot(pos, ys, "-o", color=color, label=method)
    ax.set_xticks(pos, groups)
    ax.set_xlabel("distance-to-mean group")
    ax.set_ylabel("accuracy")
    ax.set_title(title)
    if groups_by_method:
        ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def plot_metric_vs_setting(rows: Any, x: str, y: str, hue: str, path: str | os.PathLike | None = None,
                           title: str | None = None) -> Figure:
    """A metric (``y``) against a setting (``x``: K shots, imbalance ratio, ...), one line per
    ``hue`` (method), mean with std error bars.

    ``rows`` is a list of dicts (or a pandas DataFrame). Either each row is one run and ``y`` holds
    a number -- rows with the same (``hue``, ``x``) are aggregated with
    :func:`~contrastfit.evaluation.statistics.summarize` -- or ``y`` holds an aggregated
    ``{"mean", "std", ...}`` dict as in ``summary.json``. Numeric ``x`` values are placed on a
    numeric axis (log-scaled when they span more than a factor of 20), others in order of
    appearance.
    """
    if hasattr(rows, "to_dict"):
        rows = rows.to_dict("records")
    cells: dict[Any, dict[Any, list]] = {}
    for row in rows:
        cells.setdefault(row[hue], {}).setdefault(row[x], []).append(row[y])
    xs_all: list = []
    for per_x in cells.values():
        for xv in per_x:
            if xv not in xs_all:
                xs_all.append(xv)
    numeric = bool(xs_all) and all(_numeric(v) for v in xs_all)
    if numeric:
        xs_all = sorted(xs_all)
    position = {v: (float(v) if numeric else i) for i, v in enumerate(xs_all)}

    fig = _figure(7, 4.8)
    ax = fig.add_subplot()
    for color, (name, per_x) in zip(_colors(max(1, len(cells))), cells.items()):
        points = []
        for xv in xs_all:
            if xv not in per_x:
                continue
            values = per_x[xv]
            if len(values) == 1 and isinstance(values[0], Mapping):
                mean, std = float(values[0]["mean"]), float(values[0].get("std", 0.0) or 0.0)
            else:
                stat = summarize(float(v["mean"]) if isinstance(v, Mapping) else float(v) for v in values)
                mean, std = stat["mean"], stat["std"]
            points.append((position[xv], mean, 0.0 if math.isnan(std) else std))
        px, py, pe = zip(*points)
        ax.errorbar(px, py, yerr=pe, fmt="-o", color=color, capsize=3, markersize=4, label=str(name))
    if numeric:
        if xs_all and min(xs_all) > 0 and max(xs_all) / min(xs_all) > 20:
            ax.set_xscale("log")
        ax.set_xticks([position[v] for v in xs_all], [str(v) for v in xs_all])
        ax.minorticks_off()
    else:
        ax.set_xticks(list(range(len(xs_all))), [str(v) for v in xs_all])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title or f"{y} vs {x}")
    if cells:
        ax.legend(fontsize="small", title=hue)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_attributions(rows: Sequence[tuple[str, Any]], path: str | os.PathLike | None = None, title: str | None = None,
                      line_chars: int = 90) -> Figure:
    """Word attributions as highlighted text, one block per ``(label, attribution)`` row (e.g. one
    per method for the same sentence): red words raise the target's probability, blue words lower
    it, with one colour scale shared by all rows. ``attribution`` is a
    :class:`~contrastfit.evaluation.attributions.TokenAttribution` or its ``to_dict()``; words wrap
    at about ``line_chars`` characters (monospace)."""
    from matplotlib import colormaps
    from matplotlib.colors import TwoSlopeNorm

    items = []
    for label, attr in rows:
        d = attr.to_dict() if hasattr(attr, "to_dict") else dict(attr)
        items.append((str(label), d))
    scale = max([abs(float(v)) for _, d in items for v in d["values"]] + [1e-12])
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-scale, vmax=scale)
    cmap = colormaps["coolwarm"]

    def lines(d: Mapping[str, Any]) -> list[list[tuple[str, float, int]]]:
        out, current, width = [], [], 0
        segments = list(d.get("segments") or [0] * len(d["words"]))
        for i, (word, value) in enumerate(zip(d["words"], d["values"])):
            if i and segments[i] != segments[i - 1]:  # second text of a pair on its own line
                out.append(current)
                current, width = [], 0
            if current and width + len(word) + 1 > line_chars:
                out.append(current)
                current, width = [], 0
            current.append((word, float(value), width))
            width += len(word) + 1
        out.append(current)
        return out

    laid = [(label, d, lines(d)) for label, d in items]
    n_lines = sum(len(ls) + 1 for _, _, ls in laid)
    font_pt = 9
    char_in = 0.6 * font_pt / 72  # advance of one DejaVu Sans Mono character, in inches
    width_in = (line_chars + 2) * char_in
    line_h = 1.0 / max(n_lines + 1, 4)
    fig = _figure(width_in + 0.2, 0.3 * max(n_lines + 1, 4) + 0.4)
    ax = fig.add_axes((0.1 / (width_in + 0.2), 0.0, width_in / (width_in + 0.2), 0.9 if title else 1.0))
    char_w = char_in / width_in
    ax.set_axis_off()
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    y = 1.0 - line_h / 2
    for label, d, ls in laid:
        ax.text(0.0, y, f"{label}: p({d['target_name']}) = {d['probability']:.2f} "
                        f"(all words removed: {d['base_probability']:.2f})",
                fontsize=font_pt, fontweight="bold", va="center", ha="left")
        y -= line_h
        for line in ls:
            for word, value, offset in line:
                ax.text(offset * char_w, y, word, family="monospace", fontsize=font_pt, va="center", ha="left",
                        bbox={"facecolor": cmap(norm(value)), "edgecolor": "none", "pad": 1.0})
            y -= line_h
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)
