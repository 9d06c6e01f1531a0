"""Hyper-parameter selection: for every (setting, method) with a grid, the grid point with the best
mean *validation* score (:func:`~contrastfit.experiments.summary.best_variants`; the test score is
read only after the choice). Always part of the report when the experiment has a grid."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..page import Table
from ..summary import best_variants, format_stat, format_value
from .base import Analysis, AnalysisResult, register_analysis


@dataclass
class Selection(AnalysisResult):
    best: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    headline: str


@register_analysis
class HyperparameterSelection(Analysis):
    name = "selection"
    title = "Hyper-parameter selection (by validation)"
    order = 10
    configurable = False

    def compute(self, runs, options) -> Selection | None:
        best = best_variants(runs.records, top_k=runs.top_k)
        return Selection(best, runs.rows, runs.metrics[0]) if best else None

    def tables(self, result: Selection) -> list[Table]:
        rows = {(r["setting"], r["variant"]): r for r in result.rows}
        selection = result.rows[0]["selection_metric"]
        headline = result.headline
        body = [[b["setting"], b["method"], b["variant"], str(b["n_variants"]),
                 format_value(b["validation_mean"], selection),
                 format_stat(rows.get((b["setting"], b["variant"]), {}).get("metrics", {}).get(headline), headline)]
                for b in result.best]
        return [Table(["setting", "method", "best variant", "grid points", f"mean val {selection}",
                       f"test {headline}"], body,
                      caption=f"The grid point with the best mean validation {selection} per setting and method; "
                              "the test column is read only after the choice.")]
