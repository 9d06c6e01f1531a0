"""Multi-task experiments: the variants of a config with ``tasks:`` (one model per task, one multi-task
model under a schedule, either after a stage-1 encoder), run for every seed, summarised and reported.

The CS224N report's comparison (Behrman & Christoglou: sentence embeddings trained once on a corpus of
their own, then one encoder fine-tuned on several tasks with round-robin batches) as an experiment:
``contrastfit experiment examples/cs224n_multitask.yaml``. The schema is
:class:`~contrastfit.experiments.schema.MultiTaskExperiment`; :func:`contrastfit.experiments.run_experiment`
runs every seed and variant (:func:`variant_units`):

1. a variant with ``pretrain: NAME`` first gets that stage-1 encoder (:func:`stage1_encoder`):
   :func:`contrastfit.pretrain.pretrain` on the entry's corpus (``tasks``: :func:`task_corpus`), from the
   experiment's model (or the entry's ``model``), with the seed, into ``OUTPUT/encoders/NAME-KEY-seedS/``
   (``KEY`` hashes the entry's settings, so an edited entry trains a new encoder); it is trained once
   and shared by every variant that names it;
2. ``mode: multitask`` trains one :func:`~contrastfit.training.train_multitask` run on every task in
   ``OUTPUT/runs/RUN_ID/``; ``mode: single`` one run per task in ``OUTPUT/runs/RUN_ID/TASK/``. With
   ``steps_per_task``, a single-task run takes that many steps and a multi-task run that many times the
   number of tasks, so every task gets as many batches in every variant (round-robin);
3. the variant's record (below) goes into the results store.

Results store and crashes: as for single-task experiments (:mod:`.runner`, :func:`.store.run_pending`),
each (variant, seed) is one run of ``OUTPUT/results.sqlite``, claimed before it trains and marked done
with its record after; a
runner killed at any moment loses at most the variant in progress, and a restarted one skips the
finished variants. Inside an interrupted variant, the task runs that finished (their ``results.json``)
and the stage-1 encoders are reused, and a run that kept Trainer checkpoints (``training:
{save_checkpoints: true}``) resumes from its last one.

A variant's record: ``variant``, ``mode``, ``seed``, ``model`` (the encoder its runs started from),
``stage1`` (the stage-1 encoder: name, method, folder, steps, final loss, seconds, corpus), ``runs``
(each run's folder, schedule, training settings and seconds), ``tasks`` (per task: its resolved spec, its
data -- source, sampling, sizes and hashes of the training, validation and test rows -- and every metric
per split), ``metrics`` (per split: each task's headline metrics and ``average``, the mean of the
tasks' selection metrics as in model selection: accuracy, Pearson's r), ``timings`` and library
versions.

The summary (``summary.json``, ``summary.md``, ``report.md`` / ``report.html``, rendered by the report
templates) has one row per variant: each task's test selection metric and their average (mean ± std
over seeds, in %), training and stage-1 seconds; then every headline metric per task, and the stage-1
encoders.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Sequence

import numpy as np

from ..atomic import write_text_atomic
from ..data import load_data
from ..data.loading import TEXT, TEXT_PAIR
from ..encoders import DEFAULT_MODEL
from ..errors import ContrastfitError
from .. import pretrain as stage_one
from .. import training
from ..multitask.tasks import TaskSpec
from ..multitask.shape import selection_value
from ..record import RESULTS_NAME, Entry, Number, TaskEntry, metric_of
from ..versions import library_versions
from .config import MultiTaskExperimentConfig, multitask_settings
from .page import REPORT_HTML, REPORT_MD, Page, Section, Table, Text, render_fragment, render_page
from .records import RUNS_DIR, load_experiment, load_runs, ordered_unique
from .schema import MultiTaskVariant
from ..identity import IDENTITY_TAG, make_identity, path_digest, text_data_digest, with_identity
from .store import STORE_NAME, Unit, file_lock, read_written
from .summary import format_stat, value_stat

__all__ = ["ENCODERS_DIR", "VARIANT_KIND", "VariantRecord", "is_multitask_experiment", "main_table_text", "multitask_summary", "stage1_encoder",
           "summarise_folder", "summary_tables", "task_corpus", "variant_identity", "variant_run_id", "variant_units",
           "write_multitask_report"]

ENCODERS_DIR = "encoders"
#: The stream of ``numpy.random.default_rng([seed, CORPUS_STREAM])`` that shuffles a ``tasks`` corpus.
CORPUS_STREAM = 11
#: The keys of a task's headline metrics (what the detailed table shows).
HEADLINE = {"classification": ("accuracy", "f1", "macro_f1", "mcc"), "regression": ("pearson", "spearman", "mse")}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def variant_run_id(name: str, seed: int) -> str:
    """The store's run id (and folder name) of variant ``name`` with training seed ``seed``."""
    return f"{_slug(name)}-seed{seed}"


# -----------------------------------------------------------------------------------------------
# Stage 1
# -----------------------------------------------------------------------------------------------

def task_corpus(tasks: Sequence[Any], max_texts: int | None, seed: int) -> list[str]:
    """The unlabelled texts of the tasks' training splits (every row of the split, not only a task's
    sample; both sentences of a pair), whitespace-normalised, de-duplicated in order, shuffled with
    ``seed`` and cut to ``max_texts``. ``tasks``: :class:`~contrastfit.multitask.Task` objects or
    ``tasks:`` entries. No validation or test row is read."""
    seen: dict[str, None] = {}
    for t in tasks:
        train = load_data(t.data, text_column=t.text_column, text_pair_column=t.text_pair_column,
                          label_column=t.label_column, validation_data=t.validation_data, test_data=t.test_data,
                          validation_split=t.validation_split).train
        for column in (TEXT, TEXT_PAIR):
            if column in train.column_names:
                for text in train[column]:
                    text = " ".join(str(text).split())
                    if text:
                        seen.setdefault(text, None)
    texts = list(seen)
    order = np.random.default_rng([seed, CORPUS_STREAM]).permutation(len(texts))
    texts = [texts[i] for i in order]
    return texts[:max_texts] if max_texts else texts


def stage1_encoder(config: MultiTaskExperimentConfig, name: str, seed: int, out: Path,
                   progress: bool = True) -> dict[str, Any]:
    """The stage-1 encoder of ``pretrain.NAME`` for ``seed``, trained now unless its folder holds it
    already (under a file lock, so two runners never train it at once). Returns what a variant's record
    keeps of it: ``name``, ``encoder`` (the folder), ``method``, ``steps``, ``train_loss``, ``train_s``,
    ``corpus`` (kind, number of texts, hash of the rows)."""
    entry = config.pretrain[name]
    spec = {**entry.model_dump(), "model": entry.model or config.model, "seed": seed}
    key = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:8]
    folder = out / ENCODERS_DIR / f"{_slug(name)}-{key}-seed{seed}"
    with file_lock(folder.parent / f"{folder.name}.lock"):
        record = stage_one.read_pretrain_record(folder)
        if record is None:
            opts = {k: v for k, v in spec.items() if k not in ("method", "corpus", "model", "seed")}
            corpus = entry.corpus
            if corpus == "tasks":
                path = folder.parent / f"{folder.name}.corpus.txt"
                write_text_atomic(path, "\n".join(task_corpus(config.tasks, entry.max_texts, seed)) + "\n")
                corpus, opts["max_texts"] = str(path), None
            if progress:
                print(f"stage 1: {entry.method} '{name}' (seed {seed}) -> {folder}", flush=True)
            record = stage_one.pretrain(entry.method, corpus, str(folder), model=spec["model"], seed=seed,
                                        progress=progress, **opts).record
    return {"name": name, "encoder": str(folder), "folder": f"{ENCODERS_DIR}/{folder.name}", "method": record.method,
            "hparams": record.hparams, "base_model": record.base_model,
            "steps": record.training.steps, "train_loss": record.training.train_loss,
            "train_s": float(record.timings["train_s"]),
            "corpus": {k: getattr(record.data, k) for k in ("kind", "n_texts", "rows_hash", "sha256")}}


# -----------------------------------------------------------------------------------------------
# One variant
# -----------------------------------------------------------------------------------------------

#: the ``kind`` of a multi-task experiment's record of one (variant, seed)
VARIANT_KIND = "multitask-variant"


class VariantRecord(Entry):
    """One (variant, seed) of a multi-task experiment as the results store keeps it (``kind``
    :data:`VARIANT_KIND`; see the module docstring): typed where it is read, kept as JSON in the store."""

    kind: str = VARIANT_KIND
    experiment: str | None = None
    variant: str
    mode: str
    seed: int
    model: str | None = None
    base_model: str | None = None
    stage1: dict[str, Any] | None = None
    steps_per_task: int | None = None
    runs: dict[str, dict[str, Any]] = {}
    tasks: dict[str, TaskEntry] = {}
    #: per split: ``average`` and each task's headline metrics
    metrics: dict[str, dict[str, Any]] = {}
    timings: dict[str, Number] = {}
    versions: dict[str, str] | None = None
    tags: dict[str, Any] = {}


def _average(tasks: dict[str, dict[str, Any]], split: str) -> float | None:
    """The mean of the tasks' selection values on ``split`` (as model selection averages them)."""
    scored = [selection_value(TaskSpec.from_dict(t["spec"]), t["metrics"][split])
              for t in tasks.values() if split in t["metrics"]]
    return float(np.mean(scored)) if len(scored) == len(tasks) else None


def _variant_record(config: MultiTaskExperimentConfig, variant: MultiTaskVariant, seed: int, run_id: str,
                    model: str, stage1: dict[str, Any] | None, runs: dict[str, tuple[str, dict[str, Any]]],
                    identity: dict[str, Any] | None = None) -> dict:
    """The variant's record from its runs (``{run key: (folder relative to OUTPUT, train_multitask
    record)}``; the key is ``multitask`` or a task name)."""
    names = [t.name for t in config.tasks]
    tasks = {n: (runs["multitask"] if variant.mode == "multitask" else runs[n])[1]["tasks"][n] for n in names}
    metrics: dict[str, Any] = {}
    for split in ("validation", "test"):
        average = _average(tasks, split)
        if average is not None:
            kinds = {n: "regression" if t["spec"]["type"] == "regression" else "classification" for n, t in tasks.items()}
            metrics[split] = {"average": average, **{n: {k: t["metrics"][split].get(k) for k in HEADLINE[kinds[n]]}
                                                     for n, t in tasks.items()}}
    return VariantRecord.model_validate({
        "kind": VARIANT_KIND, "experiment": config.name, "variant": variant.name, "mode": variant.mode,
        "seed": seed, "model": model, "base_model": config.model, "stage1": stage1,
        "steps_per_task": config.steps_per_task,
        "runs": {key: {"folder": folder, "schedule": rec["schedule"], "training": rec["training"],
                       "timings": rec["timings"]} for key, (folder, rec) in runs.items()},
        "tasks": tasks, "metrics": metrics,
        "timings": {"train_s": float(sum(rec["timings"]["train_s"] for _, rec in runs.values())),
                    "stage1_s": float(stage1["train_s"]) if stage1 else 0.0},
        "versions": library_versions(),
        "tags": {"experiment": config.name, "variant": variant.name, "seed": seed, "run_id": run_id,
                 **({IDENTITY_TAG: identity} if identity is not None else {})},
    }).to_dict()


def _run_variant(config: MultiTaskExperimentConfig, variant: MultiTaskVariant, seed: int, out: Path,
                 progress: bool, run_id: str | None = None, identity: dict[str, Any] | None = None) -> dict[str, Any]:
    run_id = run_id or variant_run_id(variant.name, seed)
    stage1 = stage1_encoder(config, variant.pretrain, seed, out, progress) if variant.pretrain else None
    model = stage1["encoder"] if stage1 else (variant.model or config.model)
    tasks = [t.model_dump() for t in config.tasks]
    common = {**multitask_settings(config, variant), "model": model, "seed": seed, "progress": progress,
              "resume": True, "save_model": config.save_models}
    tags = {"experiment": config.name, "variant": variant.name, "seed": seed, "run_id": run_id}
    if identity is not None:
        tags[IDENTITY_TAG] = identity
    steps = config.steps_per_task
    if variant.mode == "multitask":
        plan = {"multitask": (f"{RUNS_DIR}/{run_id}", tasks, steps * len(tasks) if steps else None)}
    else:
        plan = {t["name"]: (f"{RUNS_DIR}/{run_id}/{t['name']}", [t], steps) for t in tasks}
    runs = {}
    for key, (folder, run_tasks, max_steps) in plan.items():
        written = out / folder / RESULTS_NAME
        if written.is_file():  # a finished task run: reused when readable and of this identity, else trained again
            read_written(written, identity)
        record = training.train_multitask(tasks=run_tasks, output=str(out / folder), max_steps=max_steps,
                                 tags={**tags, "run": key}, **common)
        runs[key] = (folder, record.to_dict())
    return _variant_record(config, variant, seed, run_id, model, stage1, runs, identity)


def variant_identity(config: MultiTaskExperimentConfig, variant: MultiTaskVariant, seed: int,
                     data: dict[str, dict[str, Any]], digests: dict[str, str | None]) -> dict[str, Any]:
    """The identity (:mod:`.identity`) of ``variant``'s run with ``seed``: the variant, its training
    settings, every task's entry and data (``data``: each task's row hashes), the steps per task, the
    encoder (``digests``: the hash of a local encoder folder) or the stage-1 entry it starts from."""
    base = config.pretrain[variant.pretrain].model or config.model if variant.pretrain else variant.model or config.model
    spec = {
        "kind": "multitask variant", "variant": variant.model_dump(), "seed": seed,
        "settings": multitask_settings(config, variant), "steps_per_task": config.steps_per_task,
        "tasks": [t.model_dump() for t in config.tasks], "data": data,
        "model": {"name": base, "sha256": digests.get(base)},
        "pretrain": config.pretrain[variant.pretrain].model_dump() if variant.pretrain else None,
    }
    return make_identity(spec)


def _task_data_digests(config: MultiTaskExperimentConfig) -> dict[str, dict[str, Any]]:
    """Each task's loaded data, as its row hashes (:func:`~.identity.text_data_digest`)."""
    out = {}
    for t in config.tasks:
        data = load_data(t.data, text_column=t.text_column, text_pair_column=t.text_pair_column,
                         label_column=t.label_column, validation_data=t.validation_data, test_data=t.test_data,
                         validation_split=t.validation_split)
        out[t.name] = text_data_digest(data)
    return out


def variant_units(config: MultiTaskExperimentConfig, out: Path, progress: bool = True) -> list[Unit]:
    """Every (seed, variant) of ``config`` as a unit of work for the results store (what
    :func:`contrastfit.experiments.run_experiment` runs, skipping the finished ones); each run id ends
    with the run's identity (:func:`variant_identity`), so an edited config makes new runs."""
    data = _task_data_digests(config)
    models = {config.model, *(v.model for v in config.variants if v.model), *(e.model for e in config.pretrain.values() if e.model)}
    digests = {m: path_digest(m) for m in models}

    def unit(seed: int, variant: MultiTaskVariant) -> Unit:
        identity = variant_identity(config, variant, seed, data, digests)
        run_id = with_identity(variant_run_id(variant.name, seed), identity["sha256"])
        return Unit(run_id, f"{variant.name} seed={seed}",
                    lambda: _run_variant(config, variant, seed, out, progress, run_id, identity),
                    claim={"variant": variant.name, "mode": variant.mode, "seed": seed}, identity=identity)

    return [unit(seed, v) for seed in config.seeds for v in config.variants]


# -----------------------------------------------------------------------------------------------
# Summary and report
# -----------------------------------------------------------------------------------------------

def _finite(values: Sequence[Any]) -> list[float]:
    return [float(v) for v in values if v is not None and not np.isnan(float(v))]


def multitask_summary(records: Sequence[dict[str, Any]], tasks: Sequence[str] | None = None,
                      variants: Sequence[str] | None = None) -> dict[str, Any]:
    """One row per variant (in the order of ``variants``, else of the records) over its seeds::

        {"variant", "mode", "n", "seeds", "run_ids",
         "tasks": {task: {"metric", "test": stat, "validation": stat, "headline": {metric: stat}}},
         "average": {"test": stat, "validation": stat}, "train_s": stat, "stage1_s": stat}

    ``stat`` is :func:`~contrastfit.experiments.summary.value_stat`'s ``{"mean", "std", "n", "values"}``
    (undefined values, e.g. Pearson's r of constant predictions, left out); ``metric`` is the task's
    selection metric (accuracy, Pearson's r). Returns ``{"tasks", "metrics", "rows", "stage1"}``
    (``metrics``: each task's selection metric; ``stage1``: one entry per stage-1 encoder)."""
    records = [VariantRecord.model_validate(r) for r in records
               if isinstance(r, Mapping) and r.get("kind") == VARIANT_KIND]  # the store's rows, as written
    if not records:
        raise ContrastfitError("no finished multi-task variant runs")
    tasks = list(tasks or ordered_unique(n for r in records for n in r.tasks))
    order = list(variants or []) + [v for v in ordered_unique(r.variant for r in records) if v not in (variants or [])]
    metric = {n: next(r.tasks[n].spec["metric"] for r in records if n in r.tasks) for n in tasks}
    rows = []
    for name in order:
        mine = sorted((r for r in records if r.variant == name), key=lambda r: r.seed)
        if not mine:
            continue

        def stat(split: str, task: str, key: str) -> dict[str, Any]:
            return value_stat(_finite([metric_of(r.metrics, split, task, key) for r in mine]))

        kinds = {n: mine[0].tasks[n].spec["type"] for n in tasks}
        rows.append({
            "variant": name, "mode": mine[0].mode, "n": len(mine), "seeds": [r.seed for r in mine],
            "run_ids": [r.tags["run_id"] for r in mine],
            "tasks": {n: {"metric": metric[n], "test": stat("test", n, metric[n]),
                          "validation": stat("validation", n, metric[n]),
                          "headline": {k: stat("test", n, k)
                                       for k in HEADLINE["regression" if kinds[n] == "regression" else "classification"]}}
                      for n in tasks},
            "average": {split: value_stat(_finite([metric_of(r.metrics, split, "average") for r in mine]))
                        for split in ("test", "validation")},
            "train_s": value_stat(r.timings["train_s"] for r in mine),
            "stage1_s": value_stat(r.timings["stage1_s"] for r in mine),
        })
    stage1 = {s["folder"]: s for r in records if (s := r.stage1)}
    return {"tasks": tasks, "metrics": metric, "rows": rows, "stage1": list(stage1.values())}


def summary_tables(summary: dict[str, Any]) -> list[Table]:
    """The main table (as in docs/how-to/multi-task.md: rows = variants, each task's test selection metric, their
    average, seconds), the headline metrics of every task, and the stage-1 encoders (when any)."""
    tasks, metric, rows = summary["tasks"], summary["metrics"], summary["rows"]
    seeds = sorted({r["n"] for r in rows})
    main = Table(
        ["variant", *(f"{n} {metric[n]}" for n in tasks), "average", "train s"],
        [[r["variant"], *(format_stat(r["tasks"][n]["test"], metric[n]) for n in tasks),
          format_stat(r["average"]["test"], "average"), f"{r['train_s']['mean'] + r['stage1_s']['mean']:.0f}"]
         for r in rows],
        caption=(f"Test metrics in %, mean ± std over {'/'.join(map(str, seeds))} seed(s); average: the mean of the "
                 "tasks' selection metrics (as in model selection); train s: training seconds per seed, stage 1 "
                 "included."))
    header, body = ["variant"], [[r["variant"]] for r in rows]
    for n in tasks:
        keys = list(rows[0]["tasks"][n]["headline"]) if rows else []
        header += [f"{n} {k}" for k in keys]
        for line, r in zip(body, rows):
            line += [format_stat(r["tasks"][n]["headline"][k], k) for k in keys]
    tables = [main, Table(header, body, caption="Every task's test metrics (MSE raw, the others in %).")]
    if summary.get("stage1"):
        tables.append(Table(
            ["encoder", "method", "base model", "texts", "steps", "final loss", "train s"],
            [[s["folder"], s["method"], str(s["base_model"]), str(s["corpus"].get("n_texts")), str(s["steps"]),
              f"{s['train_loss']:.4g}", f"{s['train_s']:.0f}"] for s in summary["stage1"]],
            caption="Stage-1 encoders (contrastfit pretrain), one per pretrain entry and seed."))
    return tables


def is_multitask_experiment(folder: str | os.PathLike) -> bool:
    """Whether ``folder``'s ``experiment.json`` is a multi-task experiment's (it has ``tasks``)."""
    return "tasks" in load_experiment(folder)


def summarise_folder(folder: str | os.PathLike) -> dict[str, Any]:
    """:func:`multitask_summary` of a multi-task experiment folder's finished variants (tasks and
    variants in the config's order), with the experiment's ``name``: what ``summary.json`` holds."""
    raw = load_experiment(folder)
    summary = multitask_summary(load_runs(folder), [t.get("name") for t in raw.get("tasks", [])] or None,
                                [v.get("name") for v in raw.get("variants", [])] or None)
    return {"name": raw.get("name", Path(folder).name), **summary}


def main_table_text(summary: dict[str, Any]) -> str:
    """The main table of a multi-task summary as Markdown (what the runner prints and ``summary.md``
    holds)."""
    return render_fragment(summary_tables(summary)[:1]).rstrip("\n")


def write_multitask_report(folder: str | os.PathLike) -> dict[str, Any]:
    """``report.md`` and ``report.html`` of a multi-task experiment folder (the report templates), each
    written atomically; returns their paths and the summary."""
    folder = Path(folder)
    raw = load_experiment(folder)
    summary = summarise_folder(folder)
    tables = summary_tables(summary)
    rows = summary["rows"]
    page = Page(f"Multi-task experiment report: {raw.get('name') or folder.name}", facts=[
        ("folder", f"`{folder}`"), ("model", str(raw.get("model", DEFAULT_MODEL))),
        ("tasks", ", ".join(f"{n} ({summary['metrics'][n]})" for n in summary["tasks"])),
        ("variants", ", ".join(r["variant"] for r in rows)),
        ("seeds", ", ".join(map(str, sorted({s for r in rows for s in r["seeds"]})))),
        ("steps per task", str(raw.get("steps_per_task", "the run's step rule"))),
    ])
    page.sections.append(Section("Main table", [tables[0]]))
    page.sections.append(Section("Every metric", [tables[1]]))
    if len(tables) > 2:
        page.sections.append(Section("Stage 1", [tables[2]]))
    page.sections.append(Section("Runs", [Text(
        f"Each variant's record (every task's data hashes and metrics) is in `{STORE_NAME}`; its runs are in "
        f"`{RUNS_DIR}/` ({', '.join(f'`{i}`' for r in rows for i in r['run_ids'])}).")]))
    md = write_text_atomic(folder / REPORT_MD, render_page(page, "md"))
    html = write_text_atomic(folder / REPORT_HTML, render_page(page, "html"))
    return {"markdown": md, "html": html, "summary": summary}
