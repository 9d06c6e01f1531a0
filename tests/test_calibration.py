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


def _write_rows(path, rows, flip=()):
    """``rows`` (sentence, sentiment) as a CSV, the sentiment of the rows at positions ``flip`` swapped
    (held-out rows a well-trained model gets some wrong: a temperature fit that is not degenerate)."""
    import csv

    swap = {"positive": "negative", "negative": "positive"}
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["sentence", "sentiment"])
        writer.writeheader()
        writer.writerows({**r, "sentiment": swap[r["sentiment"]] if i in flip else r["sentiment"]}
                         for i, r in enumerate(rows))
    return path


def _held_out_rows(n_per_class, seed):
    """Toy sentiment rows none of whose texts is a training text of the ``trained`` fixture."""
    from conftest import sentiment_rows

    seen = {r["sentence"] for r in sentiment_rows()}
    return [r for r in sentiment_rows(n_per_class=n_per_class, seed=seed) if r["sentence"] not in seen]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_encoder_dir):
    """A ce model trained on every row of toy.csv (no validation split) until it separates the
    classes: (its folder, toy.csv). Tests that calibrate copy the folder."""
    from conftest import write_sentiment_csv
    from contrastfit.cli import main

    folder = tmp_path_factory.mktemp("calibration")
    data = write_sentiment_csv(folder / "toy.csv")
    run = folder / "run"
    assert main(["train", "--method", "ce", "--data", str(data), "--text-column", "sentence", "--label-column",
                 "sentiment", "--model", str(tiny_encoder_dir), "--output", str(run), "--epochs", "20",
                 "--batch-size", "8", "--learning-rate", "3e-3", "--validation-split", "0", "--no-select-best",
                 "--quiet"]) == 0
    return run, data


def test_calibrate_command_saves_a_temperature_that_predict_and_evaluate_use(tmp_path, trained, capsys):
    import shutil

    from contrastfit import ContrastiveClassifier
    from contrastfit.cli import main

    run = tmp_path / "run"
    shutil.copytree(trained[0], run)
    rows = _held_out_rows(10, 5)[:20]
    held_out = _write_rows(tmp_path / "held_out.csv", rows, flip=range(0, 20, 5))  # 4 of 20 wrong
    card = (run / "README.md").read_text(encoding="utf-8")  # train writes the model card
    assert card.startswith("---\n") and "# ce on " in card and "## Calibration" not in card
    before = ContrastiveClassifier.from_pretrained(run)
    texts = [r["sentence"] for r in rows]
    labels = [before.label_names.index(r["sentiment"]) ^ (i % 5 == 0) for i, r in enumerate(rows)]
    logits = before.predict_logits(texts)
    weights_before = (run / "head.safetensors").read_bytes(), (run / "encoder" / "model.safetensors").read_bytes()
    capsys.readouterr()

    assert main(["calibrate", str(run), "--data", str(held_out)]) == 0
    captured = capsys.readouterr()
    printed = captured.out
    t = fit_temperature(logits, labels)
    assert 0.05 < t < 20 and "warning" not in captured.err  # held-out rows: no overlap, no degenerate fit
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


def test_temperature_scaling_refuses_a_degenerate_fit():
    """Logits that separate the rows perfectly (the NLL falls all the way as T -> 0) and logits that say
    nothing about the labels (T runs to the upper bound) get no record, with T, NLL and ECE in one line."""
    from contrastfit.errors import DataError
    from contrastfit.evaluation.calibration import DegenerateFitError, temperature_scaling
    from contrastfit.evaluation.metrics import probability_metrics

    rng = np.random.default_rng(3)
    labels = rng.integers(0, 3, size=30)
    separated = np.eye(3)[labels] * 2.0 + rng.normal(size=(30, 3)) * 0.1  # every row's own class highest
    t = fit_temperature(separated, labels)
    before, after = probability_metrics(separated, labels), probability_metrics(separated, labels, t)
    with pytest.raises(DegenerateFitError) as info:
        temperature_scaling(separated, labels)
    message = str(info.value)
    assert isinstance(info.value, DataError) and "\n" not in message
    assert message.startswith("degenerate temperature fit: the model separates all 30 calibration rows perfectly")
    assert (f"(T {t:.4g}, NLL {before['nll']:.4f} -> {after['nll']:.4f}, ECE {before['ece']:.4f} -> "
            f"{after['ece']:.4f}; nothing was saved)") in message
    assert t < 0.05  # what used to be saved: every probability 0 or 1

    same = np.tile([1.0, 0.0], (40, 1))  # one logit vector, half the labels each class: T runs to the bound
    with pytest.raises(DegenerateFitError, match=r"^degenerate temperature fit: T 148\.4 is outside \[0\.05, 20\] on "
                                                 r"40 calibration rows \(NLL 0\.8133 -> 0\.6932, ECE .*; "
                                                 r"nothing was saved\); calibrate on more held-out rows$"):
        temperature_scaling(same, [0, 1] * 20)

    p = np.exp(separated / 2.0)  # labels drawn from softmax(z / 2): a proper fit passes
    drawn = np.array([rng.choice(3, p=row / row.sum()) for row in p])
    record = temperature_scaling(separated, drawn)
    assert 0.05 < record["temperature"] < 20 and record["n"] == 30


def _one_line(err: str) -> str:
    """The one ``contrastfit:`` line of ``err`` (the rest is progress bars)."""
    lines = [line for line in err.splitlines() if line.startswith("contrastfit:")]
    assert len(lines) == 1, err
    return lines[0]


def test_calibrate_refuses_the_training_rows(tmp_path, trained, capsys):
    """The training file itself (same train_hash), or a file most of whose rows are training rows, is
    refused with the counts and nothing saved; a file with at most 1% training rows is calibrated on,
    with a warning that counts them."""
    import random
    import shutil

    from conftest import sentiment_rows
    from contrastfit.cli import main

    run = tmp_path / "run"
    shutil.copytree(trained[0], run)
    config = (run / "contrastfit.json").read_bytes()
    capsys.readouterr()
    assert main(["calibrate", str(run), "--data", str(trained[1])]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"contrastfit: error: {trained[1]} (all 24 rows): they are the 24 rows {run} was trained on (same "
        "train_hash); a temperature fitted on training rows makes the probabilities over-confident: calibrate on "
        "held-out rows (a validation file or split); nothing was saved")

    training = sentiment_rows()
    mixed = training[::-1] + _held_out_rows(10, 5)[:6]  # reordered: another hash, the same rows
    assert main(["calibrate", str(run), "--data", str(_write_rows(tmp_path / "mixed.csv", mixed))]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"contrastfit: error: {tmp_path / 'mixed.csv'} (all 30 rows): 24 of its 30 rows (80.0%) are rows {run} was "
        "trained on; a temperature fitted on training rows makes the probabilities over-confident: calibrate on "
        "held-out rows (a validation file or split); nothing was saved")
    assert (run / "contrastfit.json").read_bytes() == config

    fresh = _held_out_rows(70, 8)[:119]
    rows = fresh[:60] + [{**training[0], "sentence": "  " + training[0]["sentence"].upper()}] + fresh[60:]
    random.Random(0).shuffle(rows)  # one training text (in other case and spacing) among 120 rows
    few = _write_rows(tmp_path / "few.csv", rows, flip=range(0, 120, 5))
    assert main(["calibrate", str(run), "--data", str(few)]) == 0
    captured = capsys.readouterr()
    assert _one_line(captured.err) == (f"contrastfit: warning: {few} (all 120 rows): 1 of its 120 rows (0.8%) are "
                                       f"rows {run} was trained on (more than 1% is refused)")
    assert "temperature" in captured.out and json.loads((run / "contrastfit.json").read_text())["calibration"]


def test_calibrate_refuses_a_fit_that_separates_the_rows(tmp_path, trained, capsys):
    """Held-out rows the model gets all right with a margin: the NLL-minimising T goes to 0 and every
    probability to 0 or 1; refused with T, NLL and ECE, nothing saved."""
    from contrastfit import ContrastiveClassifier
    from contrastfit.cli import main
    from contrastfit.evaluation.metrics import probability_metrics

    run, _ = trained
    config = (run / "contrastfit.json").read_bytes()
    model = ContrastiveClassifier.from_pretrained(run)
    texts = [r["sentence"] for r in _held_out_rows(10, 6)]
    logits = model.predict_logits(texts)
    predicted = model.predict(texts)
    data = _write_rows(tmp_path / "easy.csv", [{"sentence": x, "sentiment": y} for x, y in zip(texts, predicted)])
    labels = logits.argmax(axis=1)
    t = fit_temperature(logits, labels)
    before, after = probability_metrics(logits, labels), probability_metrics(logits, labels, t)
    capsys.readouterr()
    assert main(["calibrate", str(run), "--data", str(data)]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"contrastfit: error: {data} (all {len(texts)} rows): degenerate temperature fit: the model separates all "
        f"{len(texts)} calibration rows perfectly (every row's label has the highest logit), so the NLL falls as "
        f"T -> 0 and every probability would be 0 or 1 (T {t:.4g}, NLL {before['nll']:.4f} -> {after['nll']:.4f}, "
        f"ECE {before['ece']:.4f} -> {after['ece']:.4f}; nothing was saved); calibrate on held-out rows the model "
        "gets some wrong")
    assert (run / "contrastfit.json").read_bytes() == config


def test_the_saved_folder_keeps_digests_of_its_training_rows(trained):
    """contrastfit.json holds one 8-byte digest per distinct training text (normalised: case and spacing
    do not matter, the label does not count); a sketch cut to its smallest digests estimates the count."""
    import datasets

    from conftest import sentiment_rows
    from contrastfit.data.overlap import row_sketch, train_overlap

    run, _ = trained
    record = json.loads((run / "contrastfit.json").read_text())["data"]
    sketch = record["train_rows"]
    assert sketch["rows"] == 24 and sketch["kept"] == sketch["distinct"] == len({r["sentence"] for r in sentiment_rows()})
    assert len(sketch["hashes"]) == 4 * -(-8 * sketch["kept"] // 3)  # base64 of 8 bytes a digest
    assert "train_rows" not in json.loads((run / "results.json").read_text())["data"]  # the run record stays small

    def table(texts, labels=None):
        return datasets.Dataset.from_dict({"text": texts, "label": labels or [0] * len(texts)})

    texts = [r["sentence"] for r in sentiment_rows()]
    assert train_overlap(record["train_hash"], sketch, table([" " + t.upper() + " " for t in texts[:5]] + ["a new text"], [1] * 6)).to_dict() == {
        "rows": 5, "of": 6, "same_rows": False, "estimated": False, "fraction": 5 / 6}
    train = table([f"training text {i}" for i in range(4000)])
    cut = {"train_hash": "-", "train_rows": row_sketch(train, size=400)}
    assert cut["train_rows"]["kept"] == 400 and cut["train_rows"]["distinct"] == 4000
    other = table([f"training text {i}" for i in range(0, 4000, 4)] + [f"other text {i}" for i in range(3000)])
    estimate = train_overlap(cut["train_hash"], cut["train_rows"], other)  # 1000 of 4000 rows; about 400 of them fall in the kept range
    assert estimate.estimated and estimate.of == 4000 and abs(estimate.rows - 1000) < 200
    assert train_overlap("-", None, other) is None  # a folder saved before the digests
