"""Reports of an experiment output folder: ``report.md``, a self-contained ``report.html``, and the
summary the runner prints (``summary.json`` / ``summary.md``).

How a report is made:

1. :func:`~contrastfit.experiments.records.load_records` reads every finished run once into a
   :class:`~contrastfit.experiments.records.ExperimentRun` (the folder layout is described there).
2. :func:`report_options` reads the report's options from ``experiment.json`` (``metrics``,
   ``top_k``, ``baseline``, ``analyses``; schema :class:`ReportOptions`) and each analysis' own
   options (passed to :func:`write_report`; schema: the analysis' ``Options``).
3. :func:`~contrastfit.experiments.summary.summary_table` makes the one summary: mean ± std per
   (setting, variant), top-k by validation, p-values against the baseline.
4. Every registered analysis (:mod:`contrastfit.experiments.analyses`) that the experiment asks for
   computes its numbers, draws its figures (``FOLDER/figures/*.png``) and returns its tables; one
   that cannot run (a regression task, no ``analysis.npz``, different test sets, an error) becomes a
   note in the report instead.
5. The templates in ``contrastfit/experiments/templates/`` render the page
   (:mod:`contrastfit.experiments.page`).

Public functions: :func:`load_runs`, :func:`summary_table`, :func:`best_variants`,
:func:`format_markdown_table` (the papers' layout), :func:`write_report`, :func:`main_table_text`
(the terminal's main table), :func:`summarise` / :func:`format_summary` (the runner's summary),
:func:`compare` (two folders side by side, with Welch / Mann-Whitney p-values between them).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import PositiveInt, field_validator

from ..atomic import write_text_atomic
from ..errors import ConfigError, ContrastfitError
from ..evaluation.metrics import headline_names
from ..evaluation.statistics import compare_to_baseline
from ..schema import Schema, parse
from .analyses import FigureWriter, Skip, available_analyses, get_analysis, parse_options, registered_analyses
from .analyses.base import Analysis, unmet_need
from . import multitask
from .multitask import is_multitask_experiment, write_multitask_report
from .page import REPORT_HTML, REPORT_MD, Figure, Note, Page, Section, Table, Text, render_fragment, render_page
from .records import (
    ANALYSIS_FILE,
    EXPERIMENT_FILE,
    RUNS_DIR,
    ExperimentRuns,
    ExperimentRun,
    load_experiment,
    load_records,
    load_runs,
    natural_key,
    ordered_unique,
)
from .summary import (
    DEFAULT_METRICS,
    REGRESSION_METRICS,
    SIGNIFICANCE,
    best_variants,
    format_p,
    format_stat,
    is_percent,
    main_table,
    runs_table,
    summary_sections,
    summary_table,
)

__all__ = [
    "DEFAULT_METRICS", "ReportOptions", "best_variants", "compare", "format_markdown_table", "format_summary",
    "load_records", "load_runs", "main_table_text", "report_options", "summarise", "summary_table", "write_report",
]

FIGURES_DIR = "figures"


# --------------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------------

class ReportOptions(Schema):
    """The keys of ``experiment.json`` the report reads (the rest of the file is the runner's)."""

    #: table metrics, the headline first (default: accuracy, f1, macro_f1, mcc; Pearson, Spearman,
    #: MSE for regression; micro_f1, macro_f1, subset_accuracy for label sets); names the runs lack
    #: are left out with a note
    metrics: list[str] | None = None
    #: also the mean ± std of the k best runs by validation per cell
    top_k: PositiveInt | None = None
    #: the variant label or method the p-values compare against (default: ce, else the first method)
    baseline: str | None = None
    #: the configurable analyses to run (default: all of them)
    analyses: list[str] | str | None = None

    @field_validator("analyses")
    @classmethod
    def _known(cls, value: list[str] | str | None) -> list[str] | None:
        if value is None:
            return None
        names = [value] if isinstance(value, str) else list(value)
        unknown = sorted(set(names) - set(available_analyses()))
        if unknown:
            raise ValueError(f"unknown analyses {', '.join(unknown)} (available: {', '.join(available_analyses())})")
        return names


@dataclass
class ResolvedOptions:
    """What a report uses, after defaults: see :func:`report_options`."""

    raw: dict[str, Any]
    metrics: list[str]
    requested_metrics: list[str] | None
    top_k: int | None
    baseline: str | None
    analyses: list[str]
    analysis_options: dict[str, Any] = field(default_factory=dict)


def _default_baseline(raw: Mapping[str, Any]) -> str | None:
    """``ce`` when the config lists it among its methods, else its first method."""
    names = [str(n) for m in (raw.get("methods") or [])
             if (n := (m.get("name") if isinstance(m, Mapping) else m))]
    return "ce" if "ce" in names else (names[0] if names else None)


def report_options(folder: str | os.PathLike, records: Sequence[ExperimentRun],
                   analysis_options: Mapping[str, Mapping[str, Any]] | None = None) -> ResolvedOptions:
    """The report's options: ``experiment.json``'s ``metrics`` / ``top_k`` / ``baseline`` /
    ``analyses`` (checked against :class:`ReportOptions`) with their defaults, and every analysis'
    options (``analysis_options = {analysis name: {option: value}}``, checked against the
    analysis' ``Options``). Bad values raise a one-line :class:`~contrastfit.errors.ConfigError`."""
    folder = Path(folder)
    raw = load_experiment(folder)
    where = str(folder / EXPERIMENT_FILE)
    opts = parse(ReportOptions, {k: raw[k] for k in ReportOptions.model_fields if k in raw}, where=where)
    present = {m for r in records for m in r.metrics.get("test", {})}
    # the headline metrics of the runs' kind: a class, a regression target or label sets
    fallback = REGRESSION_METRICS if bool(records) and records[0].task == "regression" else headline_names(present)
    metrics = [m for m in (opts.metrics or fallback) if m in present]
    if not metrics:
        metrics = [m for m in fallback if m in present] or sorted(present)
    if not metrics:
        raise ContrastfitError(f"experiment folder {folder}: the finished runs have no test metrics")
    given = dict(analysis_options or {})
    for name in given:
        get_analysis(name)  # an unknown name is a ConfigError listing the known ones
    return ResolvedOptions(
        raw=raw, metrics=metrics, requested_metrics=opts.metrics, top_k=opts.top_k,
        baseline=opts.baseline if opts.baseline is not None else _default_baseline(raw),
        analyses=list(opts.analyses) if opts.analyses is not None else available_analyses(),
        analysis_options={cls.name: parse_options(cls.name, given.get(cls.name)) for cls in registered_analyses()},
    )


# --------------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------------

def _header(folder: Path, runs: ExperimentRuns, opts: ResolvedOptions) -> Page:
    raw, records = opts.raw, runs.records
    seeds = sorted(ordered_unique(r.seed for r in records), key=lambda s: (s is None, str(s)))
    train_s = [r.train_s for r in records]
    page = Page(f"Experiment report: {raw.get('name') or folder.name}", facts=[
        ("folder", f"`{folder}`"),
        ("data", str(raw.get("data", records[0].data_name or "?"))),
        ("model" if "models" not in raw else "models",
         ", ".join(map(str, raw["models"])) if "models" in raw else str(raw.get("model", records[0].model or "?"))),
        ("finished runs", str(len(records))),
        ("settings", ", ".join(runs.settings)),
        ("variants", ", ".join(runs.variants)),
        ("seeds", ", ".join(str(s) for s in seeds)),
        ("baseline", opts.baseline or "–"),
        ("metrics", ", ".join(opts.metrics)),
        ("training time", f"{sum(train_s) / 60:.1f} min in all, {np.mean(train_s):.0f} s per run"),
    ])
    if not raw:
        page.notes.append(f"no {EXPERIMENT_FILE} in the folder: defaults used for metrics, baseline and analyses.")
    missing = [m for m in opts.requested_metrics or [] if m not in opts.metrics]
    if missing:
        page.notes.append(f"metric(s) {', '.join(missing)} not found in the runs' test metrics.")
    return page


def _analysis_section(cls: type[Analysis], runs: ExperimentRuns, options: Any, out: FigureWriter) -> Section | None:
    """The section of one analysis: its notes, then its figures and tables (under a sub-heading per
    ``group``); a note instead when it cannot run; None when it has nothing to show."""
    section = Section(cls.title)
    reason = unmet_need(cls, runs)
    if reason is not None:
        return section.add(Note(f"{cls.title}: {reason}: skipped.")) if cls.configurable else None
    analysis = cls()
    try:
        result = analysis.compute(runs, options)
    except Skip as exc:
        return section.add(Note(str(exc)))
    except Exception as exc:  # one broken analysis must not cost the whole report
        return section.add(Note(f"{cls.title} skipped: {type(exc).__name__}: {exc}"))
    if result is None:
        return None
    section.add(*(Note(n) for n in getattr(result, "notes", [])))
    items: list[Figure | Table] = []
    for what, make in (("figures", lambda: analysis.figures(result, out)), ("tables", lambda: analysis.tables(result))):
        try:
            items += make()
        except Exception as exc:
            section.add(Note(f"{cls.title}: {what} skipped: {type(exc).__name__}: {exc}"))
    section.add(*(Note(n) for n in out.notes))
    out.notes.clear()
    section.add(*(x for x in items if x.group is None))
    for group in ordered_unique(x.group for x in items if x.group is not None):
        section.add(Section(group, [x for x in items if x.group == group], level=3))
    return section


def _figures(content: Sequence[Any]) -> list[Figure]:
    out = []
    for x in content:
        if isinstance(x, Figure):
            out.append(x)
        elif isinstance(x, Section):
            out += _figures(x.content)
    return out


def write_report(folder: str | os.PathLike, options: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Write ``FOLDER/figures/*.png``, ``FOLDER/report.md`` (image links relative to the folder) and
    ``FOLDER/report.html`` (self-contained: figures as base64 data URIs), each file atomically.

    ``options``: analysis options, ``{analysis name: {option: value}}`` (e.g. ``{"tsne":
    {"max_points": 500}, "distance_groups": {"groups": 10}}``); each analysis' ``Options`` schema
    says what it takes. Analyses whose inputs are missing (no ``analysis.npz``, different test sets,
    regression) are skipped with a note in the report. Returns ``{"markdown": path, "html": path,
    "figures": {name: path}}``. A multi-task experiment's folder gets its own report
    (:func:`contrastfit.experiments.multitask.write_multitask_report`).
    """
    folder = Path(folder)
    if is_multitask_experiment(folder):
        if options:
            raise ConfigError(f"{folder} is a multi-task experiment: its report takes no analysis options")
        paths = write_multitask_report(folder)
        return {"markdown": paths["markdown"], "html": paths["html"], "figures": {}}
    records = load_records(folder)
    opts = report_options(folder, records, options)
    rows = summary_table(records, opts.metrics, top_k=opts.top_k, baseline=opts.baseline)
    runs = ExperimentRuns(records, rows, opts.metrics, opts.top_k)
    page = _header(folder, runs, opts)
    page.sections += summary_sections(rows, opts.metrics)
    out = FigureWriter(folder / FIGURES_DIR)
    for cls in registered_analyses():
        if cls.configurable and cls.name not in opts.analyses:
            continue
        section = _analysis_section(cls, runs, opts.analysis_options[cls.name], out)
        if section is not None:
            page.sections.append(section)
    if runs.missing_arrays:
        page.notes.append(f"{len(runs.missing_arrays)} run(s) have no readable {RUNS_DIR}/<run_id>/{ANALYSIS_FILE}; "
                          "the embedding analyses use the others.")
    md = write_text_atomic(folder / REPORT_MD, render_page(page, "md"))
    html = write_text_atomic(folder / REPORT_HTML, render_page(page, "html"))
    return {"markdown": md, "html": html, "figures": {f.name: f.path for f in _figures(page.sections)}}


def format_markdown_table(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> str:
    """Markdown in the papers' layout: a main table (rows = methods, columns = settings, cells
    ``mean ± std`` in percent of the headline metric ``metrics[0]``; a second one for the top-k runs
    when the rows have them), then one detailed table per setting with every metric and the
    p-values against the baseline (``*`` marks p < 0.05)."""
    return render_fragment(summary_sections(rows, metrics))


def _summary_rows(folder: Path) -> tuple[ResolvedOptions, list[dict[str, Any]]]:
    records = load_records(folder)
    opts = report_options(folder, records)
    return opts, summary_table(records, opts.metrics, top_k=opts.top_k, baseline=opts.baseline)


def main_table_text(folder: str | os.PathLike) -> str:
    """The main table of ``folder`` (methods x settings, headline metric, mean ± std in %), as
    aligned Markdown for the terminal; the top-k table follows when the experiment sets ``top_k``. A
    multi-task experiment's: variants x tasks."""
    if is_multitask_experiment(folder):
        return multitask.main_table_text(multitask.summarise_folder(folder))
    opts, rows = _summary_rows(Path(folder))
    tables = [main_table(rows, opts.metrics[0])]
    if any(r.get("top_k") for r in rows):
        tables.append(main_table(rows, opts.metrics[0], use_top_k=True))
    return render_fragment(tables).rstrip("\n")


def _json_ready(value: Any) -> Any:
    """``value`` with NaN as None and tuples as lists (strict JSON)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    return value


def summarise(folder: str | os.PathLike) -> dict[str, Any]:
    """The summary of ``folder`` as ``summary.json`` holds it: ``{"name", "data", "model",
    "metrics", "baseline", "top_k", "rows"}``, ``rows`` being :func:`summary_table`'s (with the
    report's metrics, top-k and baseline; NaN written as null). A multi-task experiment's:
    :func:`contrastfit.experiments.multitask.summarise_folder`."""
    folder = Path(folder)
    if is_multitask_experiment(folder):
        return _json_ready(multitask.summarise_folder(folder))
    opts, rows = _summary_rows(folder)
    raw = opts.raw
    return _json_ready({"name": raw.get("name", folder.name), "data": raw.get("data"), "model": raw.get("model"),
                        "metrics": opts.metrics, "baseline": opts.baseline, "top_k": opts.top_k, "rows": rows})


def format_summary(summary: Mapping[str, Any]) -> str:
    """The summary as a Markdown table, one line per (setting, variant) (what the runner prints); a
    multi-task summary's main table (variants x tasks)."""
    if "tasks" in summary:
        return multitask.main_table_text(summary)
    return render_fragment([runs_table(summary["rows"], summary["metrics"])]).rstrip("\n")


def compare(folder_a: str | os.PathLike, folder_b: str | os.PathLike,
            metrics: Sequence[str] | None = None, split: str = "test") -> str:
    """Markdown lining up two experiment folders by (setting, variant): ``mean ± std`` of A and of B,
    the difference B − A and p-values between them (Mann-Whitney U and Welch's t-test, unpaired,
    from :func:`~contrastfit.evaluation.statistics.compare_to_baseline` with A as the baseline).
    ``metrics`` defaults to folder A's."""
    folder_a, folder_b = Path(folder_a), Path(folder_b)
    for folder in (folder_a, folder_b):
        if is_multitask_experiment(folder):
            raise ContrastfitError(f"compare lines up single-task experiments; {folder} is a multi-task experiment "
                                   f"(see its {REPORT_MD})")
    records_a, records_b = load_records(folder_a), load_records(folder_b)
    if metrics is None:
        metrics = report_options(folder_a, records_a).metrics
    metrics = list(metrics)
    if not metrics:
        raise ContrastfitError("compare: no metrics given")
    rows_a = {(r["setting"], r["variant"]): r for r in summary_table(records_a, metrics, split=split)}
    rows_b = {(r["setting"], r["variant"]): r for r in summary_table(records_b, metrics, split=split)}
    variants = ordered_unique([k[1] for k in rows_a] + [k[1] for k in rows_b])
    keys = sorted(set(rows_a) | set(rows_b), key=lambda k: (natural_key(k[0]), variants.index(k[1])))
    name_a, name_b = folder_a.resolve().name or str(folder_a), folder_b.resolve().name or str(folder_b)
    if name_a == name_b:
        name_a, name_b = str(folder_a), str(folder_b)
    page = Section(f"Comparison: A = {name_a}, B = {name_b}", level=1, content=[Text(
        f"A: `{folder_a}` ({len(records_a)} runs); B: `{folder_b}` ({len(records_b)} runs). {split.capitalize()} "
        f"metrics, mean ± std over runs; p-values between A and B (unpaired): MW = Mann-Whitney U, t = Welch's "
        f"t-test; * p < {SIGNIFICANCE}.")])
    for metric in metrics:
        body = []
        for key in keys:
            sa = rows_a[key]["metrics"].get(metric) if key in rows_a else None
            sb = rows_b[key]["metrics"].get(metric) if key in rows_b else None
            va, vb = (sa or {}).get("values") or [], (sb or {}).get("values") or []
            if va and vb:
                res = compare_to_baseline(vb, va)
                diff = float(np.mean(vb) - np.mean(va))
                delta = f"{100 * diff:+.1f}" if is_percent(metric) else f"{diff:+.4g}"
                mw, welch = format_p(res["mannwhitney_p"]), format_p(res["welch_p"])
            else:
                delta, mw, welch = "–", "–", "–"
            body.append([key[0], key[1], f"{format_stat(sa, metric)} (n={len(va)})" if va else "–",
                         f"{format_stat(sb, metric)} (n={len(vb)})" if vb else "–", delta, mw, welch])
        unit = " (%)" if is_percent(metric) else ""
        page.add(Section(f"{split} {metric}{unit}", [Table(
            ["setting", "variant", f"A: {name_a}", f"B: {name_b}", "B − A", "MW p", "Welch p"], body)]))
    return render_fragment([page])
