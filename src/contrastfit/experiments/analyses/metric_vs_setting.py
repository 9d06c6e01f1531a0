"""The headline test metric against the setting (K shots, imbalance ratio rho, noise rate, ...),
one line per variant, mean ± std over runs: LaCon's K-shot and imbalance curves, Gunel et al.'s
noise curve. The x axis is the first numeric protocol parameter that varies across settings (the
setting label otherwise). Always part of the report when there are two settings or more; a
cross-validation experiment (settings = folds) gets no curve."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...evaluation.plots import plot_metric_vs_setting
from ..page import Figure
from ..records import ordered_unique
from ..summary import is_percent
from .base import Analysis, AnalysisResult, FigureWriter, register_analysis


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class Curve(AnalysisResult):
    metric: str
    x: str | None = None
    points: list[dict[str, Any]] | None = None


@register_analysis
class MetricVsSetting(Analysis):
    name = "metric_vs_setting"
    title = "Metrics across settings"
    order = 30
    configurable = False

    def compute(self, runs, options) -> Curve | None:
        if len(runs.settings) < 2:
            return None
        metric = runs.metrics[0]  # the headline metric; the tables have the others
        params = {s: runs.of(s, v)[0].params for s in runs.settings for v in runs.variants if runs.of(s, v)}
        x = next((k for k in ordered_unique(k for p in params.values() for k in p)
                  if all(_number(p.get(k)) for p in params.values()) and len({p[k] for p in params.values()}) > 1),
                 None)
        if x == "fold" or (x is None and all("fold" in p for p in params.values())):
            return Curve(metric, notes=["the settings are cross-validation folds: no curve across settings."])
        scale = 100.0 if is_percent(metric) else 1.0
        points = [{"variant": v, x or "setting": r.params.get(x) if x else s, metric: scale * value}
                  for s in runs.settings for v in runs.variants for r in runs.of(s, v)
                  if (value := r.score("test", metric)) is not None]
        return Curve(metric, x, points)

    def figures(self, result: Curve, out: FigureWriter) -> list[Figure]:
        if not result.points:
            return []
        x, metric = result.x or "setting", result.metric
        unit = " (%)" if is_percent(metric) else ""
        fig = out.draw(f"{metric}_vs_{x}", f"Test {metric} against {result.x or 'the setting'}: mean ± std over runs.",
                       lambda path: plot_metric_vs_setting(result.points, x=x, y=metric, hue="variant", path=path,
                                                           title=f"test {metric}{unit} vs {x}"))
        return [fig] if fig else []
