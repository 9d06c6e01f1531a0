"""Run an experiment: every (protocol run, method variant, training seed), each in its own folder,
every result in the SQLite results store of the output folder.

Crash safety: a run is claimed in the store before it trains and marked done (with its whole
record) after; :class:`~contrastfit.experiments.store.ResultsStore` commits each step atomically, so
a runner killed at any moment (even SIGKILL) loses at most the run in progress, and a restarted
runner skips what finished. A run that wrote its ``results.json`` but died before the store heard
of it is imported, not retrained. Several runners on one output folder share the work: a run
claimed by a live runner is left to it.

Per run, the runner also saves ``analysis.npz`` (test embeddings, labels, predictions, texts and,
for LaCon, the label embeddings) for the report's figures, and, for the first sample and seed of
the first setting, ``attributions.json``: Shapley values of the words of a few test examples (the
same examples for every method, with their gold label as the target).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..atomic import write_text_atomic
from ..data import load_data
from ..errors import ContrastfitError
from ..modeling import write_json_atomic
from ..training import RESULTS_NAME, TrainConfig, train
from .config import ExperimentConfig
from .plan import Job, jobs, protocol_runs
from .report import ANALYSIS_NAME, ATTRIBUTIONS_NAME, write_report
from .store import STORE_NAME, ResultsStore


def _train_config(config: ExperimentConfig, job: Job, folder: Path, progress: bool, model: str) -> TrainConfig:
    # Trainer checkpoints inside a run are off by default (few-shot runs take a minute; a killed run
    # is simply redone); `training: {save_checkpoints: true, save_steps: N}` turns them on, and a
    # restarted runner then resumes the interrupted run from its last checkpoint (resume=True).
    training = {"save_checkpoints": False, **config.training}
    return TrainConfig(
        method=job.variant.method, data=config.data, output=str(folder), model=model,
        hparams=dict(job.variant.hparams), seed=job.seed, save_model=config.save_models,
        resume=True, progress=progress,
        tags={"experiment": config.name, "variant": job.variant.label, "setting": job.run.setting,
              "sample": job.run.sample, "params": job.run.params, "sampling": job.run.sampling,
              "run_id": job.run_id},
        **training,
    )


def save_analysis(model, test, folder: Path, max_rows: int = 2000) -> None:
    """Test-set embeddings and predictions for the report (at most ``max_rows`` rows)."""
    if test is None or len(test) == 0 or model.task != "classification":
        return
    test = test.select(range(min(len(test), max_rows)))
    texts = list(test["text"])
    pairs = list(test["text_pair"]) if "text_pair" in test.column_names else None
    arrays = {
        "embeddings": model.embed(texts, pairs).astype(np.float32),
        "labels": np.asarray(test["label"], dtype=np.int64),
        "predictions": model.predict_logits(texts, pairs).argmax(axis=1).astype(np.int64),
        "texts": np.asarray(texts, dtype=str),
    }
    anchors = model.method.anchors(model)
    if anchors is not None:  # e.g. LaCon's label embeddings, in the same space as the embeddings
        arrays["label_embeddings"] = torch.nn.functional.normalize(anchors.detach().float(), dim=-1).cpu().numpy()
    tmp = folder / (ANALYSIS_NAME + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    tmp.replace(folder / ANALYSIS_NAME)


def pick_examples(word_counts: list[int], examples: int | list[int], max_words: int) -> list[int]:
    """Test indices to explain: the given list (those in range), or for a count N the first N
    examples of at most ``max_words`` words, topped up with the shortest longer ones."""
    if not isinstance(examples, int):
        return [i for i in examples if 0 <= i < len(word_counts)]
    order = sorted(range(len(word_counts)),
                   key=lambda i: (word_counts[i] > max_words, word_counts[i] if word_counts[i] > max_words else i))
    return sorted(order[:examples])


def save_attributions(model, test, folder: Path, options: dict[str, Any]) -> None:
    """Shapley values of the words of the chosen test examples for their gold label (``options``:
    ``examples`` -- a count (the first test examples of at most ``max_words`` words, then the
    shortest others) or a list of test indices --, ``samples``, ``baseline``; see
    :func:`~contrastfit.evaluation.attributions.token_attributions`)."""
    from ..evaluation.attributions import token_attributions

    if test is None or len(test) == 0 or model.task != "classification":
        return
    seconds = test["text_pair"] if "text_pair" in test.column_names else [None] * len(test)
    words = [len(t.split()) + (len(p.split()) if p else 0) for t, p in zip(test["text"], seconds)]
    indices = pick_examples(words, options["examples"], int(options.get("max_words", 50)))
    if not indices:
        return
    items = []
    for i in indices:
        row = test[int(i)]
        a = token_attributions(model, row["text"], seconds[i], target=int(row["label"]),
                               n_samples=int(options["samples"]), baseline=str(options["baseline"]), seed=int(i))
        items.append({"index": int(i), **a.to_dict()})
    write_json_atomic(folder / ATTRIBUTIONS_NAME, {"options": dict(options), "examples": items})


def _source_model(config: ExperimentConfig, out: Path, progress: bool) -> str:
    """Train (once) the source model of a transfer protocol; return its encoder folder."""
    source = dict(config.protocol["source"])
    folder = out / "source"
    tc = TrainConfig(
        method=source.get("method", "ce"), data=source["data"], output=str(folder), model=config.model,
        hparams=dict(source.get("hparams") or {}), shots=source.get("shots"), train_size=source.get("train_size"),
        epochs=source.get("epochs"), seed=int(source.get("seed", 0)), save_model=True, resume=True,
        progress=progress, tags={"experiment": config.name, "role": "transfer source"},
    )
    print(f"transfer: training the source model ({tc.method} on {tc.data}) in {folder}", flush=True)
    train(tc)
    return str(folder / "encoder")


def run_experiment(config: ExperimentConfig, progress: bool = True) -> dict[str, Any]:
    """Run (or continue) ``config``; return the summary rows. Also writes the report unless
    ``report: false``."""
    out = Path(config.output)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "experiment.json", config.raw)
    data = load_data(config.data, **config.data_options)
    model = _source_model(config, out, progress) if config.protocol_kind == "transfer" else config.model
    plan = jobs(config, protocol_runs(config, data))
    started = time.perf_counter()
    ran, skipped, elsewhere = 0, 0, []
    with ResultsStore(out / STORE_NAME) as store:
        for i, job in enumerate(plan, 1):
            label = f"[{i}/{len(plan)}] {job.variant.label} {job.run.setting} sample={job.run.sample} seed={job.seed}"
            row = store.get(job.run_id)
            if row is not None and row["status"] == "done":
                skipped += 1
                continue
            folder = out / "runs" / job.run_id
            written = folder / RESULTS_NAME
            if written.is_file():  # trained, but the runner died before the store heard of it
                if store.claim(job.run_id, {"imported": True}):
                    store.finish(job.run_id, json.loads(written.read_text(encoding="utf-8")))
                skipped += 1
                continue
            if not store.claim(job.run_id, {"variant": job.variant.label, "setting": job.run.setting,
                                            "sample": job.run.sample, "seed": job.seed}):
                elsewhere.append(job.run_id)
                print(f"{label}: running in another process, left to it", flush=True)
                continue
            eta = ""
            if ran:
                per_run = (time.perf_counter() - started) / ran
                left = len(plan) - i + 1 - len(elsewhere)
                eta = f", about {per_run * left / 60:.1f} min left"
            print(f"{label}{eta}", flush=True)
            try:
                result = train(_train_config(config, job, folder, progress, model), text_data=job.run.data)
                if config.analyses:
                    save_analysis(result.model, job.run.data.test, folder)
                if ("attributions" in config.analyses and job.run.setting == plan[0].run.setting
                        and job.run.sample == 0 and job.seed == config.seeds[0]):  # what the report draws
                    save_attributions(result.model, job.run.data.test, folder, config.attributions)
            except BaseException as exc:
                store.fail(job.run_id, f"{type(exc).__name__}: {exc}")
                raise
            store.finish(job.run_id, dict(result))
            ran += 1
        results = store.done()
    summary = summarise(results, config)
    write_json_atomic(out / "summary.json", summary)
    table = format_table(summary, config.metrics)
    write_text_atomic(out / "summary.md", table + "\n")
    print()
    print(table)
    minutes = (time.perf_counter() - started) / 60
    print(f"\n{len(plan)} runs ({ran} new, {skipped} done earlier"
          + (f", {len(elsewhere)} in other processes" if elsewhere else "") + f") in {minutes:.1f} min; results in {out}")
    if config.report and not elsewhere:
        try:
            paths = write_report(out)
            print(f"report: {paths['markdown']} and {paths['html']}")
        except ContrastfitError as exc:
            print(f"report not written: {exc}")
    return summary


def summarise(results: list[dict[str, Any]], config: ExperimentConfig) -> dict[str, Any]:
    """Mean ± std per (setting, variant) of every metric (test and validation)."""
    from ..evaluation.statistics import summarize

    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        tags = r.get("tags", {})
        groups.setdefault((tags.get("setting", "?"), tags.get("variant", r["method"])), []).append(r)
    rows = []
    for (setting, variant), runs in groups.items():
        row: dict[str, Any] = {"setting": setting, "method": variant, "runs": len(runs),
                               "seeds": [r["seed"] for r in runs]}
        for split in ("test", "validation"):
            for metric in config.metrics:
                values = [r["metrics"][split][metric] for r in runs
                          if split in r["metrics"] and metric in r["metrics"][split]]
                if values:
                    row[f"{split}_{metric}"] = {**summarize(values), "values": values}
        row["train_s_mean"] = float(np.mean([r["timings"]["train_s"] for r in runs]))
        rows.append(row)
    return {"name": config.name, "data": config.data, "model": config.model, "rows": rows}


def format_table(summary: dict[str, Any], metrics: list[str]) -> str:
    """Markdown table: one row per (setting, method), test metrics as mean ± std (in %)."""

    def cell(stat: dict | None) -> str:
        return f"{100 * stat['mean']:.1f} ± {100 * stat['std']:.1f}" if stat else "-"

    header = ["setting", "method", "runs", *(f"test {m}" for m in metrics), "val accuracy", "train s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in summary["rows"]:
        cells = [row["setting"], row["method"], str(row["runs"])]
        cells += [cell(row.get(f"test_{m}")) for m in metrics]
        cells += [cell(row.get("validation_accuracy")), f"{row['train_s_mean']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
