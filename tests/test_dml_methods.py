"""Sosnowski et al.'s methods: ce-supcon (ce-scl with beta = 1 - lambda) and ce-softtriple."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import contrastfit.methods.dml  # noqa: F401  (registers ce-supcon and ce-softtriple)
from contrastfit import ContrastiveClassifier, train
from contrastfit.cli import main
from contrastfit.encoders import set_dropout
from contrastfit.errors import ConfigError
from contrastfit.losses import SOSNOWSKI_TABLE1, soft_triple
from contrastfit.methods import get_method
from contrastfit.methods.ce_scl import CrossEntropySupCon
from contrastfit.methods.dml import SOSNOWSKI_TABLE2, CrossEntropySoftTriple, CrossEntropySupConBeta, nearest_size_row

TEXTS = ["good fun film", "superb great", "awful dull", "bad weak plot is very boring", "fine movie", "boring story"]
LABELS = torch.tensor([1, 1, 0, 0, 1, 0])
SMALL = {"centers_per_class": 3, "la": 5.0, "gamma": 0.1, "margin": 0.3}  # a small SoftTriple for unit tests


def _model(tiny_encoder_dir, method, **hparams):
    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), method, ["negative", "positive"], hparams=hparams)
    model.train()
    enc = model.tokenize(TEXTS, padding=True)
    return model, {k: torch.tensor(v) for k, v in enc.items()}


# -- ce-supcon ----------------------------------------------------------------------------------

@pytest.mark.parametrize("beta", [0.9, 0.8, 0.35])
def test_ce_supcon_is_ce_scl_with_lambda_one_minus_beta(tiny_encoder_dir, beta):
    supcon_model, batch = _model(tiny_encoder_dir, "ce-supcon", beta=beta, temperature=0.6)
    scl_model, _ = _model(tiny_encoder_dir, "ce-scl", **{"lambda": 1 - beta, "temperature": 0.6})
    scl_model.head.load_state_dict(supcon_model.head.state_dict())  # same weights everywhere
    with set_dropout(supcon_model, 0.0), set_dropout(scl_model, 0.0):
        a = supcon_model(**batch, labels=LABELS)
        b = scl_model(**batch, labels=LABELS)
    assert torch.equal(a.loss, b.loss)
    assert {k: v.item() for k, v in a.loss_parts.items()} == {k: v.item() for k, v in b.loss_parts.items()}
    # the ce-scl class and its loss, not a copy
    method = supcon_model.method
    assert isinstance(method, CrossEntropySupCon) and get_method("ce-supcon").cls is CrossEntropySupConBeta
    assert CrossEntropySupConBeta.training_loss is CrossEntropySupCon.training_loss
    assert method.hparams == {"beta": beta, "temperature": 0.6} and "lambda" not in method.hparams
    assert method.contrastive_weight() == pytest.approx(1 - beta)


def test_ce_scl_keeps_its_own_hyper_parameters():
    spec = get_method("ce-scl")
    assert spec.defaults == {"lambda": 0.9, "temperature": 0.3}
    assert spec.defaults_for(20) == spec.defaults  # no size table for Gunel's method


def test_nearest_size_row_on_a_log_scale():
    table = {20: {"row": 20}, 100: {"row": 100}, 1000: {"row": 1000}}
    got = {n: nearest_size_row(table, n)["row"] for n in (0, 1, 20, 40, 44, 45, 100, 316, 317, 1000, 5000)}
    assert got == {0: 20, 1: 20, 20: 20, 40: 20, 44: 20, 45: 100, 100: 100, 316: 100, 317: 1000, 1000: 1000, 5000: 1000}
    nearest_size_row(table, 20)["row"] = -1  # a copy: the table itself is untouched
    assert table[20] == {"row": 20}


@pytest.mark.parametrize("n, row", [(20, 20), (40, 20), (100, 100), (1000, 1000), (5000, 1000)])
def test_size_tables_pick_the_right_rows(n, row):
    assert get_method("ce-supcon").defaults_for(n) == SOSNOWSKI_TABLE2[row]
    assert SOSNOWSKI_TABLE2[20] == {"beta": 0.9, "temperature": 0.6}  # Table 2 as printed
    assert SOSNOWSKI_TABLE2[100] == SOSNOWSKI_TABLE2[1000] == {"beta": 0.9, "temperature": 0.7}
    soft = get_method("ce-softtriple").defaults_for(n)
    assert soft == {**SOSNOWSKI_TABLE1[row], "center_reg": 0.0, "dml_on": "tokens", "centers_learning_rate": 1e-2}
    assert get_method("ce-softtriple").defaults_for(None) == {**SOSNOWSKI_TABLE1[100], "center_reg": 0.0,
                                                             "dml_on": "tokens", "centers_learning_rate": 1e-2}


def test_cli_beta_reaches_ce_supcon_and_sized_defaults_fill_the_rest(tmp_path, tiny_encoder_dir, sentiment_csv):
    out = tmp_path / "supcon"
    code = main(["train", "--method", "ce-supcon", "--data", str(sentiment_csv), "--label-column", "sentiment",
                 "--model", str(tiny_encoder_dir), "--output", str(out), "--epochs", "1", "--batch-size", "8",
                 "--learning-rate", "1e-3", "--beta", "0.8", "--quiet"])
    assert code == 0
    record = json.loads((out / "results.json").read_text())
    assert record["data"]["train_size"] <= 44  # 24 rows minus the validation split: Table 2's 20-example row
    assert record["hparams"] == {"beta": 0.8, "temperature": 0.6}  # the user's beta, the table's temperature
    reloaded = ContrastiveClassifier.from_pretrained(out)
    assert reloaded.method.hparams == {"beta": 0.8, "temperature": 0.6}
    assert reloaded.method.contrastive_weight() == pytest.approx(0.2)
    # lambda is ce-scl's name, not ce-supcon's: refused with a one-line error
    code = main(["train", "--method", "ce-supcon", "--data", str(sentiment_csv), "--label-column", "sentiment",
                 "--model", str(tiny_encoder_dir), "--output", str(tmp_path / "bad"), "--lambda", "0.2", "--quiet"])
    assert code == 2


def test_ce_supcon_bad_values_are_refused(tiny_encoder_dir):
    with pytest.raises(ConfigError, match="beta must be in"):
        _model(tiny_encoder_dir, "ce-supcon", beta=1.5)
    with pytest.raises(ConfigError, match="has no hyper-parameter 'lambda'"):
        _model(tiny_encoder_dir, "ce-supcon", **{"lambda": 0.2})
    with pytest.raises(ConfigError, match="temperature must be > 0"):
        _model(tiny_encoder_dir, "ce-supcon", temperature=0.0)
    with pytest.raises(ConfigError, match="needs class labels"):
        ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce-supcon", None)


# -- ce-softtriple ------------------------------------------------------------------------------

def _real_tokens(token_embeddings, attention_mask, labels):
    """The test's own token flattening (a loop, not flatten_tokens)."""
    xs, ys = [], []
    for i in range(token_embeddings.shape[0]):
        for j in range(token_embeddings.shape[1]):
            if attention_mask[i, j]:
                xs.append(token_embeddings[i, j])
                ys.append(labels[i])
    return torch.stack(xs), torch.stack(ys)


@pytest.mark.parametrize("dml_on", ["tokens", "pooled"])
def test_ce_softtriple_loss_is_beta_ce_plus_one_minus_beta_softtriple(tiny_encoder_dir, dml_on):
    model, batch = _model(tiny_encoder_dir, "ce-softtriple", beta=0.4, dml_on=dml_on, **SMALL)
    with set_dropout(model, 0.0):
        out = model(**batch, labels=LABELS)
        enc = model.encoder(**batch)
        ce = F.cross_entropy(model.head(enc.pooled), LABELS)
    assert int(batch["attention_mask"].sum()) < batch["attention_mask"].numel()  # the batch has padding
    if dml_on == "tokens":
        x, y = _real_tokens(enc.token_embeddings, enc.attention_mask, LABELS)
        assert x.shape[0] == int(batch["attention_mask"].sum())
    else:
        x, y = enc.pooled, LABELS
    st = soft_triple(x, y, model.method.soft_triple.centers, la=5.0, gamma=0.1, margin=0.3, centers_per_class=3)
    assert out.loss.item() == pytest.approx((0.4 * ce + 0.6 * st).item(), rel=1e-6)
    parts = {k: v.item() for k, v in out.loss_parts.items()}
    assert parts == {"ce": pytest.approx(ce.item(), rel=1e-6), "softtriple": pytest.approx(st.item(), rel=1e-6)}
    # dml_on really changes what SoftTriple sees
    x_other, y_other = (enc.pooled, LABELS) if dml_on == "tokens" else _real_tokens(enc.token_embeddings,
                                                                                     enc.attention_mask, LABELS)
    other = soft_triple(x_other, y_other, model.method.soft_triple.centers, la=5.0, gamma=0.1, margin=0.3,
                        centers_per_class=3)
    assert other.item() != pytest.approx(st.item(), rel=1e-4)


def test_centres_and_encoder_get_gradient_and_softtriple_alone_moves_the_encoder(tiny_encoder_dir):
    model, batch = _model(tiny_encoder_dir, "ce-softtriple", beta=0.0, **SMALL)  # SoftTriple term only
    assert model.method.soft_triple.centers.shape == (2 * 3, 32)
    names = [n for n, _ in model.named_parameters()]
    assert "method.soft_triple.centers" in names
    model(**batch, labels=LABELS).loss.backward()
    assert float(model.method.soft_triple.centers.grad.abs().sum()) > 0
    assert sum(float(p.grad.abs().sum()) for p in model.encoder.parameters() if p.grad is not None) > 0  # pitfall 4
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert not torch.equal(before["method.soft_triple.centers"], model.method.soft_triple.centers)
    assert not torch.equal(before["encoder.backbone.embeddings.word_embeddings.weight"],
                           model.encoder.backbone.embeddings.word_embeddings.weight)


def test_centres_have_their_own_learning_rate_in_the_trainer(tmp_path, tiny_encoder_dir, sentiment_csv):
    from contrastfit.data import load_data
    from contrastfit.config import TrainConfig
    from contrastfit.trainer import build_trainer, tokenize_dataset

    model, _ = _model(tiny_encoder_dir, "ce-softtriple", centers_learning_rate=0.05, **SMALL)
    [own] = model.method.param_groups(model)  # the centres themselves, not a name that points at them
    assert own.params == [model.method.soft_triple.centers] and own.lr == 0.05 and own.weight_decay is None
    data = load_data(str(sentiment_csv), label_column="sentiment")
    ds = tokenize_dataset(data.train, model.tokenizer, model.max_length)
    config = TrainConfig(method="ce-softtriple", output=str(tmp_path / "t"), learning_rate=1e-3, progress=False)
    trainer = build_trainer(config, model, ds, epochs=1)
    optimizer = trainer.create_optimizer()
    centres = model.method.soft_triple.centers
    [group] = [g for g in optimizer.param_groups if any(p is centres for p in g["params"])]
    assert group["lr"] == 0.05 and len(group["params"]) == 1
    others = [g for g in optimizer.param_groups if g is not group]
    assert others and all(g["lr"] == 1e-3 for g in others)
    trainable = sum(1 for p in model.parameters() if p.requires_grad)
    assert sum(len(g["params"]) for g in optimizer.param_groups) == trainable


def test_a_parameter_group_holds_trainable_parameters_of_the_model_once(tmp_path, tiny_encoder_dir, monkeypatch):
    from contrastfit.methods import ParamGroup
    from contrastfit.config import TrainConfig
    from contrastfit.trainer import build_trainer

    model, _ = _model(tiny_encoder_dir, "ce-softtriple", **SMALL)
    config = TrainConfig(method="ce-softtriple", output=str(tmp_path / "t"), progress=False)
    centres = model.method.soft_triple.centers
    stray = torch.nn.Parameter(torch.zeros(3))
    monkeypatch.setattr(model.method, "param_groups", lambda m: [ParamGroup("stray", [stray], 0.1)])
    with pytest.raises(ValueError, match="'stray' holds a parameter that is not a trainable parameter of the model"):
        build_trainer(config, model, None, epochs=1).create_optimizer()
    monkeypatch.setattr(model.method, "param_groups",
                        lambda m: [ParamGroup("a", [centres], 0.1), ParamGroup("b", [centres], 0.2)])
    with pytest.raises(ValueError, match="two parameter groups, 'a' and 'b'"):
        build_trainer(config, model, None, epochs=1).create_optimizer()
    # a group's own weight decay replaces the Trainer's rule for its parameters only
    monkeypatch.setattr(model.method, "param_groups", lambda m: [ParamGroup("centres", [centres], 0.1, weight_decay=0.5)])
    groups = build_trainer(config, model, None, epochs=1).create_optimizer().param_groups
    [own] = [g for g in groups if g["name"] == "centres"]
    assert own["params"] == [centres] and own["lr"] == 0.1 and own["weight_decay"] == 0.5
    assert {g["weight_decay"] for g in groups if g is not own} == {0.0, config.weight_decay}
    for bad, match in ((dict(lr=0.0), "lr must be > 0"), (dict(lr=0.1, weight_decay=-1.0), "weight_decay must be >= 0")):
        with pytest.raises(ValueError, match=match):
            ParamGroup("bad", [centres], **bad)
    with pytest.raises(ValueError, match="holds no parameters"):
        ParamGroup("empty", [], 0.1)


def test_ce_softtriple_end_to_end_centres_train_and_reload(tmp_path, tiny_encoder_dir, sentiment_csv, monkeypatch):
    initial = []
    monkeypatch.setattr(CrossEntropySoftTriple, "prepare",
                        lambda self, model, ds: initial.append(self.soft_triple.centers.detach().clone()))
    result = train(method="ce-softtriple", data=str(sentiment_csv), label_column="sentiment",
                   output=str(tmp_path / "r"), model=str(tiny_encoder_dir), epochs=2, batch_size=8,
                   learning_rate=1e-3, progress=False, logging_steps=1, hparams={"centers_per_class": 4, "la": 5.0})
    record = json.loads((tmp_path / "r" / "results.json").read_text())
    # Table 1's 20-example row under the user's values
    assert record["data"]["train_size"] <= 44
    assert record["hparams"] == {**SOSNOWSKI_TABLE1[20], "centers_per_class": 4, "la": 5.0, "center_reg": 0.0,
                                 "dml_on": "tokens", "centers_learning_rate": 1e-2}
    assert record["training"]["steps"] > 0
    logged = [h for h in record["log_history"] if "loss" in h]
    assert logged and all({"loss_ce", "loss_softtriple"} <= set(h) for h in logged)
    centres = result.model.method.soft_triple.centers.detach().cpu()
    assert len(initial) == 1 and initial[0].shape == centres.shape == (2 * 4, 32)
    assert not torch.allclose(initial[0].cpu(), centres)  # the optimizer trained them (pitfall 3)
    reloaded = ContrastiveClassifier.from_pretrained(tmp_path / "r", device=result.model.device)  # on the device it trained on: the same kernels, so bitwise the same
    assert torch.equal(reloaded.method.soft_triple.centers.detach().cpu(), centres)
    assert reloaded.method.hparams == record["hparams"]
    texts = ["good fun", "dull awful plot"]
    np.testing.assert_array_equal(result.model.predict_logits(texts), reloaded.predict_logits(texts))


@pytest.mark.parametrize("method, hparams", [("ce-softtriple", {"dml_on": "tokens", **SMALL}),
                                             ("ce-softtriple", {"dml_on": "pooled", **SMALL}),
                                             ("ce-supcon", {})])
def test_degenerate_batches_are_finite(tiny_encoder_dir, method, hparams):
    model, batch = _model(tiny_encoder_dir, method, **hparams)
    one = {k: v[:1] for k, v in batch.items()}
    same = {k: v[:2] for k, v in batch.items()}  # both positive
    for b, y in ((one, LABELS[:1]), (same, LABELS[:2])):
        model.zero_grad()
        loss = model(**b, labels=y).loss
        assert torch.isfinite(loss)
        loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_ce_softtriple_bad_values_are_refused(tiny_encoder_dir):
    with pytest.raises(ConfigError, match="needs class labels"):
        ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce-softtriple", None, hparams=SMALL)
    for hparams, message in (({"dml_on": "cls"}, "dml_on must be one of pooled, tokens"),
                             ({"beta": -0.1}, "beta must be in"),
                             ({"centers_per_class": 0}, "centers_per_class must be >= 1"),
                             ({"la": 0}, "la must be > 0"),
                             ({"gamma": -1}, "gamma must be > 0"),
                             ({"margin": -0.5}, "margin must be >= 0"),
                             ({"centers_learning_rate": 0}, "centers_learning_rate must be > 0"),
                             ({"centers_per_class": "many"}, "centers_per_class must be int, got 'many'")):
        with pytest.raises(ConfigError, match=message):
            _model(tiny_encoder_dir, "ce-softtriple", **{**SMALL, **hparams})
