"""LaCon methods (``lacon``, ``lacon-fusion``): head, losses, prediction, fusion attention, training, reload."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import contrastfit.methods.lacon  # noqa: F401  (registers the methods)
from contrastfit import ContrastiveClassifier, train
from contrastfit.encoders import set_dropout
from contrastfit.errors import ConfigError
from contrastfit.losses import lacon
from contrastfit.methods.lacon import LaCon

TEXTS = ["good fun film", "superb great", "awful dull", "bad weak plot the the a", "fine movie", "boring story"]
LABELS = torch.tensor([1, 1, 0, 0, 1, 0])
METHODS = ["lacon", "lacon-fusion"]
HIDDEN = 32  # the tiny encoder's hidden size


def _model(tiny_encoder_dir, method, **hparams):
    hparams.setdefault("heads", 4)  # 32 is not a multiple of the paper's 6
    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), method, ["negative", "positive"], hparams=hparams)
    model.train()
    enc = model.tokenize(TEXTS, padding=True)
    return model, {k: torch.tensor(v) for k, v in enc.items()}


def _project(model, x):
    """g written out: three linear layers, ReLU after the first two (Sec. 2.1), widths d."""
    linears = [m for m in model.head.projection.modules() if isinstance(m, nn.Linear)]
    assert [tuple(lin.weight.shape) for lin in linears] == [(HIDDEN, HIDDEN)] * 3
    for i, lin in enumerate(linears):
        x = F.linear(x, lin.weight, lin.bias)
        if i < len(linears) - 1:
            x = torch.relu(x)
    return x


def _fused(model, batch):
    """Eq. 9 written out token by token (right padding: the first n positions are real)."""
    out = model.encoder(**batch)
    labels = model.head.label_embeddings
    w = model.head.fusion.conv.weight.reshape(-1)
    b = model.head.fusion.bias
    r = model.method.hparams["fusion_radius"]
    assert w.numel() == 2 * r + 1 and b.shape == (labels.shape[0],)
    zs = []
    for i in range(out.token_embeddings.shape[0]):
        n = int(out.attention_mask[i].sum())
        e = out.token_embeddings[i, :n]
        g = F.cosine_similarity(labels[:, None, :], e[None, :, :], dim=-1)  # (C, n)
        u = torch.stack([b + sum(w[t + r] * g[:, j + t] for t in range(-r, r + 1) if 0 <= j + t < n)
                         for j in range(n)], dim=1)
        beta = torch.softmax(torch.relu(u).max(dim=0).values, dim=0)
        zs.append((beta[:, None] * e).sum(dim=0))
    return torch.stack(zs)


def _features(model, batch):
    if model.method.name == "lacon-fusion":
        return _fused(model, batch)
    return model.encoder(**batch).pooled


@pytest.mark.parametrize("method", METHODS)
def test_training_loss_is_lacon_on_projected_embeddings(tiny_encoder_dir, method):
    model, batch = _model(tiny_encoder_dir, method, temperature=0.2, ler_weight=0.3)
    assert model.method.contrastive and model.head.label_embeddings.shape == (2, HIDDEN)
    with set_dropout(model.encoder, 0.0):
        out = model(**batch, labels=LABELS)
        h = _project(model, _features(model, batch))
    expected = lacon(h, LABELS, model.head.label_embeddings, temperature=0.2, heads=4, ler_weight=0.3)
    assert out.loss.item() == pytest.approx(expected.total.item(), rel=1e-5)
    assert {k: v.item() for k, v in out.loss_parts.items()} == {
        "icl": pytest.approx(expected.icl.item(), rel=1e-5),
        "lcl": pytest.approx(expected.lcl.item(), rel=1e-5, abs=1e-6),
        "ler": pytest.approx(expected.ler.item(), rel=1e-5),
    }


@pytest.mark.parametrize("method", METHODS)
def test_predict_logits_are_cosines_over_temperature(tiny_encoder_dir, method):
    model, batch = _model(tiny_encoder_dir, method, temperature=0.25)
    model.eval()
    with torch.no_grad():
        logits = model(**batch).logits
        h = _project(model, _features(model, batch))
        lab = model.head.label_embeddings
        cos = (h / h.norm(dim=1, keepdim=True)) @ (lab / lab.norm(dim=1, keepdim=True)).T
    torch.testing.assert_close(logits, cos / 0.25, rtol=1e-5, atol=1e-5)
    assert logits.abs().max() <= 1 / 0.25 + 1e-5
    np.testing.assert_allclose(model.predict_logits(TEXTS), logits.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model.predict_proba(TEXTS).sum(axis=1), 1.0, rtol=1e-6)


def test_fusion_attention_ignores_padding(tiny_encoder_dir):
    model, batch = _model(tiny_encoder_dir, "lacon-fusion", fusion_radius=2)
    model.eval()
    extra = 5
    padded = {k: F.pad(v, (0, extra), value=model.tokenizer.pad_token_id if k == "input_ids" else 0)
              for k, v in batch.items()}
    with torch.no_grad():
        torch.testing.assert_close(model(**padded).logits, model(**batch).logits, rtol=1e-5, atol=1e-5)
        betas = []
        for b in (batch, padded):
            out = model.encoder(**b)
            betas.append(model.head.fusion.attention(out.token_embeddings, out.attention_mask,
                                                     model.head.label_embeddings))
    short, long = betas
    assert torch.all(long[:, -extra:] == 0) and torch.all(short[batch["attention_mask"] == 0] == 0)
    torch.testing.assert_close(long[:, :-extra], short, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(long.sum(dim=1), torch.ones(len(TEXTS)))
    # the sentences of this batch do have padding, so the check above is not vacuous
    assert int((batch["attention_mask"] == 0).sum()) > 0


@pytest.mark.parametrize("method", METHODS)
def test_gradients_reach_label_embeddings_and_a_step_moves_them(tiny_encoder_dir, method):
    """Pitfall 3 (label embeddings in the optimizer) and pitfall 4 (ICL alone moves the encoder)."""
    model, batch = _model(tiny_encoder_dir, method)
    parts = model.method.training_loss(model, batch, LABELS).parts
    parts["icl"].backward(retain_graph=True)
    assert model.encoder.backbone.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    model.zero_grad()
    parts["ler"].backward(retain_graph=True)  # the regulariser alone pushes the labels apart
    assert model.head.label_embeddings.grad.abs().sum() > 0
    model.zero_grad()
    model(**batch, labels=LABELS).loss.backward()
    trained = {"head.label_embeddings", "head.projection.layers.1.weight", "head.projection.layers.7.weight"}
    if method == "lacon-fusion":
        trained |= {"head.fusion.conv.weight", "head.fusion.bias"}
    params = dict(model.named_parameters())
    for name in trained:
        assert params[name].grad is not None and params[name].grad.abs().sum() > 0, name
    before = {name: params[name].detach().clone() for name in trained}
    torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0).step()
    for name in trained:
        assert not torch.equal(before[name], params[name]), name


@pytest.mark.parametrize("method", METHODS)
def test_batch_of_one_and_single_class_batch_are_finite(tiny_encoder_dir, method):
    model, batch = _model(tiny_encoder_dir, method)
    one = {k: v[:1] for k, v in batch.items()}
    same = {k: v[:2] for k, v in batch.items()}  # both positive
    for b, y in ((one, LABELS[:1]), (same, LABELS[:2])):
        out = model(**b, labels=y)
        assert torch.isfinite(out.loss) and torch.isfinite(out.logits).all()
        assert out.loss_parts["lcl"].item() == 0.0  # no label has a negative in the batch
        out.loss.backward()
        assert torch.isfinite(model.head.label_embeddings.grad).all()
        model.zero_grad()


def test_projection_width_and_heads(tiny_encoder_dir):
    with pytest.raises(ConfigError, match="heads .6. must divide the projection width 32"):
        _model(tiny_encoder_dir, "lacon", heads=6)
    model, batch = _model(tiny_encoder_dir, "lacon", heads=6, projection_dim=36)
    assert model.head.label_embeddings.shape == (2, 36)
    assert torch.isfinite(model(**batch, labels=LABELS).loss)
    with pytest.raises(ConfigError, match="projection_dim must be 0 or 32"):
        _model(tiny_encoder_dir, "lacon-fusion", heads=6, projection_dim=36)
    # projection_layers=0: the "-g" ablation, H is the pooled embedding itself
    model, batch = _model(tiny_encoder_dir, "lacon", projection_layers=0)
    model.eval()
    with torch.no_grad():
        pooled = model.encoder(**batch).pooled
        torch.testing.assert_close(model(**batch).logits, model.head.match(pooled))
    assert not any(isinstance(m, nn.Linear) for m in model.head.modules())


def test_bad_hyper_parameters_are_refused(tiny_encoder_dir):
    for bad, match in (({"temperature": 0.0}, "temperature must be > 0"),
                       ({"ler_weight": -1.0}, "ler_weight must be >= 0"),
                       ({"projection_layers": -1}, "projection_layers must be >= 0"),
                       ({"heads": "two"}, "heads must be int, got 'two'"),
                       ({"fusion_radius": 1}, "no hyper-parameter 'fusion_radius'")):
        with pytest.raises(ConfigError, match=match):
            _model(tiny_encoder_dir, "lacon", **bad)
    with pytest.raises(ConfigError, match="fusion_radius must be >= 0"):
        _model(tiny_encoder_dir, "lacon-fusion", fusion_radius=-1)
    with pytest.raises(ConfigError, match="needs class labels"):
        ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "lacon", None, hparams={"heads": 4})


def test_label_learning_rate_reaches_the_optimizer(tmp_path, tiny_encoder_dir):
    from contrastfit.config import TrainConfig
    from contrastfit.trainer import build_trainer

    model, _ = _model(tiny_encoder_dir, "lacon", label_learning_rate=0.01)
    [own] = model.method.param_groups(model)
    assert own.params == [model.head.label_embeddings] and own.lr == 0.01
    trainer = build_trainer(TrainConfig(output=str(tmp_path / "r"), learning_rate=1e-4, report_to="none"),
                            model, None, epochs=1)
    optimizer = trainer.create_optimizer()
    [group] = [g for g in optimizer.param_groups if any(p is model.head.label_embeddings for p in g["params"])]
    assert group["lr"] == 0.01 and len(group["params"]) == 1
    plain = _model(tiny_encoder_dir, "lacon")[0]
    assert plain.method.param_groups(plain) == []


@pytest.mark.parametrize("method", METHODS)
def test_end_to_end_training_moves_labels_and_reload_is_identical(tmp_path, tiny_encoder_dir, sentiment_csv,
                                                                   monkeypatch, method):
    initial = {}
    original_prepare = LaCon.prepare

    def record(self, model, train_dataset):  # called once, just before the Trainer starts
        initial["labels"] = model.head.label_embeddings.detach().clone()
        return original_prepare(self, model, train_dataset)

    monkeypatch.setattr(LaCon, "prepare", record)
    out = tmp_path / "r"
    result = train(method=method, data=str(sentiment_csv), label_column="sentiment", output=str(out),
                   model=str(tiny_encoder_dir), epochs=2, batch_size=8, learning_rate=1e-3, weight_decay=0.0,
                   progress=False, logging_steps=1, hparams={"heads": 4})
    record_json = json.loads((out / "results.json").read_text())
    assert record_json["hparams"]["heads"] == 4
    logged = [h for h in record_json["log_history"] if "loss" in h]
    assert logged and all({"loss_icl", "loss_lcl", "loss_ler"} <= set(h) for h in logged)
    trained = result.model.head.label_embeddings.detach()
    assert not torch.equal(initial["labels"].to(trained.device), trained)  # no weight decay: the gradient moved them

    reloaded = ContrastiveClassifier.from_pretrained(out, device=result.model.device)  # on the device it trained on: the same kernels, so bitwise the same
    assert reloaded.method.name == method
    torch.testing.assert_close(reloaded.head.label_embeddings, trained, rtol=0, atol=0)
    for key, value in result.model.head.state_dict().items():
        assert torch.equal(reloaded.head.state_dict()[key], value), key
    texts = ["good fun", "dull awful plot", "the film was very boring and weak"]
    np.testing.assert_array_equal(result.model.predict_logits(texts), reloaded.predict_logits(texts))


@pytest.mark.parametrize("method", METHODS)
def test_embed_and_anchors_are_in_the_label_space(tiny_encoder_dir, method):
    """Analyses (t-SNE with label embeddings as stars) see H = g(features) and L, not the pooled output."""
    model, batch = _model(tiny_encoder_dir, method)
    model.eval()
    with torch.no_grad():
        h = F.normalize(_project(model, _features(model, batch)), dim=1)
    np.testing.assert_allclose(model.embed(TEXTS), h.numpy(), rtol=1e-5, atol=1e-5)
    assert model.method.anchors(model) is model.head.label_embeddings


# ---------------------------------------------------------------------------------------------
# Ablations (Tables 3 and 6): a weight per term
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("weights", [{"icl_weight": 0.0}, {"lcl_weight": 0.0}, {"ler_weight": 0.0},
                                     {"icl_weight": 0.5, "lcl_weight": 2.0, "ler_weight": 0.25}])
def test_training_loss_is_the_weighted_sum_of_the_parts(tiny_encoder_dir, weights):
    model, batch = _model(tiny_encoder_dir, "lacon", **weights)
    w = {"icl_weight": 1.0, "lcl_weight": 1.0, "ler_weight": 0.5, **weights}
    with set_dropout(model.encoder, 0.0):
        out = model(**batch, labels=LABELS)
        h = _project(model, _features(model, batch))
    # the parts computed separately (unweighted, default call), then weighted by hand
    parts = lacon(h, LABELS, model.head.label_embeddings, temperature=0.1, heads=4)
    want = w["icl_weight"] * parts.icl.item() + w["lcl_weight"] * parts.lcl.item() + w["ler_weight"] * parts.ler.item()
    assert out.loss.item() == pytest.approx(want, rel=1e-5, abs=1e-6)
    # a removed term is still logged, unweighted
    assert out.loss_parts["icl"].item() == pytest.approx(parts.icl.item(), rel=1e-5)
    assert out.loss_parts["lcl"].item() == pytest.approx(parts.lcl.item(), rel=1e-5, abs=1e-6)
    assert out.loss_parts["ler"].item() == pytest.approx(parts.ler.item(), rel=1e-5)


def test_minus_icl_sends_no_icl_gradient(tiny_encoder_dir):
    """With icl_weight 0 the encoder's gradient is exactly that of LCL + lambda LER."""
    model, batch = _model(tiny_encoder_dir, "lacon", icl_weight=0.0)
    with set_dropout(model.encoder, 0.0):
        out = model.method.training_loss(model, batch, LABELS)
        grads = torch.autograd.grad(out.loss, [model.head.label_embeddings, model.head.projection.layers[1].weight],
                                    retain_graph=True)
        want = torch.autograd.grad(out.parts["lcl"] + 0.5 * out.parts["ler"],
                                   [model.head.label_embeddings, model.head.projection.layers[1].weight])
    for g, r in zip(grads, want):
        torch.testing.assert_close(g, r, rtol=0, atol=0)


def test_all_weights_zero_is_a_one_line_config_error(tiny_encoder_dir):
    with pytest.raises(ConfigError) as info:
        _model(tiny_encoder_dir, "lacon", icl_weight=0, lcl_weight=0, ler_weight=0)
    assert "all three loss weights are 0" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="icl_weight and lcl_weight are both 0"):
        _model(tiny_encoder_dir, "lacon-fusion", icl_weight=0, lcl_weight=0)
    for name in ("icl_weight", "lcl_weight"):
        with pytest.raises(ConfigError, match=f"{name} must be >= 0"):
            _model(tiny_encoder_dir, "lacon", **{name: -1.0})
    assert LaCon.Hparams().icl_weight == 1.0 and LaCon.Hparams().lcl_weight == 1.0


def test_ablation_example_config(tiny_encoder_dir):
    """examples/lacon_ablation.yaml: every row of Tables 3 and 6 builds and has the intended weights."""
    from pathlib import Path

    from contrastfit.experiments.config import load_config

    config = load_config(Path(__file__).parent.parent / "examples" / "lacon_ablation.yaml")
    rows = {v.label: dict(v.hparams) for v in config.methods}
    expected = {  # label -> (icl, lcl, ler, heads, projection_layers)
        "lacon": (1.0, 1.0, 0.5, 6, 3),
        "lacon[heads=1]": (1.0, 1.0, 0.5, 1, 3),
        "lacon[icl_weight=0.0]": (0.0, 1.0, 0.5, 6, 3),
        "lacon[lcl_weight=0.0]": (1.0, 0.0, 0.5, 6, 3),
        "lacon[ler_weight=0.0]": (1.0, 1.0, 0.0, 6, 3),
        "lacon[projection_layers=0]": (1.0, 1.0, 0.5, 6, 0),
        "lacon[heads=1,lcl_weight=0.0,ler_weight=0.0]": (1.0, 0.0, 0.0, 1, 3),
        "lacon[lcl_weight=0.0,ler_weight=0.0]": (1.0, 0.0, 0.0, 6, 3),
        "lacon[icl_weight=0.0,ler_weight=0.0]": (0.0, 1.0, 0.0, 6, 3),
    }
    assert set(rows) == set(expected) | {"ce", "ce-projection"} and config.baseline == "ce"
    from contrastfit.methods import get_method

    for label, (icl, lcl, ler, heads, layers) in expected.items():
        hp = get_method("lacon").create(2, 384, **rows[label]).hparams  # MiniLM's width
        assert (hp["icl_weight"], hp["lcl_weight"], hp["ler_weight"], hp["heads"], hp["projection_layers"]) == \
            (icl, lcl, ler, heads, layers), label
    get_method("ce-projection").create(2, 384)


# ---------------------------------------------------------------------------------------------
# ce-projection: Table 3's "BERT w/ g" (CE through LaCon's projection head g)
# ---------------------------------------------------------------------------------------------

def test_ce_projection_logits_are_a_linear_classifier_on_g(tiny_encoder_dir):
    from contrastfit.heads import ProjectionClassifierHead

    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce-projection", ["negative", "positive"])
    assert isinstance(model.head, ProjectionClassifierHead) and not model.method.contrastive
    assert model.head.classifier.linear.weight.shape == (2, HIDDEN)
    assert not hasattr(model.head, "label_embeddings")
    enc = model.tokenize(TEXTS, padding=True)
    batch = {k: torch.tensor(v) for k, v in enc.items()}
    model.eval()
    with torch.no_grad():
        pooled = model.encoder(**batch).pooled
        cls = model.head.classifier.linear
        want = F.linear(_project(model, pooled), cls.weight, cls.bias)  # g as LaCon's, then W g + b
        torch.testing.assert_close(model(**batch).logits, want, rtol=1e-5, atol=1e-6)
    # training loss: cross-entropy on those logits
    model.train()
    with set_dropout(model.encoder, 0.0), set_dropout(model.head, 0.0):
        out = model(**batch, labels=LABELS)
        logits = F.linear(_project(model, model.encoder(**batch).pooled), cls.weight, cls.bias)
    assert out.loss.item() == pytest.approx(F.cross_entropy(logits, LABELS).item(), rel=1e-5)
    assert set(out.loss_parts) == {"ce"}
    # hyper-parameters
    narrow = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce-projection", ["negative", "positive"],
                                                hparams={"projection_dim": 8, "projection_layers": 2})
    assert [tuple(m.weight.shape) for m in narrow.head.modules() if isinstance(m, nn.Linear)] == [(8, HIDDEN), (8, 8), (2, 8)]
    with pytest.raises(ConfigError, match="projection_layers must be >= 1"):
        ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce-projection", ["negative", "positive"],
                                           hparams={"projection_layers": 0})
    with pytest.raises(ConfigError, match="no hyper-parameter 'ler_weight'"):
        ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce-projection", ["negative", "positive"],
                                           hparams={"ler_weight": 0.5})
    # a regression target gets one output and MSE, as `ce`
    reg = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce-projection", None)
    assert reg.head.classifier.linear.out_features == 1


def test_ce_projection_step_moves_g(tiny_encoder_dir):
    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce-projection", ["negative", "positive"])
    model.train()
    batch = {k: torch.tensor(v) for k, v in model.tokenize(TEXTS, padding=True).items()}
    model(**batch, labels=LABELS).loss.backward()
    params = dict(model.named_parameters())
    g_names = [n for n in params if n.startswith("head.projection.")]
    assert len(g_names) == 6  # three linear layers of g, weight and bias
    for name in [*g_names, "head.classifier.linear.weight", "encoder.backbone.embeddings.word_embeddings.weight"]:
        assert params[name].grad is not None and params[name].grad.abs().sum() > 0, name
    before = {n: params[n].detach().clone() for n in g_names}
    torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0).step()
    for name in g_names:
        assert not torch.equal(before[name], params[name]), name


def test_ce_projection_trains_and_reloads_with_identical_predictions(tmp_path, tiny_encoder_dir, sentiment_csv,
                                                                     monkeypatch):
    from contrastfit.methods.lacon import CEProjection

    initial = {}

    def record(self, model, train_dataset):  # called once, just before the Trainer starts
        initial.update({k: v.detach().clone() for k, v in model.head.state_dict().items()})

    monkeypatch.setattr(CEProjection, "prepare", record)
    out = tmp_path / "r"
    result = train(method="ce-projection", data=str(sentiment_csv), label_column="sentiment", output=str(out),
                   model=str(tiny_encoder_dir), epochs=2, batch_size=8, learning_rate=1e-3, weight_decay=0.0,
                   progress=False, logging_steps=1)
    trained = result.model.head.state_dict()
    assert initial and set(initial) == set(trained)
    for key in ("projection.layers.1.weight", "projection.layers.4.weight", "projection.layers.7.weight",
                "classifier.linear.weight"):
        assert not torch.equal(initial[key].to(trained[key].device), trained[key]), key  # g (and the classifier) trained

    reloaded = ContrastiveClassifier.from_pretrained(out, device=result.model.device)  # on the device it trained on: the same kernels, so bitwise the same
    assert reloaded.method.name == "ce-projection"
    for key, value in trained.items():
        assert torch.equal(reloaded.head.state_dict()[key], value), key
    texts = ["good fun", "dull awful plot", "the film was very boring and weak"]
    np.testing.assert_array_equal(result.model.predict_logits(texts), reloaded.predict_logits(texts))
    assert list(result.model.predict(texts)) == list(reloaded.predict(texts))
