"""Minority vs majority classes (LaCon, Zhang et al. Sec. 4.2): in the settings of an ``imbalance``
protocol, the per-class test F1 averaged over the minority (resp. majority) classes of each run,
then mean ± std over runs. Always part of the report when a setting names its classes."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...evaluation.statistics import summarize
from ..page import Table
from ..summary import format_stat
from .base import Analysis, AnalysisResult, register_analysis


def class_lists(params: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The minority and majority class names of an imbalance setting (``minority`` / ``majority``
    or ``minority_classes`` / ``majority_classes`` in the run's ``tags.params``); empty otherwise."""
    def names(*keys: str) -> list[str]:
        for key in keys:
            value = params.get(key)
            if isinstance(value, str):
                return [value]
            if isinstance(value, (list, tuple)):
                return [str(v) for v in value]
        return []

    return names("minority", "minority_classes"), names("majority", "majority_classes")


@dataclass
class Imbalance(AnalysisResult):
    #: (setting, variant, minority F1 stat, majority F1 stat)
    cells: list[tuple[str, str, dict[str, Any], dict[str, Any]]]


@register_analysis
class MinorityMajority(Analysis):
    name = "imbalance"
    title = "Minority vs majority classes"
    order = 20
    configurable = False

    def compute(self, runs, options) -> Imbalance | None:
        settings = [s for s in runs.settings
                    if any(all(class_lists(r.params)) for v in runs.variants for r in runs.of(s, v))]
        if not settings:
            return None
        cells = []
        for s in settings:
            for v in runs.variants:
                mins, majs = [], []
                for r in runs.of(s, v):
                    minority, majority = class_lists(r.params)
                    per_class = r.per_class.get("test", {})
                    mi = [per_class[c]["f1"] for c in minority if "f1" in per_class.get(c, {})]
                    ma = [per_class[c]["f1"] for c in majority if "f1" in per_class.get(c, {})]
                    if mi:
                        mins.append(float(np.mean(mi)))
                    if ma:
                        majs.append(float(np.mean(ma)))
                if mins or majs:
                    cells.append((s, v, summarize(mins), summarize(majs)))
        notes = [] if cells else ["imbalance settings found, but the runs have no per-class test F1."]
        return Imbalance(cells, notes=notes)

    def tables(self, result: Imbalance) -> list[Table]:
        if not result.cells:
            return []
        body = []
        for s, v, smin, smaj in result.cells:
            gap = smaj["mean"] - smin["mean"] if smin["n"] and smaj["n"] else float("nan")
            body.append([s, v, str(max(smin["n"], smaj["n"])), format_stat(smin, "f1"), format_stat(smaj, "f1"),
                         "–" if math.isnan(gap) else f"{100 * gap:.1f}"])
        return [Table(["setting", "variant", "n", "minority F1", "majority F1", "gap (maj − min)"], body,
                      caption="Per-class test F1 averaged over the minority (resp. majority) classes of each run, "
                              "then mean ± std over runs, in %.")]
