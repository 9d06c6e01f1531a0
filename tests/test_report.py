"""Experiment reports: tables (numbers against NumPy / SciPy), model selection by validation, the
report files with their figures, graceful skipping of analyses, and the comparison of two folders.

The experiment folders are synthetic: the results are written with ResultsStore directly, with
fixed random numbers, in the layout the runner produces."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from contrastfit.errors import ContrastfitError
from contrastfit.experiments.report import (
    best_variants,
    compare,
    format_markdown_table,
    load_runs,
    main_table_text,
    summary_table,
    write_report,
)
from contrastfit.experiments.store import STORE_NAME, ResultsStore

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LABELS = ["negative", "positive"]
METRICS = ["accuracy", "f1", "macro_f1", "mcc"]
# (method, variant label, hparams, mean validation accuracy, mean test accuracy): the grid point that
# wins on validation (temperature 0.1) loses on test, so a selection that peeked at test would differ.
VARIANTS = [
    ("ce", "ce", {}, 0.70, 0.70),
    ("ce-scl", "ce-scl[temperature=0.1]", {"temperature": 0.1, "lambda": 0.9}, 0.85, 0.75),
    ("ce-scl", "ce-scl[temperature=0.3]", {"temperature": 0.3, "lambda": 0.9}, 0.75, 0.88),
]
SEEDS = [0, 1, 2]
SHOTS = [("shots=16", {"shots": 16}), ("shots=4", {"shots": 4})]
IMBALANCE = [("rho=10", {"rho": 10, "minority": ["negative"], "majority": ["positive"]}),
             ("rho=100", {"rho": 100, "minority_classes": ["negative"], "majority_classes": ["positive"]})]
WORDS = "good great bad awful film plot story actor very the a was".split()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=,-]+", "_", text.replace("[", "_").replace("]", ""))


def _analysis(rng: np.random.Generator, accuracy: float, anchors: bool) -> dict[str, np.ndarray]:
    """40 test points in 2 classes; texts with "but" (every 2nd) and "not" (every 3rd)."""
    labels = np.repeat([0, 1], 20)
    emb = (rng.normal(size=(40, 8)) + labels[:, None] * 2.5).astype(np.float32)
    wrong = rng.random(40) > accuracy
    predictions = np.where(wrong, 1 - labels, labels)
    texts = []
    for i in range(40):
        words = list(rng.choice(WORDS, 4))
        if i % 2 == 0:
            words.insert(2, "but")
        if i % 3 == 0:
            words.insert(1, "not")
        texts.append(" ".join(words))
    out = {"embeddings": emb, "labels": labels, "predictions": predictions, "texts": np.asarray(texts, dtype=str)}
    if anchors:
        out["label_embeddings"] = np.stack([np.zeros(8), np.full(8, 2.5)]).astype(np.float32)
    return out


def build_experiment(folder: Path, seed: int, settings=SHOTS, with_npz: bool = True, test_hashes=None,
                     extra_config: dict | None = None) -> list[dict]:
    """Write FOLDER/experiment.json, FOLDER/results.sqlite (+ a running and a failed run, which the
    report must ignore) and FOLDER/runs/<run_id>/analysis.npz; returns the finished result dicts."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    config = {"name": folder.name, "data": "toy", "model": "tiny", "output": str(folder), "seeds": SEEDS,
              "methods": ["ce", {"name": "ce-scl", "temperature": [0.1, 0.3], "lambda": 0.9}],
              "protocol": {"kind": "few-shot", "shots": [16, 4]}}
    config.update(extra_config or {})
    (folder / "experiment.json").write_text(json.dumps(config), encoding="utf-8")
    results = []
    with ResultsStore(folder / STORE_NAME) as store:
        i = 0
        for setting, params in settings:
            for method, variant, hparams, val_mean, test_mean in VARIANTS:
                for s in SEEDS:
                    rid = _slug(f"{variant}-{setting}-seed{s}")
                    test = {m: float(np.clip(test_mean + rng.normal(0, 0.02) - (0.1 if m == "mcc" else 0.0), 0, 1))
                            for m in METRICS}
                    val = {m: float(np.clip(val_mean + rng.normal(0, 0.02), 0, 1)) for m in METRICS}
                    test["per_class"] = {name: {"precision": float(rng.uniform(0.5, 1)),
                                                "recall": float(rng.uniform(0.5, 1)),
                                                "f1": float(rng.uniform(0.3, 1)), "support": 20} for name in LABELS}
                    test["confusion_matrix"] = rng.integers(0, 20, size=(2, 2)).tolist()
                    loss = rng.uniform(0.5, 1.0)
                    result = {
                        "method": method, "hparams": hparams, "model": "tiny", "seed": s,
                        "metrics": {"validation": val, "test": test},
                        "timings": {"setup_s": 0.1, "train_s": float(rng.uniform(1, 5)), "eval_s": 0.1},
                        "log_history": [{"loss": loss, "step": 5}, {"loss": loss / 2, "step": 10},
                                        {"eval_loss": loss / 1.5, "step": 10}, {"train_runtime": 1.0, "step": 10}],
                        "data": {"name": "toy", "label_names": LABELS,
                                 "test_hash": test_hashes[i] if test_hashes else "testhash0"},
                        "tags": {"experiment": folder.name, "variant": variant, "setting": setting, "sample": 0,
                                 "params": params, "run_id": rid},
                    }
                    i += 1
                    assert store.claim(rid, {"variant": variant})
                    store.finish(rid, result)
                    results.append(json.loads(json.dumps(result)))
                    if with_npz:
                        arrays = _analysis(rng, test["accuracy"], anchors=variant.endswith("0.1]"))
                        (folder / "runs" / rid).mkdir(parents=True)
                        np.savez(folder / "runs" / rid / "analysis.npz", **arrays)
        store.claim("unfinished", {})
        store.claim("broken", {})
        store.fail("broken", "RuntimeError: boom")
    return results


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> tuple[Path, list[dict]]:
    folder = tmp_path_factory.mktemp("exp") / "fewshot"
    return folder, build_experiment(folder, seed=7, extra_config={"top_k": 2})


@pytest.fixture(scope="module")
def report(experiment) -> dict:
    return write_report(experiment[0])


def _runs(results, setting, variant):
    return [r for r in results if r["tags"]["setting"] == setting and r["tags"]["variant"] == variant]


def _assert_png(path: Path) -> None:
    assert path.is_file() and path.stat().st_size > 1000, path
    assert path.read_bytes()[:8] == PNG_MAGIC, path


# ---------------------------------------------------------------------------------------------------

def test_load_runs_ignores_unfinished_and_explains_errors(tmp_path, experiment):
    folder, results = experiment
    runs = load_runs(folder)
    assert len(runs) == len(results) == 18
    assert {r["tags"]["run_id"] for r in runs} == {r["tags"]["run_id"] for r in results}

    with pytest.raises(ContrastfitError, match="no such folder"):
        load_runs(tmp_path / "missing")
    with pytest.raises(ContrastfitError, match=f"no {STORE_NAME}"):
        load_runs(tmp_path)
    assert not (tmp_path / STORE_NAME).exists()  # reading did not create a store
    with ResultsStore(tmp_path / STORE_NAME) as store:
        store.claim("a", {})
        store.fail("a", "x")
    with pytest.raises(ContrastfitError, match="no finished runs"):
        load_runs(tmp_path)


def test_summary_numbers_equal_numpy(experiment):
    _, results = experiment
    rows = summary_table(results, METRICS)
    assert [(r["setting"], r["variant"]) for r in rows] == [
        (s, v[1]) for s in ("shots=4", "shots=16") for v in VARIANTS]  # natural order, baseline first
    for row in rows:
        runs = _runs(results, row["setting"], row["variant"])
        assert row["n"] == 3 and row["baseline"] == "ce" and row["is_baseline"] == (row["variant"] == "ce")
        for m in METRICS:
            values = np.array([r["metrics"]["test"][m] for r in runs])
            assert row["metrics"][m]["mean"] == pytest.approx(values.mean(), abs=1e-12)
            assert row["metrics"][m]["std"] == pytest.approx(values.std(ddof=1), abs=1e-12)
            assert row["metrics"][m]["n"] == 3
        val = np.array([r["metrics"]["validation"]["accuracy"] for r in runs])
        assert row["validation"]["mean"] == pytest.approx(val.mean())
        assert row["top_k"] is None
        assert (row["p_values"] == {}) == row["is_baseline"]
    # the validation split can be summarised the same way
    vrows = summary_table(results, ["accuracy"], split="validation")
    runs = _runs(results, "shots=4", "ce")
    assert vrows[0]["metrics"]["accuracy"]["mean"] == pytest.approx(
        np.mean([r["metrics"]["validation"]["accuracy"] for r in runs]))


def test_top_k_picks_by_validation(experiment):
    _, results = experiment
    rows = summary_table(results, METRICS, top_k=2)
    differs = 0
    for row in rows:
        runs = _runs(results, row["setting"], row["variant"])
        by_val = sorted(runs, key=lambda r: -r["metrics"]["validation"]["accuracy"])[:2]
        by_test = sorted(runs, key=lambda r: -r["metrics"]["test"]["accuracy"])[:2]
        assert row["top_k"]["k"] == 2
        assert row["top_k"]["run_ids"] == [r["tags"]["run_id"] for r in by_val]
        for m in METRICS:
            values = np.array([r["metrics"]["test"][m] for r in by_val])
            assert row["top_k"]["metrics"][m]["mean"] == pytest.approx(values.mean())
            assert row["top_k"]["metrics"][m]["std"] == pytest.approx(values.std(ddof=1))
        differs += {r["tags"]["run_id"] for r in by_val} != {r["tags"]["run_id"] for r in by_test}
    assert differs > 0  # the fixture has rows where picking by test would choose other runs
    with pytest.raises(ContrastfitError, match="top_k"):
        summary_table(results, METRICS, top_k=0)


def test_p_values_equal_scipy(experiment):
    _, results = experiment
    rows = summary_table(results, METRICS)
    checked = 0
    for row in rows:
        if row["is_baseline"]:
            continue
        base = sorted(_runs(results, row["setting"], "ce"), key=lambda r: r["seed"])
        mine = sorted(_runs(results, row["setting"], row["variant"]), key=lambda r: r["seed"])
        for m in METRICS:
            x = [r["metrics"]["test"][m] for r in mine]
            y = [r["metrics"]["test"][m] for r in base]
            p = row["p_values"][m]
            assert p["n_pairs"] == 3
            assert p["wilcoxon_p"] == pytest.approx(stats.wilcoxon(x, y).pvalue)
            assert p["mannwhitney_p"] == pytest.approx(stats.mannwhitneyu(x, y, alternative="two-sided").pvalue)
            assert p["welch_p"] == pytest.approx(stats.ttest_ind(x, y, equal_var=False).pvalue)
            checked += 1
    assert checked == 2 * 2 * len(METRICS)


def test_pairing_by_sample_and_seed(experiment):
    _, results = experiment
    # drop one baseline run: the Wilcoxon test pairs only the (sample, seed) keys both sides have
    runs = [r for r in results if not (r["tags"]["variant"] == "ce" and r["seed"] == 1)]
    row = next(r for r in summary_table(runs, ["accuracy"])
               if r["setting"] == "shots=4" and r["variant"] == "ce-scl[temperature=0.3]")
    assert row["p_values"]["accuracy"]["n_pairs"] == 2
    assert row["p_values"]["accuracy"]["n_baseline"] == 2 and row["p_values"]["accuracy"]["n_method"] == 3


def test_baseline_can_be_chosen(experiment):
    _, results = experiment
    rows = summary_table(results, ["accuracy"], baseline="ce-scl[temperature=0.3]")
    assert rows[0]["variant"] == "ce-scl[temperature=0.3]" and rows[0]["is_baseline"]
    assert all(r["baseline"] == "ce-scl[temperature=0.3]" for r in rows)
    # a method with a grid as the baseline: its best grid point by validation
    rows = summary_table(results, ["accuracy"], baseline="ce-scl")
    assert all(r["baseline"] == "ce-scl[temperature=0.1]" for r in rows)


def test_best_variant_by_validation_not_test(experiment):
    _, results = experiment
    best = best_variants(results)
    assert [(b["setting"], b["method"]) for b in best] == [("shots=4", "ce-scl"), ("shots=16", "ce-scl")]
    for b in best:
        assert b["variant"] == "ce-scl[temperature=0.1]" and b["hparams"]["temperature"] == 0.1
        assert b["n_variants"] == 2
        val = {v: np.mean([r["metrics"]["validation"]["accuracy"] for r in _runs(results, b["setting"], v)])
               for v in b["candidates"]}
        test = {v: np.mean([r["metrics"]["test"]["accuracy"] for r in _runs(results, b["setting"], v)])
                for v in b["candidates"]}
        assert b["candidates"] == pytest.approx(val)
        assert max(val, key=val.get) == b["variant"] != max(test, key=test.get)  # they disagree
    # changing the test scores cannot change the choice
    tampered = json.loads(json.dumps(results))
    for r in tampered:
        r["metrics"]["test"]["accuracy"] = 1.0 if r["tags"]["variant"] == "ce-scl[temperature=0.3]" else 0.0
    assert [b["variant"] for b in best_variants(tampered)] == [b["variant"] for b in best]


def test_best_variant_with_top_k_ranks_by_the_k_best_validation_runs(experiment):
    _, results = experiment
    for b in best_variants(results, top_k=1):
        top1 = {v: max(r["metrics"]["validation"]["accuracy"] for r in _runs(results, b["setting"], v))
                for v in b["candidates"]}
        assert b["candidates"] == pytest.approx(top1)
        assert b["variant"] == max(sorted(top1), key=top1.get)


def test_markdown_layout(experiment):
    _, results = experiment
    rows = summary_table(results, METRICS)
    text = format_markdown_table(rows, METRICS)
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| method"))
    assert [c.strip() for c in header.strip("|").split("|")] == ["method", "shots=4", "shots=16"]
    for _, variant, *_ in VARIANTS:
        line = next(line for line in lines if line.startswith(f"| {variant} "))
        cells = [c.strip() for c in line.strip("|").split("|")]
        for i, setting in enumerate(("shots=4", "shots=16"), start=1):
            acc = np.array([r["metrics"]["test"]["accuracy"] for r in _runs(results, setting, variant)])
            assert cells[i] == f"{100 * acc.mean():.1f} ± {100 * acc.std(ddof=1):.1f}"
    # detailed tables: one per setting, every metric, starred p-values (temperature 0.3 is far above ce)
    assert text.count("### Setting") == 2
    detail = next(line for line in lines if line.startswith("| variant ") and "p accuracy" in line)
    for m in METRICS:
        assert f" {m} " in detail and f"p {m}" in detail
    row03 = next(line for line in lines if line.startswith("| ce-scl[temperature=0.3]") and "W " in line)
    welch = summary_table(results, ["accuracy"])[2]["p_values"]["accuracy"]["welch_p"]
    assert welch < 0.05 and re.search(r"t (<0\.001|0\.\d{3})\*", row03)
    assert "baseline" in next(line for line in lines if line.startswith("| ce ") and "baseline" in line)


def test_write_report(experiment, report):
    folder, results = experiment
    md, page = report["markdown"], report["html"]
    assert md == folder / "report.md" and page == folder / "report.html"
    text, markup = md.read_text(encoding="utf-8"), page.read_text(encoding="utf-8")
    figures = report["figures"]
    names = set(figures)
    for _, variant, *_ in VARIANTS:
        slug = re.sub(r"[^A-Za-z0-9_.=-]+", "_", variant).strip("_.")
        assert f"tsne_{slug}" in names and f"confusion_{slug}" in names
    for setting in ("shots=4", "shots=16"):
        assert f"learning_curves_{setting}" in names and f"distance_groups_{setting}" in names
    assert "accuracy_vs_shots" in names
    for path in figures.values():
        assert path.parent == folder / "figures"
        _assert_png(path)
        assert f"](figures/{path.name})" in text  # relative links in the Markdown
    assert not [p for p in folder.rglob("*.tmp")], "temporary file left behind"
    # HTML: self-contained, one embedded PNG per figure, tables as HTML
    assert markup.count("data:image/png;base64,") == len(figures)
    assert "<table>" in markup and "figures/" not in markup.split("<body>")[1].replace(str(folder), "")
    # the sections that have numbers
    assert "Main table: test accuracy" in text and "top-k" in text
    assert "Hyper-parameter selection" in text and "ce-scl[temperature=0.1]" in text
    assert "Alignment and uniformity" in text and "uniformity" in markup
    assert "Error analysis by word groups" in text
    assert re.search(r"^\| but ", text, re.M) and re.search(r"^\| not ", text, re.M)
    # the main-table cell of the report is numpy's mean ± std
    acc = np.array([r["metrics"]["test"]["accuracy"] for r in _runs(results, "shots=4", "ce")])
    assert f"{100 * acc.mean():.1f} ± {100 * acc.std(ddof=1):.1f}" in text
    assert "analysis.npz" not in text  # nothing was missing


def _alignment_uniformity_by_hand(embeddings: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Wang & Isola (2020) written out pair by pair: on L2-normalised rows, alignment = mean of
    ||x_i - x_j||^2 over same-label pairs i < j, uniformity = log mean exp(-2 ||x_i - x_j||^2) over all
    pairs i < j."""
    import itertools
    import math

    x = [row / math.sqrt(sum(float(v) ** 2 for v in row)) for row in embeddings.astype(float)]
    same, every = [], []
    for i, j in itertools.combinations(range(len(x)), 2):
        d2 = sum((float(a) - float(b)) ** 2 for a, b in zip(x[i], x[j]))
        every.append(math.exp(-2 * d2))
        if labels[i] == labels[j]:
            same.append(d2)
    return sum(same) / len(same), math.log(sum(every) / len(every))


def test_alignment_uniformity_numbers(experiment, report):
    folder, results = experiment
    text = report["markdown"].read_text(encoding="utf-8")
    runs = sorted(_runs(results, "shots=4", "ce"), key=lambda r: r["seed"])
    alignment, uniformity = [], []
    for r in runs:
        with np.load(folder / "runs" / r["tags"]["run_id"] / "analysis.npz") as z:
            a, u = _alignment_uniformity_by_hand(z["embeddings"], z["labels"])
        alignment.append(a)
        uniformity.append(u)
    line = next(line for line in text.splitlines() if line.startswith("| shots=4 ") and "| ce " in line)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells == ["shots=4", "ce", "3", f"{np.mean(alignment):.4f} ± {np.std(alignment, ddof=1):.4f}",
                     f"{np.mean(uniformity):.4f} ± {np.std(uniformity, ddof=1):.4f}"]


def test_main_table_text(experiment):
    folder, results = experiment
    text = main_table_text(folder)
    assert "shots=4" in text and "shots=16" in text and "ce-scl[temperature=0.3]" in text
    acc = np.array([r["metrics"]["test"]["accuracy"] for r in _runs(results, "shots=16", "ce-scl[temperature=0.1]")])
    assert f"{100 * acc.mean():.1f} ± {100 * acc.std(ddof=1):.1f}" in text
    assert "top 2" in text  # experiment.json sets top_k: 2


def test_missing_analysis_and_imbalance(tmp_path):
    folder = tmp_path / "imbalanced"
    results = build_experiment(folder, seed=3, settings=IMBALANCE, with_npz=False,
                               extra_config={"protocol": {"kind": "imbalance"}, "metrics": ["accuracy", "macro_f1"]})
    paths = write_report(folder)
    text = paths["markdown"].read_text(encoding="utf-8")
    assert paths["html"].is_file()
    assert "analysis.npz" in text and "> **Note:**" in text  # skipped analyses are explained
    assert not any(name.startswith(("tsne", "distance_groups")) for name in paths["figures"])
    assert {"confusion_ce", "learning_curves_rho=10", "accuracy_vs_rho"} <= set(paths["figures"])
    for p in paths["figures"].values():
        _assert_png(p)
    assert paths["html"].read_text(encoding="utf-8").count("data:image/png;base64,") == len(paths["figures"])
    # minority vs majority F1
    assert "Minority vs majority classes" in text
    runs = _runs(results, "rho=100", "ce-scl[temperature=0.3]")
    mins = np.array([r["metrics"]["test"]["per_class"]["negative"]["f1"] for r in runs])
    majs = np.array([r["metrics"]["test"]["per_class"]["positive"]["f1"] for r in runs])
    line = next(line for line in text.splitlines() if line.startswith("| rho=100 ") and "temperature=0.3" in line)
    assert f"{100 * mins.mean():.1f} ± {100 * mins.std(ddof=1):.1f}" in line
    assert f"{100 * majs.mean():.1f} ± {100 * majs.std(ddof=1):.1f}" in line
    # experiment.json's metrics are the table's columns
    detail = next(line for line in text.splitlines() if line.startswith("| variant ") and "p accuracy" in line)
    assert "macro_f1" in detail and " mcc " not in detail


def test_different_test_sets_skip_shared_analyses(tmp_path):
    folder = tmp_path / "mixed"
    hashes = [f"h{i % 2}" for i in range(9)]
    build_experiment(folder, seed=5, settings=SHOTS[:1], test_hashes=hashes,
                     extra_config={"analyses": ["distance_groups", "error_analysis"]})
    paths = write_report(folder)
    text = paths["markdown"].read_text(encoding="utf-8")
    assert text.count("do not share one test set") == 2
    assert set(paths["figures"]) == set()  # one setting, no figure-producing analysis requested
    assert "t-SNE" not in text and "Confusion" not in text


def test_compare(tmp_path, experiment):
    folder_a, results_a = experiment
    folder_b = tmp_path / "other"
    results_b = build_experiment(folder_b, seed=11)
    text = compare(folder_a, folder_b, ["accuracy", "mcc"])
    assert "## test accuracy" in text and "## test mcc" in text
    for setting in ("shots=4", "shots=16"):
        for _, variant, *_ in VARIANTS:
            line = next(line for line in text.split("## test mcc")[0].splitlines()
                        if line.startswith(f"| {setting} ") and f" {variant} " in line)
            a = np.array([r["metrics"]["test"]["accuracy"] for r in _runs(results_a, setting, variant)])
            b = np.array([r["metrics"]["test"]["accuracy"] for r in _runs(results_b, setting, variant)])
            assert f"{100 * a.mean():.1f} ± {100 * a.std(ddof=1):.1f}" in line
            assert f"{100 * b.mean():.1f} ± {100 * b.std(ddof=1):.1f}" in line
            assert f"{100 * (b.mean() - a.mean()):+.1f}" in line
            welch = stats.ttest_ind(b, a, equal_var=False).pvalue
            mw = stats.mannwhitneyu(b, a, alternative="two-sided").pvalue
            cells = [c.strip() for c in line.strip("|").split("|")]
            assert cells[-2].rstrip("*") == f"{mw:.3f}"
            assert cells[-1].rstrip("*") == ("<0.001" if welch < 0.001 else f"{welch:.3f}")
    with pytest.raises(ContrastfitError):
        compare(folder_a, tmp_path / "nowhere", ["accuracy"])


def test_regression_experiment(tmp_path):
    folder = tmp_path / "stsb"
    rng = np.random.default_rng(0)
    with ResultsStore(folder / STORE_NAME) as store:
        for variant in ("ce", "simcse"):
            for s in SEEDS:
                test = {"pearson": float(rng.uniform(0.7, 0.9)), "spearman": float(rng.uniform(0.7, 0.9)),
                        "mse": float(rng.uniform(0.5, 1.5))}
                store.finish(f"{variant}-{s}", {
                    "method": variant, "hparams": {}, "seed": s, "timings": {"train_s": 1.0}, "log_history": [],
                    "metrics": {"validation": {k: v + 0.01 for k, v in test.items()}, "test": test},
                    "data": {"label_names": None, "test_hash": "t"},
                    "tags": {"variant": variant, "setting": "full", "sample": 0, "params": {},
                             "run_id": f"{variant}-{s}"}})
    paths = write_report(folder)
    text = paths["markdown"].read_text(encoding="utf-8")
    assert "Main table: test pearson" in text and "p mse" in text
    runs = load_runs(folder)
    mse = np.array([r["metrics"]["test"]["mse"] for r in runs if r["method"] == "simcse"])
    assert f"{mse.mean():.4g} ± {mse.std(ddof=1):.2g}" in text  # MSE is not a percentage
    assert "classification task" in text and paths["figures"] == {}
