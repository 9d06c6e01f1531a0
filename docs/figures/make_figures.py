"""Draw the figures of the Concepts pages into docs/figures/ (``make figures``).

* ``supcon.png``, ``softtriple.png``, ``lacon.png``: the geometry of a loss on points of the unit circle
  (two-dimensional embeddings, normalised as the losses normalise them). Each arrow is minus the gradient
  of contrastfit's own loss (:mod:`contrastfit.losses`, torch autograd) with respect to that point: the
  direction one step of gradient descent moves it, its length proportional to the gradient's size
  (scaled per panel). Nothing is random.
* ``training-job.png``: the training job, step by step, and what each task shape changes at each step.

Deterministic, CPU only, a few seconds: ``python docs/figures/make_figures.py [--out FOLDER]``
(default: the folder of this file). tests/test_doc_figures.py runs it into a temporary folder.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))  # this checkout's contrastfit

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

from contrastfit.losses import lacon, soft_triple, supcon  # noqa: E402

FIGURES = ("supcon.png", "softtriple.png", "lacon.png", "training-job.png")
COLOURS = ("#1f77b4", "#d62728", "#2ca02c")  # class 0, 1, 2
DPI = 90
ARROW = 0.42  # the longest arrow of a panel, in units of the circle's radius


def unit(degrees: list[float]) -> torch.Tensor:
    rad = torch.tensor(degrees, dtype=torch.float64) * math.pi / 180
    return torch.stack([rad.cos(), rad.sin()], dim=1)


def circle(ax, title: str) -> None:
    t = torch.linspace(0, 2 * math.pi, 200)
    ax.plot(t.cos(), t.sin(), color="0.85", lw=1, zorder=0)
    ax.set_xlim(-1.55, 1.55)
    ax.set_ylim(-1.45, 1.45)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title, fontsize=10)


def arrows(ax, points: torch.Tensor, grads: torch.Tensor, scale: float, colours: list[str]) -> None:
    """Minus each gradient, drawn from its point."""
    for (x, y), (gx, gy), colour in zip(points.tolist(), grads.tolist(), colours):
        dx, dy = -gx * scale, -gy * scale
        if math.hypot(dx, dy) > 1e-3:
            ax.add_patch(FancyArrowPatch((x, y), (x + dx, y + dy), arrowstyle="-|>", mutation_scale=11,
                                         color=colours and colour, lw=1.4, zorder=3))


def points(ax, xy: torch.Tensor, labels: list[int], marker: str = "o", size: float = 55, **kw) -> None:
    ax.scatter(xy[:, 0], xy[:, 1], c=[COLOURS[c] for c in labels], marker=marker, s=size, zorder=4,
               edgecolors="black", linewidths=0.6, **kw)


def note(ax, text: str, degrees: float, at: tuple[float, float], colour: str) -> None:
    """A label at ``at`` with a thin line to the point of the circle at ``degrees``."""
    point = (math.cos(math.radians(degrees)), math.sin(math.radians(degrees)))
    ax.annotate(text, point, at, fontsize=8, color=colour, va="center",
                arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.6, "shrinkA": 2, "shrinkB": 6})


def scale_for(*grads: torch.Tensor) -> float:
    largest = max(float(g.norm(dim=1).max()) for g in grads)
    return ARROW / largest if largest > 0 else 0.0


def draw_supcon(out: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.2, 4.2))
    # left: one anchor's term (the batch is the anchor alone; the others are candidates, never anchors),
    # so the arrow on each other point is that one pair's share of the anchor's loss
    anchor = unit([90]).requires_grad_(True)
    others_deg = [55, 150, 112, 20, 215, 300]
    others_lab = [0, 0, 1, 1, 2, 2]
    others = unit(others_deg).requires_grad_(True)
    loss = supcon(anchor, torch.tensor([0]), temperature=0.3, candidates=others,
                  candidate_labels=torch.tensor(others_lab))
    loss.backward()
    s = scale_for(anchor.grad, others.grad)
    circle(left, "one anchor's term: each pair's pull or push")
    arrows(left, others.detach(), others.grad, s, [COLOURS[c] for c in others_lab])
    arrows(left, anchor.detach(), anchor.grad, s, [COLOURS[0]])
    points(left, others.detach(), others_lab)
    points(left, anchor.detach(), [0], marker="*", size=260)
    note(left, "anchor", 90, (0.25, 1.25), "black")
    note(left, "positive: pulled in", 150, (-1.55, 1.05), COLOURS[0])
    note(left, "close negative:\npushed hardest", 112, (-0.85, 1.27), COLOURS[1])
    note(left, "far negative:\nhardly moved", 300, (0.75, -1.3), COLOURS[2])

    # right: the whole batch, every row an anchor (the term ce-scl adds to the cross-entropy)
    batch_deg = [80, 120, 170, 20, 230, 260, 320, 350]
    batch_lab = [0, 0, 0, 1, 1, 2, 2, 1]
    batch = unit(batch_deg).requires_grad_(True)
    supcon(batch, torch.tensor(batch_lab), temperature=0.3).backward()
    circle(right, "a batch: every row is an anchor (τ = 0.3)")
    arrows(right, batch.detach(), batch.grad, scale_for(batch.grad), [COLOURS[c] for c in batch_lab])
    points(right, batch.detach(), batch_lab)
    fig.tight_layout()
    save(fig, out / "supcon.png")


def draw_softtriple(out: Path) -> None:
    fig, ax = plt.subplots(figsize=(4.8, 4.4))
    emb = unit([70, 100, 160, 250, 290, 330]).requires_grad_(True)
    labels = [0, 0, 0, 1, 1, 1]
    # K = 2 centres a class: class 0 owns rows 0-1, class 1 rows 2-3
    centres_deg = [85, 175, 265, 345]
    centres = unit(centres_deg).requires_grad_(True)
    soft_triple(emb, torch.tensor(labels), centres, la=8.0, gamma=0.1, margin=0.2, centers_per_class=2).backward()
    s = scale_for(emb.grad, centres.grad)
    circle(ax, "SoftTriple: K = 2 centres a class")
    arrows(ax, emb.detach(), emb.grad, s, [COLOURS[c] for c in labels])
    arrows(ax, centres.detach(), centres.grad, s, [COLOURS[c] for c in (0, 0, 1, 1)])
    points(ax, emb.detach(), labels)
    points(ax, centres.detach(), [0, 0, 1, 1], marker="s", size=85)
    ax.text(-1.5, -1.42, "squares: centres (trained with the encoder)\ncircles: embeddings", fontsize=8)
    fig.tight_layout()
    save(fig, out / "softtriple.png")


def draw_lacon(out: Path) -> None:
    fig, ax = plt.subplots(figsize=(4.8, 4.4))
    emb = unit([60, 110, 150, 200, 280, 330]).requires_grad_(True)
    labels = [0, 0, 1, 1, 2, 2]
    label_emb = unit([95, 185, 300]).requires_grad_(True)
    parts = lacon(emb, torch.tensor(labels), label_emb, temperature=0.3, heads=1, ler_weight=0.5)
    parts.total.backward()
    s = scale_for(emb.grad, label_emb.grad)
    circle(ax, "LaCon: ICL + LCL + λ LER")
    arrows(ax, emb.detach(), emb.grad, s, [COLOURS[c] for c in labels])
    arrows(ax, label_emb.detach(), label_emb.grad, s, list(COLOURS))
    points(ax, emb.detach(), labels)
    points(ax, label_emb.detach(), [0, 1, 2], marker="*", size=260)
    ax.text(-1.5, -1.42, "stars: label embeddings (learnt)\ncircles: instances", fontsize=8)
    fig.tight_layout()
    save(fig, out / "lacon.png")


STEPS = (
    ("prepare data", "load, sample\n(--shots, --train-size),\nvalidation split"),
    ("build model", "encoder + the\nmethod's head;\nTrainer, sampler"),
    ("fit", "transformers.Trainer:\nsteps, checkpoints,\nselection on validation"),
    ("fit the head", "WiSE-FT, then the\nhead on the frozen\nencoder (two-stage)"),
    ("evaluate", "validation and\ntest metrics"),
    ("save", "model folder,\ncard; checkpoints\nremoved"),
    ("record", "results.json:\nsettings, metrics,\nidentity"),
)
SHAPES = (
    ("single-label\n(the default)", ("K per class;\nbalanced batches", "linear head", "(1-λ) CE + λ SupCon", "logistic\nregression", "accuracy, F1,\nMCC", "", "")),
    ("multi-label", ("≥ K per label", "sigmoid head", "BCE + Jaccard-\nSupCon", "one-vs-rest LR;\nthresholds", "micro/macro-F1,\nsubset acc.", "thresholds\nkept", "")),
    ("text pairs", ("two text columns", "[CLS] a [SEP] b;\nno label names", "", "", "", "", "")),
    ("regression", ("float targets;\nrandom batches", "one output", "ce: MSE", "none", "Pearson,\nSpearman, MSE", "", "")),
    ("multi-task", ("a sample\nper task", "one encoder,\na head per task", "a schedule of\ntasks' batches", "none", "per task,\naverage", "", "kind\nmultitask")),
    ("stage 1 alone\n(pretrain)", ("a corpus", "encoder only", "SimCSE / DiffCSE", "none", "none", "an encoder\nfolder", "contrastfit_\npretrain.json")),
)


def draw_training_job(out: Path) -> None:
    fig, ax = plt.subplots(figsize=(12.8, 5.6))
    fig.subplots_adjust(left=0.005, right=0.995, bottom=0.005, top=0.995)
    ax.set_xlim(0, 12.8)
    ax.set_ylim(0.12, 6.35)
    ax.axis("off")
    x0, w, gap = 1.3, 1.5, 0.14
    top, h = 5.05, 1.15
    for i, (name, what) in enumerate(STEPS):
        x = x0 + i * (w + gap)
        ax.add_patch(FancyBboxPatch((x, top), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                    facecolor="#e8f0fa", edgecolor="#1f4e8c", lw=1.2))
        ax.text(x + w / 2, top + h - 0.2, f"{i + 1}. {name}", ha="center", va="center", fontsize=10,
                weight="bold", color="#1f4e8c")
        ax.text(x + w / 2, top + 0.42, what, ha="center", va="center", fontsize=8.2, linespacing=1.15)
        if i:
            ax.add_patch(FancyArrowPatch((x - gap - 0.01, top + h / 2), (x + 0.01, top + h / 2),
                                         arrowstyle="-|>", mutation_scale=10, color="#1f4e8c", lw=1.2))
    ax.text(0.05, top + h / 2, "the job", ha="left", va="center", fontsize=9.5, weight="bold")
    row_h = 0.78
    ax.text(x0 - 0.12, top - 0.22, "what each task shape changes (blank: as in the first row)", fontsize=9,
            ha="left", va="center", style="italic")
    for r, (shape, cells) in enumerate(SHAPES):
        y = top - 0.45 - (r + 1) * row_h + 0.2
        ax.add_patch(FancyBboxPatch((0.05, y - 0.02), 12.7, row_h - 0.1, boxstyle="square,pad=0",
                                    facecolor="#f6f6f6" if r % 2 == 0 else "white", edgecolor="none"))
        ax.text(0.1, y + row_h / 2 - 0.06, shape, ha="left", va="center", fontsize=8.8, weight="bold")
        for i, cell in enumerate(cells):
            if cell:
                ax.text(x0 + i * (w + gap) + w / 2, y + row_h / 2 - 0.06, cell, ha="center", va="center",
                        fontsize=8.4, linespacing=1.1)
    save(fig, out / "training-job.png")


def save(fig, path: Path) -> None:
    fig.savefig(path, dpi=DPI, metadata={"Software": None})  # no version stamp: same bytes on a rerun
    plt.close(fig)


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write the PNGs into (default: %(default)s)")
    out = parser.parse_args(argv).out
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    plt.rcParams.update({"font.family": "DejaVu Sans", "svg.hashsalt": "contrastfit"})
    for draw in (draw_supcon, draw_softtriple, draw_lacon, draw_training_job):
        draw(out)
    paths = [out / name for name in FIGURES]
    for path in paths:
        print(f"{path} ({path.stat().st_size // 1024} KB)")
    return paths


if __name__ == "__main__":
    main()
