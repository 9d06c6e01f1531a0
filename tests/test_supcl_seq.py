"""SupCL-Seq, self-supervised CL and dropout-augmented CE: views, losses, the frozen-head stage."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from contrastfit import ContrastiveClassifier, train
from contrastfit.encoders import dropout_probabilities, set_dropout
from contrastfit.errors import ConfigError
from contrastfit.losses import supcon
from contrastfit.head_stage import train_head
from contrastfit.trainer import tokenize_dataset

TEXTS = ["good fun film", "superb great", "awful dull", "bad weak plot", "fine movie", "boring story"]
LABELS = torch.tensor([1, 1, 0, 0, 1, 0])


def _model(tiny_encoder_dir, method, **hparams):
    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), method, ["negative", "positive"], hparams=hparams)
    model.train()
    enc = model.tokenize(TEXTS, padding=True)
    return model, {k: torch.tensor(v) for k, v in enc.items()}


def test_each_view_runs_with_its_own_dropout_and_defaults_are_restored(tiny_encoder_dir):
    """Pitfall 6: every dropout site has the view's p during that view's pass; then the exact
    previous values come back (also when a view's p equals the configured default)."""
    model, batch = _model(tiny_encoder_dir, "supcl-seq", view_dropouts="0.0,0.1,0.1,0.3")
    before = dropout_probabilities(model.encoder)
    seen = []
    hook = model.encoder.backbone.register_forward_pre_hook(lambda m, a: seen.append(sorted(set(dropout_probabilities(model.encoder)))))
    model(**batch, labels=LABELS)
    hook.remove()
    assert seen == [[0.0], [0.1], [0.1], [0.3]]
    assert dropout_probabilities(model.encoder) == before


def test_supcl_seq_loss_is_supcon_over_stacked_views(tiny_encoder_dir):
    model, batch = _model(tiny_encoder_dir, "supcl-seq", view_dropouts="0.0,0.0", temperature=0.1)
    out = model(**batch, labels=LABELS)
    with set_dropout(model.encoder, 0.0):
        z = model.encoder(**batch).pooled
    expected = supcon(torch.cat([z, z]), LABELS.repeat(2), 0.1)
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert {k: v.item() for k, v in out.loss_parts.items()} == {"supcon": pytest.approx(expected.item(), rel=1e-5)}
    out.loss.backward()
    assert all(p.grad is None for p in model.head.parameters())  # stage 1 does not touch the head
    assert sum(float(p.grad.abs().sum()) for p in model.encoder.parameters() if p.grad is not None) > 0


def test_self_supervised_cl_ignores_labels(tiny_encoder_dir):
    model, batch = _model(tiny_encoder_dir, "self-supervised-cl", view_dropouts="0.0,0.0", temperature=0.2)
    a = model(**batch, labels=LABELS).loss
    b = model(**batch, labels=torch.zeros_like(LABELS)).loss
    assert a.item() == pytest.approx(b.item(), rel=1e-6)
    with set_dropout(model.encoder, 0.0):
        z = F.normalize(model.encoder(**batch).pooled.double(), dim=1)
    # hand-written Eq. 1: the positive of view i is the other view of sentence i
    zz = torch.cat([z, z])
    n = len(TEXTS)
    terms = []
    for i in range(2 * n):
        j = (i + n) % (2 * n)
        denom = sum(torch.exp(zz[i] @ zz[k] / 0.2) for k in range(2 * n) if k != i)
        terms.append(-torch.log(torch.exp(zz[i] @ zz[j] / 0.2) / denom))
    assert a.item() == pytest.approx(float(sum(terms).detach() / len(terms)), rel=1e-4)
    with pytest.raises(ConfigError, match="two view_dropouts"):
        _model(tiny_encoder_dir, "self-supervised-cl", view_dropouts="0.1")


def test_dropout_augmented_ce_averages_ce_over_views(tiny_encoder_dir):
    model, batch = _model(tiny_encoder_dir, "dropout-augmented-ce", view_dropouts="0.0,0.0")
    model.head.dropout.p = 0.0
    out = model(**batch, labels=LABELS)
    with set_dropout(model.encoder, 0.0):
        expected = F.cross_entropy(model.head(model.encoder(**batch).pooled), LABELS)
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("method", ["supcl-seq", "self-supervised-cl", "dropout-augmented-ce"])
def test_degenerate_batches_are_finite(tiny_encoder_dir, method):
    model, batch = _model(tiny_encoder_dir, method)
    one = {k: v[:1] for k, v in batch.items()}
    same = {k: v[:2] for k, v in batch.items()}  # both positive
    for b, y in ((one, LABELS[:1]), (same, LABELS[:2])):
        loss = model(**b, labels=y).loss
        assert torch.isfinite(loss)
        loss.backward()


def test_bad_view_dropouts_are_refused(tiny_encoder_dir):
    with pytest.raises(ConfigError, match=r"^method 'supcl-seq': each of view_dropouts must be in \[0, 1\), got '1.5'$"):
        _model(tiny_encoder_dir, "supcl-seq", view_dropouts="0.0,1.5")
    with pytest.raises(ConfigError, match="^method 'supcl-seq': each of view_dropouts must be float, got 'a'$"):
        _model(tiny_encoder_dir, "supcl-seq", view_dropouts="a,b")


def test_head_stage_freezes_encoder_and_cache_changes_nothing_but_time(tiny_encoder_dir, sentiment_csv):
    from transformers import DataCollatorWithPadding

    from contrastfit.data import load_data

    data = load_data(str(sentiment_csv), label_column="sentiment")
    heads = []
    for cache in (True, False):
        torch.manual_seed(0)
        model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "supcl-seq", data.label_names,
                                                   hparams={"head_epochs": 5})
        model.head.dropout.p = 0.0
        encoder_before = {k: v.clone() for k, v in model.encoder.state_dict().items()}
        head_before = {k: v.clone() for k, v in model.head.state_dict().items()}
        ds = tokenize_dataset(data.train, model.tokenizer, model.max_length)
        info = train_head(model, ds, DataCollatorWithPadding(model.tokenizer), seed=3, cache=cache)
        assert info["cached"] is cache and info["epochs"] == 5
        assert all(torch.equal(encoder_before[k], v) for k, v in model.encoder.state_dict().items())
        assert all(p.requires_grad for p in model.encoder.parameters())  # unfrozen again afterwards
        assert not torch.equal(head_before["linear.weight"], model.head.linear.weight)
        heads.append(model.head.linear.weight.detach().clone())
    torch.testing.assert_close(heads[0], heads[1], rtol=1e-5, atol=1e-6)


def test_supcl_seq_end_to_end_and_reload(tmp_path, tiny_encoder_dir, sentiment_csv):
    result = train(method="supcl-seq", data=str(sentiment_csv), label_column="sentiment", output=str(tmp_path / "r"),
                   model=str(tiny_encoder_dir), epochs=2, batch_size=8, learning_rate=1e-3, progress=False,
                   logging_steps=1, hparams={"head_epochs": 20, "view_dropouts": "0.0,0.2"})
    record = json.loads((tmp_path / "r" / "results.json").read_text())
    assert record["hparams"]["view_dropouts"] == [0.0, 0.2]
    assert record["training"]["head_stage"]["epochs"] == 20
    logged = [h for h in record["log_history"] if "loss" in h]
    assert logged and all("loss_supcon" in h for h in logged)
    texts = ["good fun", "dull awful plot"]
    reloaded = ContrastiveClassifier.from_pretrained(tmp_path / "r", device=result.model.device)  # on the device it trained on: the same kernels, so bitwise the same
    np.testing.assert_array_equal(result.model.predict_logits(texts), reloaded.predict_logits(texts))
    assert reloaded.method.hparams["view_dropouts"] == (0.0, 0.2)


def test_regression_targets_are_binned_for_the_contrastive_stage(tiny_encoder_dir):
    from contrastfit.methods.supcl_seq import contrastive_labels

    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "supcl-seq", None)
    assert model.task == "regression"
    y = torch.tensor([0.04, 0.06, 0.14, 3.21, 3.19])
    assert contrastive_labels(model.method, y).tolist() == [0, 1, 1, 32, 32]


def test_head_epoch_is_chosen_on_validation(tmp_path, tiny_encoder_dir, sentiment_csv):
    """Issue 9: two-stage methods select their head epoch on validation, by the same score."""
    result = train(method="supcl-seq", data=str(sentiment_csv), label_column="sentiment", output=str(tmp_path / "s"),
                   model=str(tiny_encoder_dir), epochs=1, batch_size=8, progress=False,
                   hparams={"head_epochs": 20, "view_dropouts": "0.0,0.1", "head_learning_rate": 0.05})
    sel = result["training"]["head_stage"]["head_selection"]
    scores = {e["epoch"]: (e["accuracy"], -e["loss"]) for e in sel["evaluations"]}
    assert sorted(scores) == list(range(2, 21, 2))  # every 20 // 10 = 2 epochs
    best = max(scores, key=lambda e: (scores[e], -e))  # best accuracy, then lowest loss, then earliest
    assert sel["best_epoch"] == best
    # the kept head is that epoch's: its validation accuracy is the recorded one
    assert result.metrics["validation"]["accuracy"] == pytest.approx(scores[best][0])
    off = train(method="supcl-seq", data=str(sentiment_csv), label_column="sentiment", output=str(tmp_path / "o"),
                model=str(tiny_encoder_dir), epochs=1, batch_size=8, progress=False, select_best=False,
                hparams={"head_epochs": 3, "view_dropouts": "0.0,0.1"})
    assert off["training"]["head_stage"]["head_selection"] is None
