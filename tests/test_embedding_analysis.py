"""Embedding-space numbers: alignment and uniformity (CS224N report Eq. 7-8) against literal loops, and
Sosnowski et al.'s accuracy by distance to the mean embedding (Fig. 2) on a constructed example."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from contrastfit.evaluation import embedding as emb_mod
from contrastfit.evaluation.embedding import (
    alignment,
    alignment_uniformity_by_label,
    distance_to_mean_groups,
    uniformity,
)


def _unit(v):
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def _dist(u, v):
    return math.sqrt(sum((a - b) ** 2 for a, b in zip(u, v)))


def loop_alignment(z1, z2, alpha, normalize=True):
    pairs = [(_unit(a) if normalize else a, _unit(b) if normalize else b) for a, b in zip(z1, z2)]
    return sum(_dist(a, b) ** alpha for a, b in pairs) / len(pairs)


def loop_uniformity(z, t, normalize=True):
    pts = [_unit(a) if normalize else a for a in z]
    vals = [math.exp(-t * _dist(pts[i], pts[j]) ** 2) for i in range(len(pts)) for j in range(i + 1, len(pts))]
    return math.log(sum(vals) / len(vals))


def _data(n=12, d=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    y = x + 0.3 * rng.normal(size=(n, d))
    return x, y


@pytest.mark.parametrize("alpha", [1, 2, 3])
def test_alignment_matches_loop(alpha):
    x, y = _data()
    want = loop_alignment(x.tolist(), y.tolist(), alpha)
    assert alignment(x, y, alpha) == pytest.approx(want, rel=1e-12)
    x32, y32 = torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
    assert alignment(x32, y32, alpha) == pytest.approx(want, rel=1e-5)
    assert alignment(x.tolist(), y.tolist(), alpha) == pytest.approx(want, rel=1e-12)
    assert isinstance(alignment(x, y), float)
    assert alignment(x, y, alpha, normalize=False) == pytest.approx(
        loop_alignment(x.tolist(), y.tolist(), alpha, normalize=False), rel=1e-12)


@pytest.mark.parametrize("t", [1, 2, 5])
def test_uniformity_matches_loop(t):
    x, _ = _data(15, 4, 1)
    assert uniformity(x, t) == pytest.approx(loop_uniformity(x.tolist(), t), rel=1e-12)
    assert uniformity(torch.tensor(x), t) == pytest.approx(loop_uniformity(x.tolist(), t), rel=1e-12)
    want_raw = loop_uniformity(x.tolist(), t, normalize=False)
    assert uniformity(x, t, normalize=False) == pytest.approx(want_raw, rel=1e-10)


def test_uniformity_blocks(monkeypatch):
    # the pair sum is done in row blocks; the result must not depend on the block size
    x, _ = _data(23, 6, 2)
    want = loop_uniformity(x.tolist(), 2)
    for block in (1, 4, 22, 23, 1000):
        monkeypatch.setattr(emb_mod, "_BLOCK", block)
        assert uniformity(x) == pytest.approx(want, rel=1e-12)


def test_known_values():
    # identical unit points: alignment 0, uniformity log(1) = 0
    same = np.ones((5, 3))
    assert alignment(same, same) == 0.0
    assert uniformity(same) == pytest.approx(0.0, abs=1e-12)
    # two antipodal points: ||x - y||^2 = 4, uniformity = -2 * 4
    assert uniformity(np.array([[1.0, 0.0], [-1.0, 0.0]])) == pytest.approx(-8.0, rel=1e-12)
    assert alignment(np.array([[1.0, 0.0]]), np.array([[0.0, 3.0]])) == pytest.approx(2.0, rel=1e-12)
    # a tensor that requires grad is accepted (detached)
    assert isinstance(uniformity(torch.randn(4, 3, requires_grad=True)), float)


def test_bad_inputs():
    with pytest.raises(ValueError, match="two"):
        uniformity(np.ones((1, 3)))
    with pytest.raises(ValueError, match="z2"):
        alignment(np.ones((3, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="z"):
        uniformity(np.ones(3))


def test_by_label_matches_loops():
    x, _ = _data(14, 5, 3)
    labels = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 1])  # class 3 has a single member
    xs = x.tolist()
    pos = [(i, j) for i in range(14) for j in range(i + 1, 14) if labels[i] == labels[j]]
    for alpha, t in ((2, 2), (1, 3)):
        got = alignment_uniformity_by_label(x, labels, alpha, t)
        want_align = loop_alignment([xs[i] for i, _ in pos], [xs[j] for _, j in pos], alpha)
        assert got["alignment"] == pytest.approx(want_align, rel=1e-12)
        assert got["uniformity"] == pytest.approx(loop_uniformity(xs, t), rel=1e-12)
        assert got["n"] == 14 and got["n_positive_pairs"] == len(pos) and got["n_pairs"] == 91
    # torch inputs, string labels, no normalisation
    got = alignment_uniformity_by_label(torch.tensor(x), [str(v) for v in labels], normalize=False)
    want_align = loop_alignment([xs[i] for i, _ in pos], [xs[j] for _, j in pos], 2, normalize=False)
    assert got["alignment"] == pytest.approx(want_align, rel=1e-12)
    assert got["uniformity"] == pytest.approx(loop_uniformity(xs, 2, normalize=False), rel=1e-10)


def test_by_label_without_positive_pairs():
    x, _ = _data(4, 3, 4)
    got = alignment_uniformity_by_label(x, torch.arange(4))
    assert math.isnan(got["alignment"]) and got["n_positive_pairs"] == 0
    assert math.isfinite(got["uniformity"])
    with pytest.raises(ValueError, match="labels"):
        alignment_uniformity_by_label(x, [0, 1])


# ---------------------------------------------------------------------------------------------
# Distance to the mean embedding (Sosnowski et al., Fig. 2)
# ---------------------------------------------------------------------------------------------

def _ring_example():
    """10 points at known distances 1..10 from their mean (pairs at +-r along one axis, mean 0)."""
    radii = [1, 2, 3, 4, 5]
    pts, dist = [], []
    for r in radii:
        pts += [[r, 0.0], [-r, 0.0]]
        dist += [r, r]
    # shuffle the input order so that sorting is exercised
    order = [7, 2, 9, 0, 5, 3, 8, 1, 6, 4]
    pts = np.array([pts[k] for k in order])
    dist = np.array([dist[k] for k in order], dtype=float)
    return pts, dist


def test_distance_groups_constructed_example():
    pts, dist = _ring_example()
    # correct only for the two nearest groups' first point and all of the farthest
    correct = np.isin(dist, [1, 5]) | ((dist == 2) & (pts[:, 0] > 0))
    groups = distance_to_mean_groups(pts, correct, groups=5)
    assert [g["group"] for g in groups] == [1, 2, 3, 4, 5]
    assert [g["n"] for g in groups] == [2, 2, 2, 2, 2]
    assert [g["min_distance"] for g in groups] == pytest.approx([1, 2, 3, 4, 5])
    assert [g["max_distance"] for g in groups] == pytest.approx([1, 2, 3, 4, 5])
    assert [g["accuracy"] for g in groups] == pytest.approx([1.0, 0.5, 0.0, 0.0, 1.0])
    # two groups of five
    two = distance_to_mean_groups(pts, correct, groups=2)
    assert [g["n"] for g in two] == [5, 5]
    assert two[0]["min_distance"] == pytest.approx(1) and two[0]["max_distance"] == pytest.approx(3)
    assert two[1]["min_distance"] == pytest.approx(3) and two[1]["max_distance"] == pytest.approx(5)
    # group 1: distances 1,1,2,2,3 -> correct 1,1,1,0,0 ; group 2: 3,4,4,5,5 -> 0,0,0,1,1
    assert two[0]["accuracy"] == pytest.approx(3 / 5) and two[1]["accuracy"] == pytest.approx(2 / 5)


def test_distance_groups_mean_is_subtracted_and_several_models():
    pts, dist = _ring_example()
    shifted = pts + np.array([100.0, -40.0])  # distances are to the mean, not to the origin
    a = dist <= 2
    b = ~a
    groups = distance_to_mean_groups(torch.tensor(shifted), {"ce": a, "ce+supcon": torch.tensor(b)}, groups=5)
    assert [g["min_distance"] for g in groups] == pytest.approx([1, 2, 3, 4, 5])
    assert [g["accuracy"]["ce"] for g in groups] == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert [g["accuracy"]["ce+supcon"] for g in groups] == [0.0, 0.0, 1.0, 1.0, 1.0]


def test_distance_groups_equal_sizes_random():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(103, 8))
    correct = rng.random(103) < 0.7
    groups = distance_to_mean_groups(x, correct, groups=5)
    sizes = [g["n"] for g in groups]
    assert sum(sizes) == 103 and max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    # groups are ordered and do not overlap
    for g, h in zip(groups, groups[1:]):
        assert g["max_distance"] <= h["min_distance"]
    # the group accuracies, weighted by size, give the overall accuracy; each one recomputed by hand
    assert sum(g["accuracy"] * g["n"] for g in groups) / 103 == pytest.approx(correct.mean())
    dist = np.linalg.norm(x - x.mean(axis=0), axis=1)
    order = np.argsort(dist, kind="stable")
    start = 0
    for g in groups:
        idx = order[start:start + g["n"]]
        assert g["accuracy"] == pytest.approx(correct[idx].mean())
        start += g["n"]
    x100 = x[:100]
    assert [g["n"] for g in distance_to_mean_groups(x100, correct[:100])] == [20] * 5


def test_distance_groups_bad_inputs():
    x = np.zeros((3, 2))
    with pytest.raises(ValueError, match="groups"):
        distance_to_mean_groups(x, [True, False, True], groups=4)
    with pytest.raises(ValueError, match="groups"):
        distance_to_mean_groups(x, [True, False, True], groups=0)
    with pytest.raises(ValueError, match="correct"):
        distance_to_mean_groups(x, [True, False], groups=1)


# ---------------------------------------------------------------------------------------------
# Sosnowski Fig. 2 uses the UN-normalised embeddings (analysis.npz `embeddings_raw`)
# ---------------------------------------------------------------------------------------------

def _raw_vs_normalised(n=16, d=4, seed=3):
    """Raw embeddings whose distance-to-mean order differs from that of their L2-normalised rows."""
    rng = np.random.default_rng(seed)
    raw = rng.normal(size=(n, d)) * rng.uniform(0.2, 5.0, size=(n, 1))  # very different norms
    unit = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    d_raw = np.linalg.norm(raw - raw.mean(axis=0), axis=1)
    d_unit = np.linalg.norm(unit - unit.mean(axis=0), axis=1)
    assert not np.array_equal(np.argsort(d_raw, kind="stable"), np.argsort(d_unit, kind="stable"))
    return raw.astype(np.float32), unit.astype(np.float32), d_raw


def _groups_by_hand(dist, correct, groups):
    order = np.argsort(dist, kind="stable")
    return [float(correct[idx].mean()) for idx in np.array_split(order, groups)]


def test_distance_reference_is_the_raw_embeddings():
    raw, unit, d_raw = _raw_vs_normalised()
    ref, is_raw = emb_mod.distance_reference({"embeddings": unit, "embeddings_raw": raw})
    assert is_raw and np.array_equal(ref, raw)
    correct = np.arange(16) % 3 == 0
    groups = distance_to_mean_groups(ref, correct, groups=4)
    assert len(groups) == 4
    # each group's distances are the Euclidean distances of the RAW rows to the RAW mean
    order = np.argsort(d_raw, kind="stable")
    for g, idx in zip(groups, np.array_split(order, 4)):
        assert g["min_distance"] == pytest.approx(d_raw[idx].min(), rel=1e-5)
        assert g["max_distance"] == pytest.approx(d_raw[idx].max(), rel=1e-5)
    assert [g["accuracy"] for g in groups] == pytest.approx(_groups_by_hand(d_raw, correct, 4))
    # files written before embeddings_raw existed fall back to the normalised ones, and say so
    ref, is_raw = emb_mod.distance_reference({"embeddings": unit})
    assert not is_raw and np.array_equal(ref, unit)


def test_runner_saves_raw_embeddings_and_report_groups_by_their_distances(tmp_path, tiny_encoder_dir):
    import csv

    import yaml

    from conftest import sentiment_rows
    from contrastfit import ContrastiveClassifier
    from contrastfit.experiments import load_config, run_experiment
    from contrastfit.experiments.report import write_report

    def write_csv(path, rows):
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=["sentence", "sentiment"])
            writer.writeheader()
            writer.writerows(rows)
        return path

    train = write_csv(tmp_path / "train.csv", sentiment_rows(30, seed=1))
    test = write_csv(tmp_path / "test.csv", sentiment_rows(8, seed=2))
    raw_config = {"name": "tiny", "data": str(train), "model": str(tiny_encoder_dir),
                  "data_options": {"label_column": "sentiment", "test_data": str(test)},
                  "methods": ["ce", "ce-scl"], "protocol": {"kind": "few-shot", "shots": 4}, "seeds": [0],
                  "validation_size": 8, "training": {"epochs": 1, "batch_size": 4, "learning_rate": 1e-3, "min_steps": 1},
                  "analyses": ["distance_groups"], "report": False, "save_models": True, "baseline": "ce",
                  "output": str(tmp_path / "out")}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw_config), encoding="utf-8")
    run_experiment(load_config(path), progress=False)
    out = tmp_path / "out"
    # each run's folder: its id, ended by its identity
    folders = {m: next((out / "runs").glob(f"{m}-shots=4-sample0-seed0-*")) for m in ("ce", "ce-scl")}
    texts = [r["sentence"] for r in sentiment_rows(8, seed=2)]
    arrays = {}
    for name, folder in folders.items():
        with np.load(folder / "analysis.npz", allow_pickle=False) as z:
            arrays[name] = {k: z[k] for k in z.files}
        a = arrays[name]
        # the raw embeddings are the model's un-normalised ones; "embeddings" stay L2-normalised
        model = ContrastiveClassifier.from_pretrained(folder)
        expected = model.embed([str(t) for t in a["texts"]], normalize=False)
        assert sorted(str(t) for t in a["texts"]) == sorted(texts)
        np.testing.assert_allclose(a["embeddings_raw"], expected, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.linalg.norm(a["embeddings"], axis=1), 1.0, rtol=1e-5)
        np.testing.assert_allclose(a["embeddings"], expected / np.linalg.norm(expected, axis=1, keepdims=True),
                                   rtol=1e-4, atol=1e-5)
        assert not np.allclose(np.linalg.norm(a["embeddings_raw"], axis=1), 1.0)
    # Give the baseline raw embeddings whose distance order differs from that of its normalised ones,
    # and predictions right exactly for the raw-nearest half: the report's groups must follow the raw
    # distances (the normalised embeddings give other group accuracies).
    a = arrays["ce"]
    n = len(a["labels"])
    groups = min(5, n)
    raw, unit, d_raw = _raw_vs_normalised(n=n, d=a["embeddings"].shape[1], seed=7)
    near = np.zeros(n, dtype=bool)
    near[np.argsort(d_raw, kind="stable")[: n // 2]] = True
    a = {**a, "embeddings": unit, "embeddings_raw": raw,
         "predictions": np.where(near, a["labels"], 1 - a["labels"]).astype(np.int64)}
    arrays["ce"] = a
    np.savez_compressed(folders["ce"] / "analysis.npz", **a)
    d_unit = np.linalg.norm(unit - unit.mean(axis=0), axis=1)
    assert _groups_by_hand(d_unit, near, groups) != _groups_by_hand(d_raw, near, groups)
    write_report(out)
    markdown = (out / "report.md").read_text(encoding="utf-8")
    lines = markdown[markdown.index("## Accuracy by distance to the mean"):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| group"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[start + 2:start + 2 + groups]]
    for name in ("ce", "ce-scl"):
        b = arrays[name]
        want = [f"{100 * x:.1f}" for x in _groups_by_hand(d_raw, b["predictions"] == b["labels"], groups)]
        assert [r[header.index(f"{name} acc")] for r in rows] == want, name
    assert [r[header.index("ce acc")] for r in rows][0] == "100.0" and rows[-1][header.index("ce acc")] == "0.0"
