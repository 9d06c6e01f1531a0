"""The default recipe's logistic head: how its regularisation C changes few-shot accuracy.

``ce-scl-lr`` ends with scikit-learn's L2 logistic regression (``head_C``, 1 by default, as SetFit's
head) fitted on the fine-tuned, frozen encoder's normalised embeddings. C does not touch the encoder,
so this study fine-tunes once per training sample (the default recipe, exactly as
``bench/fewshot.py``'s ``default`` system: same samples, same test set, same seed) and then refits
the head for every C in ``--C`` on the same encoder (:func:`contrastfit.head_stage.train_head`, the
recipe's own stage 2, label-name prior included), and once more at the C that stratified k-fold
cross-validation on the training sample itself picks (``C by CV``: what issue 22 asks about, instead
of a validation split carved out of a tiny sample). A refit at the recipe's C must give back the
trained model's test accuracy exactly; the study stops otherwise. The time of a refit is the head
stage's (about a second): choosing C costs no fine-tuning.

One JSON line per (data, K, sample) goes to ``bench/results/NAME_runs.jsonl`` (resumable; a record
is reused only while the default recipe and the C grid are the same), the summary (mean +- std per
C, paired differences against C = 1) to ``NAME.{json,md}``.

    python bench/head_c.py --data mr bbc-news --shots 8 --samples 3 --C 0.1 1 10
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from contrastfit.atomic import write_json_atomic, write_text_atomic  # noqa: E402
from contrastfit.data import data_hash, load_data  # noqa: E402
from contrastfit.experiments.protocols.few_shot import few_shot  # noqa: E402
from contrastfit.head_stage import train_head  # noqa: E402
from contrastfit.config import TrainConfig  # noqa: E402
from contrastfit.trainer import tokenize_dataset  # noqa: E402
from contrastfit.training import train  # noqa: E402
from contrastfit.versions import library_versions  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def _features(clf, ds, collator) -> tuple[np.ndarray, np.ndarray]:
    """The frozen encoder's head features of ``ds``, as stage 2 sees them (eval mode, no dropout)."""
    import torch
    from torch.utils.data import DataLoader

    clf.eval()
    xs, ys = [], []
    for batch in DataLoader(ds, batch_size=64, shuffle=False, collate_fn=collator):
        batch = {k: v.to(clf.device) for k, v in batch.items()}
        ys.append(batch.pop("labels").cpu())
        with torch.no_grad():
            xs.append(clf.method.head_features(clf, batch).float().cpu())
    return torch.cat(xs).numpy(), torch.cat(ys).numpy()


def cv_C(clf, x: np.ndarray, y: np.ndarray, grid: list[float], seed: int) -> tuple[float, dict[str, float]]:
    """C chosen by stratified k-fold cross-validation on the training sample itself (k = the smaller
    of 5 and the rarest class's count), the label names (the recipe's prior) in every training fold
    with the weight stage 2 gives them; ties go to the C nearest 1 (on a log scale)."""
    import torch
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    prior = float(clf.method.hparams.get("label_prior", 0.0))
    anchors = clf.method.label_features(clf) if prior > 0 and hasattr(clf.method, "label_features") else None
    if anchors is not None:
        with torch.no_grad():
            anchors = anchors.float().cpu().numpy()
    k = int(min(5, np.bincount(y).min()))
    folds = list(StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(x, y))
    scores: dict[str, float] = {}
    for c in grid:
        acc = []
        for tr, te in folds:
            xt, yt, w = x[tr], y[tr], np.ones(len(tr))
            if anchors is not None:
                xt = np.concatenate([xt, anchors])
                yt = np.concatenate([yt, np.arange(len(anchors))])
                w = np.concatenate([w, np.full(len(anchors), prior * len(tr) / len(anchors))])
            model = LogisticRegression(C=c, max_iter=1000, random_state=seed).fit(xt, yt, sample_weight=w)
            acc.append(float((model.predict(x[te]) == y[te]).mean()))
        scores[f"{c:g}"] = float(np.mean(acc))
    best = max(scores.values())
    chosen = min((float(c) for c, s in scores.items() if s == best), key=lambda c: abs(np.log(c)))
    return chosen, scores


def refit_accuracies(data, seed: int, model: str, max_length: int, workdir: Path, grid: list[float]) -> dict[str, Any]:
    """Fine-tune the default recipe on ``data`` once, then refit its head for every C of ``grid`` and
    for the C that cross-validation on the training sample picks (``"cv"``)."""
    import torch
    from transformers import DataCollatorWithPadding

    result = train(TrainConfig(data=data.name, output=str(workdir / f"head-c-{time.time_ns()}"), model=model,
                               seed=seed, max_length=max_length, save_model=False, save_checkpoints=False,
                               progress=False), text_data=data)
    clf = result.model
    recipe_c = float(clf.method.hparams["head_C"])
    trained = result.metrics["test"]["accuracy"]
    train_ds = tokenize_dataset(data.train, clf.tokenizer, clf.max_length)
    test_ds = tokenize_dataset(data.test, clf.tokenizer, clf.max_length)
    collator = DataCollatorWithPadding(clf.tokenizer)
    x_test, y_test = _features(clf, test_ds, collator)  # the encoder is frozen: its test features are fixed

    def refit(c: float) -> dict[str, float]:
        clf.method.hparams["head_C"] = float(c)
        t0 = time.perf_counter()
        train_head(clf, train_ds, collator, seed=seed)
        refit_s = time.perf_counter() - t0
        clf.head.eval()
        with torch.no_grad():
            pred = clf.head(torch.as_tensor(x_test, device=clf.device)).argmax(-1).cpu().numpy()
        return {"accuracy": float((pred == y_test).mean()), "refit_s": refit_s}

    out: dict[str, Any] = {f"{c:g}": refit(c) for c in sorted(set(grid) | {recipe_c})}
    x_train, y_train = _features(clf, train_ds, collator)
    chosen, scores = cv_C(clf, x_train, y_train, grid, seed)
    out["cv"] = {**out[f"{chosen:g}"], "C": chosen, "cv_accuracy": scores}
    clf.method.hparams["head_C"] = recipe_c
    if abs(out[f"{recipe_c:g}"]["accuracy"] - trained) > 1e-9:
        raise SystemExit(f"the refit at C = {recipe_c:g} gave {out[f'{recipe_c:g}']['accuracy']:.4f}, the trained model "
                         f"{trained:.4f}: the refit is not the recipe's head stage")
    return {"accuracy": trained, "by_C": out, "recipe_C": recipe_c, "method": result["method"], "hparams": result["hparams"],
            "training": {k: v for k, v in result["training"].items() if k not in ("head_stage", "head_init")},
            "train_s": result["timings"]["setup_s"] + result["timings"]["train_s"]}


def _order(c: str) -> float:
    return float("inf") if c == "cv" else float(c)


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    from scipy import stats

    cells: dict[tuple, list[dict]] = {}
    for r in records:
        cells.setdefault((r["data"], r["shots"]), []).append(r)
    rows = []
    for (data, shots), rs in sorted(cells.items()):
        base = np.array([r["by_C"][f"{r['recipe_C']:g}"]["accuracy"] for r in rs]) * 100
        for c in sorted({c for r in rs for c in r["by_C"]}, key=_order):
            acc = np.array([r["by_C"][c]["accuracy"] for r in rs]) * 100
            d = acc - base
            p = None if np.allclose(d, d[0]) or len(d) < 2 else float(stats.ttest_rel(acc, base).pvalue)
            rows.append({"data": data, "shots": shots, "C": c, "n": len(rs), "accuracy_mean": float(acc.mean()),
                         "accuracy_std": float(acc.std(ddof=1)) if len(acc) > 1 else 0.0,
                         "vs_recipe": float(d.mean()), "p_ttest": p})
    return {"rows": rows}


def markdown(summary: dict[str, Any]) -> str:
    grid = sorted({r["C"] for r in summary["rows"]}, key=_order)
    lines = ["| data | K | n | " + " | ".join("C by CV" if c == "cv" else f"C = {c}" for c in grid) + " |",
             "|---|---|---|" + "---|" * len(grid)]
    cells: dict[tuple, dict[str, dict]] = {}
    for r in summary["rows"]:
        cells.setdefault((r["data"], r["shots"]), {})[r["C"]] = r
    for (data, shots), by_c in cells.items():
        n = next(iter(by_c.values()))["n"]

        def cell(r):
            if r is None:
                return "–"
            p = "" if r["p_ttest"] is None else f", p={r['p_ttest']:.2f}" if r["p_ttest"] >= 0.01 else ", p<0.01"
            diff = "" if r["vs_recipe"] == 0 and r["p_ttest"] is None else f" ({r['vs_recipe']:+.1f}{p})"
            return f"{r['accuracy_mean']:.1f} ± {r['accuracy_std']:.1f}{diff}"

        lines.append(f"| {data} | {shots} | {n} | " + " | ".join(cell(by_c.get(c)) for c in grid) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", nargs="+", default=["mr", "imdb", "bbc-news", "medmcqa-subject"])
    p.add_argument("--shots", nargs="+", type=int, default=[4, 8, 16])
    p.add_argument("--samples", type=int, default=5)
    p.add_argument("--C", nargs="+", type=float, default=[0.1, 0.3, 1.0, 3.0, 10.0, 30.0])
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--test-size", type=int, default=1000)
    p.add_argument("--validation-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default="head_c")
    args = p.parse_args(argv)

    import fewshot  # bench/fewshot.py (Python puts the running script's folder, bench/, on the path)

    runs_path = RESULTS / f"{args.name}_runs.jsonl"
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / "contrastfit-bench"
    records = fewshot.read_records(runs_path)
    latest = {(r["data"], r["shots"], r["sample"]): r for r in records}
    for data_name in args.data:
        data = fewshot.fixed_test(load_data(data_name), args.test_size)
        for run in few_shot(data, shots=args.shots, samples=args.samples, validation_size=args.validation_size,
                            seed=args.seed):
            shots = run.params["shots"]
            key = (data_name, shots, run.sample)
            expected = fewshot.recipe("default", len(run.data.train), args.model, args.max_length)
            if key in latest and not fewshot.stale(latest[key], expected) and \
                    {f"{c:g}" for c in args.C} | {"cv"} <= set(latest[key]["by_C"]):
                continue
            record = {"data": data_name, "shots": shots, "sample": run.sample, "train_hash": data_hash(run.data.train),
                      "test_hash": data_hash(run.data.test), "test_size": len(run.data.test), "seed": args.seed,
                      "model": args.model, **refit_accuracies(run.data, args.seed, args.model, args.max_length,
                                                             workdir, args.C),
                      "versions": library_versions()}
            fewshot.append_record(runs_path, record)
            latest[key] = record
            best = max(((c, v) for c, v in record["by_C"].items() if c != "cv"), key=lambda kv: kv[1]["accuracy"])
            print(f"{data_name} K={shots} sample {run.sample}: "
                  + ", ".join(f"C={c} {100 * v['accuracy']:.1f}" for c, v in record["by_C"].items())
                  + f" (best C={best[0]}, CV chose {record['by_C']['cv']['C']:g})", flush=True)
            summary = {"config": vars(args), **summarise(list(latest.values()))}
            write_json_atomic(RESULTS / f"{args.name}.json", summary)
            write_text_atomic(RESULTS / f"{args.name}.md", markdown(summary))
    print(markdown(summarise(list(latest.values()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
