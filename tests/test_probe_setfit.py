"""The linear probe, SetFit's pair loss and procedure, the logistic-regression head, LP-FT and head
refitting, and the method-owned training settings (learning rate, step rule)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.linear_model import LogisticRegression

from contrastfit import ContrastiveClassifier, train
from contrastfit.errors import ConfigError
from contrastfit.heads import LinearHead
from contrastfit.losses import cosine_pairs
from contrastfit.methods.setfit import setfit_pair_count
from contrastfit.config import TrainConfig
from contrastfit.trainer import resolve_schedule, with_method_defaults


# -- the pair loss -------------------------------------------------------------------------------

def reference_cosine_pairs(emb: torch.Tensor, labels: list[int]) -> torch.Tensor:
    """SetFit's loss written as a loop over pairs: half the mean squared error of positive pairs
    against 1, half that of negative pairs against 0."""
    pos, neg = [], []
    for i, j in itertools.combinations(range(len(labels)), 2):
        c = F.cosine_similarity(emb[i], emb[j], dim=0)
        (pos if labels[i] == labels[j] else neg).append((c - 1.0) ** 2 if labels[i] == labels[j] else c ** 2)
    kinds = [torch.stack(k).mean() for k in (pos, neg) if k]
    return torch.stack(kinds).mean()


@pytest.mark.parametrize("labels", [[0, 0, 1, 1, 2], [0, 1, 0, 1, 1, 1], [3, 3, 3], [0, 1, 2, 3]])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cosine_pairs_matches_the_loop_and_its_gradient(labels, dtype):
    torch.manual_seed(len(labels))
    emb = torch.randn(len(labels), 6, dtype=dtype, requires_grad=True)
    y = torch.tensor(labels)
    got = cosine_pairs(emb, y)
    want = reference_cosine_pairs(emb, labels)
    assert got.item() == pytest.approx(want.item(), rel=1e-5)
    g_got, = torch.autograd.grad(got, emb)
    g_want, = torch.autograd.grad(reference_cosine_pairs(emb, labels), emb)
    torch.testing.assert_close(g_got, g_want, rtol=1e-4, atol=1e-6)


def test_cosine_pairs_of_one_row_is_zero_with_a_graph():
    emb = torch.randn(1, 4, requires_grad=True)
    loss = cosine_pairs(emb, torch.tensor([0]))
    assert loss.item() == 0.0 and loss.requires_grad
    loss.backward()
    assert torch.all(emb.grad == 0)


def test_positive_and_negative_pairs_weigh_half_each():
    # three identical rows of class 0 (positive pairs: loss 0) and one orthogonal row of class 1
    # (negative pairs: cosine 0, loss 0): total 0; flip the last row's direction to the others':
    # negative pairs then have cosine 1 -> their mean is 1 -> the loss is exactly 0.5
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert cosine_pairs(emb, torch.tensor([0, 0, 0, 1])).item() == pytest.approx(0.0, abs=1e-7)
    emb[3] = torch.tensor([2.0, 0.0])
    assert cosine_pairs(emb, torch.tensor([0, 0, 0, 1])).item() == pytest.approx(0.5)


def test_setfit_pair_count_is_the_librarys_oversampling_count():
    # 8 + 8: positives with self-pairs 2 * 8*9/2 = 72, negatives 64 -> 2 * 72
    assert setfit_pair_count([0] * 8 + [1] * 8) == 144
    # 5 classes x 8: positives 5 * 36 = 180, negatives 10 * 64 = 640 -> 1280
    assert setfit_pair_count(sum(([c] * 8 for c in range(5)), [])) == 1280
    # unequal classes 3 + 1: positives 6 + 1 = 7, negatives 3 -> 14
    assert setfit_pair_count([0, 0, 0, 1]) == 14


# -- the logistic-regression head ----------------------------------------------------------------

@pytest.mark.parametrize("num_classes", [2, 4])
def test_fit_logistic_reproduces_sklearn_probabilities(num_classes):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 8)).astype(np.float32)
    y = np.arange(40) % num_classes
    x[np.arange(40), y] += 2.0
    head = LinearHead(8, num_classes).eval()
    head.fit_logistic(torch.from_numpy(x), torch.from_numpy(y), C=0.5)
    ours = torch.softmax(head(torch.from_numpy(x)), dim=-1).detach().numpy()
    theirs = LogisticRegression(C=0.5, max_iter=1000).fit(x, y).predict_proba(x)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_fit_logistic_gives_an_absent_class_no_probability():
    x = torch.randn(10, 4)
    y = torch.tensor([0, 2] * 5)
    head = LinearHead(4, 3).eval()
    head.fit_logistic(x, y)
    p = torch.softmax(head(x), dim=-1)
    assert torch.all(p[:, 1] < 1e-6)


# -- methods ---------------------------------------------------------------------------------------

def _train(tiny_encoder_dir, sentiment_csv, tmp_path, method, **kw):
    return train(method=method, data=str(sentiment_csv), output=str(tmp_path / method), model=str(tiny_encoder_dir),
                 label_column="sentiment", progress=False, **kw)


def _normalised_features(model, ds):
    enc = model.tokenize(list(ds["text"]), padding=True)
    with torch.no_grad():
        pooled = model.encoder(**{k: torch.tensor(v, device=model.device) for k, v in enc.items()}).pooled
    return F.normalize(pooled, dim=-1).cpu().numpy()


def test_linear_probe_leaves_the_encoder_and_fits_sklearns_logistic_regression(tiny_encoder_dir, sentiment_csv, tmp_path):
    from contrastfit.data import load_data

    result = _train(tiny_encoder_dir, sentiment_csv, tmp_path, "linear-probe")
    model = result.model
    fresh = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce", ["negative", "positive"])
    for (name, a), (_, b) in zip(model.encoder.state_dict().items(), fresh.encoder.state_dict().items()):
        assert torch.equal(a.cpu(), b), name
    assert result["training"]["steps"] == 0 and result["training"]["head_stage"]["solver"] == "logistic"
    # the probe chooses nothing on validation, so every row of the file trains it
    data = load_data(str(sentiment_csv), label_column="sentiment", validation_split=0)
    assert result["data"]["train_size"] == len(data.train) == 24
    x = _normalised_features(model, data.train)
    probe = LogisticRegression(max_iter=1000).fit(x, np.asarray(data.train["label"]))
    texts = list(data.train["text"])
    np.testing.assert_allclose(model.predict_proba(texts), probe.predict_proba(x), atol=1e-5)
    reloaded = ContrastiveClassifier.from_pretrained(tmp_path / "linear-probe")
    np.testing.assert_allclose(reloaded.predict_proba(texts), model.predict_proba(texts), atol=1e-6)


def test_setfit_trains_the_encoder_for_the_librarys_step_count_then_a_logistic_head(tiny_encoder_dir, sentiment_csv, tmp_path):
    from contrastfit.data import load_data

    result = _train(tiny_encoder_dir, sentiment_csv, tmp_path, "setfit", shots=4)
    # 4 + 4 examples: positives 2 * 10 = 20, negatives 16 -> 40 pairs -> ceil(40 / 16) = 3 steps
    assert result["training"]["steps"] == 3
    assert result["training"]["learning_rate"] == 2e-5
    model = result.model
    fresh = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce", ["negative", "positive"])
    moved = [not torch.equal(a.cpu(), b) for a, b in zip(model.encoder.parameters(), fresh.encoder.parameters())]
    assert any(moved)
    data = load_data(str(sentiment_csv), label_column="sentiment", validation_split=0)  # as the run: no hold-out
    from contrastfit.data import sample_per_class
    train_rows = sample_per_class(data.train, 4, 0)
    probe = LogisticRegression(max_iter=1000).fit(_normalised_features(model, train_rows), np.asarray(train_rows["label"]))
    np.testing.assert_allclose(model.predict_proba(list(data.train["text"])),
                               probe.predict_proba(_normalised_features(model, data.train)), atol=1e-5)


def test_setfit_and_probe_refuse_a_regression_target(tiny_encoder_dir):
    for method in ("setfit", "linear-probe"):
        with pytest.raises(ConfigError, match="needs class labels"):
            ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), method, None)


# -- LP-FT and head refitting ----------------------------------------------------------------------

def test_head_init_probe_starts_from_the_probe_and_refit_head_ends_with_one(tiny_encoder_dir, sentiment_csv, tmp_path):
    from contrastfit.data import load_data

    result = _train(tiny_encoder_dir, sentiment_csv, tmp_path, "ce-scl", head_init="probe", refit_head=True,
                    epochs=1, batch_size=8)
    assert result["training"]["head_init"]["solver"] == "logistic"
    assert result["training"]["head_stage"]["solver"] == "logistic"
    model = result.model
    data = load_data(str(sentiment_csv), label_column="sentiment")
    enc = model.tokenize(list(data.train["text"]), padding=True)
    with torch.no_grad():
        pooled = model.encoder(**{k: torch.tensor(v, device=model.device) for k, v in enc.items()}).pooled.cpu().numpy()
    probe = LogisticRegression(max_iter=1000).fit(pooled, np.asarray(data.train["label"]))
    np.testing.assert_allclose(torch.softmax(model.head(torch.from_numpy(pooled).to(model.device)), -1).detach().cpu().numpy(),
                               probe.predict_proba(pooled), atol=1e-5)


def test_head_init_is_validated():
    with pytest.raises(ConfigError, match="head_init"):
        TrainConfig(head_init="zeros").validate()


# -- method-owned training settings ----------------------------------------------------------------

def test_method_training_defaults_fill_only_what_the_user_left_unset():
    assert with_method_defaults(TrainConfig(method="setfit")).learning_rate == 2e-5
    assert with_method_defaults(TrainConfig(method="ce")).learning_rate == 5e-5
    assert with_method_defaults(TrainConfig(method="setfit", learning_rate=1e-4)).learning_rate == 1e-4
    assert with_method_defaults(TrainConfig(method="ce")).min_steps == 60
    recipe = with_method_defaults(TrainConfig(method="ce-scl-lr"))  # the default recipe's short schedule
    assert (recipe.learning_rate, recipe.min_steps) == (1e-4, 30)
    from contrastfit.methods import multilabel_methods

    multi = with_method_defaults(TrainConfig(method="ce-scl-lr"), multilabel_methods()["ce-scl-lr"])
    assert (multi.learning_rate, multi.min_steps) == (5e-5, 60)  # its multi-label form keeps the global one


def test_schedule_uses_the_methods_step_rule_unless_epochs_are_given():
    labels = [0] * 8 + [1] * 8
    assert resolve_schedule(TrainConfig(method="setfit"), labels) == (1.0, 9)  # 144 pairs / 16
    assert resolve_schedule(TrainConfig(method="setfit", epochs=2), labels) == (2.0, -1)
    assert resolve_schedule(TrainConfig(method="ce"), labels) == (60.0, -1)  # 1 step an epoch, >= 60 steps
    assert resolve_schedule(TrainConfig(method="ce", min_steps=1), list(range(100)) * 2) == (3.0, -1)
    assert math.isclose(resolve_schedule(TrainConfig(method="ce", epochs=0.5), labels)[0], 0.5)


# -- the default recipe ------------------------------------------------------------------------------

def test_the_default_recipe_is_ce_scl_then_a_logistic_head(tiny_encoder_dir, sentiment_csv, tmp_path):
    """No --method: ce-scl-lr. Its encoder is trained by ce-scl's loss with the label names as anchors;
    its head is then the logistic regression of the fine-tuned encoder's normalised training
    embeddings and of its label names' embeddings, each weighing as much as its class's examples."""
    from contrastfit.data import load_data
    from contrastfit.shapes import DEFAULT_METHOD

    assert DEFAULT_METHOD == "ce-scl-lr"
    result = train(data=str(sentiment_csv), output=str(tmp_path / "default"), model=str(tiny_encoder_dir),
                   label_column="sentiment", progress=False, epochs=2, batch_size=8)
    assert result["method"] == "ce-scl-lr"
    assert result["hparams"] == {"lambda": 0.9, "temperature": 0.3, "head_C": 1.0, "label_prior": 1.0, "label_anchors": True}
    assert result["training"]["head_stage"]["solver"] == "logistic" and result["training"]["steps"] > 0
    assert result["training"]["head_stage"]["label_prior"] == "used"
    model = result.model
    data = load_data(str(sentiment_csv), label_column="sentiment", validation_split=0)  # no hold-out: every row trains
    assert result["data"]["train_size"] == len(data.train) == 24
    names = {"text": ["negative", "positive"]}
    n = len(data.train)
    probe = LogisticRegression(max_iter=1000).fit(
        np.vstack([_normalised_features(model, data.train), _normalised_features(model, names)]),
        np.r_[np.asarray(data.train["label"]), [0, 1]], sample_weight=np.r_[np.ones(n), [n / 2, n / 2]])
    np.testing.assert_allclose(model.predict_proba(list(data.train["text"])),
                               probe.predict_proba(_normalised_features(model, data.train)), atol=1e-5)


def test_the_default_recipe_for_a_regression_target_is_ce(tiny_encoder_dir, tmp_path):
    import csv

    path = tmp_path / "scores.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["text", "score"])
        w.writerows([[f"good film {i}", 0.5 + i / 10] for i in range(12)])
    result = train(data=str(path), label_column="score", output=str(tmp_path / "reg"), model=str(tiny_encoder_dir),
                   progress=False, epochs=1, batch_size=4)
    assert result["method"] == "ce"
