"""Token attributions: Shapley values of words against a hand-written enumeration of coalitions."""

from __future__ import annotations

import itertools
import os
import math

import numpy as np
import pytest
import torch

from contrastfit import ContrastiveClassifier
from contrastfit.evaluation.attributions import TokenAttribution, _word_features, token_attributions
from contrastfit.evaluation.plots import plot_attributions

LABELS = ["negative", "positive"]


@pytest.fixture()
def model(tiny_encoder_dir):
    torch.manual_seed(0)
    m = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce", LABELS, pooling="mean")
    with torch.no_grad():  # a head that gives clearly non-uniform probabilities
        for p in m.head.parameters():
            p.mul_(20)
    return m.eval()


def _value(model, text: str, keep: set[int], target: int, baseline: str) -> float:
    """p(target) with only the words in ``keep`` present (word-level tokenizer: token i+1 = word i)."""
    enc = model.tokenize([text])
    ids = torch.tensor(enc["input_ids"])
    att = torch.tensor(enc["attention_mask"])
    for i in range(ids.shape[1] - 2):
        if i not in keep:
            if baseline == "remove":
                att[0, i + 1] = 0
            else:
                ids[0, i + 1] = model.tokenizer.mask_token_id
    with torch.no_grad():
        return float(model(input_ids=ids, attention_mask=att).logits.softmax(-1)[0, target])


def _coalition_shapley(n: int, value) -> np.ndarray:
    """phi_i = sum over S not containing i of |S|! (n-|S|-1)! / n! [v(S + i) - v(S)], for players 0..n-1."""
    phi = np.zeros(n)
    for i in range(n):
        others = [j for j in range(n) if j != i]
        for size in range(n):
            for subset in itertools.combinations(others, size):
                w = math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
                s = set(subset)
                phi[i] += w * (value(s | {i}) - value(s))
    return phi


def _exact_shapley(model, text: str, target: int, baseline: str) -> np.ndarray:
    return _coalition_shapley(len(text.split()), lambda keep: _value(model, text, keep, target, baseline))


@pytest.mark.parametrize("baseline", ["remove", "mask"])
def test_exact_matches_the_coalition_formula(model, baseline):
    text = "great film but boring plot"
    got = token_attributions(model, text, target=1, exact=True, baseline=baseline)
    want = _exact_shapley(model, text, 1, baseline)
    assert got.words == text.split()
    np.testing.assert_allclose(got.values, want, atol=1e-5)
    assert got.probability == pytest.approx(_value(model, text, set(range(5)), 1, baseline), abs=1e-6)
    assert got.base_probability == pytest.approx(_value(model, text, set(), 1, baseline), abs=1e-6)
    assert np.abs(want).max() > 1e-3  # the test is not comparing zeros


def test_sampling_is_efficient_and_converges(model):
    text = "the movie was very good but the plot was dull"
    a = token_attributions(model, text, target="positive", n_samples=5, seed=1)
    # every sampled ordering telescopes: the values always sum to p(full) - p(empty)
    assert a.values.sum() == pytest.approx(a.probability - a.base_probability, abs=1e-5)
    assert a.target == 1 and a.target_name == "positive"
    again = token_attributions(model, text, target="positive", n_samples=5, seed=1)
    np.testing.assert_array_equal(a.values, again.values)  # seeded
    short = "great film but boring plot"
    est = token_attributions(model, short, target=1, n_samples=400, seed=0)
    np.testing.assert_allclose(est.values, _exact_shapley(model, short, 1, "remove"), atol=0.02)


def test_default_target_is_the_prediction_and_bad_targets_fail(model):
    text = "awful boring film"
    a = token_attributions(model, text, n_samples=2)
    assert a.target == int(model.predict_logits([text]).argmax())
    with pytest.raises(ValueError, match="not one of the model's labels"):
        token_attributions(model, text, target="neutral")
    with pytest.raises(ValueError, match="out of range"):
        token_attributions(model, text, target=5)
    with pytest.raises(ValueError, match="orderings"):
        token_attributions(model, "a b c d e f g h", exact=True)


def test_pairs_keep_segments_and_special_tokens_are_not_players(model):
    a = token_attributions(model, "good film", "bad plot", target=0, n_samples=3)
    assert a.words == ["good", "film", "bad", "plot"]
    assert a.segments == [0, 0, 1, 1]
    assert a.values.sum() == pytest.approx(a.probability - a.base_probability, abs=1e-5)
    d = a.to_dict()
    assert TokenAttribution.from_dict(d).to_dict() == d


def test_subword_tokens_of_one_word_are_one_player():
    from contrastfit.encoders import load_backbone

    _, tokenizer = load_backbone("minilm-l6")

    class Stub:  # _word_features needs only these
        max_length = 128
        device = torch.device("cpu")

    stub = Stub()
    stub.tokenizer = tokenizer
    text = "An unwatchable, overlong mess."
    batch, features, words, _, split = _word_features(stub, text, None)
    assert split is None
    tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist())
    assert len(tokens) > len(words) + 2  # some word is split into several tokens
    assert words == ["An", "unwatchable", ",", "overlong", "mess", "."]
    assert features[0, 0] == -1 and features[0, -1] == -1  # [CLS], [SEP]
    unwatchable = [t for t, f in zip(tokens, features[0].tolist()) if f == 1]
    assert "".join(t.removeprefix("##") for t in unwatchable) == "unwatchable"


def test_slow_tokenizer_players_are_tokens_and_unknown_words_count():
    from transformers import BertTokenizerLegacy

    from contrastfit.encoders import resolve_model

    path, _ = resolve_model("minilm-l6")

    class Stub:
        max_length = 128
        device = torch.device("cpu")

    stub = Stub()
    stub.tokenizer = BertTokenizerLegacy(os.path.join(path, "vocab.txt"))
    assert not stub.tokenizer.is_fast
    _, features, words, segments, _ = _word_features(stub, "An unwatchable mess \u2603", None)
    assert words == ["an", "un", "##watch", "##able", "mess", "[UNK]"]  # one player per token, [UNK] included
    assert features[0].tolist() == [-1, 0, 1, 2, 3, 4, 5, -1] and segments == [0] * 6


def test_plot_attributions_writes_a_png(model, tmp_path):
    a = token_attributions(model, "great film but boring plot", target=1, n_samples=3)
    b = token_attributions(model, "good story", "awful actor", target=0, n_samples=3)
    path = tmp_path / "attr.png"
    fig = plot_attributions([("ce", a), ("ce-scl", b.to_dict())], path, title="example")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 2000
    # a TokenAttribution and its dict draw alike: a header line, then one box per word
    drawn = [t.get_text() for t in fig.axes[0].texts]
    assert drawn == [f"ce: p({a.target_name}) = {a.probability:.2f} (all words removed: {a.base_probability:.2f})",
                     *a.words, f"ce-scl: p({b.target_name}) = {b.probability:.2f} (all words removed: "
                               f"{b.base_probability:.2f})", *b.words]


def test_separately_encoded_pairs_match_the_coalition_formula(tiny_encoder_dir):
    """A multi-task pair task whose head reads [u; v] of the two texts encoded apart: the players are
    the words of both texts, each text keeps its own special tokens, and the exact values are the
    coalition formula over the model's own (two-encoding) predictions."""
    from contrastfit.multitask import MultiTaskModel, Task
    from contrastfit.multitask.tasks import resolve_task

    torch.manual_seed(0)
    spec = resolve_task(Task("para", "x"), label_names=["no", "yes"], pairs=True, data_name="x")
    mt = MultiTaskModel.from_encoder(str(tiny_encoder_dir), [spec], pooling="mean").eval()
    with torch.no_grad():
        for p in mt.heads["para"].parameters():
            p.mul_(20)
    task = mt.for_task("para")
    assert task.separate_pairs
    first, second = "great film but", "boring plot"
    words = first.split() + second.split()

    def value(keep: set[int]) -> float:
        enc_a, enc_b = mt.tokenizer([first]), mt.tokenizer([second])
        ids_a, att_a = torch.tensor(enc_a["input_ids"]), torch.tensor(enc_a["attention_mask"])
        ids_b, att_b = torch.tensor(enc_b["input_ids"]), torch.tensor(enc_b["attention_mask"])
        for i in range(len(words)):  # word-level tokenizer: token 1 + i of its own text
            if i not in keep:
                if i < 3:
                    att_a[0, 1 + i] = 0
                else:
                    att_b[0, 1 + i - 3] = 0
        with torch.no_grad():
            out = mt(input_ids=ids_a, attention_mask=att_a, input_ids_b=ids_b, attention_mask_b=att_b,
                     task_ids=torch.zeros(1, dtype=torch.long))
        return float(out.logits.softmax(-1)[0, 1])

    n = len(words)
    want = _coalition_shapley(n, value)
    got = token_attributions(task, first, second, target=1, exact=True)
    assert got.words == words and got.segments == [0, 0, 0, 1, 1]
    np.testing.assert_allclose(got.values, want, atol=1e-5)
    assert got.probability == pytest.approx(value(set(range(n))), abs=1e-6)
    assert got.probability == pytest.approx(float(mt.predict_proba([first], [second], task="para")[0, 1]), abs=1e-5)
    assert np.abs(want).max() > 1e-3
    with pytest.raises(Exception, match="give input_ids_b"):
        task(**{k: torch.tensor(v) for k, v in mt.tokenizer([first]).items()})


def test_multi_label_values_explain_each_labels_own_probability(tiny_encoder_dir, tmp_path):
    """A multi-label model: the value of a coalition is sigmoid(logit_j / T_j), predict_proba's
    probability of label j, not a softmax across labels; exact values match the coalition formula."""
    from contrastfit import train

    rows = [("good fun", "good|fun"), ("bad dull", "bad"), ("fun film", "fun"), ("good film", "good"),
            ("bad fun film", "bad|fun"), ("dull plot", "bad")] * 3
    model = train(texts=[t for t, _ in rows], labels=[lab.split("|") for _, lab in rows],
                  multi_label=True, method="ce", model=str(tiny_encoder_dir), epochs=1, validation_split=0,
                  progress=False).model.eval()
    model.info.calibration = {"temperatures": [0.5, 2.0, 1.0]}  # as `contrastfit calibrate` would set them
    names = model.label_names
    text = "good fun dull plot"
    probs = model.predict_proba([text])[0]
    got = token_attributions(model, text, exact=True)  # the most probable label by default
    assert got.target == int(np.argmax(probs)) and got.probability == pytest.approx(float(probs.max()), abs=1e-5)
    j = names.index("bad")
    temps = torch.tensor([0.5, 2.0, 1.0])

    def value(keep):
        enc = model.tokenize([text])
        att = torch.tensor(enc["attention_mask"])
        for i in range(len(text.split())):
            if i not in keep:
                att[0, i + 1] = 0
        with torch.no_grad():
            logits = model(input_ids=torch.tensor(enc["input_ids"], device=model.device),
                           attention_mask=att.to(model.device)).logits.cpu()
        return float((logits / temps).sigmoid()[0, j])

    got = token_attributions(model, text, target="bad", exact=True)
    np.testing.assert_allclose(got.values, _coalition_shapley(4, value), atol=1e-5)
    assert got.probability == pytest.approx(float(probs[j]), abs=1e-5)
    assert got.values.sum() == pytest.approx(got.probability - got.base_probability, abs=1e-5)
