"""simcse-unsup, simcse-sup and diffcse (CS224N report Eq. 1-6): each loss equals the pure loss applied to
independently computed views, in-batch triples, the DiffCSE generator and discriminator, the report's
task heads (also on sentence pairs), degenerate batches, end-to-end training and reload."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from contrastfit import ContrastiveClassifier, train
from contrastfit.data.pairs import is_pair, split_pair
from contrastfit.encoders import set_dropout
from contrastfit.errors import ConfigError
from contrastfit.heads import CosineRegressionHead, PairConcatHead, SimCSETaskHead
from contrastfit.losses.diffcse import DEFAULT_LAMBDA, diffcse_loss, replaced_token_detection
from contrastfit.losses.simcse import simcse_sup, simcse_unsup
from contrastfit.methods.simcse_sup import Triples, supervised_triples
from contrastfit.trainer import tokenize_dataset

TEXTS = ["good fun film", "superb great", "awful dull", "bad weak plot", "fine movie", "boring story"]
LABELS = torch.tensor([1, 1, 0, 0, 1, 0])
PAIRS_A = ["good fun film", "the plot was dull", "a very fine movie"]
PAIRS_B = ["great fun", "boring story", "the actor is not good and the film is weak"]


def _model(tiny_encoder_dir, method, label_names=("negative", "positive"), texts=TEXTS, pairs=None, **hparams):
    names = list(label_names) if label_names is not None else None
    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), method, names, hparams=hparams)
    model.train()
    enc = model.tokenize(texts, pairs, padding=True)
    return model, {k: torch.tensor(v) for k, v in enc.items()}


def _prepared_diffcse(tiny_encoder_dir, texts=TEXTS, **hparams):
    import datasets

    model, batch = _model(tiny_encoder_dir, "diffcse", **hparams)
    ds = datasets.Dataset.from_dict({"text": texts * 2, "label": [0, 1] * len(texts)})
    model.method.prepare(model, tokenize_dataset(ds, model.tokenizer, model.max_length))
    return model, batch


@pytest.fixture(scope="module")
def pair_encoder_dir(tiny_encoder_dir, tmp_path_factory):
    """The tiny encoder with a tokenizer that returns ``token_type_ids`` (as BERT's, e.g. minilm-l6, does)."""
    import shutil

    folder = tmp_path_factory.mktemp("tiny-bert-tt") / "m"
    shutil.copytree(tiny_encoder_dir, folder)
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    return folder


def _encoder_grad(model) -> float:
    return sum(float(p.grad.abs().sum()) for p in model.encoder.parameters() if p.grad is not None)


# ---------------------------------------------------------------------------------------------
# simcse-unsup (Eq. 1)
# ---------------------------------------------------------------------------------------------

def test_simcse_unsup_is_the_pure_loss_on_two_dropout_passes(tiny_encoder_dir):
    model, batch = _model(tiny_encoder_dir, "simcse-unsup", temperature=0.1)
    torch.manual_seed(7)
    out = model(**batch, labels=LABELS)
    torch.manual_seed(7)
    z1 = model.encoder(**batch).pooled
    z2 = model.encoder(**batch).pooled
    assert not torch.allclose(z1, z2)  # dropout is on: two different views
    expected = simcse_unsup(z1, z2, 0.1)
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert {k: v.item() for k, v in out.loss_parts.items()} == {"simcse": pytest.approx(expected.item(), rel=1e-6)}
    # without dropout both views are the same embedding
    with set_dropout(model.encoder, 0.0):
        loss0 = model(**batch, labels=torch.zeros_like(LABELS)).loss  # labels are ignored
        z = model.encoder(**batch).pooled
    assert loss0.item() == pytest.approx(simcse_unsup(z, z, 0.1).item(), rel=1e-6)
    out.loss.backward()
    assert all(p.grad is None for p in model.head.parameters())  # stage 1 does not touch the head
    assert _encoder_grad(model) > 0


def test_simcse_unsup_trains_on_the_two_sentences_of_each_pair(pair_encoder_dir):
    model, batch = _model(pair_encoder_dir, "simcse-unsup", texts=PAIRS_A, pairs=PAIRS_B)
    with set_dropout(model.encoder, 0.0):
        loss = model(**batch, labels=torch.tensor([0, 1, 0])).loss
        sep = {k: torch.tensor(v) for k, v in model.tokenize(PAIRS_A + PAIRS_B, padding=True).items()}
        z = model.encoder(**sep).pooled
    assert loss.item() == pytest.approx(simcse_unsup(z, z, 0.05).item(), rel=1e-4)


# ---------------------------------------------------------------------------------------------
# Pairs: split a joint encoding into its two sentences
# ---------------------------------------------------------------------------------------------

def test_split_pair_gives_the_separately_tokenised_sentences(pair_encoder_dir):
    model, joint = _model(pair_encoder_dir, "simcse-unsup", texts=PAIRS_A, pairs=PAIRS_B)
    assert is_pair(joint)
    a, b = split_pair(joint, model.tokenizer.pad_token_id)
    for half, texts in ((a, PAIRS_A), (b, PAIRS_B)):
        for i, text in enumerate(texts):
            alone = model.tokenize([text])["input_ids"][0]
            n = int(half["attention_mask"][i].sum())
            assert half["input_ids"][i, :n].tolist() == alone
            assert (half["input_ids"][i, n:] == model.tokenizer.pad_token_id).all()
        assert (half["token_type_ids"] == 0).all()
    # left padding gives the same halves
    left = {k: v.clone() for k, v in joint.items()}
    for i in range(left["input_ids"].shape[0]):
        n = int(joint["attention_mask"][i].sum())
        for k in left:
            left[k][i] = torch.roll(joint[k][i], shifts=joint[k].shape[1] - n)
    a2, b2 = split_pair(left, model.tokenizer.pad_token_id)
    assert torch.equal(a2["input_ids"], a["input_ids"]) and torch.equal(b2["input_ids"], b["input_ids"])
    # single sentences are not pairs; a mixed batch is refused
    single = {k: torch.tensor(v) for k, v in model.tokenize(TEXTS, padding=True).items()}
    assert not is_pair(single)
    mixed = {k: v.clone() for k, v in joint.items()}
    mixed["token_type_ids"][0] = 0
    with pytest.raises(ValueError, match="mixes"):
        is_pair(mixed)


def test_pair_features_are_separately_encoded_sentences(pair_encoder_dir):
    model, joint = _model(pair_encoder_dir, "simcse-unsup", texts=PAIRS_A, pairs=PAIRS_B)
    model.eval()
    with torch.no_grad():
        feats = model.method.head_features(model, joint)
        u = model.encoder(**{k: torch.tensor(v) for k, v in model.tokenize(PAIRS_A, padding=True).items()}).pooled
        v = model.encoder(**{k: torch.tensor(v) for k, v in model.tokenize(PAIRS_B, padding=True).items()}).pooled
    assert feats.shape == (3, 64)
    torch.testing.assert_close(feats, torch.cat([u, v], dim=1), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Heads (report Sec. 4.2)
# ---------------------------------------------------------------------------------------------

def test_heads():
    torch.manual_seed(0)
    u, v = torch.randn(5, 8), torch.randn(5, 8)
    cos_head = CosineRegressionHead(8)
    expected = cos_head.mlp[2](torch.relu(cos_head.mlp[0](F.cosine_similarity(u, v).unsqueeze(1))))
    torch.testing.assert_close(cos_head(torch.cat([u, v], 1)), expected)
    assert [m.weight.shape for m in cos_head.mlp if isinstance(m, torch.nn.Linear)] == [(10, 1), (1, 10)]

    pair = PairConcatHead(8, 3).eval()
    linears = [m for m in pair.mlp.layers if isinstance(m, torch.nn.Linear)]
    assert [lin.weight.shape for lin in linears] == [(8, 16), (3, 8)]
    torch.testing.assert_close(pair(torch.cat([u, v], 1)), linears[1](torch.relu(linears[0](torch.cat([u, v], 1)))))

    head = SimCSETaskHead(8, 3, "classification").eval()
    single = [m for m in head.single.layers if isinstance(m, torch.nn.Linear)]
    assert [lin.weight.shape for lin in single] == [(4, 8), (3, 4)]  # hidden -> hidden/2 -> classes
    assert any(isinstance(m, torch.nn.ReLU) for m in head.single.layers)
    assert head(u).shape == (5, 3) and head(torch.cat([u, v], 1)).shape == (5, 3)
    torch.testing.assert_close(head(torch.cat([u, v], 1)), head.pair(torch.cat([u, v], 1)))
    assert isinstance(SimCSETaskHead(8, 1, "regression").pair, CosineRegressionHead)
    with pytest.raises(ValueError, match="width 5"):
        head(torch.randn(2, 5))


# ---------------------------------------------------------------------------------------------
# simcse-sup (Eq. 2): in-batch triples
# ---------------------------------------------------------------------------------------------

def _check_triples(y: torch.Tensor, tr: Triples, augmented: bool):
    labels = y.tolist()
    anchors = tr.anchors.tolist()
    assert anchors == sorted(set(anchors))
    others_pos = [p for p, s in zip(tr.positives.tolist(), tr.self_positive.tolist()) if not s]
    assert not set(anchors) & set(others_pos)  # no anchor is anyone's positive ...
    negs = [n for n, m in zip(tr.negatives.tolist(), tr.negative_mask.tolist()) if m]
    assert not set(anchors) & set(negs)  # ... or hard negative
    assert len(set(others_pos)) == len(others_pos)  # distinct positives
    for a, p, n, m, s in zip(anchors, tr.positives.tolist(), tr.negatives.tolist(), tr.negative_mask.tolist(),
                             tr.self_positive.tolist()):
        assert labels[p] == labels[a]
        assert (p == a) == s
        if m:
            assert labels[n] != labels[a]
        else:  # no non-anchor row of another class exists
            assert all(labels[j] == labels[a] for j in range(len(labels)) if j not in anchors)
    counts = {c: labels.count(c) for c in set(labels)}
    paired = sum(c // 2 for c in counts.values())
    unpaired = sum(c % 2 for c in counts.values())
    assert len(anchors) == paired + (unpaired if augmented else 0)
    assert int(tr.self_positive.sum()) == (unpaired if augmented else 0)


def test_supervised_triples_examples():
    y = torch.tensor([0, 1, 0, 1, 0, 2])
    tr = supervised_triples(y)
    assert tr.anchors.tolist() == [0, 1] and tr.positives.tolist() == [2, 3]
    # non-anchors: 2 (class 0), 3 (class 1), 4 (class 0), 5 (class 2); rotation over other-class candidates
    assert tr.negatives.tolist() == [3, 4] and tr.negative_mask.tolist() == [True, True]
    aug = supervised_triples(y, augmented=True)
    assert aug.anchors.tolist() == [0, 1, 4, 5] and aug.positives.tolist() == [2, 3, 4, 5]
    assert aug.self_positive.tolist() == [False, False, True, True]
    assert aug.negatives.tolist() == [3, 2, 3, 3]  # candidates: the non-anchors 2 (class 0), 3 (class 1)
    single = supervised_triples(torch.tensor([1, 1, 1, 1]))
    assert single.anchors.tolist() == [0, 2] and not single.negative_mask.any()
    assert supervised_triples(torch.tensor([3])).anchors.numel() == 0
    one = supervised_triples(torch.tensor([3]), augmented=True)
    assert one.anchors.tolist() == [0] and one.self_positive.tolist() == [True] and not one.negative_mask.any()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("augmented", [False, True])
def test_supervised_triples_properties(seed, augmented):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 1 + seed % 4, (int(torch.randint(1, 13, (1,), generator=g)),), generator=g)
    tr = supervised_triples(y, augmented)
    _check_triples(y, tr, augmented)
    assert torch.equal(supervised_triples(y, augmented).negatives, tr.negatives)  # deterministic


def test_simcse_sup_is_the_pure_loss_on_the_triples(tiny_encoder_dir):
    model, batch = _model(tiny_encoder_dir, "simcse-sup", temperature=0.1, hard_negative_weight=0.5)
    torch.manual_seed(3)
    out = model(**batch, labels=LABELS)
    torch.manual_seed(3)
    z = model.encoder(**batch).pooled
    tr = supervised_triples(LABELS)
    assert tr.negative_mask.all()
    expected = simcse_sup(z[tr.anchors], z[tr.positives], z[tr.negatives], 0.1, 0.5, tr.negative_mask)
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert {k: v.item() for k, v in out.loss_parts.items()} == {"simcse_sup": pytest.approx(expected.item(), rel=1e-6)}
    unweighted = _model(tiny_encoder_dir, "simcse-sup", temperature=0.1)[0]
    unweighted.load_state_dict(model.state_dict())
    torch.manual_seed(3)
    assert unweighted(**batch, labels=LABELS).loss.item() != pytest.approx(expected.item(), rel=1e-4)
    out.loss.backward()
    assert _encoder_grad(model) > 0 and all(p.grad is None for p in model.head.parameters())


def test_simcse_sup_augmented_uses_a_second_dropout_pass(tiny_encoder_dir):
    labels = torch.tensor([1, 1, 0, 0, 1, 0])  # three of each class: one unpaired row per class
    model, batch = _model(tiny_encoder_dir, "simcse-sup", augmented=True)
    torch.manual_seed(5)
    out = model(**batch, labels=labels)
    torch.manual_seed(5)
    z = model.encoder(**batch).pooled
    tr = supervised_triples(labels, augmented=True)
    rows = tr.anchors[tr.self_positive]
    assert rows.tolist() == [4, 5]
    views = model.encoder(**{k: v[rows] for k, v in batch.items()}).pooled
    assert not torch.allclose(views, z[rows])  # a real second view
    positives = z[tr.positives].clone()
    positives[tr.self_positive] = views
    expected = simcse_sup(z[tr.anchors], positives, z[tr.negatives], 0.05, 0.0, tr.negative_mask)
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    plain = _model(tiny_encoder_dir, "simcse-sup")[0]
    assert plain.method.hparams["augmented"] is False  # the report's best: the authors' dataset


# ---------------------------------------------------------------------------------------------
# diffcse (Eq. 3-6)
# ---------------------------------------------------------------------------------------------

def test_unigram_generator_is_built_in_prepare_from_training_ids(tiny_encoder_dir):
    import datasets

    model, _ = _model(tiny_encoder_dir, "diffcse")
    ds = tokenize_dataset(datasets.Dataset.from_dict({"text": TEXTS, "label": LABELS.tolist()}), model.tokenizer, 64)
    assert model.method.unigram is None
    model.method.prepare(model, ds)
    gen = model.method.unigram
    counts = torch.zeros(gen.vocab_size, dtype=torch.float64)
    for ids in ds["input_ids"]:
        counts += torch.bincount(torch.tensor(ids), minlength=gen.vocab_size).double()
    counts[model.tokenizer.all_special_ids] = 0
    assert torch.equal(gen.counts, counts)
    assert gen.vocab_size == model.encoder.backbone.get_input_embeddings().num_embeddings
    assert not any(k.startswith("method.unigram") for k in model.state_dict())


def test_diffcse_loss_is_simcse_plus_lambda_rtd(tiny_encoder_dir):
    model, batch = _prepared_diffcse(tiny_encoder_dir, **{"lambda": 0.5, "mask_ratio": 0.5})
    with set_dropout(model, 0.0):  # encoder and discriminator
        torch.manual_seed(11)
        out = model.method.training_loss(model, batch, LABELS)
        torch.manual_seed(11)
        corr = model.method.corrupt(model, batch)
        z = model.encoder(**batch).pooled
        logits = model.method.discriminator(
            F.embedding(corr.ids, model.encoder.backbone.get_input_embeddings().weight), z, batch["attention_mask"])
    rtd = replaced_token_detection(logits, corr.replaced, corr.counted)
    expected = diffcse_loss(simcse_unsup(z, z, 0.05), rtd, 0.5)
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert out.parts["rtd"].item() == pytest.approx(rtd.item(), rel=1e-5)
    # the corruption: replacements only at attended, non-special positions, and really different ids
    special = torch.isin(batch["input_ids"], torch.tensor(model.tokenizer.all_special_ids))
    assert corr.replaced.any()
    assert not (corr.replaced & (special | ~batch["attention_mask"].bool())).any()
    assert torch.equal(corr.counted, batch["attention_mask"].bool() & ~special)
    assert (corr.ids[corr.replaced] != batch["input_ids"][corr.replaced]).all()
    assert torch.equal(corr.ids[~corr.replaced], batch["input_ids"][~corr.replaced])
    assert not torch.isin(corr.ids[corr.replaced], torch.tensor(model.tokenizer.all_special_ids)).any()


def test_diffcse_rtd_gradient_reaches_the_encoder_through_h(tiny_encoder_dir):
    model, batch = _prepared_diffcse(tiny_encoder_dir)
    torch.manual_seed(0)
    out = model.method.training_loss(model, batch, LABELS)
    enc = [p for p in model.encoder.parameters()]
    grads = torch.autograd.grad(out.parts["rtd"], enc, allow_unused=True, retain_graph=True)
    assert sum(float(g.abs().sum()) for g in grads if g is not None) > 0
    # the same discriminator with h detached gives the encoder nothing: the only path is h
    corr = model.method.corrupt(model, batch)
    z = model.encoder(**batch).pooled
    logits = model.method.discriminate(model, corr.ids, z.detach(), batch["attention_mask"])
    rtd = replaced_token_detection(logits, corr.replaced, corr.counted)
    grads = torch.autograd.grad(rtd, enc, allow_unused=True)
    assert all(g is None for g in grads)
    assert out.loss.item() == pytest.approx((out.parts["simcse"] + DEFAULT_LAMBDA * out.parts["rtd"]).item(), rel=1e-6)


def test_diffcse_discriminator_trains_and_has_its_learning_rate(tiny_encoder_dir):
    model, batch = _prepared_diffcse(tiny_encoder_dir, **{"lambda": 1.0})
    before = {k: v.clone() for k, v in model.method.discriminator.state_dict().items()}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(**batch, labels=LABELS).loss.backward()
    opt.step()
    after = model.method.discriminator.state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert {"condition.weight", "score.weight", "norm.weight"} <= set(changed)
    assert any(k.startswith("layers.") for k in changed)
    assert model.method.param_groups(model) == []
    lr_model, _ = _model(tiny_encoder_dir, "diffcse", discriminator_learning_rate=1e-3)
    [own] = lr_model.method.param_groups(lr_model)
    assert own.lr == 1e-3 and own.params == list(lr_model.method.discriminator.parameters())


def test_diffcse_needs_prepare(tiny_encoder_dir):
    model, batch = _model(tiny_encoder_dir, "diffcse")
    with pytest.raises(RuntimeError, match="prepare"):
        model(**batch, labels=LABELS)


@pytest.fixture(scope="module")
def tiny_mlm_dir(tiny_encoder_dir, tmp_path_factory):
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    folder = tmp_path_factory.mktemp("tiny-mlm")
    tok = AutoTokenizer.from_pretrained(str(tiny_encoder_dir))
    torch.manual_seed(1)
    BertForMaskedLM(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=32, max_position_embeddings=64)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_diffcse_masked_lm_generator(tiny_encoder_dir, tiny_mlm_dir, tmp_path):
    model, batch = _model(tiny_encoder_dir, "diffcse", generator=str(tiny_mlm_dir), mask_ratio=0.6)
    model.method.prepare(model, None)
    mlm = model.method.mlm
    assert mlm is not None and not mlm.training and not any(p.requires_grad for p in mlm.parameters())
    assert not any("mlm" in k for k in model.state_dict())  # not saved with the model
    assert mlm not in list(model.modules())
    torch.manual_seed(0)
    corr = model.method.corrupt(model, batch)
    assert corr.replaced.any()
    assert not torch.isin(corr.ids[corr.replaced], torch.tensor(model.tokenizer.all_special_ids)).any()
    loss = model(**batch, labels=LABELS).loss
    assert torch.isfinite(loss)
    model.train()
    assert not mlm.training  # model.train() does not switch the generator
    # a generator with another vocabulary is refused
    from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models, pre_tokenizers

    other = tmp_path / "other"
    BertForMaskedLM(BertConfig(vocab_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=32)).save_pretrained(other)
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "x", "y", "z"])}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", mask_token="[MASK]").save_pretrained(other)
    bad, _ = _model(tiny_encoder_dir, "diffcse", generator=str(other))
    with pytest.raises(ConfigError, match="vocabulary"):
        bad.method.prepare(bad, None)


# ---------------------------------------------------------------------------------------------
# Degenerate batches, bad hyper-parameters
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method,hparams", [("simcse-unsup", {}), ("simcse-sup", {}), ("simcse-sup", {"augmented": True}),
                                            ("diffcse", {})])
def test_degenerate_batches_are_finite(tiny_encoder_dir, method, hparams):
    if method == "diffcse":
        model, batch = _prepared_diffcse(tiny_encoder_dir, **hparams)
    else:
        model, batch = _model(tiny_encoder_dir, method, **hparams)
    one = {k: v[:1] for k, v in batch.items()}
    same = {k: v[:2] for k, v in batch.items()}  # both positive
    for b, y in ((one, LABELS[:1]), (same, LABELS[:2])):
        loss = model(**b, labels=y).loss
        assert torch.isfinite(loss)
        loss.backward()  # graph intact
    if method == "simcse-sup" and not hparams:
        assert model(**one, labels=LABELS[:1]).loss.item() == 0.0  # no anchor has a positive


def test_bad_hyper_parameters_are_refused(tiny_encoder_dir):
    for method, hp, match in [
        ("simcse-unsup", {"temperature": 0.0}, "temperature"),
        ("simcse-sup", {"hard_negative_weight": float("nan")}, "hard_negative_weight"),
        ("diffcse", {"lambda": -1.0}, "lambda"),
        ("diffcse", {"mask_ratio": 0.0}, "mask_ratio"),
        ("diffcse", {"discriminator_layers": 0}, "discriminator_layers"),
        ("diffcse", {"augmented": True}, "no hyper-parameter 'augmented'"),
    ]:
        with pytest.raises(ConfigError, match=match):
            _model(tiny_encoder_dir, method, **hp)
    with pytest.raises(ConfigError, match="needs class labels"):
        _model(tiny_encoder_dir, "simcse-sup", label_names=None)


def test_defaults_and_registration():
    from contrastfit.methods import get_method

    assert get_method("simcse-unsup").defaults["temperature"] == 0.05
    sup = get_method("simcse-sup")
    assert sup.cls.contrastive and sup.defaults["hard_negative_weight"] == 0.0 and sup.defaults["augmented"] is False
    diff = get_method("diffcse").defaults
    assert diff["lambda"] == DEFAULT_LAMBDA == 0.005 and diff["mask_ratio"] == 0.3 and diff["generator"] == "unigram"
    for name in ("simcse-unsup", "simcse-sup", "diffcse"):
        spec = get_method(name)
        assert spec.cls.frozen_head_stage and {"head_epochs", "head_learning_rate", "head_batch_size"} <= set(spec.defaults)


# ---------------------------------------------------------------------------------------------
# End to end: train, reload, identical logits
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["simcse-unsup", "simcse-sup", "diffcse"])
def test_end_to_end_and_reload(tmp_path, tiny_encoder_dir, sentiment_csv, method):
    result = train(method=method, data=str(sentiment_csv), label_column="sentiment", output=str(tmp_path / "r"),
                   model=str(tiny_encoder_dir), epochs=1, batch_size=8, learning_rate=1e-3, progress=False,
                   logging_steps=1, save_checkpoints=False, hparams={"head_epochs": 5})
    record = json.loads((tmp_path / "r" / "results.json").read_text())
    assert record["training"]["head_stage"]["epochs"] == 5
    logged = [h for h in record["log_history"] if "loss" in h]
    part = {"simcse-unsup": "loss_simcse", "simcse-sup": "loss_simcse_sup", "diffcse": "loss_rtd"}[method]
    assert logged and all(part in h and np.isfinite(h[part]) for h in logged)
    texts = ["good fun", "dull awful plot"]
    reloaded = ContrastiveClassifier.from_pretrained(tmp_path / "r", device=result.model.device)  # on the device it trained on: the same kernels, so bitwise the same
    np.testing.assert_array_equal(result.model.predict_logits(texts), reloaded.predict_logits(texts))
    if method == "diffcse":
        for k, v in result.model.method.discriminator.state_dict().items():
            assert torch.equal(v, reloaded.method.discriminator.state_dict()[k])


def test_pair_regression_end_to_end_uses_the_cosine_head(tmp_path, pair_encoder_dir):
    import random

    rng = random.Random(0)
    words = "good great fine film movie bad awful boring plot actor story dull superb weak fun".split()
    path = tmp_path / "sts.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["sentence1", "sentence2", "score"])
        for _ in range(20):
            a = rng.sample(words, 3)
            b = a[:2] + rng.sample(words, 1) if rng.random() < 0.5 else rng.sample(words, 3)
            w.writerow([" ".join(a), " ".join(b), round(rng.uniform(0, 5), 2)])
    result = train(method="simcse-unsup", data=str(path), label_column="score", output=str(tmp_path / "r"),
                   model=str(pair_encoder_dir), epochs=1, batch_size=8, learning_rate=1e-3, progress=False,
                   save_checkpoints=False, hparams={"head_epochs": 5})
    model = result.model
    assert model.task == "regression" and isinstance(model.head.pair, CosineRegressionHead)
    assert np.isfinite(result["training"]["head_stage"]["final_loss"])
    reloaded = ContrastiveClassifier.from_pretrained(tmp_path / "r", device=model.device)  # on the device it trained on: the same kernels, so bitwise the same
    a, b = ["good film", "bad plot"], ["great movie", "fun story"]
    np.testing.assert_array_equal(model.predict_logits(a, b), reloaded.predict_logits(a, b))
    # the prediction is the cosine head on the separately encoded sentences
    u, v = model.embed(a, normalize=False), model.embed(b, normalize=False)
    with torch.no_grad():
        expected = model.head.pair(torch.cat([torch.tensor(u), torch.tensor(v)], 1).to(model.device)).cpu().numpy()
    np.testing.assert_allclose(model.predict_logits(a, b), expected, rtol=1e-4, atol=1e-5)


def test_pairs_without_token_type_ids_fall_back_to_the_joint_encoding(tiny_encoder_dir):
    """A tokenizer that returns no segment ids (RoBERTa-style; here the plain tiny tokenizer): the pair
    is one sequence and the single-sentence MLP reads it."""
    model, joint = _model(tiny_encoder_dir, "simcse-unsup", texts=PAIRS_A, pairs=PAIRS_B)
    assert "token_type_ids" not in joint and not is_pair(joint)
    model.eval()
    with torch.no_grad():
        assert model.method.head_features(model, joint).shape == (3, 32)
        torch.testing.assert_close(model.method.predict_logits(model, joint),
                                   model.head.single(model.encoder(**joint).pooled))
