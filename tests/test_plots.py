"""Analysis figures: every function writes a valid, non-empty PNG atomically and returns its path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from contrastfit.evaluation.plots import (
    plot_confusion,
    plot_distance_groups,
    plot_learning_curves,
    plot_metric_vs_setting,
    plot_tsne,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path, returned) -> None:
    assert Path(returned) == path
    assert path.is_file() and path.stat().st_size > 1000
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")], "temporary file left behind"


def test_tsne_with_anchors(tmp_path):
    rng = np.random.default_rng(0)
    labels = np.repeat([0, 1, 2], 10)
    emb = rng.normal(size=(30, 8)) + labels[:, None] * 3.0
    anchors = np.stack([np.full(8, 3.0 * i) for i in range(3)])
    path = tmp_path / "figs" / "tsne_lacon.png"
    assert_png(path, plot_tsne(emb, labels, ["neg", "neu", "pos"], path, "LaCon test embeddings", anchors=anchors))


def test_tsne_small_and_named_labels(tmp_path):
    # 5 points: perplexity must be clipped below n; labels given by name.
    emb = np.arange(20, dtype=float).reshape(5, 4)
    path = tmp_path / "tsne.png"
    assert_png(path, plot_tsne(emb, ["a", "b", "a", "b", "a"], ["a", "b"], path, "tiny", seed=1))
    with pytest.raises(ValueError):
        plot_tsne(emb[:2], [0, 1], ["a", "b"], tmp_path / "x.png", "too few")
    with pytest.raises(ValueError):
        plot_tsne(emb, [0, 1, 2, 0, 1], ["a", "b"], tmp_path / "x.png", "bad label")


def test_confusion(tmp_path):
    path = tmp_path / "confusion.png"
    assert_png(path, plot_confusion([[5, 1], [2, 7]], ["negative", "positive"], path, "CE"))
    with pytest.raises(ValueError):
        plot_confusion([[1, 2]], ["a", "b"], tmp_path / "bad.png", "bad")


def test_learning_curves(tmp_path):
    history = [{"loss": 1.0 / (s + 1), "step": s, "learning_rate": 1e-5} for s in range(1, 20)]
    history += [{"eval_loss": 0.8 - 0.01 * s, "step": s} for s in (5, 10, 15)]
    history += [{"train_runtime": 3.2, "step": 19}]
    path = tmp_path / "curves.png"
    assert_png(path, plot_learning_curves({"ce-seed0": history, "lacon-seed0": history[:5]}, path))
    empty = tmp_path / "empty.png"
    assert_png(empty, plot_learning_curves({"x": [{"step": 1}]}, empty))


@pytest.mark.parametrize("kind", ["bar", "line"])
def test_distance_groups(tmp_path, kind):
    groups = {m: [{"group": f"q{i}", "accuracy": 0.9 - 0.1 * i + d} for i in range(4)]
              for m, d in (("ce", 0.0), ("lacon", 0.03))}
    path = tmp_path / f"distance_{kind}.png"
    assert_png(path, plot_distance_groups(groups, path, kind=kind))


def test_metric_vs_setting_raw_runs_and_summaries(tmp_path):
    rows = [{"shots": k, "method": m, "accuracy": 0.5 + 0.01 * k + 0.01 * seed + (0.02 if m == "lacon" else 0)}
            for k in (4, 16, 64, 256) for m in ("ce", "lacon") for seed in range(3)]
    path = tmp_path / "kshot.png"
    assert_png(path, plot_metric_vs_setting(rows, "shots", "accuracy", "method", path))
    summary_rows = [{"ratio": r, "method": m, "test_accuracy": {"mean": 0.8 - 0.01 * i, "std": 0.02, "values": []}}
                    for i, r in enumerate(("1:1", "1:10", "1:100")) for m in ("ce", "ce_scl")]
    path2 = tmp_path / "imbalance.png"
    assert_png(path2, plot_metric_vs_setting(summary_rows, "ratio", "test_accuracy", "method", path2,
                                             title="imbalance"))


def test_overwrite_is_atomic_replace(tmp_path):
    path = tmp_path / "c.png"
    path.write_bytes(b"old")
    assert_png(path, plot_confusion(np.array([[1, 0], [0, 1]]), ["a", "b"], path, "again"))
