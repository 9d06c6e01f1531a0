"""Reports of an experiment output folder: ``report.md`` and a self-contained ``report.html``.

An experiment folder, as the runner writes it::

    FOLDER/experiment.json                  the raw experiment config (name, data, model, methods,
                                            protocol, seeds; optional baseline, top_k, metrics, analyses)
    FOLDER/results.sqlite                   the ResultsStore; one result dict per finished run
    FOLDER/runs/<run_id>/analysis.npz       optional per run: embeddings (n, d; L2-normalised),
                                            embeddings_raw (n, d; un-normalised, for the distance
                                            groups), labels (n,), predictions (n,), texts (n,),
                                            label_embeddings (C, d)

A run's result dict carries ``method``, ``hparams``, ``seed``, ``metrics`` (``validation`` /
``test``), ``timings``, ``log_history``, ``data`` (``label_names``, ``test_hash``) and ``tags``
(``variant`` -- the method label with its grid point --, ``setting``, ``sample``, ``params``,
``run_id``).

Public functions
----------------
* :func:`load_runs` -- the finished runs of a folder.
* :func:`summary_table` -- one row per (setting, variant): mean / std per metric, top-k by
  validation, p-values against the baseline variant of the same setting.
* :func:`best_variants` -- the best grid point per (setting, method) by mean *validation* score.
* :func:`format_markdown_table` -- the papers' layout (methods x settings) and a detailed table per
  setting.
* :func:`write_report` -- figures, ``report.md`` and ``report.html``.
* :func:`main_table_text` -- the main table for the terminal.
* :func:`compare` -- two folders side by side, with Welch / Mann-Whitney p-values between them.

Statistics come from :mod:`contrastfit.evaluation.statistics`, figures from
:mod:`contrastfit.evaluation.plots`; nothing here re-implements a test or a plot.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import write_text_atomic
from ..errors import ConfigError, ContrastfitError
from ..evaluation.statistics import best_by_validation, compare_to_baseline, get_score, summarize
from ..evaluation.statistics import top_k as select_top_k
from .config import ANALYSES  # the analyses write_report knows; by default every one the data allow
from .store import STORE_NAME, ResultsStore

__all__ = [
    "ANALYSES", "DEFAULT_METRICS", "best_variants", "compare", "format_markdown_table", "load_runs",
    "main_table_text", "summary_table", "write_report",
]

#: Metrics reported when the experiment does not name any (classification).
DEFAULT_METRICS = ("accuracy", "f1", "macro_f1", "mcc")
#: Metrics reported for a regression task (STS-B style).
REGRESSION_METRICS = ("pearson", "spearman", "mse")

EXPERIMENT_NAME = "experiment.json"
ANALYSIS_NAME = "analysis.npz"
ATTRIBUTIONS_NAME = "attributions.json"
RUNS_DIR = "runs"
FIGURES_DIR = "figures"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"

#: Metrics shown as raw numbers; all others are fractions shown in percent.
NOT_PERCENT = frozenset({"mse", "loss", "eval_loss"})
#: At most this many points go into one t-SNE projection (a fixed random subset beyond it).
TSNE_MAX_POINTS = 2000
#: Number of distance-to-mean groups (Sosnowski et al., Fig. 2).
DISTANCE_GROUPS = 5
#: At most this many word groups in the error analysis.
MAX_WORD_GROUPS = 10
SIGNIFICANCE = 0.05


# --------------------------------------------------------------------------------------------------
# Runs and their tags
# --------------------------------------------------------------------------------------------------

def load_runs(folder: str | os.PathLike) -> list[dict[str, Any]]:
    """The result dicts of every finished run in ``FOLDER/results.sqlite``, in the order they finished.

    Raises :class:`~contrastfit.errors.ContrastfitError` when the folder, its store, or any finished
    run is missing.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ContrastfitError(f"experiment folder {folder}: no such folder")
    path = folder / STORE_NAME
    if not path.is_file():
        raise ContrastfitError(f"experiment folder {folder}: no {STORE_NAME} (has the experiment been run?)")
    try:
        with ResultsStore(path) as store:
            runs = [r for r in store.done() if isinstance(r, dict)]
    except Exception as exc:  # sqlite3.DatabaseError and friends: not a readable store
        raise ContrastfitError(f"experiment folder {folder}: cannot read {STORE_NAME} ({exc})") from None
    if not runs:
        raise ContrastfitError(f"experiment folder {folder}: no finished runs in {STORE_NAME}")
    return runs


def load_experiment(folder: str | os.PathLike) -> dict[str, Any]:
    """The raw config in ``FOLDER/experiment.json``; ``{}`` when the file is absent."""
    path = Path(folder) / EXPERIMENT_NAME
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a JSON object at the top level")
    return raw


def _tags(run: Mapping[str, Any]) -> Mapping[str, Any]:
    tags = run.get("tags")
    return tags if isinstance(tags, Mapping) else {}


def run_setting(run: Mapping[str, Any]) -> str:
    """The setting label of a run (``tags.setting``; ``"full"`` when untagged)."""
    return str(_tags(run).get("setting") or "full")


def run_variant(run: Mapping[str, Any]) -> str:
    """The variant label of a run (``tags.variant``, e.g. ``"ce-scl[temperature=0.1]"``; the method otherwise)."""
    return str(_tags(run).get("variant") or run.get("method") or "?")


def run_method(run: Mapping[str, Any]) -> str:
    return str(run.get("method") or run_variant(run).split("[", 1)[0])


def run_key(run: Mapping[str, Any]) -> tuple[int, Any]:
    """The pairing key of a run: ``(sample, seed)``."""
    sample = _tags(run).get("sample", 0)
    return (int(sample) if sample is not None else 0, run.get("seed"))


def run_id(run: Mapping[str, Any]) -> str | None:
    rid = _tags(run).get("run_id") or run.get("run_id")
    return None if rid is None else str(rid)


def run_params(run: Mapping[str, Any]) -> dict[str, Any]:
    params = _tags(run).get("params")
    return dict(params) if isinstance(params, Mapping) else {}


def _natural_key(text: str) -> list[tuple[int, Any]]:
    """Sort key that orders ``shots=4`` before ``shots=16`` and ``rho=10`` before ``rho=100``."""
    parts = re.split(r"(\d+(?:\.\d+)?)", str(text))
    return [(0, float(p)) if re.fullmatch(r"\d+(?:\.\d+)?", p) else (1, p) for p in parts if p]


def _sort_key(run: Mapping[str, Any]) -> tuple:
    sample, seed = run_key(run)
    return (sample, seed is None, str(type(seed).__name__), seed if seed is not None else 0, run_id(run) or "")


def _ordered_unique(items) -> list:
    return list(dict.fromkeys(items))


def _settings(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    return sorted(_ordered_unique(run_setting(r) for r in runs), key=_natural_key)


def _variants(runs: Sequence[Mapping[str, Any]], baseline: str | None = None) -> list[str]:
    """Variants in order of first appearance, the baseline's (label or method) first."""
    variants = _ordered_unique(run_variant(r) for r in runs)
    if baseline is None:
        return variants
    method_of = {run_variant(r): run_method(r) for r in runs}
    first = [v for v in variants if v == baseline or method_of.get(v) == baseline]
    return first + [v for v in variants if v not in first]


def _groups(runs: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    out: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in runs:
        out.setdefault((run_setting(r), run_variant(r)), []).append(r)
    return out


def _is_regression(runs: Sequence[Mapping[str, Any]]) -> bool:
    for r in runs:
        test = (r.get("metrics") or {}).get("test") or {}
        if "pearson" in test or "spearman" in test:
            return True
        if "accuracy" in test:
            return False
    return False


def _selection_metric(runs: Sequence[Mapping[str, Any]]) -> str:
    """The validation metric that ranks runs: accuracy, or Pearson's r for regression."""
    return "pearson" if _is_regression(runs) else "accuracy"


def _score(run: Mapping[str, Any], split: str, metric: str) -> float | None:
    try:
        value = get_score(run, f"metrics.{split}.{metric}")
    except (KeyError, TypeError, ValueError):
        return None
    return value


def _default_baseline(runs: Sequence[Mapping[str, Any]], variants: Sequence[str]) -> str | None:
    methods = {run_method(r) for r in runs}
    if "ce" in methods or "ce" in variants:
        return "ce"
    return variants[0] if variants else None


def _resolve_baseline(baseline: str | None, setting: str, variants: Sequence[str],
                      groups: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]], selection: str) -> str | None:
    """The baseline *variant* of a setting: the variant labelled ``baseline``, else the single variant of
    the method ``baseline``, else (a grid) that method's variant with the best mean validation score."""
    present = [v for v in variants if (setting, v) in groups]
    if baseline is None:
        return None
    if baseline in present:
        return baseline
    of_method = {v: groups[(setting, v)] for v in present if run_method(groups[(setting, v)][0]) == baseline}
    if len(of_method) == 1:
        return next(iter(of_method))
    if of_method:
        try:
            return str(best_by_validation(of_method, key=f"metrics.validation.{selection}"))
        except (KeyError, ValueError):
            return next(iter(of_method))
    return None


# --------------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------------

def _stat(values: Sequence[float]) -> dict[str, Any]:
    out = summarize(values)
    out["values"] = [float(v) for v in values]
    return out


def summary_table(runs: Sequence[Mapping[str, Any]], metrics: Sequence[str], split: str = "test",
                  top_k: int | None = None, baseline: str | None = None) -> list[dict[str, Any]]:
    """One row per (setting, variant), settings in natural order, the baseline's variants first.

    Each row::

        {"setting", "variant", "method", "hparams", "params", "n", "run_ids", "keys" [(sample, seed)],
         "metrics": {metric: {"mean", "std", "n", "values"}},          # summarize(): std with ddof=1
         "selection_metric": "accuracy", "validation": {"mean", "std", "n", "values"},
         "top_k": None | {"k", "run_ids", "metrics": {metric: {"mean", "std", "n", "values"}}},
         "baseline": the setting's baseline variant (or None), "is_baseline": bool,
         "p_values": {metric: compare_to_baseline(...)}}                  # {} for the baseline row

    ``top_k`` keeps the ``k`` runs with the best *validation* score (Gunel et al.'s "top 3 of 10").
    ``baseline`` is a variant label or a method name (default: ``"ce"`` when present, else the first
    variant); with a grid, the method's variant with the best validation score is the baseline. Runs
    are paired for the Wilcoxon test by ``(sample, seed)``.
    """
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
        raise ConfigError(f"top_k must be a positive integer or null, got {top_k!r}")
    metrics = list(metrics)
    selection = _selection_metric(runs)
    variants = _variants(runs)
    if baseline is None:
        baseline = _default_baseline(runs, variants)
    variants = _variants(runs, baseline)
    groups = _groups(runs)
    rows: list[dict[str, Any]] = []
    for setting in _settings(runs):
        base = _resolve_baseline(baseline, setting, variants, groups, selection)
        for variant in variants:
            group = groups.get((setting, variant))
            if not group:
                continue
            group = sorted(group, key=_sort_key)
            row: dict[str, Any] = {
                "setting": setting, "variant": variant, "method": run_method(group[0]),
                "hparams": dict(group[0].get("hparams") or {}), "params": run_params(group[0]),
                "n": len(group), "run_ids": [run_id(r) for r in group], "keys": [run_key(r) for r in group],
                "metrics": {}, "selection_metric": selection, "top_k": None,
                "baseline": base, "is_baseline": variant == base, "p_values": {},
            }
            for metric in metrics:
                row["metrics"][metric] = _stat([v for r in group if (v := _score(r, split, metric)) is not None])
            row["validation"] = _stat([v for r in group if (v := _score(r, "validation", selection)) is not None])
            if top_k is not None:
                scored = [r for r in group if _score(r, "validation", selection) is not None]
                if scored:
                    best = select_top_k(scored, top_k, key=f"metrics.validation.{selection}")
                    row["top_k"] = {
                        "k": top_k, "run_ids": [run_id(r) for r in best],
                        "metrics": {m: _stat([v for r in best if (v := _score(r, split, m)) is not None])
                                    for m in metrics},
                    }
            if base is not None and variant != base:
                base_runs = sorted(groups[(setting, base)], key=_sort_key)
                for metric in metrics:
                    row["p_values"][metric] = _p_values(group, base_runs, split, metric)
            rows.append(row)
    return rows


def _p_values(method_runs: Sequence[Mapping[str, Any]], base_runs: Sequence[Mapping[str, Any]],
              split: str, metric: str) -> dict[str, Any]:
    mx = [(run_key(r), v) for r in method_runs if (v := _score(r, split, metric)) is not None]
    bx = [(run_key(r), v) for r in base_runs if (v := _score(r, split, metric)) is not None]
    m_keys, m_scores = [k for k, _ in mx], [v for _, v in mx]
    b_keys, b_scores = [k for k, _ in bx], [v for _, v in bx]
    unique = len(set(m_keys)) == len(m_keys) and len(set(b_keys)) == len(b_keys)
    return compare_to_baseline(m_scores, b_scores, paired_keys=(m_keys, b_keys) if unique else None)


def best_variants(runs: Sequence[Mapping[str, Any]], key: str | None = None, top_k: int | None = None) -> list[dict[str, Any]]:
    """For every (setting, method) with several grid points: the variant with the best mean
    validation score (:func:`~contrastfit.evaluation.statistics.best_by_validation`; test scores
    are never read for the choice); with ``top_k``, the mean of each variant's ``top_k`` best runs
    by validation (Gunel et al.), as the experiment's ``top_k`` asks.

    ``key`` is the validation score (default ``metrics.validation.accuracy``, Pearson's r for
    regression). Rows: ``{"setting", "method", "variant", "hparams", "validation_mean",
    "candidates": {variant: mean validation score}, "n_variants"}``. Methods without a grid, and
    methods none of whose runs have a validation score, are left out.
    """
    key = key or f"metrics.validation.{_selection_metric(runs)}"
    groups = _groups(runs)
    by_method: dict[tuple[str, str], dict[str, list[Mapping[str, Any]]]] = {}
    for (setting, variant), group in groups.items():
        by_method.setdefault((setting, run_method(group[0])), {})[variant] = group
    out = []
    for setting in _settings(runs):
        for (s, method), candidates in by_method.items():
            if s != setting or len(candidates) < 2:
                continue
            scored = {}
            for variant, group in candidates.items():
                values = []
                for r in group:
                    try:
                        values.append(get_score(r, key))
                    except (KeyError, TypeError, ValueError):
                        pass
                if values:
                    scored[variant] = [{"v": v} for v in values]
            if not scored:
                continue
            best = str(best_by_validation(scored, key="v", k=top_k))
            means = {v: float(np.mean(sorted((x["v"] for x in rs), reverse=True)[:top_k])) for v, rs in scored.items()}
            out.append({"setting": setting, "method": method, "variant": best,
                        "hparams": dict(candidates[best][0].get("hparams") or {}),
                        "validation_mean": means[best], "candidates": means, "n_variants": len(candidates)})
    return out


def _is_percent(metric: str) -> bool:
    return metric not in NOT_PERCENT


def format_stat(stat: Mapping[str, Any] | None, metric: str) -> str:
    """``"mean ± std"``: in percent with one decimal, raw (4 significant digits) for e.g. MSE; ``–`` if empty."""
    if not stat or not stat.get("n") or stat.get("mean") is None or math.isnan(float(stat["mean"])):
        return "–"
    mean, std = float(stat["mean"]), float(stat.get("std") or 0.0)
    if math.isnan(std):
        std = 0.0
    if _is_percent(metric):
        return f"{100 * mean:.1f} ± {100 * std:.1f}"
    return f"{mean:.4g} ± {std:.2g}"


def _fmt_value(value: float, metric: str) -> str:
    if value is None or math.isnan(float(value)):
        return "–"
    return f"{100 * float(value):.1f}" if _is_percent(metric) else f"{float(value):.4g}"


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


# Document blocks, rendered to Markdown or HTML:
#   ("h", level, text) | ("p", text) | ("note", text) | ("table", header, body) | ("list", [(key, text)])
#   | ("img", rel, path, caption)
Block = tuple


def _main_table_blocks(rows: Sequence[Mapping[str, Any]], metric: str, use_top_k: bool = False) -> list[Block]:
    settings = sorted(_ordered_unique(r["setting"] for r in rows), key=_natural_key)
    variants = _ordered_unique(r["variant"] for r in rows)
    cell: dict[tuple[str, str], Mapping[str, Any]] = {(r["variant"], r["setting"]): r for r in rows}

    def stat_of(row):
        if use_top_k:
            return (row.get("top_k") or {}).get("metrics", {}).get(metric)
        return row["metrics"].get(metric)

    ns = {int(stat_of(r)["n"]) for r in rows if stat_of(r)}
    show_n = len(ns) > 1
    body = []
    for v in variants:
        line = [v]
        for s in settings:
            row = cell.get((v, s))
            stat = stat_of(row) if row else None
            text = format_stat(stat, metric)
            if show_n and stat and stat.get("n"):
                text += f" (n={stat['n']})"
            line.append(text)
        body.append(line)
    unit = "%" if _is_percent(metric) else "raw"
    if use_top_k:
        k = next((r["top_k"]["k"] for r in rows if r.get("top_k")), "?")
        total = sorted({r["n"] for r in rows})
        caption = (f"Test {metric} ({unit}), mean ± std of the top {k} of "
                   f"{'/'.join(str(t) for t in total)} runs by validation {rows[0]['selection_metric']}.")
    else:
        caption = f"Test {metric} ({unit}), mean ± std (sample std) over " + (
            f"{ns.pop()} runs per cell." if len(ns) == 1 else "the runs of each cell (n given).")
    return [("table", ["method", *settings], body), ("p", caption)]


def _detail_blocks(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> list[Block]:
    blocks: list[Block] = []
    has_top_k = any(r.get("top_k") for r in rows)
    for setting in sorted(_ordered_unique(r["setting"] for r in rows), key=_natural_key):
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
            if r["is_baseline"]:
                line += ["baseline"] * len(metrics)
            else:
                line += [_p_cell(r["p_values"].get(m)) for m in metrics]
            body.append(line)
        blocks.append(("h", 3, f"Setting {setting}"))
        blocks.append(("table", header, body))
        base = srows[0].get("baseline")
        blocks.append(("p", (f"Test metrics, mean ± std; p-values vs the baseline `{base}`: W = Wilcoxon "
                             "signed-rank (paired by sample and seed), MW = Mann-Whitney U, t = Welch's t-test; "
                             f"* p < {SIGNIFICANCE}.") if base else
                       "No baseline variant in this setting: no p-values."))
    return blocks


def _table_blocks(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> list[Block]:
    if not rows:
        return [("note", "no runs")]
    headline = metrics[0]
    blocks: list[Block] = [("h", 2, f"Main table: test {headline}")]
    blocks += _main_table_blocks(rows, headline)
    if any(r.get("top_k") for r in rows):
        blocks.append(("h", 2, f"Main table: test {headline}, top-k by validation"))
        blocks += _main_table_blocks(rows, headline, use_top_k=True)
    blocks.append(("h", 2, "All metrics per setting"))
    blocks += _detail_blocks(rows, metrics)
    return blocks


def format_markdown_table(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> str:
    """Markdown in the papers' layout: a main table (rows = methods, columns = settings, cells
    ``mean ± std`` in percent of the headline metric ``metrics[0]``; a second one for the top-k runs
    when the rows have them), then one detailed table per setting with every metric and the
    p-values against the baseline (``*`` marks p < 0.05)."""
    return _render_markdown(_table_blocks(rows, list(metrics)))


# --------------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------------

def _md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


#: Cells that are numbers (or stand in for one): right-aligned.
_NUMERIC_CELL = re.compile(r"^(?:[-+−<]?\d|–$|$|baseline$|W )")


def _right_aligned(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[bool]:
    """Per column: right-align when every body cell is a number (the first column never)."""
    return [i > 0 and bool(body) and all(_NUMERIC_CELL.match(str(line[i])) for line in body)
            for i in range(len(header))]


def _md_alt(text: str) -> str:
    return re.sub(r"([\[\]\\])", r"\\\1", text)


def _md_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    cells = [[_md_cell(c) for c in header]] + [[_md_cell(c) for c in line] for line in body]
    widths = [max(3, max(len(line[i]) for line in cells)) for i in range(len(header))]
    right = _right_aligned(header, body)
    out = ["| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths)) + " |",
           "|" + "|".join(("-" * (w + 1) + ":") if r else (":" + "-" * (w + 1)) for r, w in zip(right, widths)) + "|"]
    for line in cells[1:]:
        out.append("| " + " | ".join(c.ljust(w) for c, w in zip(line, widths)) + " |")
    return "\n".join(out)


def _render_markdown(blocks: Sequence[Block]) -> str:
    parts = []
    for b in blocks:
        kind = b[0]
        if kind == "h":
            parts.append("#" * b[1] + " " + b[2])
        elif kind == "p":
            parts.append(b[1])
        elif kind == "note":
            parts.append(f"> **Note:** {b[1]}")
        elif kind == "table":
            parts.append(_md_table(b[1], b[2]))
        elif kind == "list":
            parts.append("\n".join(f"- **{k}:** {v}" for k, v in b[1]))
        elif kind == "img":
            parts.append(f"![{_md_alt(b[3])}]({b[1]})\n\n*{_md_alt(b[3])}*")
    return "\n\n".join(parts) + "\n"


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;
color:#222;line-height:1.4}
h1,h2,h3{line-height:1.2}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.8em 0;font-size:.88em}
th,td{border:1px solid #ccc;padding:.3em .6em;text-align:right;white-space:nowrap}
th.l,td.l{text-align:left}th{background:#f2f2f2}
tr:nth-child(even) td{background:#fafafa}
figure{margin:1em 0}img{max-width:100%;height:auto}figcaption{font-size:.85em;color:#555}
.note{background:#fff8e6;border-left:3px solid #e0a000;padding:.4em .8em;color:#6b4500}
code{background:#f2f2f2;padding:0 .2em}
"""


def _inline_html(text: str) -> str:
    """Escape, then turn `code` spans into <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(str(text)))


def _render_html(blocks: Sequence[Block], title: str) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             f"<title>{html.escape(title)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>"]
    for b in blocks:
        kind = b[0]
        if kind == "h":
            parts.append(f"<h{b[1]}>{_inline_html(b[2])}</h{b[1]}>")
        elif kind == "p":
            parts.append(f"<p>{_inline_html(b[1])}</p>")
        elif kind == "note":
            parts.append(f'<p class="note"><strong>Note:</strong> {_inline_html(b[1])}</p>')
        elif kind == "table":
            right = _right_aligned(b[1], b[2])
            cls = ["" if r else ' class="l"' for r in right]
            head = "".join(f"<th{k}>{html.escape(str(c))}</th>" for k, c in zip(cls, b[1]))
            body = "\n".join("<tr>" + "".join(f"<td{k}>{html.escape(str(c))}</td>" for k, c in zip(cls, line))
                             + "</tr>" for line in b[2])
            parts.append(f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>")
        elif kind == "list":
            parts.append("<ul>" + "".join(f"<li><strong>{html.escape(k)}:</strong> {_inline_html(v)}</li>"
                                          for k, v in b[1]) + "</ul>")
        elif kind == "img":
            data = base64.b64encode(Path(b[2]).read_bytes()).decode("ascii")
            parts.append(f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(b[3])}">'
                         f"<figcaption>{html.escape(b[3])}</figcaption></figure>")
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"


# --------------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------------

def _options(folder: Path, runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Metrics, top_k, baseline and analyses from experiment.json, checked, with defaults."""
    raw = load_experiment(folder)
    where = folder / EXPERIMENT_NAME
    requested = raw.get("metrics")
    if requested is not None and (not isinstance(requested, list) or not all(isinstance(m, str) for m in requested)):
        raise ConfigError(f"{where}: metrics must be a list of metric names, got {requested!r}")
    present = set()
    for r in runs:
        present.update(k for k, v in ((r.get("metrics") or {}).get("test") or {}).items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool))
    fallback = REGRESSION_METRICS if _is_regression(runs) else DEFAULT_METRICS
    metrics = [m for m in (requested or fallback) if m in present]
    if not metrics:
        metrics = [m for m in fallback if m in present] or sorted(present)
    if not metrics:
        raise ContrastfitError(f"experiment folder {folder}: the finished runs have no test metrics")
    top_k = raw.get("top_k")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
        raise ConfigError(f"{where}: top_k must be a positive integer or null, got {top_k!r}")
    analyses = raw.get("analyses")
    if analyses is None:
        analyses = list(ANALYSES)
    elif not isinstance(analyses, list) or not all(isinstance(a, str) for a in analyses):
        raise ConfigError(f"{where}: analyses must be a list among {', '.join(ANALYSES)}, got {analyses!r}")
    unknown = sorted(set(analyses) - set(ANALYSES))
    if unknown:
        raise ConfigError(f"{where}: unknown analyses {', '.join(unknown)} (known: {', '.join(ANALYSES)})")
    baseline = raw.get("baseline")
    if baseline is None:
        names = []
        for m in raw.get("methods") or []:
            names.append(m.get("name") if isinstance(m, Mapping) else m)
        names = [str(n) for n in names if n]
        if "ce" in names:
            baseline = "ce"
        elif names:
            baseline = names[0]
    return {"raw": raw, "metrics": metrics, "requested_metrics": requested, "top_k": top_k,
            "analyses": list(analyses), "baseline": None if baseline is None else str(baseline)}


def _class_lists(params: Mapping[str, Any]) -> tuple[list[str], list[str]]:
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


class _Report:
    """State of one report being written: the folder, runs, options, blocks and figures."""

    def __init__(self, folder: Path, runs: list[dict[str, Any]], options: dict[str, Any]) -> None:
        self.folder = folder
        self.runs = runs
        self.opts = options
        self.metrics: list[str] = options["metrics"]
        self.figdir = folder / FIGURES_DIR
        self.groups = _groups(runs)
        self.rows = summary_table(runs, self.metrics, top_k=options["top_k"], baseline=options["baseline"])
        self.settings = _settings(runs)
        self.variants = _ordered_unique(r["variant"] for r in self.rows)
        self.baselines = {r["setting"]: r["baseline"] for r in self.rows}
        self.regression = _is_regression(runs)
        self.blocks: list[Block] = []
        self.figures: dict[str, Path] = {}
        self._names: set[str] = set()
        self._missing_npz: set[str] = set()

    # -- helpers ---------------------------------------------------------------------------------

    def note(self, text: str) -> None:
        self.blocks.append(("note", text))

    def figure_path(self, stem: str) -> Path:
        slug = re.sub(r"[^A-Za-z0-9_.=-]+", "_", stem).strip("_.") or "figure"
        name, i = slug, 2
        while name in self._names:
            name, i = f"{slug}_{i}", i + 1
        self._names.add(name)
        return self.figdir / f"{name}.png"

    def add_figure(self, path: Path, caption: str) -> None:
        rel = f"{FIGURES_DIR}/{path.name}"
        self.figures[path.stem] = path
        self.blocks.append(("img", rel, path, caption))

    def attempt(self, what: str, fn: Callable[[], Any]) -> Any:
        """Run one analysis step; on failure note it in the report instead of failing the report."""
        try:
            return fn()
        except Exception as exc:  # one broken analysis must not cost the whole report
            self.note(f"{what} skipped: {type(exc).__name__}: {exc}")
            return None

    def analysis(self, run: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
        rid = run_id(run)
        if not rid or Path(rid).name != rid or rid in (".", ".."):
            return None
        path = self.folder / RUNS_DIR / rid / ANALYSIS_NAME
        if not path.is_file():
            self._missing_npz.add(rid)
            return None
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except (OSError, ValueError, zipfile.BadZipFile, EOFError):
            self._missing_npz.add(rid)
            return None
        if not {"embeddings", "labels", "predictions"} <= set(arrays):
            self._missing_npz.add(rid)
            return None
        n = len(arrays["labels"])
        if arrays["embeddings"].ndim != 2 or len(arrays["embeddings"]) != n or len(arrays["predictions"]) != n:
            self._missing_npz.add(rid)
            return None
        return arrays

    def label_names(self, run: Mapping[str, Any]) -> list[str] | None:
        names = (run.get("data") or {}).get("label_names")
        return [str(n) for n in names] if names else None

    def runs_of(self, setting: str, variant: str) -> list[Mapping[str, Any]]:
        return sorted(self.groups.get((setting, variant), []), key=_sort_key)

    def enabled(self, analysis: str) -> bool:
        return analysis in self.opts["analyses"]

    # -- sections --------------------------------------------------------------------------------

    def header(self) -> None:
        raw = self.opts["raw"]
        name = str(raw.get("name") or self.folder.name)
        self.blocks.append(("h", 1, f"Experiment report: {name}"))
        seeds = sorted(_ordered_unique(r.get("seed") for r in self.runs), key=lambda s: (s is None, str(s)))
        facts = [
            ("folder", f"`{self.folder}`"),
            ("data", str(raw.get("data", (self.runs[0].get("data") or {}).get("name", "?")))),
            ("model", str(raw.get("model", self.runs[0].get("model", "?")))),
            ("finished runs", str(len(self.runs))),
            ("settings", ", ".join(self.settings)),
            ("variants", ", ".join(self.variants)),
            ("seeds", ", ".join(str(s) for s in seeds)),
            ("baseline", self.opts["baseline"] or "–"),
            ("metrics", ", ".join(self.metrics)),
        ]
        train_s = [float((r.get("timings") or {}).get("train_s", 0.0) or 0.0) for r in self.runs]
        facts.append(("training time", f"{sum(train_s) / 60:.1f} min in all, {np.mean(train_s):.0f} s per run"))
        self.blocks.append(("list", facts))
        if not self.opts["raw"]:
            self.note(f"no {EXPERIMENT_NAME} in the folder: defaults used for metrics, baseline and analyses.")
        requested = self.opts["requested_metrics"]
        if requested:
            missing = [m for m in requested if m not in self.metrics]
            if missing:
                self.note(f"metric(s) {', '.join(missing)} not found in the runs' test metrics.")

    def tables(self) -> None:
        self.blocks += _table_blocks(self.rows, self.metrics)

    def selection(self) -> None:
        best = best_variants(self.runs, top_k=self.opts["top_k"])
        if not best:
            return
        self.blocks.append(("h", 2, "Hyper-parameter selection (by validation)"))
        rows_by = {(r["setting"], r["variant"]): r for r in self.rows}
        headline = self.metrics[0]
        sel = self.rows[0]["selection_metric"]
        body = []
        for b in best:
            row = rows_by.get((b["setting"], b["variant"]), {})
            body.append([b["setting"], b["method"], b["variant"], str(b["n_variants"]),
                         _fmt_value(b["validation_mean"], sel),
                         format_stat((row.get("metrics") or {}).get(headline), headline)])
        self.blocks.append(("table", ["setting", "method", "best variant", "grid points", f"mean val {sel}",
                                      f"test {headline}"], body))
        self.blocks.append(("p", f"The grid point with the best mean validation {sel} per setting and method; "
                                 "the test column is read only after the choice."))

    def imbalance(self) -> None:
        imb = [s for s in self.settings
               if any(all(_class_lists(run_params(r))) for v in self.variants for r in self.runs_of(s, v))]
        if not imb:
            return
        self.blocks.append(("h", 2, "Minority vs majority classes"))
        body = []
        split = "test"
        for s in imb:
            for v in self.variants:
                mins, majs = [], []
                for r in self.runs_of(s, v):
                    minority, majority = _class_lists(run_params(r))
                    per_class = ((r.get("metrics") or {}).get(split) or {}).get("per_class") or {}
                    mi = [per_class[c]["f1"] for c in minority if c in per_class]
                    ma = [per_class[c]["f1"] for c in majority if c in per_class]
                    if mi:
                        mins.append(float(np.mean(mi)))
                    if ma:
                        majs.append(float(np.mean(ma)))
                if not mins and not majs:
                    continue
                smin, smaj = summarize(mins), summarize(majs)
                gap = smaj["mean"] - smin["mean"] if mins and majs else float("nan")
                body.append([s, v, str(max(smin["n"], smaj["n"])), format_stat(smin, "f1"), format_stat(smaj, "f1"),
                             "–" if math.isnan(gap) else f"{100 * gap:.1f}"])
        if body:
            self.blocks.append(("table", ["setting", "variant", "n", "minority F1", "majority F1",
                                          "gap (maj − min)"], body))
            self.blocks.append(("p", "Per-class test F1 averaged over the minority (resp. majority) classes of each "
                                     "run, then mean ± std over runs, in %."))
        else:
            self.note("imbalance settings found, but the runs have no per-class test F1.")

    def metric_vs_setting(self) -> None:
        if len(self.settings) < 2:
            return
        self.blocks.append(("h", 2, "Metrics across settings"))
        params = {s: run_params(self.groups[(s, v)][0]) for (s, v) in self.groups}
        x_name = None
        keys = _ordered_unique(k for p in params.values() for k in p)
        for k in keys:
            values = [p.get(k) for p in params.values()]
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values) and len(set(values)) > 1:
                x_name = k
                break
        if x_name == "fold" or (x_name is None and all("fold" in p for p in params.values())):
            self.note("the settings are cross-validation folds: no curve across settings.")
            return
        for metric in self.metrics[:1]:  # the headline metric; the tables have the others
            points = []
            for s in self.settings:
                for v in self.variants:
                    for r in self.runs_of(s, v):
                        value = _score(r, "test", metric)
                        if value is None:
                            continue
                        xv = run_params(r).get(x_name) if x_name else s
                        points.append({"variant": v, x_name or "setting": xv,
                                       metric: 100 * value if _is_percent(metric) else value})
            if not points:
                continue
            path = self.figure_path(f"{metric}_vs_{x_name or 'setting'}")

            def draw(points=points, path=path, metric=metric):
                from ..evaluation.plots import plot_metric_vs_setting

                return plot_metric_vs_setting(points, x=x_name or "setting", y=metric, hue="variant", path=path,
                                              title=f"test {metric}{' (%)' if _is_percent(metric) else ''} "
                                                    f"vs {x_name or 'setting'}")

            if self.attempt(f"{metric} vs setting figure", draw) is not None:
                self.add_figure(path, f"Test {metric} against {x_name or 'the setting'}: mean ± std over runs.")

    def tsne(self) -> None:
        self.blocks.append(("h", 2, "t-SNE of test embeddings"))
        if self.regression:
            self.note("t-SNE coloured by label needs a classification task: skipped.")
            return
        setting = self.settings[0]
        drawn = 0
        for variant in self.variants:
            runs = self.runs_of(setting, variant)
            picked = next(((r, a) for r in runs if (a := self.analysis(r)) is not None), None)
            if picked is None:
                if runs:
                    self.note(f"t-SNE of `{variant}` skipped: no {ANALYSIS_NAME} for its runs in {setting}.")
                continue
            run, arrays = picked
            names = self.label_names(run)
            if not names:
                self.note(f"t-SNE of `{variant}` skipped: the run has no label names.")
                continue
            emb, labels = arrays["embeddings"], arrays["labels"]
            subset = ""
            if len(emb) > TSNE_MAX_POINTS:
                idx = np.sort(np.random.default_rng(0).choice(len(emb), TSNE_MAX_POINTS, replace=False))
                emb, labels = emb[idx], labels[idx]
                subset = f", a random {TSNE_MAX_POINTS} of {len(arrays['labels'])} points"
            anchors = arrays.get("label_embeddings")
            path = self.figure_path(f"tsne_{variant}")
            title = f"{variant} ({setting}, seed {run.get('seed')})"

            def draw(emb=emb, labels=labels, names=names, path=path, title=title, anchors=anchors):
                from ..evaluation.plots import plot_tsne

                return plot_tsne(emb, labels, names, path, title, anchors=anchors, seed=0)

            if self.attempt(f"t-SNE of `{variant}`", draw) is not None:
                drawn += 1
                extra = "; stars: label embeddings" if anchors is not None else ""
                self.add_figure(path, f"t-SNE of the test embeddings of {variant} ({setting}, seed "
                                      f"{run.get('seed')}{subset}){extra}.")
        if not drawn and not any(self.runs_of(setting, v) for v in self.variants):
            self.note(f"no runs in {setting}: no t-SNE.")

    def alignment_uniformity(self) -> None:
        self.blocks.append(("h", 2, "Alignment and uniformity"))
        if self.regression:
            self.note("alignment by label needs a classification task: skipped.")
            return
        from ..evaluation.embedding import alignment_uniformity_by_label

        body = []
        for s in self.settings:
            for v in self.variants:
                al, un = [], []
                for r in self.runs_of(s, v):
                    a = self.analysis(r)
                    if a is None:
                        continue
                    res = self.attempt(f"alignment/uniformity of run {run_id(r)}",
                                       lambda a=a: alignment_uniformity_by_label(a["embeddings"], a["labels"]))
                    if res is None:
                        continue
                    if not math.isnan(res["alignment"]):
                        al.append(res["alignment"])
                    un.append(res["uniformity"])
                if un:
                    sa, su = summarize(al), summarize(un)
                    body.append([s, v, str(su["n"]),
                                 "–" if not sa["n"] else f"{sa['mean']:.4f} ± {sa['std']:.4f}",
                                 f"{su['mean']:.4f} ± {su['std']:.4f}"])
        if not body:
            self.note(f"no {ANALYSIS_NAME} found: no alignment / uniformity.")
            return
        self.blocks.append(("table", ["setting", "variant", "runs", "alignment", "uniformity"], body))
        self.blocks.append(("p", "Wang & Isola (2020) on L2-normalised test embeddings: alignment = mean squared "
                                 "distance of same-label pairs, uniformity = log mean exp(−2‖x−y‖²) over all pairs; "
                                 "lower is better for both. Mean ± std over runs."))

    def _same_test_set(self, runs_arrays: Sequence[tuple[Mapping[str, Any], Mapping[str, np.ndarray]]]) -> bool:
        hashes = {(r.get("data") or {}).get("test_hash") for r, _ in runs_arrays}
        if len(hashes) > 1:
            return False
        if None in hashes:  # no hashes: the arrays themselves must agree
            ref = runs_arrays[0][1]
            for _, a in runs_arrays[1:]:
                if not np.array_equal(a["labels"], ref["labels"]):
                    return False
                if "texts" in ref and "texts" in a and not np.array_equal(a["texts"], ref["texts"]):
                    return False
        n = {len(a["labels"]) for _, a in runs_arrays}
        return len(n) == 1

    def _loaded(self, setting: str) -> dict[str, dict[tuple, tuple[Mapping[str, Any], dict[str, np.ndarray]]]]:
        out: dict[str, dict[tuple, tuple[Mapping[str, Any], dict[str, np.ndarray]]]] = {}
        for v in self.variants:
            for r in self.runs_of(setting, v):
                a = self.analysis(r)
                if a is not None:
                    out.setdefault(v, {}).setdefault(run_key(r), (r, a))
        return out

    def distance_groups(self) -> None:
        self.blocks.append(("h", 2, "Accuracy by distance to the mean embedding"))
        if self.regression:
            self.note("accuracy by distance needs a classification task: skipped.")
            return
        from ..evaluation.embedding import distance_reference, distance_to_mean_groups

        for setting in self.settings:
            base = self.baselines.get(setting)
            loaded = self._loaded(setting)
            if base is None or base not in loaded:
                self.note(f"{setting}: no {ANALYSIS_NAME} for the baseline's runs: no distance groups.")
                continue
            all_runs = [ra for per in loaded.values() for ra in per.values()]
            if not self._same_test_set(all_runs):
                self.note(f"{setting}: the runs do not share one test set (test_hash differs): no distance groups.")
                continue
            refs = loaded[base]
            n = len(next(iter(refs.values()))[1]["labels"])
            groups = min(DISTANCE_GROUPS, n)
            acc: dict[str, list[list[float]]] = {}
            sizes: list[int] = []
            normalised_only = False  # a baseline analysis.npz older than its embeddings_raw
            for v, per in loaded.items():
                for key, (_, a) in per.items():
                    if key not in refs:
                        continue
                    ref, is_raw = distance_reference(refs[key][1])
                    normalised_only |= not is_raw
                    correct = np.asarray(a["predictions"]) == np.asarray(a["labels"])
                    res = self.attempt(f"{setting}: distance groups of `{v}`",
                                       lambda ref=ref, correct=correct: distance_to_mean_groups(
                                           ref, correct, groups=groups))
                    if res is None:
                        continue
                    acc.setdefault(v, []).append([g["accuracy"] for g in res])
                    sizes = [g["n"] for g in res]
            if not acc:
                self.note(f"{setting}: no run shares (sample, seed) with a baseline run: no distance groups.")
                continue
            labels = [f"{g}" + (" (near)" if g == 1 else " (far)" if g == groups else "") for g in range(1, groups + 1)]
            series = {v: [{"group": labels[i], "accuracy": float(np.mean([x[i] for x in xs]))} for i in range(groups)]
                      for v, xs in acc.items()}
            path = self.figure_path(f"distance_groups_{setting}")

            def draw(series=series, path=path, setting=setting, base=base):
                from ..evaluation.plots import plot_distance_groups

                return plot_distance_groups(series, path, title=f"Accuracy by distance to the mean ({setting}; "
                                                                f"distances from {base})")

            if self.attempt(f"{setting}: distance-group figure", draw) is not None:
                self.add_figure(path, f"{setting}: test accuracy per distance-to-mean group; mean embedding and "
                                      f"Euclidean distances from the baseline {base}'s un-normalised embeddings "
                                      "(Sosnowski et al., Fig. 2), averaged over runs paired by (sample, seed).")
            if normalised_only:
                self.note(f"{setting}: some baseline runs saved only L2-normalised embeddings (no embeddings_raw: "
                          "written by an older version); their distances are on the unit sphere.")
            header = ["group", "n", *(f"{v} acc" for v in series)]
            body = [[labels[i], str(sizes[i]) if sizes else "?",
                     *(f"{100 * series[v][i]['accuracy']:.1f}" for v in series)] for i in range(groups)]
            self.blocks.append(("table", header, body))

    def error_analysis(self) -> None:
        self.blocks.append(("h", 2, "Error analysis by word groups"))
        if self.regression:
            self.note("error analysis needs a classification task: skipped.")
            return
        from ..evaluation.error_analysis import associated_features, error_analysis, word_groups
        from ..evaluation.statistics import mcnemar_exact

        feature_rows = 5  # features shown per variant

        for setting in self.settings:
            base = self.baselines.get(setting)
            loaded = {v: per for v, per in self._loaded(setting).items()
                      if all("texts" in a for _, a in per.values())}
            if base is None or base not in loaded:
                self.note(f"{setting}: no {ANALYSIS_NAME} with texts for the baseline's runs: no error analysis.")
                continue
            all_runs = [ra for per in loaded.values() for ra in per.values()]
            if not self._same_test_set(all_runs):
                self.note(f"{setting}: the runs do not share one test set (test_hash differs): no error analysis.")
                continue
            common = sorted(set.intersection(*(set(per) for per in loaded.values())),
                            key=lambda k: (k[0], str(k[1])))
            if not common:
                self.note(f"{setting}: no (sample, seed) shared by every variant: no error analysis.")
                continue
            texts = [str(t) for t in next(iter(loaded[base].values()))[1]["texts"]]
            n = len(texts)
            words = word_groups(texts, min_count=max(2, min(20, n // 20)), max_groups=MAX_WORD_GROUPS)
            if not words:
                self.note(f"{setting}: no word occurs in enough test texts for a word group.")
                continue
            pooled_texts = texts * len(common)
            correct = {v: np.concatenate([np.asarray(per[k][1]["predictions"]) == np.asarray(per[k][1]["labels"])
                                          for k in common]) for v, per in loaded.items()}
            rows = self.attempt(f"{setting}: error analysis",
                                lambda: error_analysis(pooled_texts, correct, base, words))
            if rows is None:
                continue
            variants = list(correct)
            others = [v for v in variants if v != base]
            all_row = {"group": "(all)", "n": len(pooled_texts),
                       "accuracy": {v: float(c.mean()) for v, c in correct.items()},
                       "mcnemar": {o: mcnemar_exact(correct[o], correct[base]) for o in others}}

            def mcnemar_cell(result):
                return "–" if not result else f"{format_p(result['p'])} ({result['b']}/{result['c']})"

            header = ["word", "n", *(f"{v} acc" for v in variants), *(f"p {v}" for v in others)]
            body = []
            for row in [*rows, all_row]:
                body.append([row["group"], str(row["n"] // len(common)),
                             *("–" if row["accuracy"][v] is None else f"{100 * row['accuracy'][v]:.1f}"
                               for v in variants),
                             *(mcnemar_cell(row["mcnemar"].get(o)) for o in others)])
            self.blocks.append(("h", 3, f"Setting {setting}"))
            self.blocks.append(("table", header, body))
            self.blocks.append(("p", f"Test accuracy (%) on the test texts containing each word, pooled over the "
                                     f"{len(common)} run(s) per variant that share (sample, seed); n is per run. "
                                     f"p (b/c): exact McNemar test against the baseline `{base}` on the same items "
                                     f"(paired; b = items the variant gets right and `{base}` wrong, c = the "
                                     f"reverse; binomial test of b out of b + c; pooled predictions of several runs "
                                     f"treated as independent pairs); * p < {SIGNIFICANCE}."))

            # Features found automatically (GEval-style, Sosnowski et al. Table 7): per variant, the
            # words and bigrams whose presence most changes the per-item score.
            scores = {v: np.mean([np.asarray(per[k][1]["predictions"]) == np.asarray(per[k][1]["labels"])
                                  for k in common], axis=0) for v, per in loaded.items()}
            found = {v: self.attempt(f"{setting}: features of `{v}`",
                                     lambda y=y: associated_features(texts, y, min_count=5))
                     for v, y in scores.items()}
            fbody = []
            for v, frows in found.items():
                for r in (frows or [])[:feature_rows]:
                    if r["p"] is None:
                        continue
                    fbody.append([v, r["feature"], str(r["n_with"]), f"{100 * r['mean_with']:.1f}",
                                  f"{100 * r['mean_without']:.1f}", format_p(r["p"]), format_p(r["q"])])
            if fbody:
                tested = max(len(f or []) for f in found.values())
                self.blocks.append(("table", ["variant", "feature", "n with", "acc with", "acc without", "p", "q"],
                                    fbody))
                self.blocks.append(("p", f"Features found automatically (GEval-style, Sosnowski et al. Table 7): "
                                         f"every word and bigram in at least 5 of the {n} test texts; per-item "
                                         f"score = the fraction of the {len(common)} run(s) that got the item right; "
                                         f"p: two-sided Mann-Whitney U of the scores of the items with the feature "
                                         f"against those without; q: Benjamini-Hochberg over the (up to {tested}) "
                                         f"features tested per variant. The {feature_rows} smallest p per variant."))
            else:
                self.note(f"{setting}: no feature in at least 5 test texts changes any variant's per-item scores.")

    def learning_curves(self) -> None:
        self.blocks.append(("h", 2, "Learning curves"))
        for setting in self.settings:
            histories: dict[str, list] = {}
            samples = {run_key(r)[0] for v in self.variants for r in self.runs_of(setting, v)}
            for v in self.variants:
                for r in self.runs_of(setting, v):
                    hist = r.get("log_history") or []
                    if any(isinstance(e, Mapping) and ("loss" in e or "eval_loss" in e) for e in hist):
                        sample, seed = run_key(r)
                        name = f"{v} seed {seed}" + (f" sample {sample}" if len(samples) > 1 else "")
                        histories[name] = [e for e in hist if isinstance(e, Mapping)]
            if not histories:
                self.note(f"{setting}: no logged losses: no learning curves.")
                continue
            path = self.figure_path(f"learning_curves_{setting}")

            def draw(histories=histories, path=path, setting=setting):
                from ..evaluation.plots import plot_learning_curves

                return plot_learning_curves(histories, path, title=f"Learning curves ({setting})")

            if self.attempt(f"{setting}: learning curves", draw) is not None:
                self.add_figure(path, f"{setting}: training loss (solid) and evaluation loss (dashed) against step, "
                                      "one colour per run.")

    def confusion(self) -> None:
        self.blocks.append(("h", 2, "Confusion matrices"))
        if self.regression:
            self.note("confusion matrices need a classification task: skipped.")
            return
        for v in self.variants:
            total, names, count = None, None, 0
            for s in self.settings:
                for r in self.runs_of(s, v):
                    m = ((r.get("metrics") or {}).get("test") or {}).get("confusion_matrix")
                    rn = self.label_names(r)
                    if m is None or not rn:
                        continue
                    m = np.asarray(m, dtype=np.int64)
                    if m.shape != (len(rn), len(rn)) or (names is not None and rn != names):
                        continue
                    total = m if total is None else total + m
                    names = rn
                    count += 1
            if total is None:
                self.note(f"`{v}`: no test confusion matrix in its runs.")
                continue
            path = self.figure_path(f"confusion_{v}")

            def draw(total=total, names=names, path=path, v=v, count=count):
                from ..evaluation.plots import plot_confusion

                return plot_confusion(total, names, path, title=f"{v}: summed over {count} runs")

            if self.attempt(f"confusion matrix of `{v}`", draw) is not None:
                self.add_figure(path, f"Confusion matrix of {v} on the test set (rows: true labels), summed over its "
                                      f"{count} runs in all settings.")

    def _attributions_of(self, setting: str) -> dict[int, list[tuple[str, dict]]]:
        """``{test index: [(row label, attribution dict), ...]}`` from the first run of each variant
        in ``setting`` that has ``attributions.json``."""
        by_example: dict[int, list[tuple[str, dict]]] = {}
        for v in self.variants:
            for r in self.runs_of(setting, v):
                rid = run_id(r)
                path = self.folder / RUNS_DIR / rid / ATTRIBUTIONS_NAME if rid and Path(rid).name == rid else None
                if path is None or not path.is_file():
                    continue
                try:
                    examples = json.loads(path.read_text(encoding="utf-8"))["examples"]
                except (OSError, ValueError, KeyError, TypeError):
                    continue
                for ex in examples:
                    if isinstance(ex, Mapping) and {"index", "words", "values"} <= set(ex):
                        by_example.setdefault(int(ex["index"]), []).append((f"{v} (seed {r.get('seed')})", dict(ex)))
                break  # one run per variant
        return by_example

    def attributions(self) -> None:
        self.blocks.append(("h", 2, "Token attributions"))
        if self.regression:
            self.note("token attributions are written for classification runs only: skipped.")
            return
        # the runner explains the first setting of the config, which need not sort first here
        setting, by_example = next(((s, found) for s in self.settings if (found := self._attributions_of(s))),
                                   (None, {}))
        if not by_example:
            self.note(f"no run has {ATTRIBUTIONS_NAME} (written for the first sample and seed of the first "
                      "setting when `attributions` is among the analyses).")
            return
        for index, rows in sorted(by_example.items()):
            path = self.figure_path(f"attributions_{setting}_test{index}")
            gold = rows[0][1].get("target_name", "?")

            def draw(rows=rows, path=path, index=index, gold=gold):
                from ..evaluation.plots import plot_attributions

                return plot_attributions(rows, path, title=f"test example {index}, gold label: {gold}")

            if self.attempt(f"attributions of test example {index}", draw) is not None:
                self.add_figure(path, f"Shapley values of the words of test example {index} ({setting}) for its gold "
                                      f"label `{gold}`, one row per method: red words raise the label's probability, "
                                      "blue words lower it (one colour scale for all rows).")

    def build(self) -> None:
        self.header()
        self.tables()
        self.selection()
        self.imbalance()
        self.metric_vs_setting()
        for name in ANALYSES:
            if self.enabled(name):
                getattr(self, name)()
        if self._missing_npz:
            self.note(f"{len(self._missing_npz)} run(s) have no readable {RUNS_DIR}/<run_id>/{ANALYSIS_NAME}; "
                      "the embedding analyses use the others.")


def write_report(folder: str | os.PathLike) -> dict[str, Any]:
    """Write ``FOLDER/figures/*.png``, ``FOLDER/report.md`` (image links relative to the folder) and
    ``FOLDER/report.html`` (self-contained: figures as base64 data URIs), each file atomically.

    Analyses whose inputs are missing (no ``analysis.npz``, different test sets, regression) are
    skipped with a note in the report. Returns ``{"markdown": path, "html": path, "figures":
    {name: path}}``.
    """
    folder = Path(folder)
    runs = load_runs(folder)
    report = _Report(folder, runs, _options(folder, runs))
    report.build()
    md = write_text_atomic(folder / REPORT_MD, _render_markdown(report.blocks))
    title = next((b[2] for b in report.blocks if b[0] == "h"), "Experiment report")
    page = write_text_atomic(folder / REPORT_HTML, _render_html(report.blocks, title))
    return {"markdown": md, "html": page, "figures": dict(report.figures)}


def main_table_text(folder: str | os.PathLike) -> str:
    """The main table of ``folder`` (methods x settings, headline metric, mean ± std in %), as
    aligned Markdown for the terminal; the top-k table follows when the experiment sets ``top_k``."""
    folder = Path(folder)
    runs = load_runs(folder)
    opts = _options(folder, runs)
    rows = summary_table(runs, opts["metrics"], top_k=opts["top_k"], baseline=opts["baseline"])
    blocks = _main_table_blocks(rows, opts["metrics"][0])
    if any(r.get("top_k") for r in rows):
        blocks += _main_table_blocks(rows, opts["metrics"][0], use_top_k=True)
    return _render_markdown(blocks).rstrip("\n")


def compare(folder_a: str | os.PathLike, folder_b: str | os.PathLike,
            metrics: Sequence[str] | None = None, split: str = "test") -> str:
    """Markdown lining up two experiment folders by (setting, variant): ``mean ± std`` of A and of B,
    the difference B − A and p-values between them (Mann-Whitney U and Welch's t-test, unpaired,
    from :func:`~contrastfit.evaluation.statistics.compare_to_baseline` with A as the baseline).
    ``metrics`` defaults to folder A's."""
    folder_a, folder_b = Path(folder_a), Path(folder_b)
    runs_a, runs_b = load_runs(folder_a), load_runs(folder_b)
    if metrics is None:
        metrics = _options(folder_a, runs_a)["metrics"]
    metrics = list(metrics)
    if not metrics:
        raise ContrastfitError("compare: no metrics given")
    rows_a = {(r["setting"], r["variant"]): r for r in summary_table(runs_a, metrics, split=split)}
    rows_b = {(r["setting"], r["variant"]): r for r in summary_table(runs_b, metrics, split=split)}
    variants = _ordered_unique([k[1] for k in rows_a] + [k[1] for k in rows_b])
    keys = sorted(set(rows_a) | set(rows_b), key=lambda k: (_natural_key(k[0]), variants.index(k[1])))
    name_a, name_b = folder_a.resolve().name or str(folder_a), folder_b.resolve().name or str(folder_b)
    if name_a == name_b:
        name_a, name_b = str(folder_a), str(folder_b)
    blocks: list[Block] = [("h", 1, f"Comparison: A = {name_a}, B = {name_b}"),
                           ("p", f"A: `{folder_a}` ({len(runs_a)} runs); B: `{folder_b}` ({len(runs_b)} runs). "
                                 f"{split.capitalize()} metrics, mean ± std over runs; p-values between A and B "
                                 f"(unpaired): MW = Mann-Whitney U, t = Welch's t-test; * p < {SIGNIFICANCE}.")]
    for metric in metrics:
        body = []
        for key in keys:
            sa = rows_a[key]["metrics"].get(metric) if key in rows_a else None
            sb = rows_b[key]["metrics"].get(metric) if key in rows_b else None
            va = (sa or {}).get("values") or []
            vb = (sb or {}).get("values") or []
            if va and vb:
                res = compare_to_baseline(vb, va)
                diff = float(np.mean(vb) - np.mean(va))
                delta = f"{100 * diff:+.1f}" if _is_percent(metric) else f"{diff:+.4g}"
                mw, welch = format_p(res["mannwhitney_p"]), format_p(res["welch_p"])
            else:
                delta, mw, welch = "–", "–", "–"
            body.append([key[0], key[1], f"{format_stat(sa, metric)} (n={len(va)})" if va else "–",
                         f"{format_stat(sb, metric)} (n={len(vb)})" if vb else "–", delta, mw, welch])
        unit = " (%)" if _is_percent(metric) else ""
        blocks.append(("h", 2, f"{split} {metric}{unit}"))
        blocks.append(("table", ["setting", "variant", f"A: {name_a}", f"B: {name_b}", "B − A", "MW p", "Welch p"],
                       body))
    return _render_markdown(blocks)
