"""The CS224N report's comparison through the Python API: one model per task vs one multi-task model,
and multi-task training after a stage-1 encoder trained on a corpus of its own.

Reads a config shaped like ``examples/cs224n_multitask.yaml`` (``tasks``, ``steps_per_task``,
``training``, ``pretrain``, ``variants``, ``seeds``, ``model``, ``output``) and, for every seed:

1. each ``pretrain`` entry: its corpus (``tasks``: the unlabelled texts of the tasks' training splits,
   both sentences of a pair, whitespace-normalised, de-duplicated, shuffled with the seed and cut to
   ``max_texts``; or a text file or data set name) is written to ``encoders/<name>-seed<S>.txt`` and
   :func:`contrastfit.pretrain.pretrain` trains ``encoders/<name>-seed<S>/`` from the config's model;
2. each variant: ``mode: single`` trains one :func:`~contrastfit.multitask.train_multitask` run per task
   (one task, ``steps_per_task`` steps), ``mode: multitask`` one run on all tasks
   (``steps_per_task x number of tasks`` steps, so every task gets as many batches as alone under
   round-robin), from the config's model or ``pretrain:<name>``.

Finished runs (``results.json``) and encoders are reused, so an interrupted comparison continues. The
summary, ``comparison.json`` and ``comparison.md`` in the output folder, holds each variant's test
metric per task (the task's selection metric: accuracy, or Pearson's r), their average, and the
training seconds (stage 1 included for the variants that use it).

Command line (until the experiment runner reads these keys)::

    python -m contrastfit.multitask.comparison examples/cs224n_multitask.yaml [--output DIR]
        [--steps-per-task N] [--variants NAME,NAME] [--quiet]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import write_json_atomic, write_text_atomic
from ..errors import ConfigError, ContrastfitError
from .tasks import Task

TOP_LEVEL = {"name", "model", "seeds", "tasks", "steps_per_task", "training", "pretrain", "variants", "output"}
VARIANT_KEYS = {"name", "mode", "schedule", "temperature", "model", "training"}
PRETRAIN_KEYS = {"method", "corpus", "max_texts", "batch_size", "learning_rate", "max_length", "epochs", "max_steps",
                 "weight_decay", "warmup_ratio", "pooling", "hparams", "text_column", "text_pair_column",
                 "label_column"}


def load_spec(path: str | Path) -> dict[str, Any]:
    """The comparison config from a YAML file, checked (one-line :class:`ConfigError` naming the key)."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return check_spec(spec, str(path))


def check_spec(spec: Any, where: str = "comparison config") -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: expected a mapping at the top level")
    unknown = sorted(set(spec) - TOP_LEVEL)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(TOP_LEVEL))})")
    for key in ("tasks", "variants"):
        if not isinstance(spec.get(key), list) or not spec[key]:
            raise ConfigError(f"{where}: '{key}' must be a non-empty list")
    for i, t in enumerate(spec["tasks"]):
        Task.from_value(t, f"{where}: tasks[{i}]").check()
    pretrain = spec.get("pretrain") or {}
    if not isinstance(pretrain, dict):
        raise ConfigError(f"{where}: 'pretrain' must map names to stage-1 settings")
    for name, p in pretrain.items():
        if not isinstance(p, dict) or "method" not in p:
            raise ConfigError(f"{where}: pretrain.{name} needs at least 'method'")
        bad = sorted(set(p) - PRETRAIN_KEYS)
        if bad:
            raise ConfigError(f"{where}: pretrain.{name}: unknown key(s) {', '.join(bad)} (known: {', '.join(sorted(PRETRAIN_KEYS))})")
    names = []
    for i, v in enumerate(spec["variants"]):
        if not isinstance(v, dict) or not v.get("name") or v.get("mode") not in ("single", "multitask"):
            raise ConfigError(f"{where}: variants[{i}] needs a 'name' and a mode (single or multitask)")
        bad = sorted(set(v) - VARIANT_KEYS)
        if bad:
            raise ConfigError(f"{where}: variants[{i}]: unknown key(s) {', '.join(bad)} (known: {', '.join(sorted(VARIANT_KEYS))})")
        model = str(v.get("model", ""))
        if model.startswith("pretrain:") and model.split(":", 1)[1] not in pretrain:
            raise ConfigError(f"{where}: variants[{i}] uses {model}, which the pretrain section does not define")
        names.append(v["name"])
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: variant names must be distinct, got {names}")
    steps = spec.get("steps_per_task", 60)
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ConfigError(f"{where}: steps_per_task must be an integer >= 1, got {steps!r}")
    return spec


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def task_corpus(tasks: list[Task], max_texts: int | None, seed: int) -> list[str]:
    """The unlabelled texts of the tasks' training splits (both sentences of a pair), whitespace
    normalised, de-duplicated in order, shuffled with ``seed`` and cut to ``max_texts``."""
    from ..data import load_data
    from ..data.loading import TEXT, TEXT_PAIR

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
    order = np.random.default_rng([seed, 11]).permutation(len(texts))
    texts = [texts[i] for i in order]
    return texts[:max_texts] if max_texts else texts


def _stage1(name: str, settings: dict[str, Any], spec: dict[str, Any], tasks: list[Task], out: Path, seed: int,
            progress: bool) -> tuple[str, float]:
    from ..pretrain import pretrain, read_pretrain_record

    folder = out / "encoders" / f"{_slug(name)}-seed{seed}"
    record = read_pretrain_record(folder)
    if record is None:
        opts = dict(settings)
        method = opts.pop("method")
        corpus = opts.pop("corpus", "tasks")
        if corpus == "tasks":
            path = out / "encoders" / f"{_slug(name)}-seed{seed}.txt"
            write_text_atomic(path, "\n".join(task_corpus(tasks, opts.pop("max_texts", None), seed)) + "\n")
            corpus = str(path)
        record = pretrain(method, corpus, str(folder), model=spec.get("model", "minilm-l6"), seed=seed,
                          progress=progress, **opts)
    return str(folder), float(record["timings"]["train_s"])


def _run(tasks: list[dict[str, Any]], output: Path, model: str, steps: int, training: dict[str, Any], seed: int,
         progress: bool, **extra: Any) -> dict[str, Any]:
    from .training import train_multitask

    if (output / "results.json").is_file():
        return json.loads((output / "results.json").read_text(encoding="utf-8"))
    return dict(train_multitask(tasks=tasks, output=str(output), model=model, max_steps=steps, seed=seed,
                                progress=progress, **{**training, **extra}))


def run_comparison(spec: dict[str, Any] | str | Path, output: str | Path | None = None, *,
                   steps_per_task: int | None = None, variants: list[str] | None = None,
                   progress: bool = True) -> dict[str, Any]:
    """Run the comparison (see the module docstring); returns the summary written to
    ``comparison.json``."""
    spec = load_spec(spec) if isinstance(spec, (str, Path)) else check_spec(spec)
    out = Path(output or spec.get("output") or "runs/cs224n-multitask")
    steps = int(steps_per_task or spec.get("steps_per_task", 60))
    task_dicts = [dict(t) if isinstance(t, dict) else t for t in spec["tasks"]]
    tasks = [Task.from_value(t) for t in task_dicts]
    names = [t.name for t in tasks]
    training = dict(spec.get("training") or {})
    chosen = spec["variants"] if not variants else [v for v in spec["variants"] if v["name"] in variants]
    if variants and len(chosen) != len(variants):
        known = ", ".join(v["name"] for v in spec["variants"])
        raise ConfigError(f"--variants {','.join(variants)}: not all are in the config (variants: {known})")
    seeds = spec.get("seeds") or [0]
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        encoders: dict[str, tuple[str, float]] = {}
        for variant in chosen:
            model = str(variant.get("model", spec.get("model", "minilm-l6")))
            stage1_s = 0.0
            if model.startswith("pretrain:"):
                key = model.split(":", 1)[1]
                if key not in encoders:
                    encoders[key] = _stage1(key, spec["pretrain"][key], spec, tasks, out, seed, progress)
                model, stage1_s = encoders[key]
            settings = {**training, **(variant.get("training") or {})}
            extra = {k: variant[k] for k in ("schedule", "temperature") if k in variant}
            base = out / "runs" / f"{_slug(variant['name'])}-seed{seed}"
            if variant["mode"] == "single":
                records = {t["name"]: _run([t], base / t["name"], model, steps, settings, seed, progress, **extra)
                           for t in task_dicts}
            else:
                record = _run(task_dicts, base, model, steps * len(task_dicts), settings, seed, progress, **extra)
                records = {name: record for name in names}
            test = {name: records[name]["metrics"].get("test", {}).get(name, {}) for name in names}
            score = {}
            for t in tasks:
                spec_t = records[t.name]["tasks"][t.name]["spec"]
                value = test[t.name].get(spec_t["metric"])
                score[t.name] = {"metric": spec_t["metric"], "value": value}
            values = [0.0 if v["value"] is None or np.isnan(v["value"]) else v["value"] for v in score.values()]
            train_s = sum({id(r): r["timings"]["train_s"] for r in records.values()}.values())
            rows.append({"variant": variant["name"], "seed": seed, "model": model, "test": score,
                         "average": float(np.mean(values)), "train_s": train_s, "stage1_s": stage1_s,
                         "runs": sorted({str(base / n) if variant["mode"] == "single" else str(base) for n in names})})
    summary = {"name": spec.get("name"), "tasks": names, "steps_per_task": steps, "seeds": seeds,
               "rows": rows, "table": comparison_table(rows, names), "wall_s": time.perf_counter() - t0}
    write_json_atomic(out / "comparison.json", summary)
    write_text_atomic(out / "comparison.md", summary["table"] + "\n")
    if progress:
        print(summary["table"])
    return summary


def comparison_table(rows: list[dict[str, Any]], names: list[str]) -> str:
    """Markdown: one row per variant, test metric per task (%, mean ± std over seeds), average, seconds."""
    order = list(dict.fromkeys(r["variant"] for r in rows))
    metric = {n: next(r["test"][n]["metric"] for r in rows) for n in names}
    head = ["variant", *[f"{n} ({metric[n]})" for n in names], "average", "train s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cell(values: list[float]) -> str:
        values = [v for v in values if v is not None and not np.isnan(v)]
        if not values:
            return "n/a"
        mean = 100 * float(np.mean(values))
        return f"{mean:.1f}" if len(values) == 1 else f"{mean:.1f} ± {100 * float(np.std(values, ddof=1)):.1f}"

    for v in order:
        mine = [r for r in rows if r["variant"] == v]
        cells = [cell([r["test"][n]["value"] for r in mine]) for n in names]
        seconds = float(np.mean([r["train_s"] + r["stage1_s"] for r in mine]))
        lines.append("| " + " | ".join([v, *cells, cell([r["average"] for r in mine]), f"{seconds:.0f}"]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m contrastfit.multitask.comparison", description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("--output")
    parser.add_argument("--steps-per-task", type=int)
    parser.add_argument("--variants", help="comma-separated variant names (default: all)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    try:
        run_comparison(args.config, args.output, steps_per_task=args.steps_per_task,
                       variants=args.variants.split(",") if args.variants else None, progress=not args.quiet)
    except ContrastfitError as exc:
        print(f"contrastfit: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
