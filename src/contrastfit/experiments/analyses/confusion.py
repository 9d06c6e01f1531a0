"""Confusion matrices of the test set (rows: true labels, columns: predictions), one per variant,
summed over its runs in every setting that share its label names."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...evaluation.plots import plot_confusion
from ..page import Figure
from .base import Analysis, AnalysisResult, FigureWriter, register_analysis


@dataclass
class Summed:
    variant: str
    matrix: np.ndarray
    label_names: tuple[str, ...]
    runs: int


@dataclass
class Confusion(AnalysisResult):
    matrices: list[Summed] = field(default_factory=list)


@register_analysis
class ConfusionAnalysis(Analysis):
    name = "confusion"
    title = "Confusion matrices"
    order = 90
    needs = ("classification", "confusion_matrix")

    def compute(self, runs, options) -> Confusion:
        result = Confusion()
        for v in runs.variants:
            total, names, count = None, None, 0
            for s in runs.settings:
                for r in runs.of(s, v):
                    m = r.confusion.get("test")
                    if m is None or not r.label_names:
                        continue
                    if m.shape != (len(r.label_names),) * 2 or (names is not None and r.label_names != names):
                        continue
                    total = m if total is None else total + m
                    names = r.label_names
                    count += 1
            if total is None:
                result.notes.append(f"`{v}`: no test confusion matrix in its runs.")
            else:
                result.matrices.append(Summed(v, total, names, count))
        return result

    def figures(self, result: Confusion, out: FigureWriter) -> list[Figure]:
        figures = []
        for c in result.matrices:
            fig = out.draw(f"confusion_{c.variant}",
                           f"Confusion matrix of {c.variant} on the test set (rows: true labels), summed over its "
                           f"{c.runs} runs in all settings.",
                           lambda path, c=c: plot_confusion(c.matrix, c.label_names, path,
                                                            title=f"{c.variant}: summed over {c.runs} runs"))
            if fig:
                figures.append(fig)
        return figures
