"""The head-C study's parts (bench/head_c.py): C chosen by cross-validation on the training sample,
and the summary's paired differences against the recipe's C, on hand-made features and records."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from conftest import load_bench


@pytest.fixture(scope="module")
def head_c():
    return load_bench("head_c")


def _clf(prior: float = 0.0, anchors=None):
    import torch

    method = SimpleNamespace(hparams={"label_prior": prior})
    if anchors is not None:
        method.label_features = lambda model: torch.as_tensor(anchors, dtype=torch.float32)
    return SimpleNamespace(method=method)


def test_cross_validation_scores_every_C_and_breaks_ties_towards_1(head_c):
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 8)
    x = rng.normal(size=(16, 4)) * 0.05 + np.where(y[:, None] == 1, 1.0, -1.0)  # far apart: every C is perfect
    chosen, scores = head_c.cv_C(_clf(), x, y, [0.1, 1.0, 10.0], seed=0)
    assert scores == {"0.1": 1.0, "1": 1.0, "10": 1.0} and chosen == 1.0
    chosen, _ = head_c.cv_C(_clf(), x, y, [0.25, 16.0], seed=0)
    assert chosen == 0.25  # |log 0.25| < |log 16|
    # two examples of the rarest class: two folds, so every training fold still holds each class
    chosen, scores = head_c.cv_C(_clf(), x[6:12], y[6:12], [1.0], seed=0)
    assert chosen == 1.0 and scores == {"1": 1.0}


def test_the_label_names_join_every_training_fold_with_the_prior_weight(head_c):
    # the examples sit at -1 (class 0) and +1 (class 1) on the first axis; the label names, on the
    # wrong sides and weighed 50 times their class, turn the boundary round in every fold
    y = np.repeat([0, 1], 6)
    x = np.zeros((12, 2))
    x[:, 0] = np.where(y == 1, 1.0, -1.0)
    anchors = np.array([[2.0, 0.0], [-2.0, 0.0]])  # class 0's name at +2, class 1's at -2
    _, with_wrong_names = head_c.cv_C(_clf(prior=50.0, anchors=anchors), x, y, [1.0], seed=0)
    _, without = head_c.cv_C(_clf(), x, y, [1.0], seed=0)
    assert without["1"] == 1.0 and with_wrong_names["1"] == 0.0


def test_the_summary_compares_every_C_with_the_recipes_on_the_same_samples(head_c):
    def record(sample, by_c):
        return {"data": "mr", "shots": 4, "sample": sample, "recipe_C": 1.0,
                "by_C": {c: {"accuracy": a} for c, a in by_c.items()}}

    records = [record(0, {"0.1": 0.50, "1": 0.60, "cv": 0.55}), record(1, {"0.1": 0.52, "1": 0.58, "cv": 0.58})]
    rows = {r["C"]: r for r in head_c.summarise(records)["rows"]}
    assert list(rows) == ["0.1", "1", "cv"]  # the chosen-by-CV column last
    assert rows["1"]["vs_recipe"] == 0 and rows["1"]["p_ttest"] is None
    assert rows["0.1"]["vs_recipe"] == pytest.approx(-8.0) and rows["0.1"]["accuracy_mean"] == pytest.approx(51.0)
    assert rows["cv"]["vs_recipe"] == pytest.approx(-2.5)
    table = head_c.markdown(head_c.summarise(records))
    assert table.splitlines()[0] == "| data | K | n | C = 0.1 | C = 1 | C by CV |"
    assert "| mr | 4 | 2 | 51.0 ± 1.4 (-8.0, p=0.16) | 59.0 ± 1.4 | 56.5 ± 2.1 (-2.5, p=0.50) |" in table
