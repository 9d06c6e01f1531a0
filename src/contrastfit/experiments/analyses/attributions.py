"""Token attributions: Shapley values (captum's Shapley value sampling) of the words of the same test
examples for their gold label, from every variant's first run that has ``attributions.json`` (the
runner writes them for the first sample and seed of the first setting); one figure per example, a
row per variant, one colour scale: red words raise the label's probability, blue words lower it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...evaluation.plots import plot_attributions
from ..page import Figure
from ..records import ATTRIBUTIONS_FILE
from .base import Analysis, AnalysisResult, FigureWriter, register_analysis


@dataclass
class Attributions(AnalysisResult):
    setting: str | None = None
    #: test index -> [(row label, attribution dict), ...]
    examples: dict[int, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)


@register_analysis
class AttributionsAnalysis(Analysis):
    name = "attributions"
    title = "Token attributions"
    order = 100
    needs = ("classification", ATTRIBUTIONS_FILE)

    def compute(self, runs, options) -> Attributions:
        # the runner explains the first setting of the config, which need not sort first here
        for setting in runs.settings:
            examples: dict[int, list[tuple[str, dict[str, Any]]]] = {}
            for v in runs.variants:
                run = next((r for r in runs.of(setting, v) if r.attributions()), None)
                for ex in run.attributions() if run is not None else []:
                    examples.setdefault(int(ex["index"]), []).append((f"{v} (seed {run.seed})", ex))
            if examples:
                return Attributions(setting, dict(sorted(examples.items())))
        return Attributions(notes=[f"no run has a readable {ATTRIBUTIONS_FILE}."])

    def figures(self, result: Attributions, out: FigureWriter) -> list[Figure]:
        figures = []
        for index, rows in result.examples.items():
            gold = rows[0][1].get("target_name", "?")
            fig = out.draw(f"attributions_{result.setting}_test{index}",
                           f"Shapley values of the words of test example {index} ({result.setting}) for its gold "
                           f"label `{gold}`, one row per method: red words raise the label's probability, blue words "
                           "lower it (one colour scale for all rows).",
                           lambda path, rows=rows, index=index, gold=gold: plot_attributions(
                               rows, path, title=f"test example {index}, gold label: {gold}"))
            if fig:
                figures.append(fig)
        return figures
