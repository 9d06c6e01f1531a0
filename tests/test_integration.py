"""Integration: the real all-MiniLM-L6-v2 on the real MR data (CPU; about a minute per method).

Every method trains briefly on 16 examples per class and must be clearly above chance (0.5) on
256 MR test sentences. The thresholds are below what each run reaches with seed 0 on this data (see
the README's table) and well above what an untrained head or a broken loss gives.

The default suite trains one method of each kind of pipeline (the default recipe, a one-stage loss,
label fusion, a two-stage method with dropout views, supervised SimCSE pairs, DiffCSE's generator,
SetFit's pairs, the probe, zero-shot). The methods that share a pipeline with one of those and differ
only in their loss (whose equations the unit tests check against hand-written loops on the tiny
encoder) are marked ``slow``: ``make test-all`` (``pytest --run-slow``) runs them too, about 2.5
minutes more.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from contrastfit import ContrastiveClassifier, train
from contrastfit.data import load_data, sample_stratified
from contrastfit.methods import available_methods

pytestmark = pytest.mark.integration

# method -> (extra options, minimum test accuracy on the 256-sentence MR test subset). One-stage
# methods train 60 steps of 8 examples (up to 48 tokens) on 16 examples per class (30 steps of 16
# left ce-projection at 0.53; SetFit keeps its batch of 16 pairs, its step count being pairs / batch);
# two-stage methods (encoder stage, then a head on the frozen encoder) run a short encoder stage
# (2 epochs = 8 steps) and their full head stage, so
# their accuracy here comes mostly from the head on MiniLM's embeddings: the test checks that the
# whole pipeline runs on the real model and that the encoder stage does not wreck it. Multi-view
# methods use two views. All of it keeps the suite inside the CI budget.
TWO_VIEWS = {"view_dropouts": "0.0,0.1"}
SHORT_STAGE_1 = {"epochs": 2}
METHODS = {
    "ce-scl": ({}, 0.58),
    "ce-supcon": ({}, 0.58),
    "ce-softtriple": ({}, 0.58),
    "dropout-augmented-ce": ({"hparams": TWO_VIEWS}, 0.58),
    "lacon": ({}, 0.58),
    "lacon-fusion": ({}, 0.58),
    "supcl-seq": ({"hparams": TWO_VIEWS, **SHORT_STAGE_1}, 0.58),
    "self-supervised-cl": ({"hparams": TWO_VIEWS, **SHORT_STAGE_1}, 0.58),
    "simcse-unsup": (SHORT_STAGE_1, 0.58),
    "simcse-sup": (SHORT_STAGE_1, 0.58),
    "diffcse": (SHORT_STAGE_1, 0.58),
    "ce-projection": ({}, 0.58),
    "linear-probe": ({}, 0.58),
    "setfit": ({"batch_size": 16}, 0.58),
    "ce-scl-lr": ({"min_steps": None, "batch_size": 16}, 0.58),  # the default recipe's own schedule
    "zero-shot": ({}, 0.58),
}
SHORT = {"shots": 16, "min_steps": 60, "batch_size": 8, "max_length": 48, "validation_size": 64}


@pytest.fixture(scope="module")
def mr_small():
    data = load_data("mr")
    data.test = sample_stratified(data.test, 256, seed=0)
    return data


#: Same pipeline as a method above, another loss: run by ``--run-slow`` (``make test-all``).
SLOW = {"ce-supcon", "ce-softtriple", "dropout-augmented-ce", "lacon", "ce-projection", "self-supervised-cl",
        "simcse-unsup"}


@pytest.mark.parametrize("method", [pytest.param(m, marks=pytest.mark.slow) if m in SLOW else m for m in sorted(METHODS)])
def test_short_real_run_beats_chance(method, mr_small, tmp_path):
    options, minimum = METHODS[method]
    result = train(method=method, data="mr", output=str(tmp_path / method), seed=0, progress=False,
                   text_data=mr_small, **{**SHORT, **options})
    accuracy = result.metrics["test"]["accuracy"]
    assert accuracy > minimum, f"{method}: test accuracy {accuracy:.3f} <= {minimum}"
    record = json.loads((tmp_path / method / "results.json").read_text())
    assert record["data"]["train_size"] == 32 and record["data"]["test_size"] == 256
    texts = ["a fine, moving film", "dull and lifeless"]
    reloaded = ContrastiveClassifier.from_pretrained(tmp_path / method)
    np.testing.assert_array_equal(result.model.predict_logits(texts), reloaded.predict_logits(texts))


def test_every_registered_method_has_an_integration_run():
    # the distillation methods train against a teacher, not on labels: bench/distill.py runs them on real models
    teacher_methods = {"distill-kl", "distill-cosine"}
    assert set(available_methods()) - {"ce"} - teacher_methods <= set(METHODS) | {"ce"}, "add the new method to METHODS"
