"""Accuracy by distance to the mean embedding (Sosnowski et al., Fig. 2): the baseline's
un-normalised test embeddings (``embeddings_raw``) give each test item its Euclidean distance to
their mean; the items, sorted by distance, are cut into equal-size groups
(:func:`~contrastfit.evaluation.embedding.distance_to_mean_groups`), and every variant's accuracy is
measured in those same groups, averaged over the runs paired with a baseline run by (sample, seed)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from pydantic import PositiveInt

from ...evaluation.embedding import distance_to_mean_groups
from ...evaluation.plots import plot_distance_groups
from ...schema import Schema
from ..page import Figure, Table
from ..records import ANALYSIS_FILE
from .base import Analysis, AnalysisResult, FigureWriter, register_analysis


@dataclass
class SettingGroups:
    setting: str
    baseline: str
    labels: list[str]                   # group labels, nearest first
    sizes: list[int]                    # items per group (per run)
    accuracy: dict[str, list[float]]    # variant -> mean accuracy per group


@dataclass
class DistanceGroups(AnalysisResult):
    settings: list[SettingGroups] = field(default_factory=list)


@register_analysis
class DistanceGroupsAnalysis(Analysis):
    name = "distance_groups"
    title = "Accuracy by distance to the mean embedding"
    order = 60
    needs = ("classification", ANALYSIS_FILE)

    class Options(Schema):
        #: number of equal-size distance groups (Sosnowski et al. use 5)
        groups: PositiveInt = 5

    def compute(self, runs, options: Options) -> DistanceGroups:
        result = DistanceGroups()
        for setting in runs.settings:
            base = runs.baselines.get(setting)
            loaded = runs.paired_arrays(setting)
            if base is None or base not in loaded:
                result.notes.append(f"{setting}: no {ANALYSIS_FILE} for the baseline's runs: no distance groups.")
                continue
            if not runs.same_test_set([ra for per in loaded.values() for ra in per.values()]):
                result.notes.append(f"{setting}: the runs do not share one test set (test_hash differs): "
                                    "no distance groups.")
                continue
            refs = loaded[base]
            groups = min(options.groups, len(next(iter(refs.values()))[1]))
            accuracy: dict[str, list[list[float]]] = {}
            sizes: list[int] = []
            normalised_only = False  # a baseline analysis.npz older than its embeddings_raw
            for v, per in loaded.items():
                for key, (_, arrays) in per.items():
                    if key not in refs:
                        continue
                    reference, is_raw = refs[key][1].distance_reference()
                    normalised_only |= not is_raw
                    rows = distance_to_mean_groups(reference, arrays.correct, groups=groups)
                    accuracy.setdefault(v, []).append([g["accuracy"] for g in rows])
                    sizes = [g["n"] for g in rows]
            if not accuracy:
                result.notes.append(f"{setting}: no run shares (sample, seed) with a baseline run: no distance groups.")
                continue
            if normalised_only:
                result.notes.append(f"{setting}: some baseline runs saved only L2-normalised embeddings (no "
                                    "embeddings_raw: written by an older version); their distances are on the unit "
                                    "sphere.")
            labels = [f"{g}" + (" (near)" if g == 1 else " (far)" if g == groups else "") for g in range(1, groups + 1)]
            result.settings.append(SettingGroups(setting, base, labels, sizes,
                                                 {v: [float(x) for x in np.mean(xs, axis=0)] for v, xs in accuracy.items()}))
        return result

    def figures(self, result: DistanceGroups, out: FigureWriter) -> list[Figure]:
        figures = []
        for sg in result.settings:
            series = {v: [{"group": label, "accuracy": acc} for label, acc in zip(sg.labels, accs)]
                      for v, accs in sg.accuracy.items()}
            fig = out.draw(f"distance_groups_{sg.setting}",
                           f"{sg.setting}: test accuracy per distance-to-mean group; mean embedding and Euclidean "
                           f"distances from the baseline {sg.baseline}'s un-normalised embeddings (Sosnowski et al., "
                           "Fig. 2), averaged over runs paired by (sample, seed).",
                           lambda path, sg=sg, series=series: plot_distance_groups(
                               series, path, title=f"Accuracy by distance to the mean ({sg.setting}; distances from "
                                                   f"{sg.baseline})"),
                           group=f"Setting {sg.setting}")
            if fig:
                figures.append(fig)
        return figures

    def tables(self, result: DistanceGroups) -> list[Table]:
        return [Table(["group", "n", *(f"{v} acc" for v in sg.accuracy)],
                      [[label, str(sg.sizes[i]) if sg.sizes else "?",
                        *(f"{100 * accs[i]:.1f}" for accs in sg.accuracy.values())] for i, label in enumerate(sg.labels)],
                      caption=f"Test accuracy (%) in each distance group (n: test items per run), nearest to the "
                              f"mean of `{sg.baseline}`'s embeddings first.",
                      group=f"Setting {sg.setting}")
                for sg in result.settings]
