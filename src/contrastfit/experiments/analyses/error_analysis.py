"""Error analysis by word groups and by features found automatically (Sosnowski et al., Table 7).

Word groups (:func:`~contrastfit.evaluation.error_analysis.word_groups`): "but", "not", "n't", ...,
then frequent words; per group, every variant's test accuracy on the texts containing the word and,
against the baseline on the same items, the exact McNemar test (b = items the variant gets right
and the baseline wrong, c = the reverse; :func:`~contrastfit.evaluation.statistics.mcnemar_exact`).
The items of the runs that every variant has for the same (sample, seed) are pooled and treated as
independent pairs.

Features found as GEval does (:func:`~contrastfit.evaluation.error_analysis.associated_features`):
every word and bigram in at least ``min_feature_count`` test texts; the per-item score (the fraction
of those runs that got the item right) of the texts with it against those without, two-sided
Mann-Whitney U, Benjamini-Hochberg q-values; the ``feature_rows`` smallest p per variant are shown."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import PositiveInt

from ...evaluation.error_analysis import associated_features, error_analysis, word_groups
from ...evaluation.statistics import mcnemar_exact
from ...schema import Schema
from ..page import Table
from ..records import ANALYSIS_FILE
from ..summary import SIGNIFICANCE, format_p
from .base import Analysis, AnalysisResult, register_analysis


@dataclass
class SettingErrors:
    setting: str
    baseline: str
    n_runs: int                                 # runs per variant pooled
    n_texts: int
    variants: list[str]
    groups: list[dict[str, Any]]                # error_analysis() rows, then the "(all)" row
    features: dict[str, list[dict[str, Any]]]   # variant -> associated_features() rows
    feature_rows: int
    min_count: int                              # texts a feature must be in to be tested


@dataclass
class ErrorAnalysis(AnalysisResult):
    settings: list[SettingErrors] = field(default_factory=list)


def _mcnemar_cell(result: dict[str, Any] | None) -> str:
    return "–" if not result else f"{format_p(result['p'])} ({result['b']}/{result['c']})"


@register_analysis
class ErrorAnalysisByWords(Analysis):
    name = "error_analysis"
    title = "Error analysis by word groups"
    order = 70
    needs = ("classification", ANALYSIS_FILE)

    class Options(Schema):
        #: at most this many word groups
        max_word_groups: PositiveInt = 10
        #: features shown per variant
        feature_rows: PositiveInt = 5
        #: a word or bigram is tested when at least this many test texts have it
        min_feature_count: PositiveInt = 5

    def compute(self, runs, options: Options) -> ErrorAnalysis:
        result = ErrorAnalysis()
        for setting in runs.settings:
            base = runs.baselines.get(setting)
            loaded = runs.paired_arrays(setting, with_texts=True)
            if base is None or base not in loaded:
                result.notes.append(f"{setting}: no {ANALYSIS_FILE} with texts for the baseline's runs: "
                                    "no error analysis.")
                continue
            if not runs.same_test_set([ra for per in loaded.values() for ra in per.values()]):
                result.notes.append(f"{setting}: the runs do not share one test set (test_hash differs): "
                                    "no error analysis.")
                continue
            common = sorted(set.intersection(*(set(per) for per in loaded.values())), key=lambda k: (k[0], str(k[1])))
            if not common:
                result.notes.append(f"{setting}: no (sample, seed) shared by every variant: no error analysis.")
                continue
            texts = [str(t) for t in next(iter(loaded[base].values()))[1].texts]
            n = len(texts)
            words = word_groups(texts, min_count=max(2, min(20, n // 20)), max_groups=options.max_word_groups)
            if not words:
                result.notes.append(f"{setting}: no word occurs in enough test texts for a word group.")
                continue
            correct = {v: np.concatenate([per[k][1].correct for k in common]) for v, per in loaded.items()}
            rows = error_analysis(texts * len(common), correct, base, words)
            others = [v for v in correct if v != base]
            rows.append({"group": "(all)", "n": n * len(common),
                         "accuracy": {v: float(c.mean()) for v, c in correct.items()},
                         "mcnemar": {o: mcnemar_exact(correct[o], correct[base]) for o in others}})
            scores = {v: np.mean([per[k][1].correct for k in common], axis=0) for v, per in loaded.items()}
            features = {v: associated_features(texts, y, min_count=options.min_feature_count) for v, y in scores.items()}
            if not any(f["p"] is not None for rows_v in features.values() for f in rows_v):
                result.notes.append(f"{setting}: no feature in at least {options.min_feature_count} test texts changes "
                                    "any variant's per-item scores.")
            result.settings.append(SettingErrors(setting, base, len(common), n, list(correct), rows, features,
                                                 options.feature_rows, options.min_feature_count))
        return result

    def tables(self, result: ErrorAnalysis) -> list[Table]:
        tables = []
        for se in result.settings:
            others = [v for v in se.variants if v != se.baseline]
            body = [[row["group"], str(row["n"] // se.n_runs),
                     *("–" if row["accuracy"][v] is None else f"{100 * row['accuracy'][v]:.1f}" for v in se.variants),
                     *(_mcnemar_cell(row["mcnemar"].get(o)) for o in others)] for row in se.groups]
            group = f"Setting {se.setting}"
            tables.append(Table(
                ["word", "n", *(f"{v} acc" for v in se.variants), *(f"p {v}" for v in others)], body, group=group,
                caption=f"Test accuracy (%) on the test texts containing each word, pooled over the {se.n_runs} run(s) "
                        f"per variant that share (sample, seed); n is per run. p (b/c): exact McNemar test against "
                        f"the baseline `{se.baseline}` on the same items (paired; b = items the variant gets right and "
                        f"`{se.baseline}` wrong, c = the reverse; binomial test of b out of b + c; pooled predictions "
                        f"of several runs treated as independent pairs); * p < {SIGNIFICANCE}."))
            fbody = [[v, f["feature"], str(f["n_with"]), f"{100 * f['mean_with']:.1f}", f"{100 * f['mean_without']:.1f}",
                      format_p(f["p"]), format_p(f["q"])]
                     for v, rows in se.features.items() for f in [f for f in rows if f["p"] is not None][:se.feature_rows]]
            if fbody:
                tested = max(len(rows) for rows in se.features.values())
                tables.append(Table(
                    ["variant", "feature", "n with", "acc with", "acc without", "p", "q"], fbody, group=group,
                    caption=f"Features found automatically (GEval-style, Sosnowski et al. Table 7): every word and "
                            f"bigram in at least {se.min_count} of the {se.n_texts} test texts; per-item score = the "
                            f"fraction of the {se.n_runs} run(s) that got the item right; p: two-sided Mann-Whitney U "
                            f"of the scores of the items with the feature against those without; q: "
                            f"Benjamini-Hochberg over the (up to {tested}) features tested per variant. The "
                            f"{se.feature_rows} smallest p per variant."))
        return tables
