"""The analyses of an experiment report, one module each; importing this package registers all of
them (every module of the package is imported). See :mod:`.base` for how to write one.

Configurable analyses (the names a config lists under ``analyses:``), in report order: ``tsne``,
``alignment_uniformity``, ``distance_groups``, ``error_analysis``, ``learning_curves``,
``confusion``, ``attributions``. Always part of the report: ``selection`` (best grid point by
validation), ``imbalance`` (minority vs majority F1), ``metric_vs_setting`` (curves across settings).
"""

from __future__ import annotations

import importlib
import pkgutil

from .base import (
    Analysis,
    AnalysisResult,
    FigureWriter,
    Skip,
    available_analyses,
    get_analysis,
    parse_options,
    register_analysis,
    registered_analyses,
)

__all__ = ["Analysis", "AnalysisResult", "FigureWriter", "Skip", "available_analyses", "get_analysis",
           "parse_options", "register_analysis", "registered_analyses"]

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")
