"""Run an experiment: every (setting, method variant, seed), each in its own folder.

A run whose ``results.json`` exists is skipped, so an interrupted experiment picks up where it
stopped; results are written atomically, so nothing finished is lost. At the end the runner prints
the table (mean +- std over seeds of the test metrics, with the validation accuracy) and writes it
to ``summary.md`` and ``summary.json``.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..data import load_data
from ..modeling import write_json_atomic
from ..training import RESULTS_NAME, TrainConfig, train
from .config import ExperimentConfig, MethodVariant, Setting


def run_id(variant: MethodVariant, setting: Setting, seed: int) -> str:
    raw = f"{variant.label}-{setting.label}-seed{seed}"
    return re.sub(r"[^A-Za-z0-9_.=,-]+", "_", raw.replace("[", "_").replace("]", ""))


def plan(config: ExperimentConfig) -> list[tuple[Setting, MethodVariant, int]]:
    return [(s, v, seed) for s in config.settings for v in config.methods for seed in config.seeds]


def run_experiment(config: ExperimentConfig, progress: bool = True) -> dict[str, Any]:
    out = Path(config.output)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "experiment.json", config.raw)
    data = load_data(config.data, **config.data_options)
    jobs = plan(config)
    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    ran = 0
    for i, (setting, variant, seed) in enumerate(jobs, 1):
        folder = out / "runs" / run_id(variant, setting, seed)
        done = folder / RESULTS_NAME
        if done.is_file():
            results.append(json.loads(done.read_text(encoding="utf-8")))
            print(f"[{i}/{len(jobs)}] {variant.label} {setting.label} seed={seed}: done earlier, skipped", flush=True)
            continue
        eta = ""
        if ran:
            per_run = (time.perf_counter() - started) / ran
            eta = f", about {per_run * (len(jobs) - i + 1) / 60:.1f} min left"
        print(f"[{i}/{len(jobs)}] {variant.label} {setting.label} seed={seed}{eta}", flush=True)
        tc = TrainConfig(
            method=variant.method, data=config.data, output=str(folder), model=config.model,
            hparams=dict(variant.hparams), shots=setting.shots, train_size=setting.train_size,
            validation_size=config.validation_size, seed=seed, save_model=config.save_models,
            save_checkpoints=False, resume=True, progress=progress,
            tags={"experiment": config.name, "variant": variant.label, "setting": setting.label},
            **config.training, **config.data_options,
        )
        results.append(dict(train(tc, text_data=data)))
        ran += 1
    summary = summarise(results, config)
    write_json_atomic(out / "summary.json", summary)
    table = format_table(summary, config.metrics)
    (out / "summary.md").write_text(table + "\n", encoding="utf-8")
    print()
    print(table)
    print(f"\n{len(jobs)} runs ({ran} new) in {(time.perf_counter() - started) / 60:.1f} min; results in {out}")
    return summary


def summarise(results: list[dict[str, Any]], config: ExperimentConfig) -> dict[str, Any]:
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
                values = [r["metrics"][split][metric] for r in runs if split in r["metrics"] and metric in r["metrics"][split]]
                if values:
                    row[f"{split}_{metric}"] = {"mean": float(np.mean(values)), "std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
                                                "values": values}
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
