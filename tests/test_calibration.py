"""Temperature scaling and the expected calibration error (Guo et al. 2017), and `contrastfit calibrate`."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from contrastfit.evaluation.calibration import expected_calibration_error, fit_temperature, negative_log_likelihood


def _ece_loop(probabilities, labels, n_bins=15):
    """Guo et al. Eq. 3 written out: bin m holds the confidences in ((m-1)/M, m/M]."""
    n = len(labels)
    total = 0.0
    for m in range(1, n_bins + 1):
        members = [i for i in range(n) if (m - 1) / n_bins < max(probabilities[i]) <= m / n_bins]
        if not members:
            continue
        acc = sum(int(np.argmax(probabilities[i]) == labels[i]) for i in members) / len(members)
        conf = sum(max(probabilities[i]) for i in members) / len(members)
        total += len(members) / n * abs(acc - conf)
    return total


def test_ece_matches_the_equation_and_a_hand_case():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(300, 4)) * 2
    probabilities = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    labels = rng.integers(0, 4, size=300)
    assert expected_calibration_error(probabilities, labels) == pytest.approx(_ece_loop(probabilities, labels), abs=1e-12)
    assert expected_calibration_error(probabilities, labels, n_bins=5) == pytest.approx(
        _ece_loop(probabilities, labels, 5), abs=1e-12)
    # ten predictions at confidence 0.9, six right: one bin, |0.6 - 0.9| = 0.3
    p = np.tile([0.9, 0.1], (10, 1))
    assert expected_calibration_error(p, [0] * 6 + [1] * 4) == pytest.approx(0.3)
    # confidence exactly 1.0 falls in the last bin, not out of range
    assert expected_calibration_error(np.array([[1.0, 0.0]]), [0]) == pytest.approx(0.0)


def test_nll_is_the_cross_entropy_of_the_scaled_logits():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(50, 3)) * 4
    labels = rng.integers(0, 3, size=50)
    for t in (0.5, 1.0, 2.5):
        expected = torch.nn.functional.cross_entropy(torch.tensor(logits / t), torch.tensor(labels)).item()
        assert negative_log_likelihood(logits, labels, t) == pytest.approx(expected, rel=1e-10)


def test_fit_temperature_recovers_the_temperature_that_made_the_labels():
    """Labels drawn from softmax(z / 2): the NLL's minimiser is close to 2, and it is a minimum."""
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(6000, 4)) * 3
    p = np.exp(logits / 2.0)
    p /= p.sum(1, keepdims=True)
    labels = np.array([rng.choice(4, p=row) for row in p])
    t = fit_temperature(logits, labels)
    assert t == pytest.approx(2.0, abs=0.1)
    nll = negative_log_likelihood(logits, labels, t)
    assert nll <= negative_log_likelihood(logits, labels, t * 1.01) and nll <= negative_log_likelihood(logits, labels, t / 1.01)
    # an over-confident model (logits x 3 of the calibrated ones) gets a temperature > 1, and a lower ECE
    over = logits * 3 / 2.0
    t_over = fit_temperature(over, labels)
    assert t_over == pytest.approx(3.0, abs=0.15)
    soft = lambda z: np.exp(z) / np.exp(z).sum(1, keepdims=True)  # noqa: E731
    assert expected_calibration_error(soft(over / t_over), labels) < expected_calibration_error(soft(over), labels) / 2
    with pytest.raises(ValueError, match="at least one"):
        fit_temperature(np.zeros((0, 2)), [])


def test_calibrate_command_saves_a_temperature_that_predict_and_evaluate_use(tmp_path, tiny_encoder_dir, capsys):
    from conftest import sentiment_rows, write_sentiment_csv
    from contrastfit import ContrastiveClassifier
    from contrastfit.cli import main

    data = write_sentiment_csv(tmp_path / "toy.csv")
    held_out = write_sentiment_csv(tmp_path / "held_out.csv", n_per_class=10, seed=5)
    run = tmp_path / "run"
    assert main(["train", "--method", "ce", "--data", str(data), "--text-column", "sentence", "--label-column",
                 "sentiment", "--model", str(tiny_encoder_dir), "--output", str(run), "--epochs", "3",
                 "--batch-size", "8", "--learning-rate", "1e-3", "--quiet"]) == 0
    card = (run / "README.md").read_text(encoding="utf-8")  # train writes the model card
    assert card.startswith("---\nbase_model:") and "# ce on " in card and "## Calibration" not in card
    before = ContrastiveClassifier.from_pretrained(run)
    texts = [r["sentence"] for r in sentiment_rows(n_per_class=10, seed=5)]
    labels = [before.label_names.index(r["sentiment"]) for r in sentiment_rows(n_per_class=10, seed=5)]
    logits = before.predict_logits(texts)
    weights_before = (run / "head.safetensors").read_bytes(), (run / "encoder" / "model.safetensors").read_bytes()
    capsys.readouterr()

    assert main(["calibrate", str(run), "--data", str(held_out)]) == 0
    printed = capsys.readouterr().out
    t = fit_temperature(logits, labels)
    assert f"temperature {t:.3f}" in printed and "(all 20 rows)" in printed and "ECE" in printed
    config = json.loads((run / "contrastfit.json").read_text())
    assert config["calibration"]["temperature"] == pytest.approx(t, rel=1e-6)
    assert config["calibration"]["nll_after"] <= config["calibration"]["nll_before"] + 1e-12
    assert ((run / "head.safetensors").read_bytes(), (run / "encoder" / "model.safetensors").read_bytes()) == weights_before

    assert f"softmax(logits / {t:.4f})" in (run / "README.md").read_text(encoding="utf-8")  # and calibrate rewrites it
    after = ContrastiveClassifier.from_pretrained(run)
    assert after.temperature == pytest.approx(t, rel=1e-6)
    expected = torch.softmax(torch.tensor(logits) / t, -1).numpy()
    assert after.predict_proba(texts) == pytest.approx(expected, abs=1e-5)
    assert after.predict(texts) == before.predict(texts)  # the labels do not change
    assert main(["predict", str(run), texts[0]]) == 0
    row = json.loads(capsys.readouterr().out)
    assert list(row["probabilities"].values()) == pytest.approx(expected[0].tolist(), abs=1e-5)

    report = tmp_path / "metrics.json"
    assert main(["evaluate", str(run), "--data", str(held_out), "--json", str(report)]) == 0
    metrics = json.loads(report.read_text())["metrics"]
    assert metrics["nll"] == pytest.approx(negative_log_likelihood(logits, labels, t), rel=1e-5)
    assert metrics["ece"] == pytest.approx(expected_calibration_error(expected, labels), abs=1e-5)


def test_calibrate_refuses_what_it_cannot_calibrate(tmp_path, tiny_encoder_dir, capsys):
    import csv

    from contrastfit.cli import main

    rows = [{"text": f"text {i}", "score": i / 10} for i in range(12)]
    data = tmp_path / "reg.csv"
    with open(data, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["text", "score"])
        writer.writeheader()
        writer.writerows(rows)
    run = tmp_path / "reg"
    assert main(["train", "--data", str(data), "--label-column", "score", "--model", str(tiny_encoder_dir),
                 "--output", str(run), "--epochs", "1", "--batch-size", "12", "--no-select-best", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["calibrate", str(run), "--data", str(data)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"contrastfit: error: {run} is a regression model; calibrate fits the temperature of class probabilities")
