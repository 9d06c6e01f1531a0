"""Analysis figures: what each function draws, read back from the matplotlib Figure it returns
(points per class, bar heights, line data, error bars, labels, legend entries, colours) against
values computed by hand in the test, and the PNG it writes atomically."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from contrastfit.evaluation.plots import (
    plot_attributions,
    plot_confusion,
    plot_distance_groups,
    plot_learning_curves,
    plot_metric_vs_setting,
    plot_tsne,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path, returned) -> None:
    """``returned`` is the drawn Figure and ``path`` a complete PNG, with no temporary file left."""
    assert isinstance(returned, Figure)
    assert path.is_file() and path.stat().st_size > 1000
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")], "temporary file left behind"


def legend_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_tsne_draws_every_point_in_its_label_colour_and_the_anchors_as_stars(tmp_path):
    rng = np.random.default_rng(0)
    labels = np.repeat([0, 1, 2], [12, 10, 8])  # unequal classes: a miscount shows
    emb = rng.normal(size=(30, 8)) + labels[:, None] * 3.0
    anchors = np.stack([np.full(8, 3.0 * i) for i in range(3)])
    path = tmp_path / "figs" / "tsne_lacon.png"
    fig = plot_tsne(emb, labels, ["neg", "neu", "pos"], path, "LaCon test embeddings", anchors=anchors)
    assert_png(path, fig)
    (ax,) = fig.axes
    points = {c.get_label(): len(c.get_offsets()) for c in ax.collections}
    assert points == {"neg": 12, "neu": 10, "pos": 8, "label embedding": 3}
    assert legend_texts(ax) == ["neg", "neu", "pos", "label embedding"]
    assert ax.get_title() == "LaCon test embeddings"
    # anchor i is drawn in the colour of label i
    by_label = {c.get_label(): c for c in ax.collections}
    stars = by_label["label embedding"].get_facecolor()
    for i, name in enumerate(["neg", "neu", "pos"]):
        assert tuple(stars[i][:3]) == pytest.approx(tuple(by_label[name].get_facecolor()[0][:3]))
    # t-SNE keeps the three well-separated clusters apart: each class' centre is nearest its own points
    centres = {name: np.asarray(c.get_offsets()).mean(axis=0) for name, c in by_label.items() if name != "label embedding"}
    for name, c in by_label.items():
        if name != "label embedding":
            nearest = [min(centres, key=lambda k: np.linalg.norm(p - centres[k])) for p in np.asarray(c.get_offsets())]
            assert nearest == [name] * len(nearest)


def test_tsne_small_named_labels_and_absent_classes(tmp_path):
    # 5 points: perplexity must be clipped below n; labels given by name; class "c" has no point.
    emb = np.arange(20, dtype=float).reshape(5, 4)
    path = tmp_path / "tsne.png"
    fig = plot_tsne(emb, ["a", "b", "a", "b", "a"], ["a", "b", "c"], path, "tiny", seed=1)
    assert_png(path, fig)
    (ax,) = fig.axes
    assert {c.get_label(): len(c.get_offsets()) for c in ax.collections} == {"a": 3, "b": 2}
    assert legend_texts(ax) == ["a", "b"]
    assert plot_tsne(emb, [0, 1, 0, 1, 0], ["a", "b"]).axes  # no path: nothing written, the figure returned
    with pytest.raises(ValueError):
        plot_tsne(emb[:2], [0, 1], ["a", "b"], tmp_path / "x.png", "too few")
    with pytest.raises(ValueError):
        plot_tsne(emb, [0, 1, 2, 0, 1], ["a", "b"], tmp_path / "x.png", "bad label")
    assert not (tmp_path / "x.png").exists()


def test_confusion_shows_the_counts_with_true_labels_as_rows(tmp_path):
    path = tmp_path / "confusion.png"
    fig = plot_confusion([[5, 1], [2, 7]], ["negative", "positive"], path, "CE")
    assert_png(path, fig)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == ["5", "1", "2", "7"]  # row by row
    assert ax.images[0].get_array().tolist() == [[5, 1], [2, 7]]
    assert (ax.get_ylabel(), ax.get_xlabel(), ax.get_title()) == ("True label", "Predicted label", "CE")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["negative", "positive"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["negative", "positive"]
    with pytest.raises(ValueError):
        plot_confusion([[1, 2]], ["a", "b"], tmp_path / "bad.png", "bad")


def test_learning_curves_draw_each_runs_losses_in_step_order(tmp_path):
    history = [{"loss": 1.0 / (s + 1), "step": s, "learning_rate": 1e-5} for s in range(1, 20)]
    history += [{"eval_loss": 0.8 - 0.01 * s, "step": s} for s in (15, 5, 10)]  # logged out of order
    history += [{"train_runtime": 3.2, "step": 19}]
    path = tmp_path / "curves.png"
    fig = plot_learning_curves({"ce-seed0": history, "lacon-seed0": history[:5]}, path)
    assert_png(path, fig)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.lines}
    assert list(lines) == ["ce-seed0 (train)", "ce-seed0 (eval)", "lacon-seed0 (train)"]
    assert legend_texts(ax) == list(lines)
    train, evals = lines["ce-seed0 (train)"], lines["ce-seed0 (eval)"]
    assert list(train.get_xdata()) == list(range(1, 20))
    assert list(train.get_ydata()) == pytest.approx([1 / 2, 1 / 3, 1 / 4, 1 / 5, 1 / 6, 1 / 7, 1 / 8, 1 / 9, 1 / 10,
                                                     1 / 11, 1 / 12, 1 / 13, 1 / 14, 1 / 15, 1 / 16, 1 / 17, 1 / 18,
                                                     1 / 19, 1 / 20])
    assert list(evals.get_xdata()) == [5, 10, 15] and list(evals.get_ydata()) == pytest.approx([0.75, 0.70, 0.65])
    assert (train.get_linestyle(), evals.get_linestyle()) == ("-", "--")
    assert train.get_color() == evals.get_color() != lines["lacon-seed0 (train)"].get_color()
    assert list(lines["lacon-seed0 (train)"].get_xdata()) == [1, 2, 3, 4, 5]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("step", "loss")
    empty = tmp_path / "empty.png"
    fig = plot_learning_curves({"x": [{"step": 1}]}, empty)
    assert_png(empty, fig)
    assert not fig.axes[0].lines and [t.get_text() for t in fig.axes[0].texts] == ["no logged losses"]


def test_distance_groups_bar_heights_are_the_accuracies(tmp_path):
    groups = {"ce": [{"group": "q1", "accuracy": 0.9}, {"group": "q2", "accuracy": 0.7},
                     {"group": "q3", "accuracy": 0.6}],
              "lacon": [{"group": "q2", "accuracy": 0.8}, {"group": "q3", "accuracy": 0.65}]}  # no q1
    path = tmp_path / "distance_bar.png"
    fig = plot_distance_groups(groups, path)
    assert_png(path, fig)
    ax = fig.axes[0]
    heights = {c.get_label(): [p.get_height() for p in c] for c in ax.containers}
    assert heights["ce"] == pytest.approx([0.9, 0.7, 0.6])
    assert np.isnan(heights["lacon"][0]) and heights["lacon"][1:] == pytest.approx([0.8, 0.65])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["q1", "q2", "q3"]
    assert legend_texts(ax) == ["ce", "lacon"]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("distance-to-mean group", "accuracy")
    # side by side: lacon's bar of each group sits right of ce's, both inside the group's slot
    for ce_bar, lacon_bar, slot in zip(ax.containers[0], ax.containers[1], range(3)):
        assert slot - 0.4 <= ce_bar.get_x() < lacon_bar.get_x() < slot + 0.4
    line = plot_distance_groups(groups, tmp_path / "distance_line.png", kind="line").axes[0]
    assert [list(ln.get_ydata()) for ln in line.lines][0] == pytest.approx([0.9, 0.7, 0.6])
    with pytest.raises(ValueError, match="kind"):
        plot_distance_groups(groups, kind="pie")


def test_metric_vs_setting_means_and_error_bars_from_raw_runs(tmp_path):
    # three seeds per point: 0.5 + 0.01 K + {0, 0.01, 0.02} (+0.02 for lacon): mean = 0.51 + 0.01 K
    # (+0.02), sample std = 0.01
    rows = [{"shots": k, "method": m, "accuracy": 0.5 + 0.01 * k + 0.01 * seed + (0.02 if m == "lacon" else 0)}
            for k in (4, 16, 64, 256) for m in ("ce", "lacon") for seed in range(3)]
    path = tmp_path / "kshot.png"
    fig = plot_metric_vs_setting(rows, "shots", "accuracy", "method", path)
    assert_png(path, fig)
    ax = fig.axes[0]
    bars = {c.get_label(): c for c in ax.containers}
    assert list(bars) == ["ce", "lacon"]
    expected = {"ce": [0.55, 0.67, 1.15, 3.07], "lacon": [0.57, 0.69, 1.17, 3.09]}
    for name, container in bars.items():
        data, _, (errors,) = container.lines
        assert list(data.get_xdata()) == [4, 16, 64, 256]
        assert list(data.get_ydata()) == pytest.approx(expected[name])
        half = [(seg[1][1] - seg[0][1]) / 2 for seg in errors.get_segments()]
        assert half == pytest.approx([0.01] * 4)
    assert ax.get_xscale() == "log"  # 256 / 4 > 20
    assert [t.get_text() for t in ax.get_xticklabels()] == ["4", "16", "64", "256"]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("shots", "accuracy", "accuracy vs shots")
    assert ax.get_legend().get_title().get_text() == "method"


def test_metric_vs_setting_from_summary_rows_on_a_categorical_axis(tmp_path):
    summary_rows = [{"ratio": r, "method": m, "test_accuracy": {"mean": 0.8 - 0.01 * i, "std": 0.02, "values": []}}
                    for i, r in enumerate(("1:1", "1:10", "1:100")) for m in ("ce", "ce_scl")]
    path = tmp_path / "imbalance.png"
    fig = plot_metric_vs_setting(summary_rows, "ratio", "test_accuracy", "method", path, title="imbalance")
    assert_png(path, fig)
    ax = fig.axes[0]
    assert [c.get_label() for c in ax.containers] == ["ce", "ce_scl"]  # one error-bar line per method
    for container in ax.containers:
        data, _, (errors,) = container.lines
        assert list(data.get_xdata()) == [0, 1, 2]
        assert list(data.get_ydata()) == pytest.approx([0.80, 0.79, 0.78])
        assert [(seg[1][1] - seg[0][1]) / 2 for seg in errors.get_segments()] == pytest.approx([0.02] * 3)
    assert ax.get_xscale() == "linear" and ax.get_title() == "imbalance"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1:1", "1:10", "1:100"]


def test_attributions_colour_each_word_by_its_value_on_one_scale(tmp_path):
    from matplotlib import colormaps

    a = {"words": ["great", "film", "but", "boring"], "values": [0.3, 0.0, -0.1, -0.4], "target_name": "positive",
         "probability": 0.8, "base_probability": 0.6}
    b = {"words": ["good", "story", "awful", "actor"], "values": [0.2, 0.1, -0.2, 0.0], "segments": [0, 0, 1, 1],
         "target_name": "negative", "probability": 0.35, "base_probability": 0.25}
    path = tmp_path / "attr.png"
    fig = plot_attributions([("ce", a), ("ce-scl", b)], path, title="example")
    assert_png(path, fig)
    texts = fig.axes[0].texts
    assert [t.get_text() for t in texts] == [
        "ce: p(positive) = 0.80 (all words removed: 0.60)", "great", "film", "but", "boring",
        "ce-scl: p(negative) = 0.35 (all words removed: 0.25)", "good", "story", "awful", "actor"]
    assert fig.texts[0].get_text() == "example"
    # one scale for both rows: the largest |value| (0.4) maps to the ends of the colour map, 0 to its middle
    coolwarm = colormaps["coolwarm"]
    words = {t.get_text(): t for t in texts if ":" not in t.get_text()}
    for word, position in {"great": 0.875, "film": 0.5, "but": 0.375, "boring": 0.0, "good": 0.75,
                           "awful": 0.25}.items():
        assert to_rgba(words[word].get_bbox_patch().get_facecolor()) == pytest.approx(coolwarm(position))
    red, blue = to_rgba(words["great"].get_bbox_patch().get_facecolor()), to_rgba(words["boring"].get_bbox_patch().get_facecolor())
    assert red[0] > red[2] and blue[2] > blue[0]
    # a sentence pair: the second text starts its own line
    (_, y_story), (x_awful, y_awful) = words["story"].get_position(), words["awful"].get_position()
    assert y_awful < y_story and x_awful == 0.0 == words["good"].get_position()[0]


def test_overwrite_is_atomic_replace(tmp_path, monkeypatch):
    """A write that fails half-way (the disk fills up while the PNG is written) keeps the previous
    figure byte for byte and leaves no temporary file; a write that succeeds replaces it."""
    import errno

    from matplotlib.figure import Figure

    path = tmp_path / "c.png"
    plot_confusion(np.array([[1, 0], [0, 1]]), ["a", "b"], path, "first")
    before = path.read_bytes()
    real_savefig = Figure.savefig

    def disk_full_half_way(self, fh, *args, **kwargs):
        fh.write(PNG_MAGIC + b"\0" * 64)  # the start of a PNG, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", disk_full_half_way)
    with pytest.raises(OSError, match="No space left"):
        plot_confusion(np.array([[2, 0], [1, 1]]), ["a", "b"], path, "second")
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["c.png"], "temporary file left behind"
    monkeypatch.setattr(Figure, "savefig", real_savefig)
    assert_png(path, plot_confusion(np.array([[2, 0], [1, 1]]), ["a", "b"], path, "second"))
    assert path.read_bytes() != before
