"""Alignment and uniformity of the L2-normalised test embeddings (Wang & Isola 2020; Behrman &
Christoglou, CS224N report Eq. 7-8): alignment = mean squared distance of same-label pairs,
uniformity = log mean exp(-2 ||x - y||^2) over all distinct pairs; lower is better for both. Per
(setting, variant): mean ± std over the runs that have an ``analysis.npz``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ...evaluation.embedding import alignment_uniformity_by_label
from ...evaluation.statistics import summarize
from ..page import Table
from ..records import ANALYSIS_FILE
from .base import Analysis, AnalysisResult, register_analysis


@dataclass
class AlignmentUniformity(AnalysisResult):
    #: (setting, variant, alignment stat, uniformity stat)
    cells: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = field(default_factory=list)


@register_analysis
class AlignmentUniformityAnalysis(Analysis):
    name = "alignment_uniformity"
    title = "Alignment and uniformity"
    order = 50
    needs = ("classification", ANALYSIS_FILE)

    def compute(self, runs, options) -> AlignmentUniformity:
        result = AlignmentUniformity()
        for s in runs.settings:
            for v in runs.variants:
                al, un = [], []
                for r in runs.of(s, v):
                    a = runs.arrays(r)
                    if a is None:
                        continue
                    try:
                        res = alignment_uniformity_by_label(a.embeddings, a.labels)
                    except ValueError as exc:  # e.g. a single test embedding
                        result.notes.append(f"alignment/uniformity of run {r.run_id} skipped: {exc}")
                        continue
                    if not math.isnan(res["alignment"]):
                        al.append(res["alignment"])
                    un.append(res["uniformity"])
                if un:
                    result.cells.append((s, v, summarize(al), summarize(un)))
        if not result.cells:
            result.notes.append(f"no readable {ANALYSIS_FILE}: no alignment / uniformity.")
        return result

    def tables(self, result: AlignmentUniformity) -> list[Table]:
        if not result.cells:
            return []
        body = [[s, v, str(su["n"]), "–" if not sa["n"] else f"{sa['mean']:.4f} ± {sa['std']:.4f}",
                 f"{su['mean']:.4f} ± {su['std']:.4f}"] for s, v, sa, su in result.cells]
        return [Table(["setting", "variant", "runs", "alignment", "uniformity"], body,
                      caption="Wang & Isola (2020) on L2-normalised test embeddings: alignment = mean squared "
                              "distance of same-label pairs, uniformity = log mean exp(−2‖x−y‖²) over all pairs; "
                              "lower is better for both. Mean ± std over runs.")]
