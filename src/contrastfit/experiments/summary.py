"""The one summary of an experiment: per (setting, variant) mean ± std of every metric, top-k by
validation, p-values against the baseline, and the tables made from it.

The report (``report.md``), the runner's printed table, ``summary.json`` / ``summary.md`` and
``contrastfit compare`` all come from :func:`summary_table`.

Conventions: std is the sample std (``ddof = 1``, :func:`~contrastfit.evaluation.statistics.summarize`);
runs are paired by ``(sample, seed)`` for the Wilcoxon test; the top-k runs and the best grid point
are chosen by the *validation* score (accuracy; Pearson's r for regression; micro-F1 for label sets), never by test (Gunel
et al.'s "top 3 of 10"); fractions (accuracy, F1, MCC, r) are shown in percent with one decimal,
MSE and losses as raw numbers (4 significant digits). Statistics come from
:mod:`contrastfit.evaluation.statistics`; nothing here re-implements a test.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..evaluation.metrics import HEADLINE, REGRESSION_HEADLINE, headline_names
from ..evaluation.statistics import best_by_validation, compare_to_baseline, summarize
from ..evaluation.statistics import top_k as select_top_k
from .page import Section, Table, Text
from .records import ExperimentRun, as_records, group_records, natural_key, ordered_unique, settings_of, variants_of

__all__ = [
    "DEFAULT_METRICS", "REGRESSION_METRICS", "SIGNIFICANCE", "best_variants", "format_p", "format_stat",
    "main_table", "ranking_metric", "runs_table", "summary_sections", "summary_table", "value_stat",
]

#: Metrics reported when the experiment does not name any: the headline metrics of the runs' kind
#: (:func:`contrastfit.evaluation.metrics.headline_names`): a class (these), a regression target (STS-B
#: style: ``REGRESSION_METRICS``) or label sets (micro-F1, macro-F1, subset accuracy).
DEFAULT_METRICS = HEADLINE
REGRESSION_METRICS = REGRESSION_HEADLINE
#: Metrics shown as raw numbers; all others are fractions shown in percent.
NOT_PERCENT = frozenset({"mse", "loss", "eval_loss"})
SIGNIFICANCE = 0.05


def is_percent(metric: str) -> bool:
    return metric not in NOT_PERCENT


def ranking_metric(records: Sequence[ExperimentRun]) -> str:
    """The validation metric that ranks runs: the first headline metric of their kind (accuracy;
    Pearson's r for regression; micro-F1 for label sets)."""
    if not records:
        return "accuracy"
    if records[0].task == "regression":
        return "pearson"
    return headline_names({m for values in records[0].metrics.values() for m in values})[0]


def value_stat(values: Iterable[float]) -> dict[str, Any]:
    """``{"mean", "std", "n", "values"}`` of ``values`` (:func:`~contrastfit.evaluation.statistics.summarize`:
    the sample std, 0 for one value): what a summary cell holds and :func:`format_stat` prints."""
    values = [float(v) for v in values]
    return {**summarize(values), "values": values}


def _scores(runs: Sequence[ExperimentRun], split: str, metric: str) -> list[float]:
    return [v for r in runs if (v := r.score(split, metric)) is not None]


def _default_baseline(records: Sequence[ExperimentRun], variants: Sequence[str]) -> str | None:
    if "ce" in {r.method for r in records} or "ce" in variants:
        return "ce"
    return variants[0] if variants else None


def _ranked(runs: Sequence[ExperimentRun], split: str, metric: str) -> list[dict[str, Any]]:
    """What the selection functions of :mod:`~contrastfit.evaluation.statistics` read: the score,
    the seed and the run id (their tie-breakers) of each run that has the score."""
    return [{"score": s, "seed": r.seed, "run_id": r.run_id, "record": r}
            for r in runs if (s := r.score(split, metric)) is not None]


def _resolve_baseline(baseline: str | None, setting: str, variants: Sequence[str],
                      groups: Mapping[tuple[str, str], Sequence[ExperimentRun]], selection: str) -> str | None:
    """The baseline *variant* of a setting: the variant labelled ``baseline``, else the single variant of
    the method ``baseline``, else (a grid) that method's variant with the best mean validation score."""
    present = [v for v in variants if (setting, v) in groups]
    if baseline is None:
        return None
    if baseline in present:
        return baseline
    of_method = {v: groups[(setting, v)] for v in present if groups[(setting, v)][0].method == baseline}
    if len(of_method) == 1:
        return next(iter(of_method))
    scored = {v: _ranked(runs, "validation", selection) for v, runs in of_method.items()}
    scored = {v: rs for v, rs in scored.items() if rs}
    if scored:
        return str(best_by_validation(scored, key="score"))
    return next(iter(of_method), None)


def _p_values(method_runs: Sequence[ExperimentRun], base_runs: Sequence[ExperimentRun], split: str,
              metric: str) -> dict[str, Any]:
    mx = [(r.key, v) for r in method_runs if (v := r.score(split, metric)) is not None]
    bx = [(r.key, v) for r in base_runs if (v := r.score(split, metric)) is not None]
    m_keys, m_scores = [k for k, _ in mx], [v for _, v in mx]
    b_keys, b_scores = [k for k, _ in bx], [v for _, v in bx]
    unique = len(set(m_keys)) == len(m_keys) and len(set(b_keys)) == len(b_keys)
    return compare_to_baseline(m_scores, b_scores, paired_keys=(m_keys, b_keys) if unique else None)


def summary_table(runs: Sequence[ExperimentRun | Mapping[str, Any]], metrics: Sequence[str], split: str = "test",
                  top_k: int | None = None, baseline: str | None = None) -> list[dict[str, Any]]:
    """One row per (setting, variant), settings in natural order, the baseline's variants first.

    ``runs`` are :class:`~contrastfit.experiments.records.ExperimentRun` objects or result dicts. Each row::

        {"setting", "variant", "method", "model", "hparams", "params", "n", "run_ids", "keys" [(sample, seed)],
         "metrics": {metric: {"mean", "std", "n", "values"}},          # summarize(): std with ddof=1
         "selection_metric": "accuracy", "validation": {"mean", "std", "n", "values"},
         "train_s": {"mean", "std", "n", "values"},                     # training seconds per run
         "top_k": None | {"k", "run_ids", "metrics": {metric: {"mean", "std", "n", "values"}}},
         "baseline": the setting's baseline variant (or None), "is_baseline": bool,
         "p_values": {metric: compare_to_baseline(...)}}                  # {} for the baseline row

    ``top_k`` keeps the ``k`` runs with the best *validation* score (Gunel et al.'s "top 3 of 10").
    ``baseline`` is a variant label or a method name (default: ``"ce"`` when present, else the first
    variant); with a grid, the method's variant with the best validation score is the baseline. Runs
    are paired for the Wilcoxon test by ``(sample, seed)``. ``model`` is the encoder's label when the
    experiment compares several (the variant is then ``MODEL/VARIANT``), else None.
    """
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
        raise ConfigError(f"top_k must be a positive integer or null, got {top_k!r}")
    records = as_records(runs)
    metrics = list(metrics)
    selection = ranking_metric(records)
    if baseline is None:
        baseline = _default_baseline(records, variants_of(records))
    variants = variants_of(records, baseline)
    groups = group_records(records)
    rows: list[dict[str, Any]] = []
    for setting in settings_of(records):
        base = _resolve_baseline(baseline, setting, variants, groups, selection)
        for variant in variants:
            group = groups.get((setting, variant))
            if not group:
                continue
            first = group[0]
            row: dict[str, Any] = {
                "setting": setting, "variant": variant, "method": first.method, "model": first.model_label,
                "hparams": dict(first.hparams),
                "params": dict(first.params), "n": len(group), "run_ids": [r.run_id for r in group],
                "keys": [r.key for r in group],
                "metrics": {m: value_stat(_scores(group, split, m)) for m in metrics},
                "selection_metric": selection, "validation": value_stat(_scores(group, "validation", selection)),
                "train_s": value_stat(r.train_s for r in group), "top_k": None,
                "baseline": base, "is_baseline": variant == base, "p_values": {},
            }
            if top_k is not None:
                scored = _ranked(group, "validation", selection)
                if scored:
                    best = [s["record"] for s in select_top_k(scored, top_k, key="score")]
                    row["top_k"] = {"k": top_k, "run_ids": [r.run_id for r in best],
                                    "metrics": {m: value_stat(_scores(best, split, m)) for m in metrics}}
            if base is not None and variant != base:
                row["p_values"] = {m: _p_values(group, groups[(setting, base)], split, m) for m in metrics}
            rows.append(row)
    return rows


def best_variants(runs: Sequence[ExperimentRun | Mapping[str, Any]], key: str | None = None,
                  top_k: int | None = None) -> list[dict[str, Any]]:
    """For every (setting, method) with several grid points: the variant with the best mean
    validation score (:func:`~contrastfit.evaluation.statistics.best_by_validation`; test scores
    are never read for the choice); with ``top_k``, the mean of each variant's ``top_k`` best runs
    by validation (Gunel et al.), as the experiment's ``top_k`` asks.

    ``key`` is the validation score as ``"metrics.validation.METRIC"`` (default: accuracy, Pearson's
    r for regression). Rows: ``{"setting", "method", "variant", "hparams", "validation_mean",
    "candidates": {variant: mean validation score}, "n_variants"}``. Methods without a grid, and
    methods none of whose runs have a validation score, are left out.
    """
    records = as_records(runs)
    if key is None:
        split, metric = "validation", ranking_metric(records)
    else:
        parts = key.split(".")
        if len(parts) != 3 or parts[0] != "metrics":
            raise ConfigError(f"best_variants: key must be 'metrics.SPLIT.METRIC', got {key!r}")
        split, metric = parts[1], parts[2]
    by_method: dict[tuple[str, str], dict[str, list[ExperimentRun]]] = {}
    for (setting, variant), group in group_records(records).items():
        by_method.setdefault((setting, group[0].method), {})[variant] = group
    out = []
    for setting in settings_of(records):
        for (s, method), candidates in by_method.items():
            if s != setting or len(candidates) < 2:
                continue
            scored = {v: ranked for v, group in candidates.items() if (ranked := _ranked(group, split, metric))}
            if not scored:
                continue
            best = str(best_by_validation(scored, key="score", k=top_k))
            means = {v: float(np.mean(sorted((x["score"] for x in rs), reverse=True)[:top_k]))
                     for v, rs in scored.items()}
            out.append({"setting": setting, "method": method, "variant": best,
                        "hparams": dict(candidates[best][0].hparams),
                        "validation_mean": means[best], "candidates": means, "n_variants": len(candidates)})
    return out


# --------------------------------------------------------------------------------------------------
# Cells
# --------------------------------------------------------------------------------------------------

def format_stat(stat: Mapping[str, Any] | None, metric: str) -> str:
    """``"mean ± std"``: in percent with one decimal, raw (4 significant digits) for e.g. MSE; ``–`` if
    empty; the value alone for one run (the sample std of one value is undefined, not 0)."""
    if not stat or not stat.get("n") or stat.get("mean") is None or math.isnan(float(stat["mean"])):
        return "–"
    mean, std = float(stat["mean"]), float(stat.get("std") or 0.0)
    if int(stat["n"]) == 1:
        return format_value(mean, metric)
    if math.isnan(std):
        std = 0.0
    if is_percent(metric):
        return f"{100 * mean:.1f} ± {100 * std:.1f}"
    return f"{mean:.4g} ± {std:.2g}"


def format_value(value: float | None, metric: str) -> str:
    """One number: in percent with one decimal, or raw with 4 significant digits; ``–`` if absent."""
    if value is None or math.isnan(float(value)):
        return "–"
    return f"{100 * float(value):.1f}" if is_percent(metric) else f"{float(value):.4g}"


def format_p(p: float | None) -> str:
    """A p-value with 3 decimals (``<0.001`` below), starred when below 0.05; ``–`` when absent."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "–"
    star = "*" if p < SIGNIFICANCE else ""
    return ("<0.001" if p < 0.001 else f"{p:.3f}") + star


def _p_cell(result: Mapping[str, Any] | None) -> str:
    if not result:
        return "–"
    return (f"W {format_p(result.get('wilcoxon_p'))} · MW {format_p(result.get('mannwhitney_p'))} · "
            f"t {format_p(result.get('welch_p'))}")


# --------------------------------------------------------------------------------------------------
# Tables made from the summary rows
# --------------------------------------------------------------------------------------------------

def main_table(rows: Sequence[Mapping[str, Any]], metric: str, use_top_k: bool = False) -> Table:
    """The papers' layout: rows = variants, columns = settings, cells ``mean ± std`` of ``metric``
    (of the top-k runs by validation with ``use_top_k``); ``(n=...)`` when cells differ in runs."""
    settings = sorted(ordered_unique(r["setting"] for r in rows), key=natural_key)
    variants = ordered_unique(r["variant"] for r in rows)
    cell = {(r["variant"], r["setting"]): r for r in rows}

    def stat_of(row):
        if use_top_k:
            return (row.get("top_k") or {}).get("metrics", {}).get(metric)
        return row["metrics"].get(metric)

    ns = {int(stat_of(r)["n"]) for r in rows if stat_of(r)}
    body = []
    for v in variants:
        line = [v]
        for s in settings:
            row = cell.get((v, s))
            stat = stat_of(row) if row else None
            text = format_stat(stat, metric)
            if len(ns) > 1 and stat and stat.get("n"):
                text += f" (n={stat['n']})"
            line.append(text)
        body.append(line)
    unit = "%" if is_percent(metric) else "raw"
    if use_top_k:
        k = next((r["top_k"]["k"] for r in rows if r.get("top_k")), "?")
        total = sorted({r["n"] for r in rows})
        caption = (f"Test {metric} ({unit}), mean ± std of the top {k} of "
                   f"{'/'.join(str(t) for t in total)} runs by validation {rows[0]['selection_metric']}.")
    else:
        caption = f"Test {metric} ({unit}), mean ± std (sample std) over " + (
            f"{ns.pop()} runs per cell." if len(ns) == 1 else "the runs of each cell (n given).")
    return Table(["method", *settings], body, caption=caption)


def _detail_sections(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> list[Section]:
    """One sub-section per setting: every metric, top-k, and the p-values against the baseline."""
    out = []
    has_top_k = any(r.get("top_k") for r in rows)
    for setting in sorted(ordered_unique(r["setting"] for r in rows), key=natural_key):
        srows = [r for r in rows if r["setting"] == setting]
        selection = srows[0]["selection_metric"]
        header = ["variant", "n", f"val {selection}", *metrics]
        if has_top_k:
            header += [f"top-{srows[0]['top_k']['k'] if srows[0].get('top_k') else 'k'} {m}" for m in metrics]
        header += [f"p {m}" for m in metrics]
        body = []
        for r in srows:
            line = [r["variant"], str(r["n"]), format_stat(r.get("validation"), selection)]
            line += [format_stat(r["metrics"].get(m), m) for m in metrics]
            if has_top_k:
                line += [format_stat((r.get("top_k") or {}).get("metrics", {}).get(m), m) for m in metrics]
            line += ["baseline"] * len(metrics) if r["is_baseline"] else [_p_cell(r["p_values"].get(m)) for m in metrics]
            body.append(line)
        base = srows[0].get("baseline")
        caption = (f"Test metrics, mean ± std; p-values vs the baseline `{base}`: W = Wilcoxon signed-rank (paired "
                   "by sample and seed), MW = Mann-Whitney U, t = Welch's t-test; "
                   f"* p < {SIGNIFICANCE}.") if base else "No baseline variant in this setting: no p-values."
        out.append(Section(f"Setting {setting}", [Table(header, body, caption=caption)], level=3))
    return out


def summary_sections(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> list[Section]:
    """The summary part of a report: the main table of the headline metric ``metrics[0]`` (and of
    its top-k runs when the rows have them), then every metric per setting with p-values."""
    metrics = list(metrics)
    if not rows:
        return [Section("Main table", [Text("No runs.")])]
    headline = metrics[0]
    sections = [Section(f"Main table: test {headline}", [main_table(rows, headline)])]
    if any(r.get("top_k") for r in rows):
        sections.append(Section(f"Main table: test {headline}, top-k by validation",
                                [main_table(rows, headline, use_top_k=True)]))
    sections.append(Section("All metrics per setting", list(_detail_sections(rows, metrics))))
    return sections


def runs_table(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> Table:
    """One line per (setting, variant): runs, test metrics, the validation selection metric and the
    mean training seconds -- what the runner prints and writes to ``summary.md``."""
    selection = rows[0]["selection_metric"] if rows else "accuracy"
    header = ["setting", "method", "runs", *(f"test {m}" for m in metrics), f"val {selection}", "train s"]
    body = [[r["setting"], r["variant"], str(r["n"]), *(format_stat(r["metrics"].get(m), m) for m in metrics),
             format_stat(r.get("validation"), selection), f"{r['train_s']['mean']:.0f}"] for r in rows]
    raw = [m for m in metrics if not is_percent(m)]
    units = f"{', '.join(raw)} raw, the others in %" if raw else "in %"
    return Table(header, body, caption=f"Mean ± std over runs ({units}); train s: mean training seconds per run.")
