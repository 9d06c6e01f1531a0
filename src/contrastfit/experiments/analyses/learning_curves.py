"""Learning curves: the training loss (solid) and the evaluation loss (dashed) that the Trainer
logged, against the optimisation step, one figure per setting and one colour per run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...evaluation.plots import plot_learning_curves
from ..page import Figure
from .base import Analysis, AnalysisResult, FigureWriter, register_analysis


@dataclass
class LearningCurves(AnalysisResult):
    #: setting -> {run name: log history}
    histories: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)


@register_analysis
class LearningCurvesAnalysis(Analysis):
    name = "learning_curves"
    title = "Learning curves"
    order = 80
    needs = ("log_history",)

    def compute(self, runs, options) -> LearningCurves:
        result = LearningCurves()
        for setting in runs.settings:
            logged = [r for v in runs.variants for r in runs.of(setting, v) if r.has_losses]
            several_samples = len({r.sample for v in runs.variants for r in runs.of(setting, v)}) > 1
            if not logged:
                result.notes.append(f"{setting}: no logged losses: no learning curves.")
                continue
            result.histories[setting] = {
                f"{r.variant} seed {r.seed}" + (f" sample {r.sample}" if several_samples else ""): list(r.log_history)
                for r in logged}
        return result

    def figures(self, result: LearningCurves, out: FigureWriter) -> list[Figure]:
        figures = []
        for setting, histories in result.histories.items():
            fig = out.draw(f"learning_curves_{setting}",
                           f"{setting}: training loss (solid) and evaluation loss (dashed) against step, one colour "
                           "per run.",
                           lambda path, h=histories, s=setting: plot_learning_curves(h, path,
                                                                                      title=f"Learning curves ({s})"))
            if fig:
                figures.append(fig)
        return figures
