"""t-SNE of the test embeddings (van der Maaten & Hinton 2008), one figure per variant, coloured
by gold label; LaCon's label embeddings (Zhang et al.) as stars in the same projection. One run per
variant: the first (by sample, seed) of the first setting that has an ``analysis.npz``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import NonNegativeInt, PositiveInt

from ...evaluation.plots import plot_tsne
from ...schema import Schema
from ..page import Figure
from ..records import ANALYSIS_FILE
from .base import Analysis, AnalysisResult, FigureWriter, register_analysis


@dataclass
class Projection:
    variant: str
    setting: str
    seed: Any
    embeddings: np.ndarray
    labels: np.ndarray
    label_names: tuple[str, ...]
    anchors: np.ndarray | None
    subset: str  # how the points were subsampled ("" when all are drawn)


@dataclass
class Tsne(AnalysisResult):
    seed: int
    projections: list[Projection] = field(default_factory=list)


@register_analysis
class TsneAnalysis(Analysis):
    name = "tsne"
    title = "t-SNE of test embeddings"
    order = 40
    needs = ("classification", ANALYSIS_FILE)

    class Options(Schema):
        #: at most this many points per projection (a fixed random subset beyond it)
        max_points: PositiveInt = 2000
        #: random state of the subset and of t-SNE
        seed: NonNegativeInt = 0

    def compute(self, runs, options: Options) -> Tsne:
        setting = runs.settings[0]
        result = Tsne(seed=options.seed)
        for variant in runs.variants:
            candidates = runs.of(setting, variant)
            picked = next(((r, a) for r in candidates if (a := runs.arrays(r)) is not None), None)
            if picked is None:
                if candidates:
                    result.notes.append(f"t-SNE of `{variant}` skipped: no {ANALYSIS_FILE} for its runs in {setting}.")
                continue
            run, arrays = picked
            if not run.label_names:
                result.notes.append(f"t-SNE of `{variant}` skipped: the run has no label names.")
                continue
            emb, labels, subset = arrays.embeddings, arrays.labels, ""
            if len(emb) > options.max_points:
                idx = np.sort(np.random.default_rng(options.seed).choice(len(emb), options.max_points, replace=False))
                emb, labels = emb[idx], labels[idx]
                subset = f", a random {options.max_points} of {len(arrays)} points"
            result.projections.append(Projection(variant, setting, run.seed, emb, labels, run.label_names,
                                                 arrays.label_embeddings, subset))
        return result

    def figures(self, result: Tsne, out: FigureWriter) -> list[Figure]:
        figures = []
        for p in result.projections:
            extra = "; stars: label embeddings" if p.anchors is not None else ""
            caption = f"t-SNE of the test embeddings of {p.variant} ({p.setting}, seed {p.seed}{p.subset}){extra}."
            fig = out.draw(f"tsne_{p.variant}", caption,
                           lambda path, p=p: plot_tsne(p.embeddings, p.labels, p.label_names, path,
                                                       f"{p.variant} ({p.setting}, seed {p.seed})", anchors=p.anchors,
                                                       seed=result.seed))
            if fig:
                figures.append(fig)
        return figures
